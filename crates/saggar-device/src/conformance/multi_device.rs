//! Two devices: a device pinned to a thread refuses another device's work, and a capture on one
//! device while another is busy records only its own work.

use super::{builtin_module, download, fill};
use crate::api::{Backend, Device, DeviceBuffer, Graph, Module, Stream};
use crate::builtin;
use crate::error::Error;
use crate::types::CaptureMode;

/// Using a device while another device is pinned to the thread is a typed error, not work on the
/// wrong device; unpinning restores normal operation.
pub fn wrong_device_pinned_is_an_error<B: Backend>(d0: &B::Device, d1: &B::Device) {
    let stream0 = d0.create_stream().unwrap();
    {
        let _pin = d1.pin().unwrap();
        let err = d0.alloc(256).unwrap_err();
        assert!(matches!(err, Error::WrongDevice { expected: 0, current: 1, .. }), "{err:?}");
        assert!(matches!(stream0.synchronize().unwrap_err(), Error::WrongDevice { .. }));
        let buf1 = d1.alloc(256).unwrap();
        drop(buf1);
    }
    let buf0 = d0.alloc(256).unwrap();
    stream0.memset(buf0.as_slice(), 0).unwrap();
    stream0.synchronize().unwrap();
}

/// A capture on device 1 in thread-local mode, while another thread keeps device 0 pinned and busy,
/// records only its own work, and replays correctly.
pub fn capture_on_one_device_while_another_is_pinned_elsewhere<B: Backend>(d0: &B::Device, d1: &B::Device) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let busy = s.spawn(|| {
            let _pin = d0.pin().unwrap();
            let module = builtin_module::<B>(d0);
            let fill_k = module.kernel(builtin::FILL_U32).unwrap();
            let stream = d0.create_stream().unwrap();
            let buf = d0.alloc(1 << 16).unwrap();
            let mut rounds = 0u32;
            while !stop.load(Ordering::Relaxed) || rounds < 4 {
                // SAFETY: `buf` is live until after the synchronize.
                unsafe { fill::<B>(&stream, &fill_k, buf.as_slice(), rounds) };
                stream.synchronize().unwrap();
                rounds += 1;
            }
            rounds
        });
        let capture = s.spawn(|| {
            let _pin = d1.pin().unwrap();
            let module = builtin_module::<B>(d1);
            let fill_k = module.kernel(builtin::FILL_U32).unwrap();
            let stream = d1.create_stream().unwrap();
            let buf = d1.alloc(4096).unwrap();
            stream.begin_capture(CaptureMode::ThreadLocal).unwrap();
            for v in 1..=5 {
                // SAFETY: `buf` is live until after the synchronize.
                unsafe { fill::<B>(&stream, &fill_k, buf.as_slice(), v) };
                std::thread::yield_now();
            }
            let graph = stream.end_capture().unwrap();
            assert_eq!(graph.node_count(), 5, "the capture swept in other work");
            let exec = d1.instantiate(&graph).unwrap();
            // SAFETY: `buf` is live.
            unsafe { stream.launch_graph(&exec) }.unwrap();
            stream.synchronize().unwrap();
            let word = download::<B>(&stream, buf.slice(4092, 4).unwrap());
            assert_eq!(u32::from_le_bytes(word.try_into().unwrap()), 5);
        });
        capture.join().expect("capturing thread");
        stop.store(true, Ordering::Relaxed);
        assert!(busy.join().expect("busy thread") >= 4);
    });
}
