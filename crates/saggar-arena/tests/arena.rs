//! saggar-arena on the host backend: round trips, padding, leases under concurrency, pinned-memory
//! lifetime, and bad input.

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use saggar_arena::{
    ArenaError, ArenaLayout, ArenaOptions, ArenaPool, BindingKind, DeviceInputMode, GatherOptions, InputSource,
    OutputTarget, PoolConfig, SlotSpec, StagingStores, WhenExhausted,
};
use saggar_device::conformance::builtin_module;
use saggar_device::host::{AddressReuse, HostBackend, HostConfig, HostCounters, HostDevice};
use saggar_device::{Device, DeviceBuffer, Event, KernelArg, LaunchConfig, Module, Stream, builtin};
use saggar_shape::{Chunk, DType, PadPlan, SlicePlan, TensorShape};

fn device() -> HostDevice {
    HostDevice::with_config(0, HostConfig { address_reuse: AddressReuse::Immediate, ..HostConfig::default() }).unwrap()
}

fn pool(device: &HostDevice, inputs: &[SlotSpec], outputs: &[SlotSpec], config: PoolConfig) -> ArenaPool<HostBackend> {
    let layout = Arc::new(ArenaLayout::new(inputs, outputs, 256).unwrap());
    ArenaPool::new(device.clone(), layout, config).unwrap()
}

/// Pool settings with the single copies made by the copy engine (`by_kernel` false) or by the copy
/// kernel through mapped pinned memory (the default for copies this small).
fn copies(by_kernel: bool) -> PoolConfig {
    let arena = if by_kernel { ArenaOptions::default() } else { ArenaOptions::default().with_kernel_copies_up_to(0) };
    PoolConfig { arena, ..PoolConfig::default() }
}

/// Exactly one host-to-device copy of `bytes` since `before`: one engine copy of those bytes, or one
/// launch (the copy kernel) and no engine copy.
fn assert_one_upload(d: &HostDevice, before: &HostCounters, by_kernel: bool, bytes: usize, what: &str) {
    let after = d.counters();
    let (engine, launches) = (after.copies_h2d - before.copies_h2d, after.launches - before.launches);
    if by_kernel {
        assert_eq!((engine, launches), (0, 1), "{what}: one copy, by the kernel");
    } else {
        assert_eq!((engine, launches), (1, 0), "{what}: one copy, by the copy engine");
        assert_eq!(after.bytes_h2d - before.bytes_h2d, bytes as u64, "{what}: the span's bytes");
    }
}

/// Gathers split across three helpers whatever the layout's size, with plain or streaming stores.
fn stores(streaming: bool) -> StagingStores {
    if streaming { StagingStores::Streaming } else { StagingStores::Plain }
}

fn parallel_gather(streaming: bool) -> PoolConfig {
    let gather = GatherOptions::auto()
        .with_helpers(3)
        .with_parallel_min_bytes(0)
        .with_parallel_min_inputs(0)
        .with_spin(Duration::from_micros(20))
        .with_stores(stores(streaming));
    PoolConfig { arena: ArenaOptions::default().with_gather(gather), ..PoolConfig::default() }
}

/// The gather configurations every round trip is checked with.
fn gather_config(index: usize) -> PoolConfig {
    let inline = |streaming| PoolConfig {
        arena: ArenaOptions::default().with_gather(GatherOptions::INLINE.with_stores(stores(streaming))),
        ..PoolConfig::default()
    };
    match index {
        0 => inline(false),
        1 => inline(true),
        2 => parallel_gather(false),
        _ => parallel_gather(true),
    }
}

fn plan(name: &str, dtype: DType, dims: &[u64], batched: bool, chunk: Chunk) -> PadPlan {
    PadPlan::new(TensorShape::new(name, dtype, dims), batched, chunk).unwrap()
}

fn bytes_of(seed: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| ((i * 31 + seed * 7) % 251) as u8).collect()
}

/// An aligned copy of `bytes` (Vec<u64> backing) so host pointers satisfy every dtype.
fn aligned(bytes: &[u8]) -> Vec<u64> {
    let mut v = vec![0u64; bytes.len().div_ceil(8)];
    bytemuck_copy(&mut v, bytes);
    v
}

fn bytemuck_copy(dst: &mut [u64], src: &[u8]) {
    for (i, b) in src.iter().enumerate() {
        let word = &mut dst[i / 8];
        *word |= (*b as u64) << (8 * (i % 8));
    }
}

fn as_bytes(v: &[u64], len: usize) -> &[u8] {
    // Little-endian view of the u64 words, truncated to `len` bytes.
    let ptr = v.as_ptr().cast::<u8>();
    // SAFETY: `v` holds at least `len` initialised bytes and u8 has no alignment requirement.
    unsafe { std::slice::from_raw_parts(ptr, len) }
}

#[test]
fn one_copy_gathers_pads_and_round_trips() {
    one_copy_gathers_pads_and_round_trips_with(false);
    one_copy_gathers_pads_and_round_trips_with(true);
}

fn one_copy_gathers_pads_and_round_trips_with(by_kernel: bool) {
    let d = device();
    let stream = d.create_stream().unwrap();
    let (rows, bucket, width) = (3u64, 8u64, 5u64);
    let inputs = [SlotSpec::new("dense", (bucket * width * 4) as usize, 4), SlotSpec::new("table", 64, 4)];
    let outputs = [SlotSpec::new("out", (bucket * 16) as usize, 4)];
    let pool = pool(&d, &inputs, &outputs, copies(by_kernel));
    let mut lease = pool.lease().unwrap();
    let dense = aligned(&bytes_of(1, (rows * width * 4) as usize));
    let table = aligned(&bytes_of(2, 64));
    let chunk = Chunk::whole(rows, bucket);
    let before = d.counters();
    let report = lease
        .stage_inputs(
            &stream,
            &[
                InputSource::Host {
                    data: as_bytes(&dense, (rows * width * 4) as usize),
                    plan: plan("dense", DType::F32, &[rows, width], true, chunk),
                },
                InputSource::Host { data: as_bytes(&table, 64), plan: plan("table", DType::F32, &[16], false, chunk) },
            ],
        )
        .unwrap();
    stream.synchronize().unwrap();
    assert_eq!(report.host_to_device_copies, 1);
    assert_eq!(lease.copies_by_kernel(report.staged_bytes), by_kernel);
    assert_one_upload(&d, &before, by_kernel, report.staged_bytes, "stage_inputs");
    // The padded rows repeat the last real row.
    let binding = lease.input_bindings()[0];
    assert_eq!(binding.len(), (bucket * width * 4) as usize);
    let mut got = vec![0u8; binding.len()];
    stream.download(binding, &mut got).unwrap();
    let row = (width * 4) as usize;
    let src = as_bytes(&dense, (rows * width * 4) as usize);
    assert_eq!(&got[..src.len()], src);
    for r in rows as usize..bucket as usize {
        assert_eq!(&got[r * row..(r + 1) * row], &src[(rows as usize - 1) * row..], "padded row {r}");
    }
    // Outputs: write the slot on the device, download once, scatter the real rows.
    let out_slot = lease.output_slot(0);
    let produced = bytes_of(3, out_slot.len());
    stream.upload(&produced, out_slot).unwrap();
    lease.download_outputs(&stream).unwrap();
    let mut dst = vec![0u64; (rows * 16 / 8) as usize];
    let dst_bytes = (rows * 16) as usize;
    // SAFETY: `dst` holds `dst_bytes` bytes; u8 has no alignment requirement.
    let dst_view = unsafe { std::slice::from_raw_parts_mut(dst.as_mut_ptr().cast::<u8>(), dst_bytes) };
    let slice_plan = SlicePlan::new(TensorShape::new("out", DType::F32, &[bucket, 4]), true, chunk).unwrap();
    lease.scatter_outputs(&mut [OutputTarget { data: dst_view, plan: slice_plan }]).unwrap();
    assert_eq!(as_bytes(&dst, dst_bytes), &produced[..dst_bytes]);
}

/// Tensors of zero elements (an ONNX Split with a zero-size part, a Slice past the end) pass through
/// the arena like any other: an empty input at a dangling, f32-unaligned address is not "misaligned",
/// and a layout whose only output is empty still downloads and scatters.
#[test]
fn zero_element_inputs_and_outputs_round_trip() {
    let d = device();
    let stream = d.create_stream().unwrap();
    let inputs = [SlotSpec::new("empty", 0, 8), SlotSpec::new("x", 16, 4)];
    let outputs = [SlotSpec::new("nothing", 0, 4)];
    let pool = pool(&d, &inputs, &outputs, PoolConfig::default());
    let mut lease = pool.lease().unwrap();
    let chunk = Chunk::whole(1, 1);
    let x = aligned(&bytes_of(4, 16));
    // An empty Vec<u8>'s pointer is 1: not 8-byte aligned, and never dereferenced.
    let empty: Vec<u8> = Vec::new();
    assert_eq!(empty.as_ptr() as usize % 8, 1);
    lease
        .stage_inputs(
            &stream,
            &[
                InputSource::Host { data: &empty, plan: plan("empty", DType::I64, &[0], false, chunk) },
                InputSource::Host { data: as_bytes(&x, 16), plan: plan("x", DType::F32, &[4], false, chunk) },
            ],
        )
        .unwrap();
    lease.download_outputs(&stream).unwrap();
    let mut nothing: Vec<u8> = Vec::new();
    let slice_plan = SlicePlan::new(TensorShape::new("nothing", DType::F32, &[0]), false, chunk).unwrap();
    lease.scatter_outputs(&mut [OutputTarget { data: &mut nothing, plan: slice_plan }]).unwrap();
    let mut got = vec![0u8; 16];
    stream.download(lease.input_bindings()[1], &mut got).unwrap();
    assert_eq!(got, as_bytes(&x, 16));
    // Without coalesced outputs there is no read-back buffer to scatter from.
    let config = PoolConfig { arena: ArenaOptions::default().with_coalesce_outputs(false), ..PoolConfig::default() };
    let uncoalesced = self::pool(&d, &inputs, &outputs, config);
    let mut lease = uncoalesced.lease().unwrap();
    let slice_plan = SlicePlan::new(TensorShape::new("nothing", DType::F32, &[0]), false, chunk).unwrap();
    let err = lease.scatter_outputs(&mut [OutputTarget { data: &mut nothing, plan: slice_plan }]).unwrap_err();
    assert!(matches!(err, ArenaError::NotDownloaded), "{err:?}");
}

#[test]
fn device_inputs_are_copied_padded_or_bound_directly_and_reported() {
    let d = device();
    let stream = d.create_stream().unwrap();
    let width = 8u64;
    let inputs = [SlotSpec::new("a", 4 * 8 * 4, 4), SlotSpec::new("b", 4 * 8 * 4, 4), SlotSpec::new("c", 4 * 8 * 4, 4)];
    let pool = pool(&d, &inputs, &[], PoolConfig::default());
    let mut lease = pool.lease().unwrap();
    let src = d.alloc(2 * 8 * 4).unwrap();
    let data = bytes_of(5, 64);
    stream.upload(&data, src.as_slice()).unwrap();
    let exact = Chunk::whole(2, 2);
    let padded = Chunk::whole(2, 4);
    let report = lease
        .stage_inputs(
            &stream,
            &[
                InputSource::Device {
                    data: src.as_slice(),
                    plan: plan("a", DType::F32, &[2, width], true, exact),
                    mode: DeviceInputMode::DirectBind,
                },
                InputSource::Device {
                    data: src.as_slice(),
                    plan: plan("b", DType::F32, &[2, width], true, padded),
                    mode: DeviceInputMode::DirectBind,
                },
                InputSource::Device {
                    data: src.as_slice(),
                    plan: plan("c", DType::F32, &[2, width], true, exact),
                    mode: DeviceInputMode::CopyIntoSlot,
                },
            ],
        )
        .unwrap();
    assert_eq!(lease.binding_kinds(), &[BindingKind::DirectBind, BindingKind::DeviceCopy, BindingKind::DeviceCopy]);
    assert_eq!(
        (report.direct_binds, report.device_copies, report.direct_bind_refused, report.host_to_device_copies),
        (1, 2, 1, 0)
    );
    assert_eq!(lease.input_bindings()[0].ptr(), src.ptr());
    let mut got = vec![0u8; 128];
    stream.download(lease.input_bindings()[1], &mut got).unwrap();
    assert_eq!(&got[..64], &data[..]);
    assert_eq!(&got[64..96], &data[32..64]);
    assert_eq!(&got[96..128], &data[32..64]);
}

/// A gather stores an input's binding and kind only when they change (neighbouring parts share their
/// cache lines); every request must still see its own: a smaller bucket shortens the binding, a
/// direct bind replaces it, and the next host input takes the slot back.
#[test]
fn bindings_and_kinds_follow_every_request() {
    let d = device();
    let stream = d.create_stream().unwrap();
    let width = 8u64;
    let row = (width * 4) as usize;
    let inputs = [SlotSpec::new("a", 8 * row, 4), SlotSpec::new("b", 8 * row, 4), SlotSpec::new("c", 8 * row, 4)];
    let device_rows = d.alloc(2 * row).unwrap();
    stream.upload(&bytes_of(9, 2 * row), device_rows.as_slice()).unwrap();
    for config in 0..4 {
        let pool = pool(&d, &inputs, &[], gather_config(config));
        let mut lease = pool.lease().unwrap();
        let data = aligned(&bytes_of(config, 2 * row));
        let host = |name: &str, bucket: u64| InputSource::Host {
            data: as_bytes(&data, 2 * row),
            plan: plan(name, DType::F32, &[2, width], true, Chunk::whole(2, bucket)),
        };
        let slots: Vec<_> = (0..3).map(|i| lease.input_slot(i)).collect();
        // Bucket 8, then 4: the bindings shrink with the bucket.
        for bucket in [8u64, 4, 8] {
            lease.stage_inputs(&stream, &[host("a", bucket), host("b", bucket), host("c", bucket)]).unwrap();
            for (i, binding) in lease.input_bindings().iter().enumerate() {
                assert_eq!(binding.ptr(), slots[i].ptr(), "config {config}, bucket {bucket}, input {i}");
                assert_eq!(binding.len(), bucket as usize * row, "config {config}, bucket {bucket}, input {i}");
            }
            assert_eq!(lease.binding_kinds(), &[BindingKind::Staged; 3], "config {config}, bucket {bucket}");
        }
        // Input b bound directly to device memory, then staged from the host again.
        let direct = InputSource::Device {
            data: device_rows.as_slice(),
            plan: plan("b", DType::F32, &[2, width], true, Chunk::whole(2, 2)),
            mode: DeviceInputMode::DirectBind,
        };
        lease.stage_inputs(&stream, &[host("a", 4), direct, host("c", 4)]).unwrap();
        assert_eq!(lease.binding_kinds()[1], BindingKind::DirectBind, "config {config}");
        assert_eq!(lease.input_bindings()[1].ptr(), device_rows.ptr(), "config {config}");
        lease.stage_inputs(&stream, &[host("a", 4), host("b", 4), host("c", 4)]).unwrap();
        assert_eq!(lease.binding_kinds(), &[BindingKind::Staged; 3], "config {config}");
        assert_eq!(lease.input_bindings()[1].ptr(), slots[1].ptr(), "config {config}");
        assert_eq!(lease.input_bindings()[1].len(), 4 * row, "config {config}");
        stream.synchronize().unwrap();
    }
}

#[test]
fn sixteen_threads_leasing_concurrently_never_alias() {
    let d = device();
    let inputs = [SlotSpec::new("id", 256, 8)];
    let outputs = [SlotSpec::new("echo", 256, 8)];
    let pool = pool(&d, &inputs, &outputs, PoolConfig { max_arenas: 6, ..PoolConfig::default() });
    std::thread::scope(|s| {
        for t in 0..16u64 {
            let (pool, d) = (pool.clone(), d.clone());
            s.spawn(move || {
                let stream = d.create_stream().unwrap();
                for round in 0..50u64 {
                    let id = [t * 1000 + round; 32];
                    // SAFETY: u64 -> u8 view of an initialised array.
                    let id_bytes = unsafe { std::slice::from_raw_parts(id.as_ptr().cast::<u8>(), 256) };
                    let mut lease = pool.lease().unwrap();
                    let chunk = Chunk::whole(1, 1);
                    lease
                        .stage_inputs(
                            &stream,
                            &[InputSource::Host { data: id_bytes, plan: plan("id", DType::U64, &[32], false, chunk) }],
                        )
                        .unwrap();
                    stream.copy_d2d(lease.input_bindings()[0], lease.output_slot(0)).unwrap();
                    std::thread::yield_now();
                    lease.download_outputs(&stream).unwrap();
                    let mut back = [0u64; 32];
                    // SAFETY: as above, mutable.
                    let back_bytes = unsafe { std::slice::from_raw_parts_mut(back.as_mut_ptr().cast::<u8>(), 256) };
                    let plan_out = SlicePlan::new(TensorShape::new("echo", DType::U64, &[32]), false, chunk).unwrap();
                    lease.scatter_outputs(&mut [OutputTarget { data: back_bytes, plan: plan_out }]).unwrap();
                    assert_eq!(back, id, "thread {t} round {round} read another request's data");
                }
            });
        }
    });
    assert!(pool.created() <= 6);
}

/// 40 inputs of 200 bytes (f32), each thread's values tagged with its id and round.
fn tagged_inputs(tag: u32) -> Vec<Vec<u32>> {
    (0..40u32).map(|i| (0..50u32).map(|j| tag * 1_000_000 + i * 100 + j).collect()).collect()
}

fn u32_bytes(v: &[u32]) -> &[u8] {
    // SAFETY: u32 -> u8 view of initialised memory.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), v.len() * 4) }
}

/// Uploads the staged span and checks through the device that input `i`'s slot holds `data[i]`.
fn check_staged(
    lease: &mut saggar_arena::ArenaLease<HostBackend>,
    stream: &saggar_device::host::HostStream,
    data: &[Vec<u32>],
    what: &str,
) {
    let span = lease.layout().input_span();
    // SAFETY: fenced right below.
    unsafe { lease.enqueue_upload(stream, span).unwrap() };
    lease.fence(stream).unwrap();
    for (i, want) in data.iter().enumerate() {
        let mut got = vec![0u8; want.len() * 4];
        stream.download(lease.input_bindings()[i], &mut got).unwrap();
        assert_eq!(got, u32_bytes(want), "{what}: input {i}");
    }
}

#[test]
fn parallel_gathers_on_sixteen_threads_never_mix() {
    let d = device();
    let specs: Vec<SlotSpec> = (0..40).map(|i| SlotSpec::new(format!("x{i}"), 200, 4)).collect();
    for streaming in [false, true] {
        let pool = pool(&d, &specs, &[], PoolConfig { max_arenas: 16, ..parallel_gather(streaming) });
        std::thread::scope(|s| {
            for t in 0..16u32 {
                let (pool, d) = (pool.clone(), d.clone());
                s.spawn(move || {
                    let stream = d.create_stream().unwrap();
                    let plans: Vec<PadPlan> =
                        (0..40).map(|i| plan(&format!("x{i}"), DType::F32, &[50], false, Chunk::whole(1, 1))).collect();
                    for round in 0..40u32 {
                        let data = tagged_inputs(t * 100 + round);
                        let mut lease = pool.lease().unwrap();
                        lease
                            .gather_host_with(|i| InputSource::Host { data: u32_bytes(&data[i]), plan: plans[i] })
                            .unwrap();
                        // Each slot holds this request's input, read back through the device.
                        check_staged(&mut lease, &stream, &data, &format!("thread {t} round {round}"));
                    }
                });
            }
        });
    }
}

/// Gathers `data` with inputs 3 and 37 (in different parts of a split gather) cut short: the error
/// must name input 3, whichever part ends first.
fn assert_first_bad_input_is_reported(
    lease: &mut saggar_arena::Arena<HostBackend>,
    data: &[Vec<u32>],
    plans: &[PadPlan],
) {
    let err = lease
        .gather_host_with(|i| {
            let bytes = u32_bytes(&data[i]);
            InputSource::Host { data: if i == 3 || i == 37 { &bytes[..100] } else { bytes }, plan: plans[i] }
        })
        .unwrap_err();
    assert!(matches!(&err, ArenaError::InputTooShort { input, .. } if &**input == "x3"), "{err:?}");
}

#[test]
fn a_parallel_gather_reports_the_first_bad_input_and_the_next_request_succeeds() {
    let d = device();
    let stream = d.create_stream().unwrap();
    let specs: Vec<SlotSpec> = (0..40).map(|i| SlotSpec::new(format!("x{i}"), 200, 4)).collect();
    let pool = pool(&d, &specs, &[], parallel_gather(true));
    let plans: Vec<PadPlan> =
        (0..40).map(|i| plan(&format!("x{i}"), DType::F32, &[50], false, Chunk::whole(1, 1))).collect();
    let data = tagged_inputs(7);
    let mut lease = pool.lease().unwrap();
    for _ in 0..20 {
        assert_first_bad_input_is_reported(&mut lease, &data, &plans);
    }
    lease.gather_host_with(|i| InputSource::Host { data: u32_bytes(&data[i]), plan: plans[i] }).unwrap();
    check_staged(&mut lease, &stream, &data, "after the errors");
}

/// A gather that finds every helper parked runs alone, as one pass on the calling thread: the same
/// staging and the same first bad input as a split gather, counted as run alone.
#[test]
fn a_gather_that_finds_the_helpers_parked_runs_alone_in_one_pass() {
    let d = device();
    let stream = d.create_stream().unwrap();
    let specs: Vec<SlotSpec> = (0..40).map(|i| SlotSpec::new(format!("x{i}"), 200, 4)).collect();
    // Options of this test alone (the spin), so no other test's gathers wake these helpers.
    let mut config = parallel_gather(true);
    config.arena.gather = config.arena.gather.with_spin(Duration::from_micros(31));
    let pool = pool(&d, &specs, &[], config);
    let plans: Vec<PadPlan> =
        (0..40).map(|i| plan(&format!("x{i}"), DType::F32, &[50], false, Chunk::whole(1, 1))).collect();
    let mut lease = pool.lease().unwrap();
    for round in 0..4u32 {
        // Far past the spin: every helper has parked.
        std::thread::sleep(Duration::from_millis(20));
        let data = tagged_inputs(round);
        let before = lease.gather_stats();
        if round % 2 == 1 {
            assert_first_bad_input_is_reported(&mut lease, &data, &plans);
        } else {
            lease.gather_host_with(|i| InputSource::Host { data: u32_bytes(&data[i]), plan: plans[i] }).unwrap();
            check_staged(&mut lease, &stream, &data, &format!("round {round}"));
        }
        let stats = lease.gather_stats().since(&before);
        assert_eq!((stats.split, stats.alone_parked), (0, 1), "round {round}: {stats:?}");
    }
}

#[test]
fn pinned_memory_is_released_only_after_the_stream_finished() {
    let d = device();
    let stream = d.create_stream().unwrap();
    let gate_stream = d.create_stream().unwrap();
    let module = builtin_module::<HostBackend>(&d);
    let fill = module.kernel(builtin::FILL_U32).unwrap();
    let big = d.alloc(1 << 25).unwrap();
    let gate = d.create_event().unwrap();
    {
        let pool = pool(&d, &[SlotSpec::new("x", 4096, 4)], &[SlotSpec::new("y", 4096, 4)], PoolConfig::default());
        let mut lease = pool.lease().unwrap();
        // Hold the stream behind a long kernel on another stream, so the staged copy is still queued
        // when the lease and the pool are dropped.
        // SAFETY: `big` lives past the synchronize below.
        unsafe {
            gate_stream
                .launch(
                    &fill,
                    &LaunchConfig::for_elements(1 << 23, 256),
                    &[KernelArg::Ptr(big.ptr()), KernelArg::U64(1 << 23), KernelArg::U32(1)],
                )
                .unwrap()
        };
        gate_stream.record(&gate).unwrap();
        stream.wait(&gate).unwrap();
        let data = aligned(&bytes_of(9, 4096));
        lease
            .stage_inputs(
                &stream,
                &[InputSource::Host {
                    data: as_bytes(&data, 4096),
                    plan: plan("x", DType::F32, &[1024], false, Chunk::whole(1, 1)),
                }],
            )
            .unwrap();
        lease.download_outputs(&stream).unwrap();
    }
    assert!(gate.is_complete().unwrap(), "the arena was freed before the stream passed its copies");
    stream.synchronize().unwrap();
    let c = d.counters();
    assert_eq!(c.pinned_released_while_pending, 0, "pinned memory was released while a copy was pending");
    assert_eq!(c.live_pinned_bytes, 0);
}

#[test]
fn bad_input_is_a_typed_error_and_the_lease_still_returns() {
    let d = device();
    let stream = d.create_stream().unwrap();
    let pool = pool(
        &d,
        &[SlotSpec::new("x", 64, 4)],
        &[],
        PoolConfig { max_arenas: 1, when_exhausted: WhenExhausted::Fail, arena: ArenaOptions::default() },
    );
    let data = aligned(&bytes_of(1, 256));
    let chunk = Chunk::whole(1, 1);
    {
        let mut lease = pool.lease().unwrap();
        assert!(matches!(pool.lease().unwrap_err(), ArenaError::PoolExhausted { max: 1 }));
        // Shorter than the plan reads.
        let err = lease
            .stage_inputs(
                &stream,
                &[InputSource::Host { data: as_bytes(&data, 10), plan: plan("x", DType::F32, &[16], false, chunk) }],
            )
            .unwrap_err();
        assert!(matches!(err, ArenaError::InputTooShort { .. }), "{err:?}");
        // Larger than the slot.
        let err = lease
            .stage_inputs(
                &stream,
                &[InputSource::Host { data: as_bytes(&data, 256), plan: plan("x", DType::F32, &[64], false, chunk) }],
            )
            .unwrap_err();
        assert!(matches!(err, ArenaError::InputTooLarge { capacity: 64, .. }), "{err:?}");
        // Misaligned for f32.
        let err = lease
            .stage_inputs(
                &stream,
                &[InputSource::Host {
                    data: &as_bytes(&data, 65)[1..],
                    plan: plan("x", DType::F32, &[16], false, chunk),
                }],
            )
            .unwrap_err();
        assert!(matches!(err, ArenaError::Misaligned { align: 4, .. }), "{err:?}");
        // Wrong number of inputs.
        assert!(matches!(lease.stage_inputs(&stream, &[]).unwrap_err(), ArenaError::Count { .. }));
        // This layout has no outputs: scattering none of them is a no-op, not an error.
        lease.scatter_outputs(&mut []).unwrap();
        // The same lease serves the next valid request.
        lease
            .stage_inputs(
                &stream,
                &[InputSource::Host { data: as_bytes(&data, 64), plan: plan("x", DType::F32, &[16], false, chunk) }],
            )
            .unwrap();
    }
    // The lease came back.
    let _again = pool.lease().unwrap();
    assert_eq!(pool.created(), 1);
}

#[test]
fn a_waiting_lease_times_out_and_then_succeeds_when_one_returns() {
    let d = device();
    let config = PoolConfig {
        max_arenas: 1,
        when_exhausted: WhenExhausted::Wait { timeout: Some(Duration::from_millis(50)) },
        arena: ArenaOptions::default(),
    };
    let pool = pool(&d, &[SlotSpec::new("x", 64, 4)], &[], config);
    let held = pool.lease().unwrap();
    assert!(matches!(pool.lease().unwrap_err(), ArenaError::PoolTimeout { .. }));
    std::thread::scope(|s| {
        let waiter = s.spawn(|| pool.lease().map(drop));
        std::thread::sleep(Duration::from_millis(10));
        drop(held);
        waiter.join().unwrap().unwrap();
    });
}

#[test]
fn arena_addresses_are_stable_across_leases() {
    let d = device();
    let pool = pool(
        &d,
        &[SlotSpec::new("x", 64, 4)],
        &[SlotSpec::new("y", 64, 4)],
        PoolConfig { max_arenas: 1, ..PoolConfig::default() },
    );
    let first = { pool.lease().unwrap().input_slot(0) };
    for _ in 0..10 {
        assert_eq!(pool.lease().unwrap().input_slot(0), first);
    }
}

#[test]
fn nothing_leaks_after_the_pool_is_dropped() {
    let d = device();
    {
        let pool = pool(&d, &[SlotSpec::new("x", 4096, 4)], &[SlotSpec::new("y", 4096, 4)], PoolConfig::default());
        pool.prewarm(4).unwrap();
        assert_eq!(pool.created(), 4);
        let _a = pool.lease().unwrap();
    }
    let c = d.counters();
    assert_eq!((c.live_device_bytes, c.live_pinned_bytes), (0, 0), "{c:?}");
}

/// One random tensor: aligned bytes, byte length, dims, batched, dtype.
type TensorCase = (Vec<u64>, usize, Vec<u64>, bool, DType);

const DTYPES: [DType; 5] = [DType::U8, DType::F16, DType::F32, DType::I64, DType::F64];

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    #[test]
    fn gather_upload_download_round_trips_random_layouts(
        tensors in prop::collection::vec((0..5usize, 1..6u64, 1..4u64, any::<bool>()), 1..8),
        rows in 1..6u64,
        extra in 0..3u64,
        gather in 0..4usize,
    ) {
        let d = device();
        let stream = d.create_stream().unwrap();
        let bucket = rows + extra;
        // u8 tensors have odd sizes, so streaming copies have tails.
        let specs: Vec<SlotSpec> = tensors
            .iter()
            .enumerate()
            .map(|(i, &(t, w, h, _))| SlotSpec::new(format!("t{i}"), (bucket * w * h) as usize * DTYPES[t].size_bytes(), DTYPES[t].size_bytes()))
            .collect();
        let pool = pool(&d, &specs, &[], gather_config(gather));
        let mut lease = pool.lease().unwrap();
        let chunk = Chunk::whole(rows, bucket);
        let datas: Vec<TensorCase> = tensors
            .iter()
            .enumerate()
            .map(|(i, &(t, w, h, batched))| {
                let dims = if batched { vec![rows, w, h] } else { vec![w, h] };
                let len = dims.iter().product::<u64>() as usize * DTYPES[t].size_bytes();
                (aligned(&bytes_of(i, len)), len, dims, batched, DTYPES[t])
            })
            .collect();
        let names: Vec<String> = (0..datas.len()).map(|i| format!("t{i}")).collect();
        let sources: Vec<InputSource<'_>> = datas
            .iter()
            .zip(&names)
            .map(|((words, len, dims, batched, dtype), name)| InputSource::Host {
                data: as_bytes(words, *len),
                plan: PadPlan::new(TensorShape::new(name, *dtype, dims), *batched, chunk).unwrap(),
            })
            .collect();
        lease.stage_inputs(&stream, &sources).unwrap();
        stream.synchronize().unwrap();
        for (i, (words, len, dims, batched, _)) in datas.iter().enumerate() {
            let binding = lease.input_bindings()[i];
            let mut got = vec![0u8; binding.len()];
            stream.download(binding, &mut got).unwrap();
            let src = as_bytes(words, *len);
            prop_assert_eq!(&got[..src.len()], src);
            if *batched && extra > 0 {
                let row = src.len() / dims[0] as usize;
                for r in rows as usize..bucket as usize {
                    prop_assert_eq!(&got[r * row..(r + 1) * row], &src[src.len() - row..]);
                }
            }
        }
    }
}

/// Inputs written in place into staging are padded in place (the last real row repeated into the
/// bucket's rows) and reach the device with the one copy; the read-back view is refused while the
/// download may still be in flight and gives the real rows after.
#[test]
fn inputs_written_in_place_are_padded_in_place_and_sent_with_one_copy() {
    inputs_written_in_place_with(false);
    inputs_written_in_place_with(true);
}

fn inputs_written_in_place_with(by_kernel: bool) {
    let d = device();
    let stream = d.create_stream().unwrap();
    let (rows, bucket, width) = (3u64, 8u64, 5u64);
    let inputs = [SlotSpec::new("dense", (bucket * width * 4) as usize, 4), SlotSpec::new("table", 64, 4)];
    let outputs = [SlotSpec::new("out", (bucket * 16) as usize, 4)];
    let pool = pool(&d, &inputs, &outputs, copies(by_kernel));
    let mut lease = pool.lease().unwrap();
    let chunk = Chunk::whole(rows, bucket);
    let plans =
        [plan("dense", DType::F32, &[rows, width], true, chunk), plan("table", DType::F32, &[16], false, chunk)];
    let dense = bytes_of(1, (rows * width * 4) as usize);
    let table = bytes_of(2, 64);
    lease.staged_input_mut(0, &plans[0]).unwrap().copy_from_slice(&dense);
    lease.staged_input_mut(1, &plans[1]).unwrap().copy_from_slice(&table);
    assert_eq!(lease.staged_input_mut(0, &plans[0]).unwrap().len(), dense.len(), "the view holds the real rows");
    let span = lease.pad_staged(|i| plans[i]).unwrap();
    let before = d.counters();
    // SAFETY: fenced right below.
    unsafe { lease.enqueue_upload(&stream, span).unwrap() };
    lease.fence(&stream).unwrap();
    lease.wait_idle().unwrap();
    assert_one_upload(&d, &before, by_kernel, span, "enqueue_upload");
    let mut got = vec![0u8; (bucket * width * 4) as usize];
    stream.download(lease.input_slot(0).sub(0, got.len()).unwrap(), &mut got).unwrap();
    let row = (width * 4) as usize;
    assert_eq!(&got[..dense.len()], &dense[..]);
    for r in rows as usize..bucket as usize {
        assert_eq!(&got[r * row..(r + 1) * row], &dense[dense.len() - row..], "padded row {r} on the device");
    }
    let mut got_table = vec![0u8; 64];
    stream.download(lease.input_slot(1).sub(0, 64).unwrap(), &mut got_table).unwrap();
    assert_eq!(got_table, table);
    // Outputs: the view is refused while the download may be in flight, then gives the real rows.
    let produced = bytes_of(3, lease.output_slot(0).len());
    stream.upload(&produced, lease.output_slot(0)).unwrap();
    lease.download_outputs(&stream).unwrap();
    let slice_plan = SlicePlan::new(TensorShape::new("out", DType::F32, &[bucket, 4]), true, chunk).unwrap();
    assert!(matches!(lease.downloaded_output(0, &slice_plan), Err(ArenaError::InFlight)));
    lease.wait_idle().unwrap();
    assert_eq!(lease.downloaded_output(0, &slice_plan).unwrap(), &produced[..(rows * 16) as usize]);
}

/// The limit of kernel copies is inclusive: a span of exactly `kernel_copies_up_to` bytes goes by
/// the kernel, one byte more by the copy engine, both ways.
#[test]
fn copies_above_the_kernel_limit_use_the_copy_engine() {
    let d = device();
    let stream = d.create_stream().unwrap();
    let inputs = [SlotSpec::new("x", 1024, 4)];
    let outputs = [SlotSpec::new("y", 1024, 4)];
    for (limit, by_kernel) in [(1024, true), (1023, false)] {
        let config =
            PoolConfig { arena: ArenaOptions::default().with_kernel_copies_up_to(limit), ..PoolConfig::default() };
        let pool = pool(&d, &inputs, &outputs, config);
        let mut lease = pool.lease().unwrap();
        assert_eq!(lease.copies_by_kernel(1024), by_kernel, "limit {limit}");
        let data = bytes_of(7, 1024);
        let plan = plan("x", DType::F32, &[256], false, Chunk::whole(1, 1));
        lease.write_staged_input(0, &plan, &data).unwrap();
        let before = d.counters();
        // SAFETY: fenced right below.
        unsafe { lease.enqueue_upload(&stream, 1024).unwrap() };
        lease.fence(&stream).unwrap();
        lease.wait_idle().unwrap();
        assert_one_upload(&d, &before, by_kernel, 1024, &format!("upload at limit {limit}"));
        let mut got = vec![0u8; 1024];
        stream.download(lease.input_slot(0), &mut got).unwrap();
        assert_eq!(got, data, "upload at limit {limit}");
        stream.upload(&data, lease.output_slot(0)).unwrap();
        let before = d.counters();
        lease.download_outputs(&stream).unwrap();
        lease.wait_idle().unwrap();
        let after = d.counters();
        let engine = after.copies_d2h - before.copies_d2h;
        assert_eq!((engine, after.launches - before.launches), if by_kernel { (0, 1) } else { (1, 0) });
        let y = SlicePlan::new(TensorShape::new("y", DType::F32, &[256]), false, Chunk::whole(1, 1)).unwrap();
        assert_eq!(lease.downloaded_output(0, &y).unwrap(), &data[..], "download at limit {limit}");
    }
}

/// A pool of several layouts: each arena holds all of them in one memory, switches between them, and
/// gathers, binds and sends each at its own offsets; a layout index out of range and layouts of
/// different tensor counts are typed errors.
#[test]
fn arenas_of_several_layouts_gather_and_send_each_at_its_own_offsets() {
    several_layouts_with(false);
    several_layouts_with(true);
}

fn several_layouts_with(by_kernel: bool) {
    let d = device();
    let stream = d.create_stream().unwrap();
    // Two inputs of `rows` rows of 8 bytes: bucket 1 packs them 256 bytes apart, bucket 64 512 bytes
    // apart.
    let layout = |rows: usize| {
        let inputs = [SlotSpec::new("a", rows * 8, 4), SlotSpec::new("b", rows * 8, 4)];
        Arc::new(ArenaLayout::new(&inputs, &[SlotSpec::new("out", rows * 4, 4)], 256).unwrap())
    };
    let pool =
        ArenaPool::<HostBackend>::with_layouts(d.clone(), vec![layout(1), layout(64)], copies(by_kernel)).unwrap();
    assert_eq!(pool.layouts().len(), 2);
    let mut lease = pool.lease().unwrap();
    assert_eq!(lease.layout_index(), 0);
    for (index, rows) in [(1usize, 64u64), (0, 1), (1, 64)] {
        lease.use_layout(index).unwrap();
        assert_eq!(lease.layout().inputs()[1].offset, if rows == 1 { 256 } else { 512 });
        let chunk = Chunk::whole(rows, rows);
        let plans = [plan("a", DType::F32, &[rows, 2], true, chunk), plan("b", DType::F32, &[rows, 2], true, chunk)];
        let data = [bytes_of(index, rows as usize * 8), bytes_of(index + 5, rows as usize * 8)];
        let sources: Vec<InputSource<'_>> =
            data.iter().zip(&plans).map(|(d, p)| InputSource::Host { data: d, plan: *p }).collect();
        let before = d.counters();
        let report = lease.stage_inputs(&stream, &sources).unwrap();
        lease.wait_idle().unwrap();
        let span = lease.layout().inputs()[1].offset + rows as usize * 8;
        assert_eq!(report.staged_bytes, span, "rows {rows}");
        assert_one_upload(&d, &before, by_kernel, span, &format!("rows {rows}"));
        for (i, want) in data.iter().enumerate() {
            assert_eq!(lease.input_bindings()[i], lease.input_slot(i).sub(0, want.len()).unwrap());
            let mut got = vec![0u8; want.len()];
            stream.download(lease.input_slot(i).sub(0, want.len()).unwrap(), &mut got).unwrap();
            assert_eq!(&got, want, "input {i} at rows {rows}");
        }
    }
    assert!(matches!(lease.use_layout(2), Err(ArenaError::Layout { .. })));
    let other = Arc::new(ArenaLayout::new(&[SlotSpec::new("a", 8, 4)], &[], 256).unwrap());
    assert!(matches!(
        ArenaPool::<HostBackend>::with_layouts(d.clone(), vec![layout(1), other], PoolConfig::default()),
        Err(ArenaError::Layout { .. })
    ));
    assert!(matches!(
        ArenaPool::<HostBackend>::with_layouts(d, Vec::new(), PoolConfig::default()),
        Err(ArenaError::Layout { .. })
    ));
}

/// Inputs written with `write_staged_input` (streamed on GPU backends) land in their slot like a
/// view's writes, and a length other than the real rows' is a typed error.
#[test]
fn written_inputs_land_in_their_slots_and_a_wrong_length_is_an_error() {
    let d = device();
    let stream = d.create_stream().unwrap();
    for config in [gather_config(0), gather_config(1)] {
        let inputs = [SlotSpec::new("a", 40, 4), SlotSpec::new("b", 24, 4)];
        let pool = pool(&d, &inputs, &[], config);
        let mut lease = pool.lease().unwrap();
        let chunk = Chunk::whole(1, 1);
        let plans = [plan("a", DType::F32, &[10], false, chunk), plan("b", DType::F32, &[6], false, chunk)];
        let data = [bytes_of(1, 40), bytes_of(2, 24)];
        for (i, d) in data.iter().enumerate() {
            lease.write_staged_input(i, &plans[i], d).unwrap();
        }
        assert!(matches!(
            lease.write_staged_input(0, &plans[0], &data[1]),
            Err(ArenaError::InputLength { expected: 40, actual: 24, .. })
        ));
        let span = lease.pad_staged(|i| plans[i]).unwrap();
        // SAFETY: waited for right below.
        unsafe { lease.enqueue_upload(&stream, span).unwrap() };
        stream.synchronize().unwrap();
        for (i, want) in data.iter().enumerate() {
            let mut got = vec![0u8; want.len()];
            stream.download(lease.input_slot(i).sub(0, want.len()).unwrap(), &mut got).unwrap();
            assert_eq!(&got, want, "input {i}");
        }
    }
}
