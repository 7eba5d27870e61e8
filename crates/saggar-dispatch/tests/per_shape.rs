//! The per-shape path: models with symbolic dimensions besides the batch get one program per
//! concrete shape, kept in a bounded table (least recently used out), made under one per-key lock,
//! run on slots with their own graphs. Every output produced and correct, with new device buffers
//! every run, from 8 threads at once, and after bad input.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use common::{as_bytes, floats, host_device};
use saggar_device::host::{HostBackend, register_kernel};
use saggar_device::{
    Backend, CodeObject, Device, DeviceSlice, KernelArg, KernelSignature, KernelSource, LaunchConfig, Module,
    ParamKind, Stream,
};
use saggar_dispatch::{
    CompileRequest, CompilerError, CompilerIdentity, DeviceTensor, DispatchError, GraphConfig, HostTensor, ModelHash,
    ModelSpec, Program, ProgramCompiler, Session, SessionConfig,
};
use saggar_shape::{DType, Dim, TensorSpec};

const KERNEL: &str = "saggar_test_per_shape_scale";

/// While set, a launch of the shape `HOLD_ROWS x HOLD_COLS` (which no other test uses) waits before
/// it enqueues its kernel (it sets `HELD` when it is there), so a test can keep that shape's program in use.
static HOLD: AtomicBool = AtomicBool::new(false);
static HELD: AtomicBool = AtomicBool::new(false);
const HOLD_ROWS: u32 = 31;
const HOLD_COLS: u32 = 7;

fn kernel_signature() -> KernelSignature {
    KernelSignature::new(
        KERNEL,
        &[ParamKind::Ptr, ParamKind::Ptr, ParamKind::Ptr, ParamKind::U32, ParamKind::U32, ParamKind::Ptr],
    )
}

/// `y[r][c] = 2 x[r][c] + cols`, `s[r] = sum of row r of y`, through scratch.
fn register() {
    register_kernel(kernel_signature(), |ctx, _, args| {
        let ptr = |i: usize| args[i].as_ptr().unwrap();
        let (rows, cols) = match (args[3], args[4]) {
            (KernelArg::U32(r), KernelArg::U32(c)) => (r as usize, c as usize),
            _ => unreachable!(),
        };
        let y: Vec<f32> = ctx.read_f32s(ptr(5), rows * cols)?.iter().map(|v| 2.0 * v + cols as f32).collect();
        ctx.write_f32s(ptr(2), &y)?;
        let staged = ctx.read_f32s(ptr(2), rows * cols)?;
        ctx.write_f32s(ptr(0), &staged)?;
        let sums: Vec<f32> = staged.chunks(cols).map(|r| r.iter().sum()).collect();
        ctx.write_f32s(ptr(1), &sums)
    })
    .unwrap();
}

/// The model `x [rows, cols] -> y [rows, cols], s [rows, 1]`, both dimensions symbolic, with
/// counters of compiles and of programs alive.
struct ScaleModel {
    spec: ModelSpec,
    compiles: AtomicUsize,
    alive: Arc<AtomicUsize>,
    most_alive: Arc<AtomicUsize>,
    fail_next_compile: AtomicBool,
}

impl ScaleModel {
    fn new() -> Arc<ScaleModel> {
        register();
        let (rows, cols) = (|| Dim::symbolic("rows"), || Dim::symbolic("cols"));
        Arc::new(ScaleModel {
            spec: ModelSpec::new(
                "scale",
                vec![TensorSpec::new("x", DType::F32, [rows(), cols()])],
                vec![
                    TensorSpec::new("y", DType::F32, [rows(), cols()]),
                    TensorSpec::new("s", DType::F32, [rows(), Dim::Fixed(1)]),
                ],
            ),
            compiles: AtomicUsize::new(0),
            alive: Arc::new(AtomicUsize::new(0)),
            most_alive: Arc::new(AtomicUsize::new(0)),
            fail_next_compile: AtomicBool::new(false),
        })
    }
}

struct ScaleProgram {
    kernel: <HostBackend as Backend>::Kernel,
    rows: u32,
    cols: u32,
    output_dims: Vec<Vec<u64>>,
    alive: Arc<AtomicUsize>,
    _module: <HostBackend as Backend>::Module,
}

impl Drop for ScaleProgram {
    fn drop(&mut self) {
        self.alive.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Program<HostBackend> for ScaleProgram {
    fn output_dims(&self) -> &[Vec<u64>] {
        &self.output_dims
    }

    fn scratch_bytes(&self) -> usize {
        self.rows as usize * self.cols as usize * 4
    }

    unsafe fn launch(
        &self,
        stream: &<HostBackend as Backend>::Stream,
        inputs: &[DeviceSlice],
        outputs: &[DeviceSlice],
        scratch: DeviceSlice,
    ) -> Result<(), saggar_device::Error> {
        let args = [
            KernelArg::Ptr(outputs[0].ptr()),
            KernelArg::Ptr(outputs[1].ptr()),
            KernelArg::Ptr(scratch.ptr()),
            KernelArg::U32(self.rows),
            KernelArg::U32(self.cols),
            KernelArg::Ptr(inputs[0].ptr()),
        ];
        if (self.rows, self.cols) == (HOLD_ROWS, HOLD_COLS) {
            HELD.store(true, Ordering::SeqCst);
            while HOLD.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        // SAFETY: the dispatcher passes live slices sized for this program's shape.
        unsafe { stream.launch(&self.kernel, &LaunchConfig::for_elements(1, 1), &args) }
    }
}

impl ProgramCompiler<HostBackend> for ScaleModel {
    type Program = ScaleProgram;

    fn model(&self) -> &ModelSpec {
        &self.spec
    }

    fn identity(&self) -> CompilerIdentity {
        CompilerIdentity::new("saggar-per-shape-tests", "1", ModelHash::parse(format!("{:064x}", 77)).unwrap())
    }

    fn compile(
        &self,
        device: &<HostBackend as Backend>::Device,
        _request: &CompileRequest<'_>,
    ) -> Result<Vec<u8>, CompilerError> {
        if self.fail_next_compile.swap(false, Ordering::SeqCst) {
            return Err("injected compile failure".into());
        }
        self.compiles.fetch_add(1, Ordering::SeqCst);
        // A compile takes a moment, so concurrent first requests really overlap.
        std::thread::sleep(Duration::from_millis(2));
        Ok(device.compile(&KernelSource::new("scale", "", vec![kernel_signature()]))?.to_bytes())
    }

    fn load(
        &self,
        device: &<HostBackend as Backend>::Device,
        request: &CompileRequest<'_>,
        artifact: &[u8],
    ) -> Result<ScaleProgram, CompilerError> {
        let (rows, cols) = (request.input_dims[0][0], request.input_dims[0][1]);
        let module = device.load_module(&CodeObject::from_bytes(artifact)?)?;
        let alive = self.alive.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_alive.fetch_max(alive, Ordering::SeqCst);
        Ok(ScaleProgram {
            kernel: module.kernel(KERNEL)?,
            rows: rows as u32,
            cols: cols as u32,
            output_dims: vec![vec![rows, cols], vec![rows, 1]],
            alive: self.alive.clone(),
            _module: module,
        })
    }
}

fn input(rows: u64, cols: u64, seed: u64) -> Vec<f32> {
    (0..rows * cols).map(|i| ((i * 5 + seed * 3) % 11) as f32 - 5.0).collect()
}

fn expected(x: &[f32], cols: u64) -> (Vec<f32>, Vec<f32>) {
    let y: Vec<f32> = x.iter().map(|v| 2.0 * v + cols as f32).collect();
    let s = y.chunks(cols as usize).map(|r| r.iter().sum()).collect();
    (y, s)
}

/// Runs one host request of `rows x cols` and checks both outputs.
fn run_and_check(session: &Session<HostBackend, ScaleModel>, rows: u64, cols: u64, seed: u64) -> bool {
    let x = input(rows, cols, seed);
    let dims = [rows, cols];
    let out = session.run(&[HostTensor { name: "x", dtype: DType::F32, dims: &dims, data: as_bytes(&x) }]).unwrap();
    let (y, s) = expected(&x, cols);
    assert_eq!(out.len(), 2, "every output is produced");
    assert_eq!((out[0].dims.as_slice(), out[1].dims.as_slice()), (&[rows, cols][..], &[rows, 1][..]));
    assert_eq!(floats(&out[0].data), y, "y of {rows}x{cols}");
    assert_eq!(floats(&out[1].data), s, "s of {rows}x{cols}");
    true
}

fn session(model: &Arc<ScaleModel>, limit: usize, graphs: bool) -> Session<HostBackend, ScaleModel> {
    let config = SessionConfig::builder()
        .max_concurrency(8)
        .max_shape_programs(limit)
        .graphs(GraphConfig::default().with_enabled(graphs))
        .build()
        .unwrap();
    Session::builder(host_device(), model.clone()).config(config).build().unwrap()
}

#[test]
fn two_hundred_shapes_with_a_table_of_sixteen_from_eight_threads_keep_at_most_sixteen_programs() {
    let model = ScaleModel::new();
    let session = session(&model, 16, true);
    // 200 distinct shapes: rows 1..=20 x cols 1..=10.
    let shapes: Vec<(u64, u64)> = (1..=20).flat_map(|r| (1..=10).map(move |c| (r, c))).collect();
    assert_eq!(shapes.len(), 200);
    std::thread::scope(|scope| {
        for t in 0..8u64 {
            let (session, shapes) = (&session, &shapes);
            scope.spawn(move || {
                // Each thread walks every shape in its own order, revisiting recent ones now and then.
                for i in 0..shapes.len() as u64 {
                    let (rows, cols) = shapes[((i * 37 + t * 53) % 200) as usize];
                    run_and_check(session, rows, cols, t * 1000 + i);
                    if i % 5 == 0 {
                        run_and_check(session, rows, cols, t * 1000 + i + 1);
                    }
                }
            });
        }
    });
    let st = session.stats();
    assert!(model.most_alive.load(Ordering::SeqCst) <= 16, "at most 16 programs alive at once: {st:?}");
    assert!(st.shape_programs <= 16, "{st:?}");
    assert_eq!(st.shape_overflow_runs, 0, "8 threads never hold all 16 programs: {st:?}");
    assert!(st.shape_program_evictions >= 200 - 16, "every shape beyond 16 evicted one: {st:?}");
    assert_eq!(st.failed, 0);
    assert_eq!(st.standard, st.requests, "per-shape requests take the standard path");
    assert!(st.captures > 0 && st.replays >= st.captures, "per-shape programs run graphs: {st:?}");
    drop(session);
    assert_eq!(model.alive.load(Ordering::SeqCst), 0, "every program is freed with its session");
}

#[test]
fn concurrent_first_requests_of_one_shape_make_one_program() {
    let model = ScaleModel::new();
    let session = session(&model, 4, true);
    let barrier = Barrier::new(8);
    std::thread::scope(|scope| {
        for t in 0..8 {
            let (session, barrier) = (&session, &barrier);
            scope.spawn(move || {
                barrier.wait();
                run_and_check(session, 3, 5, t);
            });
        }
    });
    assert_eq!(model.compiles.load(Ordering::SeqCst), 1, "one compile for one shape");
    assert_eq!(model.most_alive.load(Ordering::SeqCst), 1, "one program for one shape");
    assert_eq!(session.stats().program_loads, 1);
}

#[test]
fn a_repeated_shape_replays_its_graph_and_graphs_off_runs_eagerly() {
    let model = ScaleModel::new();
    let with_graphs = session(&model, 4, true);
    for seed in 0..4 {
        run_and_check(&with_graphs, 2, 3, seed);
    }
    let st = with_graphs.stats();
    assert_eq!(st.captures, 1, "one graph for one shape on one run slot: {st:?}");
    assert_eq!(st.replays, 4, "{st:?}");
    assert_eq!(st.eager_runs, 0);
    assert!(st.graph_bytes > 0, "the graph's memory is counted: {st:?}");
    drop(with_graphs);

    let eager = session(&model, 4, false);
    for seed in 0..3 {
        run_and_check(&eager, 2, 3, seed);
    }
    let st = eager.stats();
    assert_eq!((st.captures, st.replays, st.eager_runs), (0, 0, 3), "{st:?}");
}

#[test]
fn device_requests_with_new_buffers_every_run_are_correct() {
    let model = ScaleModel::new();
    let session = session(&model, 4, true);
    let device = session.device().clone();
    let stream = device.create_stream().unwrap();
    for run in 0..6u64 {
        // New allocations each run, and a shape that comes back: no pointer is ever baked.
        let (rows, cols) = if run % 2 == 0 { (4, 3) } else { (2, 6) };
        let x = input(rows, cols, run);
        let keep_alive: Vec<_> = (0..run).map(|_| device.alloc(64).unwrap()).collect();
        let xb = device.alloc(x.len() * 4).unwrap();
        stream.upload(as_bytes(&x), saggar_device::DeviceBuffer::as_slice(&xb)).unwrap();
        let yb = device.alloc(x.len() * 4).unwrap();
        let sb = device.alloc(rows as usize * 4).unwrap();
        let (xd, yd, sd) = ([rows, cols], [rows, cols], [rows, 1]);
        let slice = saggar_device::DeviceBuffer::as_slice;
        let inputs = [DeviceTensor { name: "x", dtype: DType::F32, dims: &xd, data: slice(&xb) }];
        let outputs = [
            DeviceTensor { name: "y", dtype: DType::F32, dims: &yd, data: slice(&yb) },
            DeviceTensor { name: "s", dtype: DType::F32, dims: &sd, data: slice(&sb) },
        ];
        session.run_device(&inputs, &outputs).unwrap();
        let (y, s) = expected(&x, cols);
        let mut got = vec![0u8; x.len() * 4];
        stream.download(slice(&yb), &mut got).unwrap();
        assert_eq!(floats(&got), y, "run {run}");
        let mut got = vec![0u8; rows as usize * 4];
        stream.download(slice(&sb), &mut got).unwrap();
        assert_eq!(floats(&got), s, "run {run}");
        drop(keep_alive);
    }
    assert_eq!(model.compiles.load(Ordering::SeqCst), 2);
}

#[test]
fn bad_input_is_a_typed_error_and_the_table_keeps_serving() {
    let model = ScaleModel::new();
    let session = session(&model, 2, true);
    let x = input(2, 2, 0);
    let run = |dtype, dims: &[u64], data: &[u8]| session.run(&[HostTensor { name: "x", dtype, dims, data }]);
    assert!(matches!(run(DType::F16, &[2, 2], as_bytes(&x)), Err(DispatchError::Shape(_))));
    assert!(matches!(run(DType::F32, &[2, 2, 1], as_bytes(&x)), Err(DispatchError::Shape(_))));
    assert!(run(DType::F32, &[2, 2], &as_bytes(&x)[..8]).is_err(), "a short buffer is refused");
    model.fail_next_compile.store(true, Ordering::SeqCst);
    assert!(matches!(run(DType::F32, &[2, 2], as_bytes(&x)), Err(DispatchError::Compile { .. })));
    // The failed compile left no slot behind: the table still has room for two programs.
    run_and_check(&session, 2, 2, 1);
    run_and_check(&session, 3, 3, 2);
    let st = session.stats();
    assert_eq!((st.shape_programs, st.shape_program_evictions), (2, 0), "{st:?}");
    assert_eq!(st.failed, 4);
}

#[test]
fn a_request_that_finds_every_program_in_use_runs_on_an_unkept_program() {
    let model = ScaleModel::new();
    let session = session(&model, 1, true);
    HOLD.store(true, Ordering::SeqCst);
    std::thread::scope(|scope| {
        let holder = scope.spawn(|| run_and_check(&session, HOLD_ROWS as u64, HOLD_COLS as u64, 0));
        while !HELD.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
        // The one kept program is running: this shape's program is made, run, and not kept.
        run_and_check(&session, 2, 3, 1);
        let st = session.stats();
        assert_eq!((st.shape_overflow_runs, st.shape_programs), (1, 1), "{st:?}");
        HOLD.store(false, Ordering::SeqCst);
        holder.join().unwrap();
    });
    // Now the held program is idle and is evicted for the next new shape.
    run_and_check(&session, 2, 4, 2);
    let st = session.stats();
    assert_eq!((st.shape_program_evictions, st.shape_programs), (1, 1), "{st:?}");
    assert!(model.most_alive.load(Ordering::SeqCst) <= 2);
}
