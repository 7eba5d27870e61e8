//! Stream capture and executable graphs: replays equal eager runs, keep their captured pointers,
//! update in place when the topology matches, and refuse what is illegal during a capture.

use super::{axpy, builtin_module, download, f32_bytes, fill, pattern, words};
use crate::api::{Backend, CaptureStatus, Device, DeviceBuffer, Graph, GraphExec, Module, Stream};
use crate::builtin;
use crate::error::Error;
use crate::types::{CaptureMode, KernelArg, LaunchConfig};

/// A graph of 100 launches replays to the same bytes as the same launches run eagerly.
pub fn graph_of_100_launches_replays_equal_to_eager<B: Backend>(device: &B::Device) {
    let module = builtin_module::<B>(device);
    let axpy_k = module.kernel(builtin::AXPY_F32).unwrap();
    let stream = device.create_stream().unwrap();
    let n = 1024u64;
    let init_x: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
    let init_y: Vec<f32> = (0..n).map(|i| 1.0 - i as f32).collect();
    let bufs: Vec<_> = (0..4).map(|_| device.alloc(n as usize * 4).unwrap()).collect();
    for pair in bufs.chunks(2) {
        stream.upload(&f32_bytes(&init_x), pair[0].as_slice()).unwrap();
        stream.upload(&f32_bytes(&init_y), pair[1].as_slice()).unwrap();
    }
    let run = |x: &B::DeviceBuffer, y: &B::DeviceBuffer| {
        for i in 0..100 {
            let a = if i % 2 == 0 { 0.25 } else { -0.125 };
            // SAFETY: `x` and `y` are live for the whole test and hold `n` floats.
            unsafe { axpy::<B>(&stream, &axpy_k, n, a, x.ptr(), y.ptr()) };
        }
    };
    run(&bufs[0], &bufs[1]);
    stream.synchronize().unwrap();
    stream.begin_capture(CaptureMode::ThreadLocal).unwrap();
    run(&bufs[2], &bufs[3]);
    let graph = stream.end_capture().unwrap();
    assert_eq!(graph.node_count(), 100);
    let exec = device.instantiate(&graph).unwrap();
    // SAFETY: the captured buffers are live.
    unsafe { stream.launch_graph(&exec) }.unwrap();
    stream.synchronize().unwrap();
    assert_eq!(download::<B>(&stream, bufs[1].as_slice()), download::<B>(&stream, bufs[3].as_slice()));
}

/// Programmatic launches ([`crate::LaunchConfig::programmatic`]) of a kernel that waits for the one
/// before it compute what ordinary launches do, eagerly and replayed from a graph: 200 alternating
/// axpys over 4M floats, each reading what the one before it wrote (`x += a y`, `y += b x`). A
/// kernel started early without waiting would read stale halves and differ.
pub fn programmatic_launches_equal_ordinary_ones<B: Backend>(device: &B::Device) {
    let module = builtin_module::<B>(device);
    let axpy_k = module.kernel(builtin::AXPY_F32).unwrap();
    let stream = device.create_stream().unwrap();
    let n = 1u64 << 22;
    let init: Vec<f32> = (0..n).map(|i| (i % 1000) as f32 * 1e-3).collect();
    let pairs: Vec<[B::DeviceBuffer; 2]> =
        (0..3).map(|_| [device.alloc(n as usize * 4).unwrap(), device.alloc(n as usize * 4).unwrap()]).collect();
    for [x, y] in &pairs {
        stream.upload(&f32_bytes(&init), x.as_slice()).unwrap();
        stream.upload(&f32_bytes(&init), y.as_slice()).unwrap();
    }
    let run = |[x, y]: &[B::DeviceBuffer; 2], programmatic: bool| {
        let config = LaunchConfig { programmatic, ..LaunchConfig::for_elements(n, 256) };
        for i in 0..200 {
            let (a, from, to) = if i % 2 == 0 { (0.5f32, y, x) } else { (-0.25, x, y) };
            let args = [KernelArg::U64(n), KernelArg::F32(a), KernelArg::Ptr(from.ptr()), KernelArg::Ptr(to.ptr())];
            // SAFETY: both buffers are live for the whole test and hold `n` floats; the kernel waits for
            // the one before it (`SAGGAR_GRID_DEPENDENCY`), as a programmatic launch needs.
            unsafe { stream.launch(&axpy_k, &config, &args) }.unwrap();
        }
    };
    run(&pairs[0], false);
    run(&pairs[1], true);
    stream.synchronize().unwrap();
    stream.begin_capture(CaptureMode::ThreadLocal).unwrap();
    run(&pairs[2], true);
    let graph = stream.end_capture().unwrap();
    let exec = device.instantiate(&graph).unwrap();
    // SAFETY: the captured buffers are live.
    unsafe { stream.launch_graph(&exec) }.unwrap();
    stream.synchronize().unwrap();
    let expected = download::<B>(&stream, pairs[0][1].as_slice());
    assert_eq!(download::<B>(&stream, pairs[1][1].as_slice()), expected, "eager programmatic launches");
    assert_eq!(download::<B>(&stream, pairs[2][1].as_slice()), expected, "programmatic launches in a graph");
}

/// The hazard, shown on purpose: a graph keeps the pointers it was captured with. After the captured
/// buffer is freed and its address reused, a replay reads the new occupant.
pub fn replay_after_free_reads_new_occupant<B: Backend>(device: &B::Device) {
    let stream = device.create_stream().unwrap();
    let len = 4096;
    let out = device.alloc(len).unwrap();
    let source = device.alloc(len).unwrap();
    let old_ptr = source.ptr();
    stream.upload(&pattern(len, 1), source.as_slice()).unwrap();
    stream.begin_capture(CaptureMode::ThreadLocal).unwrap();
    stream.copy_d2d(source.as_slice(), out.as_slice()).unwrap();
    let graph = stream.end_capture().unwrap();
    let exec = device.instantiate(&graph).unwrap();
    drop(source);
    let occupant = device.alloc(len).unwrap();
    let new_data = pattern(len, 2);
    stream.upload(&new_data, occupant.as_slice()).unwrap();
    if occupant.ptr() != old_ptr {
        eprintln!(
            "NOTE {}: the allocator did not reuse the freed address; the stale replay is not observable",
            B::KIND
        );
        return;
    }
    // SAFETY: the baked address is live again (it belongs to `occupant`), which is exactly the point.
    unsafe { stream.launch_graph(&exec) }.unwrap();
    stream.synchronize().unwrap();
    assert_eq!(download::<B>(&stream, out.as_slice()), new_data, "the replay should read the new occupant");
}

/// Updating an executable graph from a capture of the same topology re-points its launch.
pub fn graph_update_repoints_launch<B: Backend>(device: &B::Device) {
    let module = builtin_module::<B>(device);
    let fill_k = module.kernel(builtin::FILL_U32).unwrap();
    let stream = device.create_stream().unwrap();
    let a = device.alloc(1024).unwrap();
    let b = device.alloc(1024).unwrap();
    stream.memset(a.as_slice(), 0).unwrap();
    stream.memset(b.as_slice(), 0).unwrap();
    let capture = |target: &B::DeviceBuffer, value: u32| {
        stream.begin_capture(CaptureMode::ThreadLocal).unwrap();
        // SAFETY: both buffers are live for the whole test.
        unsafe { fill::<B>(&stream, &fill_k, target.as_slice(), value) };
        stream.end_capture().unwrap()
    };
    let mut exec = device.instantiate(&capture(&a, 11)).unwrap();
    exec.update(&capture(&b, 22)).unwrap();
    // SAFETY: `b`, the updated target, is live.
    unsafe { stream.launch_graph(&exec) }.unwrap();
    stream.synchronize().unwrap();
    assert!(download::<B>(&stream, a.as_slice()).iter().all(|&x| x == 0), "the old target was written");
    assert!(words(&download::<B>(&stream, b.as_slice())).iter().all(|&w| w == 22), "the new target was not filled");
}

/// An update from a graph of another topology is refused and leaves the executable graph usable.
pub fn graph_update_refuses_new_topology<B: Backend>(device: &B::Device) {
    let module = builtin_module::<B>(device);
    let fill_k = module.kernel(builtin::FILL_U32).unwrap();
    let stream = device.create_stream().unwrap();
    let a = device.alloc(1024).unwrap();
    let capture = |launches: usize| {
        stream.begin_capture(CaptureMode::ThreadLocal).unwrap();
        for i in 0..launches {
            // SAFETY: `a` is live for the whole test.
            unsafe { fill::<B>(&stream, &fill_k, a.as_slice(), i as u32 + 1) };
        }
        stream.end_capture().unwrap()
    };
    let mut exec = device.instantiate(&capture(2)).unwrap();
    let err = exec.update(&capture(3)).unwrap_err();
    assert!(matches!(err, Error::GraphUpdate { .. }), "unexpected error {err:?}");
    // SAFETY: `a` is live.
    unsafe { stream.launch_graph(&exec) }.unwrap();
    stream.synchronize().unwrap();
    let first = u32::from_le_bytes(download::<B>(&stream, a.slice(0, 4).unwrap()).try_into().unwrap());
    assert_eq!(first, 2, "the executable graph changed after a refused update");
}

/// Capturing nothing is valid and replays as a no-op.
pub fn empty_capture_replays_as_noop<B: Backend>(device: &B::Device) {
    let stream = device.create_stream().unwrap();
    stream.begin_capture(CaptureMode::ThreadLocal).unwrap();
    let graph = stream.end_capture().unwrap();
    assert_eq!(graph.node_count(), 0);
    let exec = device.instantiate(&graph).unwrap();
    for _ in 0..3 {
        // SAFETY: an empty graph touches no memory.
        unsafe { stream.launch_graph(&exec) }.unwrap();
    }
    stream.synchronize().unwrap();
}

/// Synchronising the capturing stream and synchronous copies during capture fail, invalidate the
/// capture, and leave the stream serving the next valid call.
pub fn illegal_calls_during_capture<B: Backend>(device: &B::Device) {
    let stream = device.create_stream().unwrap();
    let buf = device.alloc(256).unwrap();
    let data = pattern(256, 3);

    stream.begin_capture(CaptureMode::ThreadLocal).unwrap();
    let err = stream.synchronize().unwrap_err();
    assert!(matches!(err, Error::IllegalDuringCapture { .. }), "synchronize during capture gave {err:?}");
    assert_eq!(stream.capture_status(), CaptureStatus::Invalidated);
    assert!(matches!(stream.end_capture().unwrap_err(), Error::CaptureInvalidated { .. }));
    assert_eq!(stream.capture_status(), CaptureStatus::Idle);

    stream.begin_capture(CaptureMode::ThreadLocal).unwrap();
    let err = stream.upload(&data, buf.as_slice()).unwrap_err();
    assert!(matches!(err, Error::IllegalDuringCapture { .. }), "upload during capture gave {err:?}");
    assert!(matches!(stream.end_capture().unwrap_err(), Error::CaptureInvalidated { .. }));

    // The stream and the device serve the next valid calls.
    stream.upload(&data, buf.as_slice()).unwrap();
    assert_eq!(download::<B>(&stream, buf.as_slice()), data);
    stream.synchronize().unwrap();
}

/// Ending a capture that never began, and beginning one twice, are typed errors.
pub fn capture_state_errors<B: Backend>(device: &B::Device) {
    let stream = device.create_stream().unwrap();
    assert!(matches!(stream.end_capture().unwrap_err(), Error::CaptureState { .. }));
    stream.begin_capture(CaptureMode::ThreadLocal).unwrap();
    assert!(stream.begin_capture(CaptureMode::ThreadLocal).is_err(), "a second begin_capture succeeded");
    let _ = stream.end_capture();
    assert_eq!(stream.capture_status(), CaptureStatus::Idle);
    stream.synchronize().unwrap();
}

/// Launching or updating a destroyed graph is a typed error.
pub fn destroyed_graph_cannot_launch<B: Backend>(device: &B::Device) {
    let stream = device.create_stream().unwrap();
    stream.begin_capture(CaptureMode::ThreadLocal).unwrap();
    let graph = stream.end_capture().unwrap();
    let mut exec = device.instantiate(&graph).unwrap();
    assert_eq!(exec.memory_bytes(), 0, "an empty graph holds no memory");
    exec.destroy().unwrap();
    assert!(exec.is_destroyed());
    assert_eq!(exec.memory_bytes(), 0, "a destroyed graph holds no memory");
    // SAFETY: the launch must be refused before anything runs.
    let err = unsafe { stream.launch_graph(&exec) }.unwrap_err();
    assert!(matches!(err, Error::GraphDestroyed { .. }), "launching a destroyed graph gave {err:?}");
    assert!(matches!(exec.update(&graph).unwrap_err(), Error::GraphDestroyed { .. }));
    exec.destroy().unwrap();
    stream.synchronize().unwrap();
}
