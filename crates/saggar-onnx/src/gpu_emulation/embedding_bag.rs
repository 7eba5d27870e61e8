//! The embedding-bag kernel run on the CPU from its generated C++ against the host, a reference and
//! the unfused kernels, and the bags of the DLRM model as lowered.

use saggar_device::BackendKind;
use saggar_shape::{DType, Dim};

use super::{assert_close, run_emulated};
use crate::builder::ModelBuilder;
use crate::ops::Attribute::Int;
use crate::plan::PlanStep;
use crate::{ImportLimits, OnnxCompiler, OnnxModel, OnnxOptions, Tensor, TensorData, run_on_host};

/// A table of `rows` rows of `row` (dims) elements.
fn table(rows: usize, row: &[usize], seed: usize) -> Tensor {
    let width: usize = row.iter().product();
    let v = (0..rows * width).map(|i| ((i * 7919 + seed * 104_729) % 211) as f32 / 105.0 - 1.0).collect();
    Tensor::new([&[rows], row].concat(), TensorData::F32(v)).unwrap()
}

fn fixed(d: &[usize]) -> Vec<Dim> {
    d.iter().map(|&v| Dim::Fixed(v as u64)).collect()
}

/// One bag of the test model: a table, an index input, the reduction's axes, keepdims, mean.
struct Case {
    rows: usize,
    row: Vec<usize>,
    idx: Vec<usize>,
    index: DType,
    axes: Vec<i64>,
    keepdims: bool,
    mean: bool,
}

fn cases() -> Vec<Case> {
    let case = |rows, width, idx: &[usize], axes: &[i64]| Case {
        rows,
        row: vec![width],
        idx: idx.to_vec(),
        index: DType::I64,
        axes: axes.to_vec(),
        keepdims: false,
        mean: false,
    };
    vec![
        // Width 37 (no multiple of 4 or 32), keepdims 0 and 1, int64 and int32 indices.
        case(7, 37, &[3, 5], &[1]),
        Case { keepdims: true, ..case(7, 37, &[3, 5], &[-2]) },
        Case { index: DType::I32, ..case(9, 5, &[4, 3], &[1]) },
        // Bags of one row; many rows a bag; more bags than one block holds; rows wider than a block.
        case(6, 16, &[5, 1], &[1]),
        case(11, 3, &[2, 40], &[1]),
        case(13, 16, &[40, 4], &[1]),
        case(5, 300, &[2, 3], &[1]),
        // Index rank 3: the last two axes, or the last one; every index axis (one bag).
        Case { keepdims: true, ..case(8, 6, &[2, 3, 4], &[1, 2]) },
        case(8, 6, &[2, 3, 4], &[2]),
        case(8, 6, &[3, 4], &[0, 1]),
        // ReduceMean.
        Case { mean: true, ..case(7, 10, &[3, 4], &[1]) },
        // A table of more than two dimensions: each row is [2, 5].
        Case { row: vec![2, 5], ..case(7, 10, &[3, 4], &[1]) },
    ]
}

/// Indices for case `c`: negative ones, and with `out_of_range` some outside the table either way.
fn indices(c: &Case, k: usize, out_of_range: bool) -> Tensor {
    let n: usize = c.idx.iter().product();
    let rows = c.rows as i64;
    let v: Vec<i64> = (0..n)
        .map(|i| {
            let base = ((i * 5 + k * 3) as i64 % (2 * rows)) - rows;
            match (out_of_range, i % 7) {
                (true, 2) => rows + (i as i64 % 3),
                (true, 5) => -rows - 1 - (i as i64 % 2),
                _ => base,
            }
        })
        .collect();
    let data = match c.index {
        DType::I32 => TensorData::I32(v.iter().map(|&x| x as i32).collect()),
        _ => TensorData::I64(v),
    };
    Tensor::new(c.idx.clone(), data).unwrap()
}

fn model(cases: &[Case]) -> OnnxModel {
    let mut b = ModelBuilder::new(18);
    for (k, c) in cases.iter().enumerate() {
        b.input(&format!("idx{k}"), c.index, &fixed(&c.idx));
        b.initializer(&format!("t{k}"), &table(c.rows, &c.row, k));
        b.initializer(&format!("axes{k}"), &Tensor::from_i64s(c.axes.clone()));
        b.node("Gather", &[&format!("t{k}"), &format!("idx{k}")], &[&format!("g{k}")], &[]);
        let op = if c.mean { "ReduceMean" } else { "ReduceSum" };
        let attrs = [("keepdims", Int(i64::from(c.keepdims)))];
        b.node(op, &[&format!("g{k}"), &format!("axes{k}")], &[&format!("y{k}")], &attrs);
        b.output(&format!("y{k}"), DType::F32, &[]);
    }
    OnnxModel::from_bytes(&b.to_bytes(), "bags", &ImportLimits::default()).unwrap()
}

/// `out[b, d] = Σ_l table[idx[b, l], d]` (a mean with `mean`), negative indices wrapped once and
/// indices still out of range adding nothing, in index order in f32.
fn reference(c: &Case, k: usize, idx: &Tensor) -> Vec<f32> {
    let t = table(c.rows, &c.row, k).to_f32s().unwrap();
    let width: usize = c.row.iter().product();
    let idx: Vec<i64> = match idx.data() {
        TensorData::I64(v) => v.clone(),
        TensorData::I32(v) => v.iter().map(|&x| i64::from(x)).collect(),
        other => panic!("{other:?}"),
    };
    // Axes of the Gather's output: the index axes, then the row's.
    let rank = c.idx.len() + c.row.len();
    let axes: Vec<usize> =
        c.axes.iter().map(|&a| if a < 0 { (a + rank as i64) as usize } else { a as usize }).collect();
    let len: usize = axes.iter().map(|&a| c.idx[a]).product();
    let mut out = Vec::new();
    for bag in idx.chunks(len) {
        for d in 0..width {
            let mut acc = 0.0f32;
            for &x in bag {
                let x = if x < 0 { x + c.rows as i64 } else { x };
                if (0..c.rows as i64).contains(&x) {
                    acc += t[x as usize * width + d];
                }
            }
            out.push(if c.mean { acc / len as f32 } else { acc });
        }
    }
    out
}

fn bag_launches(compiler: &OnnxCompiler, inputs: &[Tensor]) -> usize {
    let dims: Vec<Vec<u64>> = inputs.iter().map(|t| t.dims().iter().map(|&d| d as u64).collect()).collect();
    let lowered = compiler.lower(&dims, &[], BackendKind::Cuda).unwrap();
    lowered
        .steps
        .iter()
        .filter(|s| matches!(s, PlanStep::Launch(l) if l.kernel.starts_with("onnx_embedding_bag_")))
        .count()
}

/// Every case as one fused launch, run on the CPU from the generated C++: against the host
/// backend with indices in range, and against the reference (the host refuses them) and the
/// unfused GPU plan with indices out of range.
#[test]
fn fused_bags_match_the_host_and_the_unfused_kernels_when_run_on_the_cpu() {
    let cases = cases();
    let model = model(&cases);
    let fused = OnnxCompiler::new(model.clone(), OnnxOptions::default());
    let unfused = OnnxCompiler::new(model, OnnxOptions::default().with_fusion(false));
    for out_of_range in [false, true] {
        let inputs: Vec<Tensor> = cases.iter().enumerate().map(|(k, c)| indices(c, k, out_of_range)).collect();
        assert_eq!(bag_launches(&fused, &inputs), cases.len(), "every case is one bag launch");
        assert_eq!(bag_launches(&unfused, &inputs), 0, "fusion off");
        let dir = tempfile::tempdir().unwrap();
        let Some(got) = run_emulated(&fused, &inputs, dir.path()) else { return };
        if out_of_range {
            assert!(run_on_host(&fused, &inputs).is_err(), "the host refuses indices out of range");
            let dir = tempfile::tempdir().unwrap();
            let plain = run_emulated(&unfused, &inputs, dir.path()).expect("g++ ran once already");
            for (k, (g, p)) in got.iter().zip(&plain).enumerate() {
                let p = Tensor::from_le_bytes(DType::F32, vec![p.len() / 4], p).unwrap();
                assert_close(g, &p, &format!("case {k} against the unfused kernels"));
            }
        } else {
            let want = run_on_host(&fused, &inputs).unwrap();
            for (k, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_close(g, w, &format!("case {k} against the host"));
            }
        }
        for (k, (c, g)) in cases.iter().zip(&got).enumerate() {
            let want = reference(c, k, &inputs[k]);
            let want = Tensor::new(vec![want.len()], TensorData::F32(want)).unwrap();
            assert_close(g, &want, &format!("case {k} against the reference (out of range: {out_of_range})"));
        }
    }
}

/// The DLRM model's 26 bags are one step each, labelled with both nodes, at batch 1 and 3.
#[test]
fn each_bag_of_the_dlrm_model_is_one_step_naming_both_nodes() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("models").join("dlrm");
    let model = OnnxModel::load(dir.join("model.onnx")).unwrap();
    for fusion in [true, false] {
        let compiler = OnnxCompiler::new(model.clone(), OnnxOptions::default().with_fusion(fusion));
        for batch in [1u64, 3] {
            let dims: Vec<Vec<u64>> =
                model.inputs().iter().enumerate().map(|(i, _)| vec![batch, if i == 0 { 13 } else { 4 }]).collect();
            let lowered = compiler.lower(&dims, &[], BackendKind::Cuda).unwrap();
            let labels = &lowered.labels;
            let bag_steps: Vec<usize> = (0..lowered.steps.len())
                .filter(|&s| labels.groups[labels.step_group[s]].ops == ["Gather", "ReduceSum"])
                .collect();
            assert_eq!(bag_steps.len(), if fusion { 26 } else { 0 }, "fusion {fusion}, batch {batch}");
            for s in bag_steps {
                let PlanStep::Launch(l) = &lowered.steps[s] else { panic!("step {s} is a matmul") };
                assert!(l.kernel.starts_with("onnx_embedding_bag_"), "{}", l.kernel);
            }
        }
    }
}
