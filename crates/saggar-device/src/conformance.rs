//! The conformance suite: one set of tests, generic over [`Backend`], that every backend runs.
//!
//! Each test is a public generic function taking an opened device; [`conformance_tests!`](crate::conformance_tests) turns them
//! into `#[test]`s for one backend. A backend with no device here (no GPU on a CI machine) reports
//! every test as skipped, with the reason, on standard error: it never passes silently by doing
//! nothing.
//!
//! It is one file of a little over 600 lines of code on purpose: the tests are the suite's
//! specification of a backend, read side by side, and the macro that instantiates them must list
//! every one of them.
//!
//! ```text
//! saggar_device::conformance_tests!(saggar_device::host::HostBackend);
//! ```
//!
//! Functions panic on failure, like any test body; the messages say what differed.
//!
//! Built with the `conformance` feature only: it is a test harness, not part of the runtime API.
//! Test targets enable it through a dev-dependency (`features = ["conformance"]`).

use crate::api::{Backend, CaptureStatus, Device, DeviceBuffer, Event, Graph, GraphExec, Module, PinnedBuffer, Stream};
use crate::builtin;
pub use crate::conformance_blas::{
    blas_bad_requests_are_refused, blas_matmul_captures_and_replays, blas_matmul_matches_reference,
};
use crate::error::Error;
use crate::types::{CaptureMode, DevicePtr, DeviceSlice, KernelArg, LaunchConfig};

/// Generates one `#[test]` per conformance test for backend `$backend`.
#[macro_export]
macro_rules! conformance_tests {
    ($backend:ty) => {
        $crate::conformance_tests!(@one $backend;
            alloc_copy_round_trip,
            pinned_async_round_trip,
            kernels_reach_mapped_pinned_memory,
            events_order_work_across_streams,
            event_timing,
            untimed_event_orders_work_and_refuses_timing,
            graph_of_100_launches_replays_equal_to_eager,
            replay_after_free_reads_new_occupant,
            graph_update_repoints_launch,
            graph_update_refuses_new_topology,
            empty_capture_replays_as_noop,
            illegal_calls_during_capture,
            capture_state_errors,
            destroyed_graph_cannot_launch,
            bad_sizes_and_ranges,
            bad_launches,
            bad_device_index,
            random_sequences_replay_equal_to_eager,
            no_deferred_errors_after_clean_drop,
            blas_matmul_matches_reference,
            blas_matmul_captures_and_replays,
            blas_bad_requests_are_refused
        );
        $crate::conformance_tests!(@two $backend;
            wrong_device_pinned_is_an_error,
            capture_on_one_device_while_another_is_pinned_elsewhere
        );
    };
    (@one $backend:ty; $($name:ident),*) => {
        $(
            #[test]
            fn $name() {
                let Some(device) = $crate::conformance::open_or_skip::<$backend>(stringify!($name)) else { return };
                $crate::conformance::$name::<$backend>(&device);
            }
        )*
    };
    (@two $backend:ty; $($name:ident),*) => {
        $(
            #[test]
            fn $name() {
                let Some((d0, d1)) = $crate::conformance::open_two_or_skip::<$backend>(stringify!($name)) else { return };
                $crate::conformance::$name::<$backend>(&d0, &d1);
            }
        )*
    };
}

/// Opens device 0 of `B`, or prints why the test is skipped and returns `None`.
pub fn open_or_skip<B: Backend>(test: &str) -> Option<B::Device> {
    match B::enumerate().and_then(|_| B::open(0)) {
        Ok(device) => Some(device),
        Err(e) => {
            eprintln!("SKIPPED {}::{test}: {e}", B::KIND);
            None
        }
    }
}

/// Opens devices 0 and 1 of `B`, or prints why the test is skipped and returns `None`.
pub fn open_two_or_skip<B: Backend>(test: &str) -> Option<(B::Device, B::Device)> {
    let devices = match B::enumerate() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("SKIPPED {}::{test}: {e}", B::KIND);
            return None;
        }
    };
    if devices.len() < 2 {
        eprintln!("SKIPPED {}::{test}: needs two devices, {} found", B::KIND, devices.len());
        return None;
    }
    Some((B::open(0).expect("open device 0"), B::open(1).expect("open device 1")))
}

/// The built-in kernels, compiled and loaded on `device`.
pub fn builtin_module<B: Backend>(device: &B::Device) -> B::Module {
    let code = device.compile(&builtin::source()).expect("compile the built-in kernels");
    device.load_module(&code).expect("load the built-in kernels")
}

fn pattern(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

fn download<B: Backend>(stream: &B::Stream, slice: DeviceSlice) -> Vec<u8> {
    let mut out = vec![0u8; slice.len()];
    stream.download(slice, &mut out).expect("download");
    out
}

fn words(bytes: &[u8]) -> Vec<u32> {
    bytes.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect()
}

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// Enqueues `saggar_fill_u32` over `slice` with `value`.
///
/// # Safety
/// `slice` must name live device memory until the stream has passed the launch.
pub unsafe fn fill<B: Backend>(stream: &B::Stream, kernel: &B::Kernel, slice: DeviceSlice, value: u32) {
    let n = (slice.len() / 4) as u64;
    let args = [KernelArg::Ptr(slice.ptr()), KernelArg::U64(n), KernelArg::U32(value)];
    // SAFETY: the caller guarantees the slice is live; the kernel writes exactly `n` words of it.
    unsafe { stream.launch(kernel, &LaunchConfig::for_elements(n, 256), &args) }.expect("launch saggar_fill_u32");
}

/// Enqueues `saggar_axpy_f32`: `y = a * x + y` over `n` floats.
///
/// # Safety
/// `x` and `y` must name live device memory of `n` floats until the stream has passed the launch.
pub unsafe fn axpy<B: Backend>(stream: &B::Stream, kernel: &B::Kernel, n: u64, a: f32, x: DevicePtr, y: DevicePtr) {
    let args = [KernelArg::U64(n), KernelArg::F32(a), KernelArg::Ptr(x), KernelArg::Ptr(y)];
    // SAFETY: the caller guarantees both ranges are live and hold `n` floats.
    unsafe { stream.launch(kernel, &LaunchConfig::for_elements(n, 256), &args) }.expect("launch saggar_axpy_f32");
}

/// Upload, download, device-to-device copy, memset and sub-slices give back the bytes put in.
pub fn alloc_copy_round_trip<B: Backend>(device: &B::Device) {
    let stream = device.create_stream().unwrap();
    for &len in &[1usize, 255, 256, 4096, 1 << 20] {
        let a = device.alloc(len).unwrap();
        let b = device.alloc(len).unwrap();
        assert_eq!(a.len(), len);
        let data = pattern(len, len as u32);
        stream.upload(&data, a.as_slice()).unwrap();
        assert_eq!(download::<B>(&stream, a.as_slice()), data, "upload/download of {len} bytes");
        stream.copy_d2d(a.as_slice(), b.as_slice()).unwrap();
        assert_eq!(download::<B>(&stream, b.as_slice()), data, "copy_d2d of {len} bytes");
        if len >= 4 {
            let mid = b.slice(1, len / 2).unwrap();
            stream.memset(mid, 0x5A).unwrap();
            let mut expected = data.clone();
            expected[1..1 + len / 2].fill(0x5A);
            assert_eq!(download::<B>(&stream, b.as_slice()), expected, "memset of a sub-slice");
            let tail = a.slice(len - 2, 2).unwrap();
            assert_eq!(download::<B>(&stream, tail), data[len - 2..], "download of a sub-slice");
        }
    }
    stream.synchronize().unwrap();
}

/// Asynchronous copies through pinned memory, with offsets on both sides.
pub fn pinned_async_round_trip<B: Backend>(device: &B::Device) {
    let stream = device.create_stream().unwrap();
    let len = 64 * 1024;
    let mut src = device.alloc_pinned(len).unwrap();
    let dst = device.alloc_pinned(len).unwrap();
    // Offsets aligned inside a pinned buffer (an arena's 256-byte slots) must be aligned in memory.
    for buffer in [&src, &dst, &device.alloc_pinned(100).unwrap()] {
        let address = buffer.as_slice().as_ptr() as usize;
        assert_eq!(address % 4096, 0, "pinned memory at {address:#x} does not start on a page boundary");
    }
    let data = pattern(len, 7);
    src.as_mut_slice().copy_from_slice(&data);
    let buf = device.alloc(len).unwrap();
    // SAFETY: `src`, `dst` and `buf` live until after the synchronize below, and the host does not touch
    // the pinned buffers until then.
    unsafe {
        stream.copy_h2d_async(&src, 0, buf.slice(0, len / 2).unwrap()).unwrap();
        stream.copy_h2d_async(&src, len / 2, buf.slice(len / 2, len / 2).unwrap()).unwrap();
        stream.copy_d2h_async(buf.slice(1000, 5000).unwrap(), &dst, 17).unwrap();
    }
    stream.synchronize().unwrap();
    assert_eq!(&dst.as_slice()[17..5017], &data[1000..6000]);
}

/// Pinned memory is mapped into its device: a kernel reads it and writes it at
/// [`crate::PinnedBuffer::device_ptr`], eagerly and from a captured graph, at 16-byte aligned offsets
/// (the four-word path) and odd ones (bytes), and a dropped buffer's mapping is gone.
pub fn kernels_reach_mapped_pinned_memory<B: Backend>(device: &B::Device) {
    let stream = device.create_stream().unwrap();
    let module = builtin_module::<B>(device);
    let copy = module.kernel(builtin::COPY_BYTES).unwrap();
    let len = 48 * 1024 + 13;
    let mut src = device.alloc_pinned(len).unwrap();
    let mut dst = device.alloc_pinned(len).unwrap();
    let (Some(src_ptr), Some(dst_ptr)) = (src.device_ptr(), dst.device_ptr()) else {
        panic!("pinned memory of {:?} is not mapped into the device", device.info().backend);
    };
    assert_eq!(src.device_slice().map(|s| (s.ptr(), s.len())), Some((src_ptr, len)));
    let on_device = device.alloc(len).unwrap();
    let at = |ptr: DevicePtr, offset: u64| DevicePtr(ptr.0 + offset);
    for (round, captured) in [false, true].into_iter().enumerate() {
        let data = pattern(len, 11 + round as u32);
        src.as_mut_slice().copy_from_slice(&data);
        dst.as_mut_slice().fill(0);
        let enqueue = || {
            // SAFETY: every range lies inside `src`, `dst` or `on_device`, which outlive the
            // synchronize below; the host does not touch the pinned buffers until then.
            unsafe {
                builtin::enqueue_copy_bytes::<B>(&stream, &copy, src_ptr, on_device.ptr(), len as u64).unwrap();
                builtin::enqueue_copy_bytes::<B>(&stream, &copy, on_device.ptr(), dst_ptr, 4096).unwrap();
                builtin::enqueue_copy_bytes::<B>(&stream, &copy, at(on_device.ptr(), 4096), at(dst_ptr, 4096), 1000)
                    .unwrap();
                builtin::enqueue_copy_bytes::<B>(
                    &stream,
                    &copy,
                    at(on_device.ptr(), 5096),
                    at(dst_ptr, 5096),
                    (len - 5096) as u64,
                )
                .unwrap();
                builtin::enqueue_copy_bytes::<B>(&stream, &copy, at(src_ptr, 3), at(dst_ptr, 7), 100).unwrap();
            }
        };
        if captured {
            stream.begin_capture(CaptureMode::ThreadLocal).unwrap();
            enqueue();
            let graph = stream.end_capture().unwrap();
            assert_eq!(graph.node_count(), 5);
            let exec = device.instantiate(&graph).unwrap();
            // SAFETY: the captured ranges are live until after the synchronize below.
            unsafe { stream.launch_graph(&exec) }.unwrap();
        } else {
            enqueue();
        }
        stream.synchronize().unwrap();
        let mut expected = data.clone();
        expected.copy_within(3..103, 7);
        assert!(dst.as_slice() == &expected[..], "round {round}: a kernel's copy through mapped pinned memory differs");
        assert_eq!(download::<B>(&stream, on_device.as_slice()), data, "round {round}: the device copy differs");
    }
    drop(src);
    if device.info().backend == crate::BackendKind::Host {
        // The host backend checks every access: the dropped buffer's mapping must be gone.
        // SAFETY: the host backend resolves the address and faults instead of touching memory.
        let launched = unsafe { builtin::enqueue_copy_bytes::<B>(&stream, &copy, src_ptr, on_device.ptr(), 64) };
        let waited = launched.and_then(|()| stream.synchronize());
        assert!(waited.is_err(), "a kernel read a dropped pinned buffer's mapping");
    }
}

/// Four rounds of eight fills on a producer stream, then `events` recorded there, a consumer stream
/// waiting on the first and copying the filled buffer: the consumer must see the last fill.
fn producer_orders_consumer<B: Backend>(device: &B::Device, events: &[&B::Event]) {
    let module = builtin_module::<B>(device);
    let fill_k = module.kernel(builtin::FILL_U32).unwrap();
    let producer = device.create_stream().unwrap();
    let consumer = device.create_stream().unwrap();
    let n = 1 << 20;
    let a = device.alloc(n * 4).unwrap();
    let b = device.alloc(n * 4).unwrap();
    for round in 0..4u32 {
        // SAFETY: `a` and `b` outlive the synchronize at the end of each round.
        unsafe {
            for i in 0..8 {
                fill::<B>(&producer, &fill_k, a.as_slice(), round * 100 + i);
            }
        }
        for event in events {
            producer.record(event).unwrap();
        }
        consumer.wait(events[0]).unwrap();
        consumer.copy_d2d(a.as_slice(), b.as_slice()).unwrap();
        consumer.synchronize().unwrap();
        let words = download::<B>(&consumer, b.slice(0, 16).unwrap());
        let first = u32::from_le_bytes(words[..4].try_into().unwrap());
        assert_eq!(first, round * 100 + 7, "the consumer ran before the producer's last fill");
    }
    producer.synchronize().unwrap();
}

/// An event recorded on one stream orders work on another.
pub fn events_order_work_across_streams<B: Backend>(device: &B::Device) {
    let event = device.create_event().unwrap();
    producer_orders_consumer::<B>(device, &[&event]);
}

/// Events give an elapsed time once both are complete, and an error before they are recorded.
pub fn event_timing<B: Backend>(device: &B::Device) {
    let stream = device.create_stream().unwrap();
    let start = device.create_event().unwrap();
    let end = device.create_event().unwrap();
    assert!(end.elapsed_since(&start).is_err(), "elapsed time of events never recorded");
    let buf = device.alloc(1 << 20).unwrap();
    stream.record(&start).unwrap();
    stream.memset(buf.as_slice(), 1).unwrap();
    stream.record(&end).unwrap();
    end.synchronize().unwrap();
    assert!(end.is_complete().unwrap());
    let elapsed = end.elapsed_since(&start).unwrap();
    assert!(elapsed.as_secs() < 10, "implausible elapsed time {elapsed:?}");
}

/// An untimed event orders work across streams and can be waited on like a timed one, and every
/// elapsed-time query involving it is an error (not a garbage duration), also once it is complete.
pub fn untimed_event_orders_work_and_refuses_timing<B: Backend>(device: &B::Device) {
    let fence = device.create_untimed_event().unwrap();
    let timed = device.create_event().unwrap();
    producer_orders_consumer::<B>(device, &[&fence, &timed]);
    fence.synchronize().unwrap();
    assert!(fence.is_complete().unwrap());
    for (end, start) in [(&fence, &timed), (&timed, &fence), (&fence, &fence)] {
        assert!(
            matches!(end.elapsed_since(start), Err(Error::Event { .. })),
            "elapsed time involving an untimed event must be refused"
        );
    }
}

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

/// Zero-length and overflowing allocations, ranges past a buffer's end and mismatched copies.
pub fn bad_sizes_and_ranges<B: Backend>(device: &B::Device) {
    assert!(matches!(device.alloc(0).unwrap_err(), Error::InvalidSize { .. }));
    assert!(matches!(device.alloc_pinned(0).unwrap_err(), Error::InvalidSize { .. }));
    let err = device.alloc(usize::MAX).unwrap_err();
    assert!(matches!(err, Error::InvalidSize { .. } | Error::OutOfMemory { .. }), "usize::MAX allocation gave {err:?}");
    let too_big = device.info().total_memory.saturating_mul(2).min(usize::MAX as u64) as usize;
    let err = device.alloc(too_big).unwrap_err();
    assert!(
        matches!(err, Error::OutOfMemory { .. } | Error::InvalidSize { .. }),
        "allocation past the device gave {err:?}"
    );

    let stream = device.create_stream().unwrap();
    let a = device.alloc(100).unwrap();
    let b = device.alloc(50).unwrap();
    assert!(matches!(a.slice(90, 11).unwrap_err(), Error::OutOfBounds { .. }));
    assert!(matches!(a.slice(usize::MAX, 2).unwrap_err(), Error::OutOfBounds { .. }));
    assert!(matches!(stream.copy_d2d(a.as_slice(), b.as_slice()).unwrap_err(), Error::LengthMismatch { .. }));
    assert!(matches!(stream.upload(&[0; 10], b.as_slice()).unwrap_err(), Error::LengthMismatch { .. }));
    let pinned = device.alloc_pinned(64).unwrap();
    // SAFETY: the copy must be refused before anything is enqueued.
    let err = unsafe { stream.copy_h2d_async(&pinned, 32, b.slice(0, 40).unwrap()) }.unwrap_err();
    assert!(matches!(err, Error::OutOfBounds { .. }), "a pinned range past the end gave {err:?}");
    // SAFETY: as above.
    let err = unsafe { stream.copy_d2h_async(a.as_slice(), &pinned, 0) }.unwrap_err();
    assert!(matches!(err, Error::OutOfBounds { .. }), "a pinned destination too small gave {err:?}");
    stream.synchronize().unwrap();
}

/// Launches with the wrong number or kind of arguments, a bad configuration, or a missing kernel.
pub fn bad_launches<B: Backend>(device: &B::Device) {
    let module = builtin_module::<B>(device);
    let fill_k = module.kernel(builtin::FILL_U32).unwrap();
    assert!(matches!(module.kernel("no_such_kernel").unwrap_err(), Error::NoSuchKernel { .. }));
    let stream = device.create_stream().unwrap();
    let buf = device.alloc(1024).unwrap();
    let config = LaunchConfig::for_elements(256, 256);
    // SAFETY: every launch below must be refused before anything is enqueued.
    unsafe {
        let err = stream.launch(&fill_k, &config, &[KernelArg::Ptr(buf.ptr())]).unwrap_err();
        assert!(matches!(err, Error::ArgumentCount { expected: 3, got: 1, .. }), "{err:?}");
        let err =
            stream.launch(&fill_k, &config, &[KernelArg::U32(0), KernelArg::U64(256), KernelArg::U32(1)]).unwrap_err();
        assert!(matches!(err, Error::ArgumentKind { index: 0, .. }), "{err:?}");
        let mut bad = config;
        bad.block.x = 4096;
        let args = [KernelArg::Ptr(buf.ptr()), KernelArg::U64(256), KernelArg::U32(1)];
        let err = stream.launch(&fill_k, &bad, &args).unwrap_err();
        assert!(matches!(err, Error::InvalidLaunchConfig { .. }), "{err:?}");
        bad = config;
        bad.grid.x = 0;
        assert!(matches!(stream.launch(&fill_k, &bad, &args).unwrap_err(), Error::InvalidLaunchConfig { .. }));
        // The stream still serves a valid launch.
        stream.launch(&fill_k, &config, &args).unwrap();
    }
    stream.synchronize().unwrap();
    let word = download::<B>(&stream, buf.slice(0, 4).unwrap());
    assert_eq!(u32::from_le_bytes(word.try_into().unwrap()), 1);
}

/// A device index that does not exist is a typed error.
pub fn bad_device_index<B: Backend>(_device: &B::Device) {
    let count = B::enumerate().unwrap().len();
    let err = B::open(count).unwrap_err();
    assert!(matches!(err, Error::NoSuchDevice { .. }), "opening device {count} gave {err:?}");
    assert!(matches!(B::open(usize::MAX).unwrap_err(), Error::NoSuchDevice { .. }));
}

/// One step of a random work sequence (see [`replay_equals_eager`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SequenceStep {
    /// Fill buffer `buf` with `value`.
    Fill {
        /// Buffer index (modulo the buffer count).
        buf: usize,
        /// The word to fill with.
        value: u32,
    },
    /// `buf[y] = a * buf[x] + buf[y]`.
    Axpy {
        /// Source buffer.
        x: usize,
        /// Destination buffer.
        y: usize,
        /// Multiplier.
        a: f32,
    },
    /// Device-to-device copy of a whole buffer.
    Copy {
        /// Source buffer.
        src: usize,
        /// Destination buffer.
        dst: usize,
    },
    /// Set bytes `offset..offset + len` (clamped) of a buffer.
    Memset {
        /// Buffer.
        buf: usize,
        /// First byte.
        offset: usize,
        /// Bytes.
        len: usize,
        /// Value.
        value: u8,
    },
    /// Copy the first `rows` 64-byte rows of `src` into `dst`, repeating the last to fill `dst`.
    PadRows {
        /// Source buffer.
        src: usize,
        /// Destination buffer.
        dst: usize,
        /// Real rows (clamped to 1..=rows in a buffer).
        rows: u64,
    },
    /// Copy a pinned host pattern into a buffer asynchronously.
    FromPinned {
        /// Destination buffer.
        buf: usize,
    },
}

const SEQ_BUFFERS: usize = 4;
const SEQ_FLOATS: usize = 1024;
const SEQ_ROW: u64 = 64;

/// Runs `steps` eagerly on one set of buffers and captured-then-replayed on another, from the same
/// initial bytes, and asserts the results are byte-identical.
pub fn replay_equals_eager<B: Backend>(device: &B::Device, steps: &[SequenceStep]) {
    let module = builtin_module::<B>(device);
    let (fill_k, axpy_k, rows_k) = (
        module.kernel(builtin::FILL_U32).unwrap(),
        module.kernel(builtin::AXPY_F32).unwrap(),
        module.kernel(builtin::COPY_ROWS).unwrap(),
    );
    let stream = device.create_stream().unwrap();
    let bytes = SEQ_FLOATS * 4;
    let mut pinned = device.alloc_pinned(bytes).unwrap();
    pinned.as_mut_slice().copy_from_slice(&pattern(bytes, 99));
    let sets: Vec<Vec<B::DeviceBuffer>> =
        (0..2).map(|_| (0..SEQ_BUFFERS).map(|_| device.alloc(bytes).unwrap()).collect()).collect();
    for set in &sets {
        for (i, buf) in set.iter().enumerate() {
            // Small floats keep axpy finite and exact enough to compare bit for bit.
            let init: Vec<f32> = (0..SEQ_FLOATS).map(|j| ((i * 31 + j) % 17) as f32 - 8.0).collect();
            stream.upload(&f32_bytes(&init), buf.as_slice()).unwrap();
        }
    }
    let run = |set: &[B::DeviceBuffer]| {
        let b = |i: usize| &set[i % SEQ_BUFFERS];
        for step in steps {
            // SAFETY: every buffer and the pinned source live until the end of this function, after the
            // final synchronize; the host does not touch `pinned` meanwhile.
            unsafe {
                match *step {
                    SequenceStep::Fill { buf, value } => fill::<B>(&stream, &fill_k, b(buf).as_slice(), value),
                    SequenceStep::Axpy { x, y, a } => {
                        axpy::<B>(&stream, &axpy_k, SEQ_FLOATS as u64, a, b(x).ptr(), b(y).ptr())
                    }
                    SequenceStep::Copy { src, dst } => {
                        if src % SEQ_BUFFERS != dst % SEQ_BUFFERS {
                            stream.copy_d2d(b(src).as_slice(), b(dst).as_slice()).unwrap()
                        }
                    }
                    SequenceStep::Memset { buf, offset, len, value } => {
                        let offset = offset % bytes;
                        let len = len.clamp(1, bytes - offset);
                        stream.memset(b(buf).slice(offset, len).unwrap(), value).unwrap()
                    }
                    SequenceStep::PadRows { src, dst, rows } => {
                        if src % SEQ_BUFFERS != dst % SEQ_BUFFERS {
                            let total = bytes as u64 / SEQ_ROW;
                            let args = [
                                KernelArg::Ptr(b(dst).ptr()),
                                KernelArg::Ptr(b(src).ptr()),
                                KernelArg::U64(SEQ_ROW),
                                KernelArg::U64(rows.clamp(1, total)),
                                KernelArg::U64(total),
                            ];
                            stream.launch(&rows_k, &LaunchConfig::for_elements(bytes as u64, 256), &args).unwrap()
                        }
                    }
                    SequenceStep::FromPinned { buf } => stream.copy_h2d_async(&pinned, 0, b(buf).as_slice()).unwrap(),
                }
            }
        }
    };
    run(&sets[0]);
    stream.synchronize().unwrap();
    stream.begin_capture(CaptureMode::ThreadLocal).unwrap();
    run(&sets[1]);
    let graph = stream.end_capture().unwrap();
    let exec = device.instantiate(&graph).unwrap();
    // SAFETY: the captured buffers and `pinned` are live until the end of this function.
    unsafe { stream.launch_graph(&exec) }.unwrap();
    stream.synchronize().unwrap();
    for (i, (eager, replayed)) in sets[0].iter().zip(&sets[1]).enumerate() {
        let eager = download::<B>(&stream, eager.as_slice());
        let replayed = download::<B>(&stream, replayed.as_slice());
        assert!(eager == replayed, "buffer {i} differs between eager and replay after {steps:?}");
    }
}

/// A few fixed pseudo-random sequences through [`replay_equals_eager`] (the host backend's tests run
/// many more through proptest).
pub fn random_sequences_replay_equal_to_eager<B: Backend>(device: &B::Device) {
    for seed in 1..=4u32 {
        let r = pattern(64 * 8, seed);
        let steps: Vec<SequenceStep> = r
            .chunks_exact(8)
            .map(|c| {
                let (i, j) = (c[1] as usize, c[2] as usize);
                match c[0] % 6 {
                    0 => SequenceStep::Fill { buf: i, value: u32::from_le_bytes([c[3], c[4], c[5], 0]) },
                    1 => SequenceStep::Axpy { x: i, y: j, a: (c[3] as f32 - 128.0) / 64.0 },
                    2 => SequenceStep::Copy { src: i, dst: j },
                    3 => {
                        SequenceStep::Memset { buf: i, offset: c[3] as usize * 16, len: c[4] as usize * 8, value: c[5] }
                    }
                    4 => SequenceStep::PadRows { src: i, dst: j, rows: c[3] as u64 % 64 },
                    _ => SequenceStep::FromPinned { buf: i },
                }
            })
            .collect();
        replay_equals_eager::<B>(device, &steps);
    }
}

/// After a normal workload is dropped, no destructor recorded an error.
pub fn no_deferred_errors_after_clean_drop<B: Backend>(device: &B::Device) {
    {
        let module = builtin_module::<B>(device);
        let fill_k = module.kernel(builtin::FILL_U32).unwrap();
        let stream = device.create_stream().unwrap();
        let buf = device.alloc(4096).unwrap();
        let _pinned = device.alloc_pinned(4096).unwrap();
        stream.begin_capture(CaptureMode::ThreadLocal).unwrap();
        // SAFETY: `buf` is live until after the synchronize.
        unsafe { fill::<B>(&stream, &fill_k, buf.as_slice(), 5) };
        let exec = device.instantiate(&stream.end_capture().unwrap()).unwrap();
        // SAFETY: as above.
        unsafe { stream.launch_graph(&exec) }.unwrap();
        stream.synchronize().unwrap();
    }
    device.synchronize().unwrap();
    let errors = device.take_deferred_errors();
    assert!(errors.is_empty(), "destructors recorded errors: {errors:?}");
}

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
