//! The three run paths, padding and slicing, splitting, and every output on every path.

mod common;

use std::sync::Arc;

use common::*;
use saggar_dispatch::{BindingMode, BucketSpec, HostTensor, RunPath, Session, SessionConfig};
use saggar_shape::DType;

fn session(model: SumModel, max: u64) -> (Session<saggar_device::host::HostBackend, SumModel>, Arc<SumModel>) {
    let model = Arc::new(model);
    let config = SessionConfig::builder().buckets(BucketSpec::PowersOfTwo { max }).build().unwrap();
    (Session::builder(host_device(), model.clone()).config(config).build().unwrap(), model)
}

fn run(
    session: &Session<saggar_device::host::HostBackend, SumModel>,
    model: &SumModel,
    batch: usize,
    seed: u32,
) -> saggar_dispatch::RunInfo {
    let data = model.inputs(batch, seed);
    let dims = model.dims(batch as u64);
    let specs = session.signature().inputs();
    let inputs: Vec<HostTensor<'_>> = specs
        .iter()
        .zip(&data)
        .zip(&dims)
        .map(|((s, d), dims)| HostTensor { name: s.name(), dtype: DType::F32, dims, data: as_bytes(d) })
        .collect();
    let (want_sum, want_rowsum) = model.reference(&data, batch);
    let mut sum = vec![f32::NAN; batch * model.width as usize];
    let mut rowsum = vec![f32::NAN; batch];
    let info = {
        // SAFETY: f32 -> u8 views of initialised, exclusively borrowed memory.
        let mut outs: Vec<&mut [u8]> =
            vec![unsafe { std::slice::from_raw_parts_mut(sum.as_mut_ptr().cast::<u8>(), sum.len() * 4) }, unsafe {
                std::slice::from_raw_parts_mut(rowsum.as_mut_ptr().cast::<u8>(), rowsum.len() * 4)
            }];
        session.run_into(&inputs, &mut outs).unwrap()
    };
    assert_eq!(sum, want_sum, "sum for batch {batch}");
    assert_eq!(rowsum, want_rowsum, "rowsum for batch {batch}: every output must be produced");
    info
}

#[test]
fn first_run_is_fast_then_ultra_fast_and_paths_sum_to_requests() {
    let (s, m) = session(SumModel::new(3, 4, true), 8);
    assert_eq!(s.buckets(), vec![1, 2, 4, 8]);
    assert_eq!(run(&s, &m, 3, 1).path, RunPath::Fast);
    for i in 0..5 {
        let info = run(&s, &m, 3, 2 + i);
        assert_eq!((info.path, info.bucket, info.mode), (RunPath::UltraFast, Some(4), BindingMode::PinnedCopy));
        assert!(info.replayed);
    }
    assert_eq!(run(&s, &m, 5, 1).path, RunPath::Fast);
    let st = s.stats();
    assert_eq!(st.ultra_fast + st.fast + st.standard, st.requests);
    assert_eq!((st.useful_rows, st.padded_rows), (3 * 6 + 5, 6 + 3));
    assert_eq!(m.compiles.load(std::sync::atomic::Ordering::SeqCst), 4, "every bucket compiled once at creation");
}

#[test]
fn inputs_in_another_order_take_the_standard_path_and_are_correct() {
    let (s, m) = session(SumModel::new(3, 4, true), 8);
    let data = m.inputs(2, 9);
    let dims = m.dims(2);
    let specs = s.signature().inputs();
    let mut inputs: Vec<HostTensor<'_>> = specs
        .iter()
        .zip(&data)
        .zip(&dims)
        .map(|((sp, d), dims)| HostTensor { name: sp.name(), dtype: DType::F32, dims, data: as_bytes(d) })
        .collect();
    inputs.reverse();
    let out = s.run(&inputs).unwrap();
    let (want_sum, want_rowsum) = m.reference(&data, 2);
    assert_eq!(floats(&out[0].data), want_sum);
    assert_eq!(floats(&out[1].data), want_rowsum);
    assert_eq!((out[0].dims.clone(), out[1].dims.clone()), (vec![2, 4], vec![2, 1]));
    assert_eq!(s.stats().standard, 1);
}

#[test]
fn batches_above_the_largest_bucket_are_split_and_every_row_returned() {
    let (s, m) = session(SumModel::new(2, 3, false), 4);
    let info = run(&s, &m, 11, 3);
    assert_eq!((info.path, info.chunks), (RunPath::Standard, 3));
    assert_eq!(s.stats().split_requests, 1);
}

#[test]
fn graphs_off_runs_eagerly_with_the_same_results() {
    let model = Arc::new(SumModel::new(2, 4, true));
    let graphs = saggar_dispatch::GraphConfig::default().with_enabled(false);
    let config = SessionConfig::builder().buckets(BucketSpec::List(vec![2, 6])).graphs(graphs).build().unwrap();
    let s = Session::builder(host_device(), model.clone()).config(config).build().unwrap();
    for b in [1, 2, 5, 6, 2] {
        assert!(!run(&s, &model, b, b as u32).replayed);
    }
    assert_eq!(s.stats().captures, 0);
    assert_eq!(s.stats().eager_runs, 5);
}

#[test]
fn eager_capture_captures_every_bucket_at_creation() {
    let model = Arc::new(SumModel::new(2, 4, false));
    let graphs = saggar_dispatch::GraphConfig::default().with_capture(saggar_dispatch::CaptureWhen::Eager);
    let config = SessionConfig::builder().buckets(BucketSpec::Stepped { max: 16 }).graphs(graphs).build().unwrap();
    let s = Session::builder(host_device(), model.clone()).config(config).build().unwrap();
    let buckets = s.buckets().len() as u64;
    assert_eq!(s.stats().captures, buckets);
    run(&s, &model, 7, 1);
    assert_eq!(s.stats().captures, buckets, "a lazily-captured graph was captured again");
}

#[test]
fn graph_memory_budget_evicts_least_recently_used_graphs() {
    let model = Arc::new(SumModel::new(2, 4, false));
    let graphs = saggar_dispatch::GraphConfig::default()
        .with_memory_budget_bytes(Some(2 * saggar_dispatch::GRAPH_NODE_BYTES * 3));
    let config = SessionConfig::builder()
        .buckets(BucketSpec::PowersOfTwo { max: 8 })
        .graphs(graphs)
        .max_concurrency(1)
        .prewarm_contexts(1)
        .build()
        .unwrap();
    let s = Session::builder(host_device(), model.clone()).config(config).build().unwrap();
    for b in [1, 2, 4, 8, 1, 2] {
        run(&s, &model, b, 0);
    }
    let st = s.stats();
    assert!(st.evicted_graphs >= 2, "{st:?}");
}

#[test]
fn a_static_model_runs_one_program() {
    use saggar_dispatch::{CompileRequest, CompilerError, CompilerIdentity, ModelSpec, ProgramCompiler};
    use saggar_shape::{Dim, TensorSpec};
    struct Static(SumModel);
    impl ProgramCompiler<saggar_device::host::HostBackend> for Static {
        type Program = SumProgram;
        fn model(&self) -> &ModelSpec {
            &self.0.spec
        }
        fn identity(&self) -> CompilerIdentity {
            self.0.identity()
        }
        fn compile(
            &self,
            d: &saggar_device::host::HostDevice,
            r: &CompileRequest<'_>,
        ) -> Result<Vec<u8>, CompilerError> {
            self.0.compile(d, r)
        }
        fn load(
            &self,
            d: &saggar_device::host::HostDevice,
            r: &CompileRequest<'_>,
            a: &[u8],
        ) -> Result<SumProgram, CompilerError> {
            self.0.load(d, r, a)
        }
    }
    let mut inner = SumModel::new(2, 4, false);
    let fixed = |name: &str, dims: [u64; 2]| TensorSpec::new(name, DType::F32, dims.map(Dim::Fixed));
    inner.spec = ModelSpec::new(
        "static",
        vec![fixed("in0", [3, 4]), fixed("in1", [3, 4])],
        vec![fixed("sum", [3, 4]), fixed("rowsum", [3, 1])],
    );
    let s = Session::builder(host_device(), Arc::new(Static(inner))).build().unwrap();
    let m = SumModel::new(2, 4, false);
    let data = m.inputs(3, 4);
    let dims = [3u64, 4];
    let inputs = [
        HostTensor { name: "in0", dtype: DType::F32, dims: &dims, data: as_bytes(&data[0]) },
        HostTensor { name: "in1", dtype: DType::F32, dims: &dims, data: as_bytes(&data[1]) },
    ];
    for _ in 0..3 {
        let out = s.run(&inputs).unwrap();
        assert_eq!(floats(&out[0].data), m.reference(&data, 3).0);
    }
    assert_eq!(s.stats().ultra_fast, 2, "runs 2 and 3 take the ultra-fast path");
}
