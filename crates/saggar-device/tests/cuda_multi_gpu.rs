//! Two CUDA GPUs: a capture on device 1 while device 0 is pinned, and busy with work CUDA counts as
//! unsafe during capture, on another thread. With fewer than two GPUs each test prints why it is skipped.

#![cfg(feature = "cuda")]

use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, Ordering};

use saggar_device::conformance::{builtin_module, open_two_or_skip};
use saggar_device::cuda::{CudaBackend, CudaKernel, CudaStream};
use saggar_device::{
    CaptureMode, Device, DeviceBuffer, Error, Graph, KernelArg, LaunchConfig, Module, Stream, builtin,
};

type B = CudaBackend;

fn fill(stream: &CudaStream, kernel: &CudaKernel, buf: &impl DeviceBuffer, value: u32) {
    let n = (buf.len() / 4) as u64;
    let args = [KernelArg::Ptr(buf.ptr()), KernelArg::U64(n), KernelArg::U32(value)];
    // SAFETY: every caller keeps `buf` alive until after its next synchronisation.
    unsafe { stream.launch(kernel, &LaunchConfig::for_elements(n, 256), &args) }.expect("launch saggar_fill_u32");
}

fn words(stream: &CudaStream, buf: &impl DeviceBuffer) -> Vec<u32> {
    let mut out = vec![0u8; buf.len()];
    stream.download(buf.as_slice(), &mut out).expect("download");
    out.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect()
}

/// Thread A pins device 1 and captures in thread-local mode; thread B keeps device 0 pinned and makes,
/// all through A's capture, the calls a capture forbids on its own thread (allocations, synchronous
/// copies, synchronisations). Thread-local mode leaves B alone; A's graph holds only A's work and
/// replays correctly on device 1.
#[test]
fn capture_on_device_1_while_device_0_is_pinned_on_another_thread() {
    let Some((d0, d1)) = open_two_or_skip::<B>("capture_on_device_1_while_device_0_is_pinned_on_another_thread") else {
        return;
    };
    let capture_started = Barrier::new(2);
    let capture_may_end = Barrier::new(2);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let busy = s.spawn(|| {
            let _pin = d0.pin().unwrap();
            let module = builtin_module::<B>(&d0);
            let fill_k = module.kernel(builtin::FILL_U32).unwrap();
            let stream = d0.create_stream().unwrap();
            let mut rounds = 0u32;
            capture_started.wait();
            while rounds < 8 || !stop.load(Ordering::Acquire) {
                let buf = d0.alloc(1 << 16).unwrap();
                fill(&stream, &fill_k, &buf, rounds);
                stream.upload(&rounds.to_le_bytes(), buf.slice(0, 4).unwrap()).unwrap();
                assert!(words(&stream, &buf).iter().all(|&w| w == rounds), "device 0 round {rounds}");
                d0.synchronize().unwrap();
                rounds += 1;
                if rounds == 8 {
                    capture_may_end.wait();
                }
            }
            rounds
        });
        let capture = s.spawn(|| {
            let _pin = d1.pin().unwrap();
            let module = builtin_module::<B>(&d1);
            let fill_k = module.kernel(builtin::FILL_U32).unwrap();
            let stream = d1.create_stream().unwrap();
            let buf = d1.alloc(4096).unwrap();
            stream.begin_capture(CaptureMode::ThreadLocal).unwrap();
            capture_started.wait();
            for v in 1..=5 {
                fill(&stream, &fill_k, &buf, v);
            }
            // Device 0's thread is mid-way through its rounds of unsafe calls while this capture is open.
            capture_may_end.wait();
            let graph = stream.end_capture().expect("the capture on device 1 survived device 0's work");
            assert_eq!(graph.node_count(), 5, "the capture swept in other work");
            let exec = d1.instantiate(&graph).unwrap();
            // SAFETY: `buf` is live until after the download.
            unsafe { stream.launch_graph(&exec) }.unwrap();
            assert!(words(&stream, &buf).iter().all(|&w| w == 5));
            let errors = d1.take_deferred_errors();
            assert!(errors.is_empty(), "{errors:?}");
        });
        capture.join().expect("capturing thread");
        stop.store(true, Ordering::Release);
        assert!(busy.join().expect("device 0 thread") >= 8);
    });
    assert!(d0.take_deferred_errors().is_empty());
}

/// With device 1 pinned, objects of device 0 are refused, not run on the wrong GPU; mixing devices in one
/// launch is a typed error; unpinning restores device 0.
#[test]
fn pinned_device_guards_every_call() {
    let Some((d0, d1)) = open_two_or_skip::<B>("pinned_device_guards_every_call") else { return };
    let module0 = builtin_module::<B>(&d0);
    let fill0 = module0.kernel(builtin::FILL_U32).unwrap();
    let stream0 = d0.create_stream().unwrap();
    let buf0 = d0.alloc(1024).unwrap();
    {
        let _pin = d1.pin().unwrap();
        assert!(matches!(d0.alloc(16).unwrap_err(), Error::WrongDevice { expected: 0, current: 1, .. }));
        assert!(matches!(stream0.synchronize().unwrap_err(), Error::WrongDevice { .. }));
        let stream1 = d1.create_stream().unwrap();
        let args = [KernelArg::Ptr(buf0.ptr()), KernelArg::U64(256), KernelArg::U32(1)];
        // SAFETY: refused before anything is enqueued.
        let err = unsafe { stream1.launch(&fill0, &LaunchConfig::for_elements(256, 256), &args) }.unwrap_err();
        assert!(matches!(err, Error::DeviceMismatch { ordinal: 1, other: 0, .. }), "{err:?}");
        stream1.synchronize().unwrap();
    }
    fill(&stream0, &fill0, &buf0, 3);
    assert!(words(&stream0, &buf0).iter().all(|&w| w == 3));
    {
        // Dropping device-0 objects while device 1 is pinned frees them in device 0's context and leaves
        // device 1 current.
        let _pin = d1.pin().unwrap();
        drop(buf0);
        drop(stream0);
        drop(fill0);
        drop(module0);
        let buf1 = d1.alloc(256).unwrap();
        drop(buf1);
    }
    assert!(d0.take_deferred_errors().is_empty());
    assert!(d1.take_deferred_errors().is_empty());
}
