//! Host-backend behaviour beyond the conformance suite: the hazards it reproduces on purpose, its
//! allocator policies, its capture rules, its counters and its leak accounting.

use proptest::prelude::*;
use saggar_device::conformance::{SequenceStep, builtin_module, fill, replay_equals_eager};
use saggar_device::host::{AddressReuse, HostBackend, HostConfig, HostDevice, POISON};
use saggar_device::{
    Backend, CaptureMode, Device, DeviceBuffer, Error, Event, GraphExec, KernelArg, LaunchConfig, Module, PinnedBuffer,
    Stream, builtin,
};

fn device(reuse: AddressReuse) -> HostDevice {
    HostDevice::with_config(0, HostConfig { address_reuse: reuse, ..HostConfig::default() }).unwrap()
}

#[test]
fn immediate_reuse_hands_the_freed_address_to_the_next_allocation() {
    let d = device(AddressReuse::Immediate);
    let a = d.alloc(1000).unwrap();
    let addr = a.ptr();
    drop(a);
    assert_eq!(d.alloc(900).unwrap().ptr(), addr);
}

#[test]
fn never_reuse_gives_fresh_addresses() {
    let d = device(AddressReuse::Never);
    let mut seen = std::collections::HashSet::new();
    for _ in 0..100 {
        let b = d.alloc(256).unwrap();
        assert!(seen.insert(b.ptr()), "address {} handed out twice", b.ptr());
    }
}

#[test]
fn fresh_device_memory_is_poisoned_not_zeroed() {
    let d = device(AddressReuse::Never);
    let s = d.create_stream().unwrap();
    let b = d.alloc(64).unwrap();
    let mut out = [0u8; 64];
    s.download(b.as_slice(), &mut out).unwrap();
    assert!(out.iter().all(|&x| x == POISON));
}

#[test]
fn devices_have_disjoint_address_spaces() {
    let d0 = HostBackend::open(0).unwrap();
    let d1 = HostBackend::open(1).unwrap();
    let (a, b) = (d0.alloc(256).unwrap(), d1.alloc(256).unwrap());
    assert_ne!(a.ptr().0 >> 40, b.ptr().0 >> 40);
    // A pointer of device 1 is not memory of device 0.
    let s0 = d0.create_stream().unwrap();
    let err = s0.upload(&[0; 256], b.as_slice()).unwrap_err();
    assert!(matches!(err, Error::InvalidAddress { ordinal: 0, .. }), "{err:?}");
}

#[test]
fn use_after_free_is_a_typed_error_at_the_next_synchronize_and_the_stream_recovers() {
    let d = device(AddressReuse::Never);
    let s = d.create_stream().unwrap();
    let buf = d.alloc(256).unwrap();
    let stale = buf.as_slice();
    drop(buf);
    s.memset(stale, 1).unwrap();
    let err = s.synchronize().unwrap_err();
    assert!(matches!(err.root(), Error::InvalidAddress { .. }), "{err:?}");
    // The error is reported once; the stream serves the next valid call.
    let ok = d.alloc(256).unwrap();
    s.memset(ok.as_slice(), 2).unwrap();
    s.synchronize().unwrap();
}

#[test]
fn stream_work_is_asynchronous_until_synchronized() {
    // Block the stream on an event that is recorded on a second stream only later: the memset queued
    // behind the wait has not run when the host looks, and has run after the synchronize.
    let d = device(AddressReuse::Never);
    let (s, gate_stream) = (d.create_stream().unwrap(), d.create_stream().unwrap());
    let module = builtin_module::<HostBackend>(&d);
    let fill_k = module.kernel(builtin::FILL_U32).unwrap();
    let buf = d.alloc(1 << 22).unwrap();
    let marker = d.alloc(4).unwrap();
    s.memset(marker.as_slice(), 0).unwrap();
    s.synchronize().unwrap();
    let gate = d.create_event().unwrap();
    // SAFETY: `buf` lives past the synchronize.
    unsafe { fill::<HostBackend>(&gate_stream, &fill_k, buf.as_slice(), 9) };
    gate_stream.record(&gate).unwrap();
    s.wait(&gate).unwrap();
    s.memset(marker.as_slice(), 7).unwrap();
    s.synchronize().unwrap();
    let mut out = [0u8; 4];
    s.download(marker.as_slice(), &mut out).unwrap();
    assert_eq!(out, [7; 4]);
    assert!(gate.is_complete().unwrap());
}

#[test]
fn pinned_buffer_dropped_while_a_copy_is_pending_is_counted_and_memory_stays_valid() {
    let d = device(AddressReuse::Never);
    let s = d.create_stream().unwrap();
    let gate_stream = d.create_stream().unwrap();
    let module = builtin_module::<HostBackend>(&d);
    let fill_k = module.kernel(builtin::FILL_U32).unwrap();
    let big = d.alloc(1 << 24).unwrap();
    let gate = d.create_event().unwrap();
    // SAFETY: `big` lives past the synchronize.
    unsafe { fill::<HostBackend>(&gate_stream, &fill_k, big.as_slice(), 1) };
    gate_stream.record(&gate).unwrap();
    s.wait(&gate).unwrap();
    let dst = d.alloc(1024).unwrap();
    let mut pinned = d.alloc_pinned(1024).unwrap();
    pinned.as_mut_slice().fill(3);
    // SAFETY: deliberately broken contract: the pinned buffer is dropped before the stream passes the
    // copy. The host backend keeps the memory alive and counts the hazard.
    unsafe { s.copy_h2d_async(&pinned, 0, dst.as_slice()).unwrap() };
    drop(pinned);
    s.synchronize().unwrap();
    assert_eq!(d.counters().pinned_released_while_pending, 1);
    let mut out = [0u8; 1024];
    s.download(dst.as_slice(), &mut out).unwrap();
    assert!(out.iter().all(|&x| x == 3));
}

#[test]
fn allocation_during_thread_local_capture_fails_and_invalidates_it() {
    let d = device(AddressReuse::Never);
    let s = d.create_stream().unwrap();
    s.begin_capture(CaptureMode::ThreadLocal).unwrap();
    assert!(matches!(d.alloc(256).unwrap_err(), Error::IllegalDuringCapture { .. }));
    assert!(matches!(s.end_capture().unwrap_err(), Error::CaptureInvalidated { .. }));
    d.alloc(256).unwrap();
}

#[test]
fn thread_local_capture_does_not_restrict_other_threads_but_global_does() {
    let d = device(AddressReuse::Never);
    let s = d.create_stream().unwrap();
    s.begin_capture(CaptureMode::ThreadLocal).unwrap();
    std::thread::scope(|sc| sc.spawn(|| d.alloc(256).map(drop)).join().unwrap()).unwrap();
    s.end_capture().unwrap();

    s.begin_capture(CaptureMode::Global).unwrap();
    let r = std::thread::scope(|sc| sc.spawn(|| d.alloc(256).map(drop)).join().unwrap());
    assert!(matches!(r.unwrap_err(), Error::IllegalDuringCapture { .. }));
    assert!(matches!(s.end_capture().unwrap_err(), Error::CaptureInvalidated { .. }));
}

#[test]
fn relaxed_capture_allows_allocation() {
    let d = device(AddressReuse::Never);
    let s = d.create_stream().unwrap();
    s.begin_capture(CaptureMode::Relaxed).unwrap();
    d.alloc(256).unwrap();
    s.end_capture().unwrap();
}

#[test]
fn thread_local_capture_must_end_on_its_own_thread() {
    let d = device(AddressReuse::Never);
    let s = d.create_stream().unwrap();
    s.begin_capture(CaptureMode::ThreadLocal).unwrap();
    let err = std::thread::scope(|sc| sc.spawn(|| s.end_capture().map(drop)).join().unwrap()).unwrap_err();
    assert!(matches!(err, Error::CaptureState { .. }), "{err:?}");
    assert!(matches!(s.end_capture().unwrap_err(), Error::CaptureInvalidated { .. }));
}

#[test]
fn waiting_on_an_event_recorded_outside_the_capture_is_a_capture_isolation_error() {
    let d = device(AddressReuse::Never);
    let (s, other) = (d.create_stream().unwrap(), d.create_stream().unwrap());
    let e = d.create_event().unwrap();
    other.record(&e).unwrap();
    s.begin_capture(CaptureMode::ThreadLocal).unwrap();
    let err = s.wait(&e).unwrap_err();
    assert!(err.to_string().contains("outside the capture"), "{err}");
    assert!(
        matches!(s.end_capture().unwrap_err(), Error::CaptureInvalidated { reason } if reason.contains("uncaptured work"))
    );
    // An event recorded inside the same capture is fine.
    s.begin_capture(CaptureMode::ThreadLocal).unwrap();
    s.record(&e).unwrap();
    s.wait(&e).unwrap();
    s.end_capture().unwrap();
}

#[test]
fn capturing_work_on_another_devices_memory_invalidates_the_capture() {
    let d0 = HostBackend::open(0).unwrap();
    let d1 = HostBackend::open(1).unwrap();
    let s0 = d0.create_stream().unwrap();
    let foreign = d1.alloc(256).unwrap();
    s0.begin_capture(CaptureMode::ThreadLocal).unwrap();
    assert!(matches!(s0.memset(foreign.as_slice(), 0).unwrap_err(), Error::DeviceMismatch { other: 1, .. }));
    assert!(matches!(s0.end_capture().unwrap_err(), Error::CaptureInvalidated { .. }));
}

#[test]
fn unregistered_host_kernel_fails_to_compile_with_a_hint() {
    let d = device(AddressReuse::Never);
    let src = saggar_device::KernelSource::new(
        "missing.cu",
        "",
        vec![saggar_device::KernelSignature::new("not_registered", &[saggar_device::ParamKind::Ptr])],
    );
    let err = d.compile(&src).unwrap_err();
    assert!(matches!(&err, Error::Compile { log, .. } if log.contains("register_kernel")), "{err}");
}

#[test]
fn custom_host_kernels_can_be_registered() {
    use saggar_device::{KernelSignature, ParamKind};
    let sig = KernelSignature::new("test_double_u8", &[ParamKind::Ptr, ParamKind::U64]);
    saggar_device::host::register_kernel(sig.clone(), |ctx, _, args| {
        let (ptr, n) = (args[0].as_ptr().unwrap(), if let KernelArg::U64(n) = args[1] { n as usize } else { 0 });
        ctx.bytes_mut(ptr, n)?.iter_mut().for_each(|b| *b = b.wrapping_mul(2));
        Ok(())
    })
    .unwrap();
    let other = KernelSignature::new("test_double_u8", &[ParamKind::Ptr]);
    assert!(matches!(
        saggar_device::host::register_kernel(other, |_, _, _| Ok(())),
        Err(Error::KernelAlreadyRegistered { .. })
    ));
    let d = device(AddressReuse::Never);
    let module = d.load_module(&d.compile(&saggar_device::KernelSource::new("t", "", vec![sig])).unwrap()).unwrap();
    let k = module.kernel("test_double_u8").unwrap();
    let s = d.create_stream().unwrap();
    let b = d.alloc(4).unwrap();
    s.upload(&[1, 2, 3, 4], b.as_slice()).unwrap();
    // SAFETY: `b` is live and holds 4 bytes.
    unsafe { s.launch(&k, &LaunchConfig::for_elements(4, 4), &[KernelArg::Ptr(b.ptr()), KernelArg::U64(4)]).unwrap() };
    let mut out = [0u8; 4];
    s.download(b.as_slice(), &mut out).unwrap();
    assert_eq!(out, [2, 4, 6, 8]);
}

#[test]
fn a_kernel_fault_is_reported_at_synchronize() {
    let d = device(AddressReuse::Never);
    let module = builtin_module::<HostBackend>(&d);
    let fill_k = module.kernel(builtin::FILL_U32).unwrap();
    let s = d.create_stream().unwrap();
    let small = d.alloc(16).unwrap();
    // SAFETY: deliberately out of bounds: the host backend turns it into a typed error.
    unsafe {
        s.launch(
            &fill_k,
            &LaunchConfig::for_elements(64, 64),
            &[KernelArg::Ptr(small.ptr()), KernelArg::U64(64), KernelArg::U32(1)],
        )
        .unwrap()
    };
    assert!(matches!(s.synchronize().unwrap_err().root(), Error::InvalidAddress { .. }));
    s.synchronize().unwrap();
}

#[test]
fn an_injected_fault_loses_the_device_after_n_launches_and_only_that_device() {
    let config = HostConfig { lose_after_launches: Some(2), ..HostConfig::default() };
    let lost = HostDevice::with_config(1, config).unwrap();
    let healthy = device(AddressReuse::Never);
    for d in [&lost, &healthy] {
        let module = builtin_module::<HostBackend>(d);
        let fill_k = module.kernel(builtin::FILL_U32).unwrap();
        let s = d.create_stream().unwrap();
        let b = d.alloc(64).unwrap();
        let launch = || {
            // SAFETY: `b` is live and holds 16 u32s.
            unsafe {
                s.launch(
                    &fill_k,
                    &LaunchConfig::for_elements(16, 16),
                    &[KernelArg::Ptr(b.ptr()), KernelArg::U64(16), KernelArg::U32(7)],
                )
            }
        };
        launch().unwrap();
        launch().unwrap();
        s.synchronize().unwrap();
        if d.info().ordinal == 1 {
            let err = launch().unwrap_err();
            assert!(err.is_device_lost() && matches!(err, Error::DeviceLost { ordinal: 1, .. }), "{err}");
            assert!(err.to_string().contains("leave it out"), "{err}");
            assert!(s.synchronize().unwrap_err().is_device_lost(), "synchronize fails after the fault");
            let mut out = [0u8; 64];
            assert!(s.download(b.as_slice(), &mut out).unwrap_err().is_device_lost(), "copies fail too");
        } else {
            launch().unwrap();
            s.synchronize().unwrap();
        }
    }
}

#[test]
fn only_sticky_vendor_errors_mean_a_lost_device() {
    let vendor = |name: &str| Error::Vendor {
        backend: saggar_device::BackendKind::Cuda,
        op: "stream.synchronize",
        name: name.into(),
        code: 700,
        message: String::new(),
    };
    assert!(vendor("CUDA_ERROR_ILLEGAL_ADDRESS").is_device_lost());
    assert!(Error::Async { stream: 1, source: Box::new(vendor("hipErrorIllegalAddress")) }.is_device_lost());
    assert!(!vendor("CUDA_ERROR_OUT_OF_MEMORY").is_device_lost());
    assert!(!Error::OutOfMemory { op: "alloc", requested: 1, available: 0 }.is_device_lost());
}

#[test]
fn counters_count_and_nothing_leaks_after_everything_is_dropped() {
    let d = device(AddressReuse::Immediate);
    {
        replay_equals_eager::<HostBackend>(
            &d,
            &[
                SequenceStep::Fill { buf: 0, value: 1 },
                SequenceStep::Copy { src: 0, dst: 1 },
                SequenceStep::FromPinned { buf: 2 },
            ],
        );
        let c = d.counters();
        assert!(
            c.launches >= 2 && c.copies_d2d >= 2 && c.copies_h2d >= 2 && c.graph_launches == 1 && c.captures == 1,
            "{c:?}"
        );
        assert!(c.live_device_bytes > 0 || c.allocations > 0);
    }
    let c = d.counters();
    assert_eq!(c.live_device_bytes, 0, "device bytes leaked: {c:?}");
    assert_eq!(c.live_pinned_bytes, 0, "pinned bytes leaked: {c:?}");
    assert_eq!(c.live_graph_execs, 0, "executable graphs leaked: {c:?}");
    assert_eq!(c.allocations, c.frees);
    assert!(d.take_deferred_errors().is_empty());
}

#[test]
fn destroy_then_drop_releases_the_graph_once() {
    let d = device(AddressReuse::Never);
    let s = d.create_stream().unwrap();
    s.begin_capture(CaptureMode::ThreadLocal).unwrap();
    let mut exec = d.instantiate(&s.end_capture().unwrap()).unwrap();
    assert_eq!(d.counters().live_graph_execs, 1);
    exec.destroy().unwrap();
    drop(exec);
    assert_eq!(d.counters().live_graph_execs, 0);
}

#[test]
fn event_synchronize_and_elapsed_follow_stream_order() {
    let d = device(AddressReuse::Never);
    let s = d.create_stream().unwrap();
    let (e1, e2) = (d.create_event().unwrap(), d.create_event().unwrap());
    s.record(&e1).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(5));
    s.record(&e2).unwrap();
    e2.synchronize().unwrap();
    assert!(e2.elapsed_since(&e1).unwrap() <= std::time::Duration::from_secs(5));
}

fn step() -> impl Strategy<Value = SequenceStep> {
    prop_oneof![
        (0..4usize, any::<u32>()).prop_map(|(buf, value)| SequenceStep::Fill { buf, value }),
        (0..4usize, 0..4usize, -2.0f32..2.0).prop_map(|(x, y, a)| SequenceStep::Axpy { x, y, a }),
        (0..4usize, 0..4usize).prop_map(|(src, dst)| SequenceStep::Copy { src, dst }),
        (0..4usize, 0..4096usize, 1..4096usize, any::<u8>())
            .prop_map(|(buf, offset, len, value)| SequenceStep::Memset { buf, offset, len, value }),
        (0..4usize, 0..4usize, 1..64u64).prop_map(|(src, dst, rows)| SequenceStep::PadRows { src, dst, rows }),
        (0..4usize).prop_map(|buf| SequenceStep::FromPinned { buf }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn random_sequences_give_the_same_bytes_captured_and_replayed_as_eager(steps in prop::collection::vec(step(), 0..40)) {
        let d = device(AddressReuse::Immediate);
        replay_equals_eager::<HostBackend>(&d, &steps);
    }
}
