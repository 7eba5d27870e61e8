//! Faults on a CUDA GPU: a launch with an invalid configuration, an allocation larger than the device,
//! illegal calls during capture, a source that does not compile and an image that does not load. Each is
//! a typed error, and the same stream and context then serve the next valid call. Without a GPU each
//! test prints why it is skipped; the no-driver test runs everywhere.

#![cfg(feature = "cuda")]

use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use saggar_device::conformance::{builtin_module, open_or_skip};
use saggar_device::cuda::{CudaBackend, CudaDevice, CudaKernel, CudaStream};
use saggar_device::{
    Backend, BackendKind, CaptureMode, CaptureStatus, CodeFormat, CodeObject, Device, DeviceBuffer, Dim3, Error, Event,
    Graph, GraphExec, KernelArg, KernelSource, LaunchConfig, Module, Stream, builtin,
};

type B = CudaBackend;

/// A global-mode capture forbids unsafe calls on every thread of the process, so the test that makes
/// one runs alone (exclusive); every other test holds this shared.
static CAPTURE_MODE_LOCK: RwLock<()> = RwLock::new(());

fn shared() -> RwLockReadGuard<'static, ()> {
    CAPTURE_MODE_LOCK.read().unwrap_or_else(|e| e.into_inner())
}

fn exclusive() -> RwLockWriteGuard<'static, ()> {
    CAPTURE_MODE_LOCK.write().unwrap_or_else(|e| e.into_inner())
}

fn download(stream: &CudaStream, buf: &impl DeviceBuffer) -> Vec<u32> {
    let mut out = vec![0u8; buf.len()];
    stream.download(buf.as_slice(), &mut out).expect("download");
    out.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect()
}

fn fill_args(buf: &impl DeviceBuffer, value: u32) -> [KernelArg; 3] {
    [KernelArg::Ptr(buf.ptr()), KernelArg::U64((buf.len() / 4) as u64), KernelArg::U32(value)]
}

/// Enqueues `saggar_fill_u32` over all of `buf`.
fn fill(stream: &CudaStream, kernel: &CudaKernel, buf: &impl DeviceBuffer, value: u32) {
    let config = LaunchConfig::for_elements((buf.len() / 4) as u64, 256);
    // SAFETY: every caller keeps `buf` alive until after its next synchronisation.
    unsafe { stream.launch(kernel, &config, &fill_args(buf, value)) }.expect("launch saggar_fill_u32");
}

fn assert_no_deferred_errors(device: &CudaDevice) {
    let errors = device.take_deferred_errors();
    assert!(errors.is_empty(), "destructors recorded errors: {errors:?}");
}

/// Runs everywhere: with or without a driver, enumerating is a value, never a panic; without a driver
/// the reason says so.
#[test]
fn enumerate_never_panics_and_explains_absence() {
    let result = std::panic::catch_unwind(CudaBackend::enumerate).expect("CudaBackend::enumerate panicked");
    match result {
        Ok(devices) => {
            assert!(!devices.is_empty(), "Ok with no devices: the API asks for BackendUnavailable instead");
            for (i, d) in devices.iter().enumerate() {
                assert_eq!((d.backend, d.ordinal), (BackendKind::Cuda, i));
                assert!(d.arch.starts_with("sm_"), "arch {}", d.arch);
                eprintln!("cuda device {i}: {} ({}, {} bytes, {})", d.name, d.arch, d.total_memory, d.driver_version);
            }
        }
        Err(Error::BackendUnavailable { backend: BackendKind::Cuda, reason }) => {
            eprintln!("cuda unavailable here, as expected on a machine without a GPU: {reason}");
            assert!(
                reason.starts_with("no CUDA driver found")
                    || reason.starts_with("no CUDA device found")
                    || reason.starts_with("the CUDA driver"),
                "unexplained reason: {reason}"
            );
        }
        Err(other) => panic!("enumerate gave {other:?}"),
    }
}

/// Launch configurations the device cannot run are refused before the driver sees them; the stream
/// then runs a valid launch.
#[test]
fn invalid_launch_configuration_is_typed_and_stream_recovers() {
    let Some(device) = open_or_skip::<B>("invalid_launch_configuration_is_typed_and_stream_recovers") else { return };
    let _serial = shared();
    let module = builtin_module::<B>(&device);
    let fill_k = module.kernel(builtin::FILL_U32).unwrap();
    let stream = device.create_stream().unwrap();
    let buf = device.alloc(4096).unwrap();
    let args = fill_args(&buf, 9);
    let valid = LaunchConfig::for_elements(1024, 256);
    let bad_configs = [
        ("1024x2 threads per block", LaunchConfig { block: Dim3 { x: 1024, y: 2, z: 1 }, ..valid }),
        ("block z past the device maximum of 64", LaunchConfig { block: Dim3 { x: 1, y: 1, z: 128 }, ..valid }),
        ("grid y past 65535", LaunchConfig { grid: Dim3 { x: 1, y: 65_536, z: 1 }, ..valid }),
        ("1 MiB of dynamic shared memory", LaunchConfig { shared_mem_bytes: 1 << 20, ..valid }),
        ("a zero grid", LaunchConfig { grid: Dim3 { x: 0, y: 1, z: 1 }, ..valid }),
    ];
    for (what, config) in bad_configs {
        // SAFETY: the launch must be refused before anything is enqueued.
        let err = unsafe { stream.launch(&fill_k, &config, &args) }.unwrap_err();
        assert!(matches!(err, Error::InvalidLaunchConfig { .. }), "{what}: {err:?}");
    }
    // SAFETY: `buf` lives until after the download.
    unsafe { stream.launch(&fill_k, &valid, &args) }.unwrap();
    assert!(download(&stream, &buf).iter().all(|&w| w == 9));
    stream.synchronize().unwrap();
    device.synchronize().unwrap();
    drop((buf, stream, fill_k, module));
    assert_no_deferred_errors(&device);
}

/// An allocation larger than the device is out of memory, whether saggar or the driver refuses it, and
/// the context keeps serving allocations and copies.
#[test]
fn allocation_larger_than_device_is_out_of_memory_and_device_recovers() {
    let Some(device) = open_or_skip::<B>("allocation_larger_than_device_is_out_of_memory_and_device_recovers") else {
        return;
    };
    let _serial = shared();
    let total = device.info().total_memory as usize;
    // Refused by saggar: more than the device has.
    let err = device.alloc(total + 1).unwrap_err();
    assert!(matches!(err, Error::OutOfMemory { .. }), "total + 1 bytes: {err:?}");
    // Refused by the driver: the whole device, part of which the context itself uses.
    let err = device.alloc(total).unwrap_err();
    assert!(matches!(err, Error::OutOfMemory { requested, .. } if requested == total as u64), "total bytes: {err:?}");
    let err = device.alloc(usize::MAX).unwrap_err();
    assert!(matches!(err, Error::InvalidSize { .. }), "usize::MAX bytes: {err:?}");
    // The device still serves the next valid calls.
    let stream = device.create_stream().unwrap();
    let buf = device.alloc(1 << 20).unwrap();
    let data: Vec<u8> = (0..1 << 20).map(|i| (i * 7 % 251) as u8).collect();
    stream.upload(&data, buf.as_slice()).unwrap();
    let mut back = vec![0u8; data.len()];
    stream.download(buf.as_slice(), &mut back).unwrap();
    assert!(back == data, "round trip after out-of-memory");
    let info = device.memory_info().unwrap();
    assert!(info.free > 0 && info.free <= info.total);
    device.synchronize().unwrap();
    drop((buf, stream));
    assert_no_deferred_errors(&device);
}

/// Calls CUDA forbids during a thread-local capture are refused with a typed error and invalidate it;
/// the stream and device then serve a valid capture and replay.
#[test]
fn illegal_calls_during_capture_are_typed_and_stream_recovers() {
    let Some(device) = open_or_skip::<B>("illegal_calls_during_capture_are_typed_and_stream_recovers") else { return };
    let _serial = shared();
    let module = builtin_module::<B>(&device);
    let fill_k = module.kernel(builtin::FILL_U32).unwrap();
    let stream = device.create_stream().unwrap();
    let buf = device.alloc(4096).unwrap();

    stream.begin_capture(CaptureMode::ThreadLocal).unwrap();
    fill(&stream, &fill_k, &buf, 1);
    assert_eq!(stream.capture_status(), CaptureStatus::Active);
    let err = device.alloc(256).unwrap_err();
    assert!(matches!(err, Error::IllegalDuringCapture { op: "device.alloc", .. }), "{err:?}");
    assert_eq!(stream.capture_status(), CaptureStatus::Invalidated);
    let illegal = [
        ("device.alloc_pinned", device.alloc_pinned(256).map(drop)),
        ("device.synchronize", device.synchronize()),
        ("stream.synchronize", stream.synchronize()),
        ("stream.upload", stream.upload(&[0; 4096], buf.as_slice())),
        ("stream.download", stream.download(buf.as_slice(), &mut [0; 4096])),
    ];
    for (what, result) in illegal {
        assert!(matches!(result, Err(Error::IllegalDuringCapture { .. })), "{what}: {result:?}");
    }
    let err = stream.end_capture().unwrap_err();
    assert!(matches!(err, Error::CaptureInvalidated { .. }), "{err:?}");
    assert_eq!(stream.capture_status(), CaptureStatus::Idle);
    let err = stream.end_capture().unwrap_err();
    assert!(matches!(err, Error::CaptureState { .. }), "end_capture without a capture: {err:?}");

    // The same stream and context serve eager work, then a clean capture and replay.
    fill(&stream, &fill_k, &buf, 2);
    assert!(download(&stream, &buf).iter().all(|&w| w == 2));
    stream.begin_capture(CaptureMode::ThreadLocal).unwrap();
    fill(&stream, &fill_k, &buf, 3);
    let graph = stream.end_capture().unwrap();
    assert_eq!(graph.node_count(), 1);
    let exec = device.instantiate(&graph).unwrap();
    // SAFETY: `buf` is live until after the download.
    unsafe { stream.launch_graph(&exec) }.unwrap();
    assert!(download(&stream, &buf).iter().all(|&w| w == 3));
    device.synchronize().unwrap();
    drop((exec, graph, buf, stream, fill_k, module));
    assert_no_deferred_errors(&device);
}

/// A global-mode capture forbids unsafe calls on every thread; a relaxed one forbids none (CUDA's rules).
#[test]
fn capture_modes_follow_cuda_rules() {
    let Some(device) = open_or_skip::<B>("capture_modes_follow_cuda_rules") else { return };
    let _serial = exclusive();
    let module = builtin_module::<B>(&device);
    let fill_k = module.kernel(builtin::FILL_U32).unwrap();
    let stream = device.create_stream().unwrap();
    let buf = device.alloc(4096).unwrap();

    stream.begin_capture(CaptureMode::Global).unwrap();
    fill(&stream, &fill_k, &buf, 1);
    let other_thread = std::thread::scope(|s| s.spawn(|| device.alloc(256).map(drop)).join().unwrap());
    assert!(matches!(other_thread, Err(Error::IllegalDuringCapture { .. })), "{other_thread:?}");
    assert!(matches!(stream.end_capture().unwrap_err(), Error::CaptureInvalidated { .. }));

    stream.begin_capture(CaptureMode::Relaxed).unwrap();
    fill(&stream, &fill_k, &buf, 4);
    let extra = device.alloc(256).expect("allocating during a relaxed capture");
    let graph = stream.end_capture().expect("a relaxed capture survives an allocation");
    drop(extra);
    let exec = device.instantiate(&graph).unwrap();
    // SAFETY: `buf` is live until after the download.
    unsafe { stream.launch_graph(&exec) }.unwrap();
    assert!(download(&stream, &buf).iter().all(|&w| w == 4));
    device.synchronize().unwrap();
    drop((exec, graph, buf, stream, fill_k, module));
    assert_no_deferred_errors(&device);
}

/// Waiting on an event recorded outside the capture is refused by the driver
/// (`CUDA_ERROR_STREAM_CAPTURE_ISOLATION`, "dependency created on uncaptured work"): a typed error, and
/// the capture is invalidated. An event recorded inside the capture orders work within it.
#[test]
fn waiting_on_uncaptured_work_invalidates_the_capture() {
    let Some(device) = open_or_skip::<B>("waiting_on_uncaptured_work_invalidates_the_capture") else { return };
    let _serial = shared();
    let stream = device.create_stream().unwrap();
    let side = device.create_stream().unwrap();
    let event = device.create_event().unwrap();
    let buf = device.alloc(4096).unwrap();
    side.memset(buf.as_slice(), 1).unwrap();
    side.record(&event).unwrap();

    stream.begin_capture(CaptureMode::ThreadLocal).unwrap();
    let err = stream.wait(&event).unwrap_err();
    assert!(matches!(err, Error::IllegalDuringCapture { .. }), "{err:?}");
    assert!(matches!(stream.end_capture().unwrap_err(), Error::CaptureInvalidated { .. }));

    let inner = device.create_event().unwrap();
    stream.begin_capture(CaptureMode::ThreadLocal).unwrap();
    stream.memset(buf.as_slice(), 2).unwrap();
    stream.record(&inner).unwrap();
    stream.wait(&inner).unwrap();
    let err = inner.synchronize().unwrap_err();
    assert!(matches!(err, Error::Event { .. }), "synchronising an event recorded in a capture: {err:?}");
    let graph = stream.end_capture().unwrap();
    assert!(graph.node_count() >= 1);
    side.synchronize().unwrap();
    stream.synchronize().unwrap();
    drop((graph, inner, buf, event, side, stream));
    assert_no_deferred_errors(&device);
}

/// Dropping objects during a capture postpones their release (a free is forbidden during capture)
/// instead of breaking the capture; the releases happen after it, and none is recorded as an error.
#[test]
fn drop_during_capture_postpones_the_release() {
    let Some(device) = open_or_skip::<B>("drop_during_capture_postpones_the_release") else { return };
    let _serial = shared();
    let stream = device.create_stream().unwrap();
    let keep = device.alloc(4096).unwrap();
    let doomed = device.alloc(1 << 20).unwrap();
    let pinned = device.alloc_pinned(4096).unwrap();
    let other_stream = device.create_stream().unwrap();
    let event = device.create_event().unwrap();
    let module = builtin_module::<B>(&device);
    let kernel = module.kernel(builtin::FILL_U32).unwrap();
    stream.begin_capture(CaptureMode::ThreadLocal).unwrap();
    fill(&stream, &kernel, &keep, 1);
    let old_graph = stream.end_capture().unwrap();
    let old_exec = device.instantiate(&old_graph).unwrap();

    stream.begin_capture(CaptureMode::ThreadLocal).unwrap();
    stream.memset(keep.as_slice(), 7).unwrap();
    drop((doomed, pinned, other_stream, event, kernel, module, old_exec, old_graph));
    assert_eq!(stream.capture_status(), CaptureStatus::Active, "a drop broke the capture");
    let graph = stream.end_capture().expect("a drop broke the capture");
    let exec = device.instantiate(&graph).unwrap();
    // SAFETY: `keep` is live until after the download.
    unsafe { stream.launch_graph(&exec) }.unwrap();
    assert!(download(&stream, &keep).iter().all(|&w| w == 0x0707_0707));
    device.synchronize().unwrap();
    drop((exec, graph, keep, stream));
    assert_no_deferred_errors(&device);
}

/// A thread-local capture cannot be ended from another thread (typed error, capture invalidated); a
/// stream dropped mid-capture ends its capture and is destroyed without error.
#[test]
fn capture_ended_on_another_thread_or_abandoned() {
    let Some(device) = open_or_skip::<B>("capture_ended_on_another_thread_or_abandoned") else { return };
    let _serial = shared();
    let stream = device.create_stream().unwrap();
    let buf = device.alloc(4096).unwrap();
    stream.begin_capture(CaptureMode::ThreadLocal).unwrap();
    stream.memset(buf.as_slice(), 1).unwrap();
    let elsewhere = std::thread::scope(|s| s.spawn(|| stream.end_capture().map(drop)).join().unwrap());
    assert!(matches!(elsewhere, Err(Error::CaptureState { .. })), "{elsewhere:?}");
    assert_eq!(stream.capture_status(), CaptureStatus::Invalidated);
    assert!(matches!(stream.end_capture().unwrap_err(), Error::CaptureInvalidated { .. }));
    stream.memset(buf.as_slice(), 2).unwrap();
    stream.synchronize().unwrap();

    let doomed = device.create_stream().unwrap();
    doomed.begin_capture(CaptureMode::ThreadLocal).unwrap();
    doomed.memset(buf.as_slice(), 3).unwrap();
    drop(doomed);
    // Nothing is left forbidding unsafe calls on this thread.
    let extra = device.alloc(256).expect("allocating after a stream was dropped mid-capture");
    drop(extra);
    assert!(download(&stream, &buf).iter().all(|&w| w == 0x0202_0202), "the abandoned capture ran");
    device.synchronize().unwrap();
    drop((buf, stream));
    assert_no_deferred_errors(&device);
}

/// Graph updates against the driver: a changed node type is refused and leaves the executable graph
/// usable; a changed kernel function is CUDA's to accept (CUDA 12+ does, within one context); a
/// destroyed graph cannot launch; an empty capture instantiates, replays and updates as a no-op.
#[test]
fn graph_update_destroy_and_empty_capture() {
    let Some(device) = open_or_skip::<B>("graph_update_destroy_and_empty_capture") else { return };
    let _serial = shared();
    let module = builtin_module::<B>(&device);
    let fill_k = module.kernel(builtin::FILL_U32).unwrap();
    let axpy_k = module.kernel(builtin::AXPY_F32).unwrap();
    let stream = device.create_stream().unwrap();
    let a = device.alloc(4096).unwrap();
    #[derive(Clone, Copy)]
    enum Node {
        Fill,
        Axpy,
        Memset,
    }
    let capture = |node: Node| {
        stream.begin_capture(CaptureMode::ThreadLocal).unwrap();
        match node {
            Node::Fill => fill(&stream, &fill_k, &a, 5),
            Node::Axpy => {
                let args =
                    [KernelArg::U64(1024), KernelArg::F32(1.0), KernelArg::Ptr(a.ptr()), KernelArg::Ptr(a.ptr())];
                // SAFETY: `a` holds 1024 floats and lives until after the final synchronisation.
                unsafe { stream.launch(&axpy_k, &LaunchConfig::for_elements(1024, 256), &args) }.unwrap();
            }
            Node::Memset => stream.memset(a.as_slice(), 0).unwrap(),
        }
        let graph = stream.end_capture().unwrap();
        assert_eq!(graph.node_count(), 1);
        graph
    };
    let mut exec = device.instantiate(&capture(Node::Fill)).unwrap();
    // Same node count, another node type: the driver refuses (CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED).
    let err = exec.update(&capture(Node::Memset)).unwrap_err();
    assert!(matches!(&err, Error::GraphUpdate { reason } if reason.contains("NODE_TYPE_CHANGED")), "{err:?}");
    // SAFETY: `a` is live.
    unsafe { stream.launch_graph(&exec) }.unwrap();
    assert!(download(&stream, &a).iter().all(|&w| w == 5), "the executable graph changed after a refused update");

    // Another kernel in the same node: CUDA 12+ may accept it; then the replay runs the new kernel
    // (`a = 1.0 * a + a` doubles each float: the bit pattern 5, a subnormal, becomes 10).
    match exec.update(&capture(Node::Axpy)) {
        Ok(()) => {
            // SAFETY: `a` is live.
            unsafe { stream.launch_graph(&exec) }.unwrap();
            assert!(download(&stream, &a).iter().all(|&w| w == 10), "the updated graph did not run axpy");
        }
        Err(Error::GraphUpdate { reason }) => eprintln!("NOTE cuda: a kernel change was refused: {reason}"),
        Err(other) => panic!("updating to another kernel gave {other:?}"),
    }
    exec.destroy().unwrap();
    // SAFETY: refused before anything runs.
    assert!(matches!(unsafe { stream.launch_graph(&exec) }.unwrap_err(), Error::GraphDestroyed { .. }));

    stream.begin_capture(CaptureMode::ThreadLocal).unwrap();
    let empty = stream.end_capture().unwrap();
    assert_eq!(empty.node_count(), 0);
    let mut empty_exec = device.instantiate(&empty).unwrap();
    // SAFETY: an empty graph touches nothing.
    unsafe { stream.launch_graph(&empty_exec) }.unwrap();
    empty_exec.update(&empty).unwrap();
    assert!(matches!(empty_exec.update(&capture(Node::Fill)).unwrap_err(), Error::GraphUpdate { .. }));
    stream.synchronize().unwrap();
    drop((empty_exec, empty, exec, a, stream, axpy_k, fill_k, module));
    assert_no_deferred_errors(&device);
}

/// A source that does not compile gives NVRTC's log; an image that does not load is a code-object error.
#[test]
fn compile_and_load_errors_are_typed() {
    let Some(device) = open_or_skip::<B>("compile_and_load_errors_are_typed") else { return };
    let _serial = shared();
    let source =
        KernelSource::new("broken.cu", "extern \"C\" __global__ void k(int* p) { p[0] = undefined_name; }", vec![]);
    match device.compile(&source) {
        Err(Error::Compile { name, log }) => {
            assert_eq!(name, "broken.cu");
            assert!(log.contains("undefined_name"), "log: {log}");
        }
        Err(e @ Error::BackendUnavailable { .. }) => eprintln!("SKIPPED cuda::compile_errors: {e}"),
        other => panic!("compiling a broken source gave {other:?}"),
    }
    let garbage = CodeObject { format: CodeFormat::Ptx, image: b"this is not PTX\0".to_vec(), kernels: vec![] };
    let err = device.load_module(&garbage).unwrap_err();
    assert!(matches!(err, Error::CodeObject { .. }), "{err:?}");
    let foreign = CodeObject { format: CodeFormat::HostPlan, image: b"plan".to_vec(), kernels: vec![] };
    assert!(matches!(device.load_module(&foreign).unwrap_err(), Error::CodeObject { .. }));
    // The context still loads and runs good code.
    let module = builtin_module::<B>(&device);
    let fill_k = module.kernel(builtin::FILL_U32).unwrap();
    let stream = device.create_stream().unwrap();
    let buf = device.alloc(1024).unwrap();
    fill(&stream, &fill_k, &buf, 11);
    assert!(download(&stream, &buf).iter().all(|&w| w == 11));
}

/// Events time real work.
#[test]
fn events_time_device_work() {
    let Some(device) = open_or_skip::<B>("events_time_device_work") else { return };
    let _serial = shared();
    let module = builtin_module::<B>(&device);
    let fill_k = module.kernel(builtin::FILL_U32).unwrap();
    let stream = device.create_stream().unwrap();
    let (start, end) = (device.create_event().unwrap(), device.create_event().unwrap());
    let buf = device.alloc(64 << 20).unwrap();
    stream.record(&start).unwrap();
    for v in 0..20 {
        fill(&stream, &fill_k, &buf, v);
    }
    stream.record(&end).unwrap();
    end.synchronize().unwrap();
    let elapsed = end.elapsed_since(&start).unwrap();
    assert!(elapsed.as_nanos() > 0 && elapsed.as_secs() < 10, "{elapsed:?}");
    eprintln!("20 fills of 64 MiB took {elapsed:?}");
}
