//! Requests as an attacker would send them: absurd declared shapes, short and long buffers, wrong
//! dtypes and names, on every entry point of the host backend. Each gets a typed error or a correct
//! result, nothing in this test binary ever allocates more than [`ALLOCATION_BOUND`] at once (a
//! counting global allocator watches), the stats add up, and the next valid request is correct.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::*;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use saggar_device::host::HostBackend;
use saggar_device::{Backend, Device, DeviceBuffer, Stream};
use saggar_dispatch::{
    BucketSpec, DeviceTensor, DispatchError, FailureKind, HostTensor, RequestLimits, Session, SessionConfig,
    StatsSnapshot,
};
use saggar_shape::{DType, ShapeError, Splitting};

/// The largest single allocation any test here may make: the byte limit of the property test's
/// sessions. Every legitimate request of these tests needs a few KiB; a request that claims 2^40
/// rows would need terabytes.
const ALLOCATION_BOUND: usize = LIMITS.max_bytes as usize;

/// The system allocator, remembering the largest allocation asked of it.
struct Counting;

static LARGEST: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator; the counter is a side effect.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LARGEST.fetch_max(new_size, Ordering::Relaxed);
        // SAFETY: forwarded unchanged; `ptr` was allocated by `System` with `layout`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn assert_allocations_bounded() {
    let largest = LARGEST.load(Ordering::Relaxed);
    assert!(largest <= ALLOCATION_BOUND, "an allocation of {largest} bytes was made");
}

type S = Session<HostBackend, SumModel>;

const WIDTH: u64 = 4;

fn session(model: &Arc<SumModel>, splitting: Splitting, limits: RequestLimits) -> S {
    let config = SessionConfig::builder()
        .buckets(BucketSpec::PowersOfTwo { max: 4 })
        .splitting(splitting)
        .max_concurrency(1)
        .request_limits(limits)
        .build()
        .unwrap();
    Session::new(host_device(), model.clone(), config, &no_progress).unwrap()
}

fn assert_stats_add_up(s: &StatsSnapshot) {
    assert_eq!(s.ultra_fast + s.fast + s.standard + s.failed, s.requests, "paths + failed = requests: {s:?}");
    assert_eq!(s.failures.total(), s.failed, "failures by kind add up: {s:?}");
}

/// Valid requests on the host paths and the device path, checked against the reference: batches
/// 3 and (when the session splits) 6.
fn valid_requests_work(s: &S, m: &SumModel, seed: u32, splitting: Splitting) {
    let batches: &[usize] = if splitting == Splitting::Allowed { &[3, 6] } else { &[3] };
    for &batch in batches {
        let data = m.inputs(batch, seed);
        let dims = m.dims(batch as u64);
        let inputs = host_tensors(m, &data, &dims);
        let out = s.run(&inputs).unwrap();
        let (sum, rowsum) = m.reference(&data, batch);
        assert_eq!(floats(&out[0].data), sum);
        assert_eq!(floats(&out[1].data), rowsum);
        let device = s.device().clone();
        let req = DeviceRequest::new(&device, m, batch, seed + 1);
        req.poison(&device);
        let (ins, outs) = req.tensors(m);
        s.run_device(&ins, &outs).unwrap();
        req.check(&device, m);
    }
}

fn host_tensors<'a>(m: &'a SumModel, data: &'a [Vec<f32>], dims: &'a [Vec<u64>]) -> Vec<HostTensor<'a>> {
    m.spec
        .inputs
        .iter()
        .zip(data)
        .zip(dims)
        .map(|((sp, d), dims)| HostTensor { name: sp.name(), dtype: DType::F32, dims, data: as_bytes(d) })
        .collect()
}

const HUGE: u64 = 1 << 40;

/// A request claiming 2^40 rows with buffers that hold 5.
fn huge_claim(m: &SumModel) -> (Vec<Vec<f32>>, Vec<Vec<u64>>) {
    (m.inputs(5, 1), m.dims(HUGE))
}

#[test]
fn a_huge_declared_batch_is_a_typed_error_before_anything_is_allocated() {
    let m = Arc::new(SumModel::new(2, WIDTH, true));
    for (limits, splitting) in [
        (RequestLimits::default(), Splitting::Allowed),
        (RequestLimits { max_rows: u64::MAX, max_bytes: u64::MAX }, Splitting::Allowed),
        (RequestLimits { max_rows: u64::MAX, max_bytes: u64::MAX }, Splitting::Disabled),
    ] {
        let s = session(&m, splitting, limits);
        let raised = limits.max_rows == u64::MAX;
        let (data, dims) = huge_claim(&m);
        let inputs = host_tensors(&m, &data, &dims);
        let expect = |e: DispatchError, role: &str| match (raised, splitting, &e) {
            (false, _, DispatchError::LimitExceeded { what: "rows", requested: HUGE, .. }) => {}
            (true, _, DispatchError::BufferTooSmall { role: r, .. }) if *r == role => {}
            (true, Splitting::Disabled, DispatchError::Shape(ShapeError::BatchAboveLargestBucket { .. })) => {}
            _ => panic!("{limits:?} {splitting:?}: unexpected {e:?}"),
        };
        expect(s.run(&inputs).unwrap_err(), "input");
        let mut outputs = [vec![0u8; 5 * 16], vec![0u8; 5 * 4]];
        expect(s.run_into(&inputs, &mut outputs).unwrap_err(), "input");
        // The inputs in another order take the standard path directly.
        let reversed: Vec<HostTensor<'_>> = inputs.iter().rev().copied().collect();
        expect(s.run_into(&reversed, &mut outputs).unwrap_err(), "input");

        let device = s.device().clone();
        let req = DeviceRequest::new(&device, &m, 5, 1);
        let (mut ins, mut outs) = req.tensors(&m);
        let out_dims = [vec![HUGE, WIDTH], vec![HUGE, 1]];
        for (t, d) in ins.iter_mut().zip(&dims) {
            t.dims = d;
        }
        for (t, d) in outs.iter_mut().zip(&out_dims) {
            t.dims = d;
        }
        expect(s.run_device(&ins, &outs).unwrap_err(), "input");
        expect(s.bind_device(&ins, &outs).unwrap_err(), "input");
        assert_allocations_bounded();
        valid_requests_work(&s, &m, 3, splitting);
        let stats = s.stats();
        assert_stats_add_up(&stats);
        assert_eq!(stats.failed, 4);
        let split = if splitting == Splitting::Allowed { 2 } else { 0 };
        assert_eq!(stats.standard, split, "only the valid split requests were served by the standard path");
    }
}

#[test]
fn a_request_failing_on_the_standard_path_is_not_counted_as_served() {
    let m = Arc::new(SumModel::new(2, WIDTH, false));
    // A batch above every bucket with splitting off.
    let s = session(&m, Splitting::Disabled, RequestLimits::default());
    let data = m.inputs(5, 1);
    let dims = m.dims(5);
    let err = s.run(&host_tensors(&m, &data, &dims)).unwrap_err();
    assert!(matches!(err, DispatchError::Shape(ShapeError::BatchAboveLargestBucket { .. })), "{err:?}");
    let stats = s.stats();
    assert_eq!((stats.requests, stats.standard, stats.failed, stats.failures.request), (1, 0, 1, 1), "{stats:?}");

    // A short buffer in a split request, on the standard path.
    let s = session(&m, Splitting::Allowed, RequestLimits::default());
    let mut inputs = host_tensors(&m, &data, &dims);
    inputs[1].data = &inputs[1].data[..inputs[1].data.len() - 4];
    assert!(matches!(s.run(&inputs).unwrap_err(), DispatchError::BufferTooSmall { role: "input", .. }));
    let mut outputs = [vec![0u8; 5 * 16], vec![0u8; 5 * 4]];
    assert!(s.run_into(&inputs, &mut outputs).is_err());
    let stats = s.stats();
    assert_eq!((stats.requests, stats.standard, stats.failed, stats.split_requests), (2, 0, 2, 0), "{stats:?}");
    assert_stats_add_up(&stats);
    valid_requests_work(&s, &m, 2, Splitting::Allowed);
    let stats = s.stats();
    assert_eq!((stats.standard, stats.split_requests), (2, 2));
    assert_stats_add_up(&stats);
}

#[test]
fn limits_are_typed_errors_counted_apart() {
    let m = Arc::new(SumModel::new(2, WIDTH, true));
    // 8 rows of this model: 2 inputs and 2 outputs of 16 + 16 + 16 + 4 bytes a row, and a bias.
    let s = session(&m, Splitting::Allowed, RequestLimits { max_rows: 8, max_bytes: 8 * 52 + 16 });
    let (data, dims) = (m.inputs(9, 1), m.dims(9));
    let err = s.run(&host_tensors(&m, &data, &dims)).unwrap_err();
    assert!(matches!(err, DispatchError::LimitExceeded { what: "rows", requested: 9, limit: 8 }), "{err:?}");
    assert_eq!(err.failure_kind(), FailureKind::Limit);
    let s = session(&m, Splitting::Allowed, RequestLimits { max_rows: 8, max_bytes: 8 * 52 + 15 });
    let (data, dims) = (m.inputs(8, 1), m.dims(8));
    let err = s.run(&host_tensors(&m, &data, &dims)).unwrap_err();
    assert!(matches!(err, DispatchError::LimitExceeded { what: "bytes", requested: 432, .. }), "{err:?}");
    let (data, dims) = (m.inputs(7, 1), m.dims(7));
    assert!(s.run(&host_tensors(&m, &data, &dims)).is_ok());
    let stats = s.stats();
    assert_eq!((stats.failures.limit, stats.failed, stats.standard), (1, 1, 1));
    assert_stats_add_up(&stats);
    assert!(matches!(
        SessionConfig::builder().request_limits(RequestLimits { max_rows: 0, max_bytes: 1 }).build(),
        Err(DispatchError::Config(_))
    ));
}

/// `output_dims` checks a request as a run does, so a caller (the Python package) can size its
/// output buffers from it before allocating: a request past the limits, or claiming 2^40 rows
/// with five rows of data, is refused and nothing its size is allocated.
#[test]
fn output_dims_checks_limits_before_a_caller_allocates() {
    let m = Arc::new(SumModel::new(2, WIDTH, true));
    let s = session(&m, Splitting::Allowed, RequestLimits { max_rows: 8, max_bytes: 1 << 20 });
    let (data, dims) = (m.inputs(9, 1), m.dims(9));
    let err = s.output_dims(&host_tensors(&m, &data, &dims)).unwrap_err();
    assert!(matches!(err, DispatchError::LimitExceeded { what: "rows", requested: 9, limit: 8 }), "{err:?}");
    let (data, dims) = huge_claim(&m);
    let err = s.output_dims(&host_tensors(&m, &data, &dims)).unwrap_err();
    assert!(matches!(err, DispatchError::LimitExceeded { what: "rows", .. }), "{err:?}");
    let (data, dims) = (m.inputs(3, 1), m.dims(3));
    let out = s.output_dims(&host_tensors(&m, &data, &dims)).unwrap();
    assert_eq!(out.len(), 2);
    assert!(out.iter().all(|d| d[0] == 3), "{out:?}");
    assert_allocations_bounded();
}

#[test]
fn stats_add_up_over_every_path_and_enqueued_runs() {
    let m = Arc::new(SumModel::new(2, WIDTH, true));
    let s = session(&m, Splitting::Allowed, RequestLimits::default());
    for seed in 0..3 {
        valid_requests_work(&s, &m, seed, Splitting::Allowed);
    }
    let device = s.device().clone();
    let req = DeviceRequest::new(&device, &m, 4, 9);
    let (ins, outs) = req.tensors(&m);
    let pending = s.enqueue_device(&ins, &outs).unwrap();
    assert_eq!(s.stats().requests, s.stats().ultra_fast + s.stats().fast + s.stats().standard + 1);
    drop(pending);
    req.check(&device, &m);
    let binding = s.bind_device(&ins, &outs).unwrap();
    binding.run().unwrap();
    let stats = s.stats();
    assert!(stats.ultra_fast > 0 && stats.fast > 0 && stats.standard > 0, "{stats:?}");
    assert_eq!(stats.failed, 0);
    assert_stats_add_up(&stats);
}

/// How one input of a generated request differs from a valid one.
#[derive(Debug, Clone, Copy)]
enum Twist {
    None,
    /// A different extent on the batch axis (or on the bias' only axis).
    Extent(u64),
    WrongWidth,
    WrongRank,
    WrongDType(DType),
    /// The buffer is this many bytes short.
    Short(usize),
    /// The buffer has this many extra bytes (still a valid request).
    Long(usize),
}

fn twist() -> impl Strategy<Value = Twist> {
    prop_oneof![
        12 => Just(Twist::None),
        1 => prop_oneof![Just(0u64), 1..12u64, Just(HUGE), Just(u64::MAX / 2), Just(u64::MAX)].prop_map(Twist::Extent),
        1 => Just(Twist::WrongWidth),
        1 => Just(Twist::WrongRank),
        1 => prop_oneof![Just(DType::F16), Just(DType::I32), Just(DType::U8), Just(DType::F64)].prop_map(Twist::WrongDType),
        1 => (1..20usize).prop_map(Twist::Short),
        1 => (1..20usize).prop_map(|n| Twist::Long(n * 4)),
    ]
}

/// Which entry point a generated request is sent to.
#[derive(Debug, Clone, Copy)]
enum Entry {
    Run,
    RunInto,
    RunDevice,
    BindDevice,
}

#[derive(Debug, Clone)]
struct Case {
    batch: u64,
    twists: [Twist; 3],
    /// Output buffers this many bytes short (`run_into` and the device entry points).
    short_output: [usize; 2],
    reversed: bool,
    entry: Entry,
    seed: u32,
}

fn case() -> impl Strategy<Value = Case> {
    let batch = prop_oneof![4 => 1..12u64, 1 => Just(0u64), 1 => Just(HUGE), 1 => Just(u64::MAX / 3)];
    let entry = prop_oneof![Just(Entry::Run), Just(Entry::RunInto), Just(Entry::RunDevice), Just(Entry::BindDevice)];
    let short = prop_oneof![4 => Just(0usize), 1 => 1..8usize];
    (batch, [twist(), twist(), twist()], [short.clone(), short], any::<bool>(), entry, 0..100u32).prop_map(
        |(batch, twists, short_output, reversed, entry, seed)| Case {
            batch,
            twists,
            short_output,
            reversed,
            entry,
            seed,
        },
    )
}

/// Rows of real data a generated request carries: never more than a small test needs.
const MAX_DATA_ROWS: u64 = 16;

/// The session limits of the property test: a request above them must fail before allocating.
const LIMITS: RequestLimits = RequestLimits { max_rows: 12, max_bytes: 1 << 20 };

struct Built {
    data: Vec<Vec<f32>>,
    dims: Vec<Vec<u64>>,
    dtypes: Vec<DType>,
    lens: Vec<usize>,
    valid: bool,
    rows: usize,
}

fn build(m: &SumModel, c: &Case, splitting: Splitting) -> Built {
    let rows = c.batch.min(MAX_DATA_ROWS) as usize;
    let mut data = m.inputs(rows, c.seed);
    let mut dims = m.dims(c.batch);
    let mut dtypes = vec![DType::F32; 3];
    let mut lens: Vec<usize> = data.iter().map(|d| d.len() * 4).collect();
    let largest_bucket = if splitting == Splitting::Allowed { LIMITS.max_rows } else { 4 };
    let mut valid = (1..=largest_bucket).contains(&c.batch);
    let needed = |i: usize| if i < 2 { c.batch.saturating_mul(WIDTH * 4) } else { WIDTH * 4 };
    for (i, twist) in c.twists.iter().enumerate() {
        match *twist {
            Twist::None => {}
            Twist::Extent(e) => {
                valid &= e == dims[i][0];
                dims[i][0] = e;
            }
            Twist::WrongWidth => {
                valid = false;
                let last = dims[i].len() - 1;
                dims[i][last] += 1;
            }
            Twist::WrongRank => {
                valid = false;
                dims[i].push(1);
            }
            Twist::WrongDType(d) => {
                valid = false;
                dtypes[i] = d;
            }
            Twist::Short(n) => {
                valid &= (lens[i].saturating_sub(n) as u64) >= needed(i);
                lens[i] = lens[i].saturating_sub(n);
            }
            Twist::Long(n) => {
                data[i].extend(std::iter::repeat_n(0.0, n / 4));
                lens[i] += n;
            }
        }
        valid &= lens[i] as u64 >= needed(i);
    }
    Built { data, dims, dtypes, lens, valid, rows }
}

/// Sends a generated request to its entry point; returns the outputs it produced on success.
fn send(s: &S, m: &SumModel, c: &Case, b: &Built) -> Result<(Vec<f32>, Vec<f32>), DispatchError> {
    let mut inputs: Vec<HostTensor<'_>> = (0..3)
        .map(|i| HostTensor {
            name: m.spec.inputs[i].name(),
            dtype: b.dtypes[i],
            dims: &b.dims[i],
            data: &as_bytes(&b.data[i])[..b.lens[i]],
        })
        .collect();
    if c.reversed {
        inputs.reverse();
    }
    let out_bytes = [b.rows * WIDTH as usize * 4, b.rows * 4];
    let out_lens = [out_bytes[0].saturating_sub(c.short_output[0]), out_bytes[1].saturating_sub(c.short_output[1])];
    match c.entry {
        Entry::Run => {
            let out = s.run(&inputs)?;
            Ok((floats(&out[0].data), floats(&out[1].data)))
        }
        Entry::RunInto => {
            let mut outputs = [vec![0u8; out_lens[0]], vec![0u8; out_lens[1]]];
            s.run_into(&inputs, &mut outputs)?;
            Ok((floats(&outputs[0]), floats(&outputs[1])))
        }
        Entry::RunDevice | Entry::BindDevice => {
            let device = s.device().clone();
            let stream = device.create_stream().unwrap();
            let upload = |bytes: &[u8]| {
                let buffer = device.alloc(bytes.len().max(1)).unwrap();
                stream.upload(bytes, buffer.slice(0, bytes.len()).unwrap()).unwrap();
                buffer
            };
            let in_buffers: Vec<_> = inputs.iter().map(|t| upload(t.data)).collect();
            let out_buffers: Vec<_> = out_lens.iter().map(|&n| device.alloc(n.max(1)).unwrap()).collect();
            let out_dims = [vec![c.batch, WIDTH], vec![c.batch, 1]];
            let ins: Vec<DeviceTensor<'_>> = inputs
                .iter()
                .zip(&in_buffers)
                .map(|(t, buf)| DeviceTensor {
                    name: t.name,
                    dtype: t.dtype,
                    dims: t.dims,
                    data: buf.slice(0, t.data.len()).unwrap(),
                })
                .collect();
            let outs: Vec<DeviceTensor<'_>> = m
                .spec
                .outputs
                .iter()
                .zip(&out_buffers)
                .zip(&out_dims)
                .zip(out_lens)
                .map(|(((sp, buf), dims), len)| DeviceTensor {
                    name: sp.name(),
                    dtype: sp.dtype(),
                    dims,
                    data: buf.slice(0, len).unwrap(),
                })
                .collect();
            match c.entry {
                Entry::RunDevice => {
                    s.run_device(&ins, &outs)?;
                }
                _ => {
                    let mut binding = s.bind_device(&ins, &outs)?;
                    // A buffer one byte short of the input it replaces is refused, and the binding
                    // keeps the old one.
                    let short = (c.batch * WIDTH * 4) as usize - 1;
                    let spare = device.alloc(short.max(1)).unwrap();
                    assert!(binding.set_input(0, spare.slice(0, short).unwrap()).is_err());
                    assert!(binding.set_input(7, spare.slice(0, short).unwrap()).is_err());
                    binding.run()?;
                }
            }
            let download = |buffer: &<HostBackend as Backend>::DeviceBuffer, len: usize| {
                let mut bytes = vec![0u8; len];
                stream.download(buffer.slice(0, len).unwrap(), &mut bytes).unwrap();
                floats(&bytes)
            };
            Ok((download(&out_buffers[0], out_lens[0]), download(&out_buffers[1], out_lens[1])))
        }
    }
}

fn check_case(s: &S, m: &SumModel, c: &Case, splitting: Splitting) {
    let b = build(m, c, splitting);
    // `run` allocates its outputs itself.
    let valid = b.valid && (matches!(c.entry, Entry::Run) || c.short_output == [0, 0]);
    let before = s.stats();
    match send(s, m, c, &b) {
        Ok((sum, rowsum)) => {
            assert!(valid, "an invalid request succeeded: {c:?}");
            let data: Vec<Vec<f32>> = b.data.iter().zip(&b.lens).map(|(d, &len)| d[..len / 4].to_vec()).collect();
            assert_eq!((sum, rowsum), m.reference(&data, b.rows), "{c:?}");
        }
        Err(e) => {
            assert!(!valid, "a valid request failed: {c:?}: {e}");
            assert!(matches!(e.failure_kind(), FailureKind::Request | FailureKind::Limit), "{c:?}: {e:?}");
        }
    }
    assert_allocations_bounded();
    let after = s.stats();
    assert_stats_add_up(&after);
    // A `bind_device` that refuses the request runs nothing.
    assert!(after.requests - before.requests <= 1, "{c:?}");
}

#[test]
fn random_requests_get_a_typed_error_or_a_correct_result() {
    let m = Arc::new(SumModel::new(2, WIDTH, true));
    let sessions = [session(&m, Splitting::Allowed, LIMITS), session(&m, Splitting::Disabled, LIMITS)];
    let mut runner = TestRunner::new(Config { cases: 128, failure_persistence: None, ..Config::default() });
    runner
        .run(&(case(), any::<bool>()), |(c, split)| {
            let splitting = if split { Splitting::Allowed } else { Splitting::Disabled };
            let s = &sessions[usize::from(!split)];
            check_case(s, &m, &c, splitting);
            valid_requests_work(s, &m, c.seed, splitting);
            Ok(())
        })
        .unwrap();
}
