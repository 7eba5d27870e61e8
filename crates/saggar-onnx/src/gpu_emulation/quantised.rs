//! A QDQ encoder's quantised chains run through the emulation against the host backend:
//! LayerNormalizations storing the per-tensor quantisation of their result in their own kernel
//! (`i8` and `u8`, with and without the f32 result kept, four elements a step, one at a time and
//! many rows; a norm without an input group, whose QuantizeLinear stays a kernel of its own), and
//! an `i8` product's dequantisation, bias, GELU and requantisation as one kernel (GELU reads its
//! input twice).

use saggar_device::BackendKind;
use saggar_shape::{DType, Dim};

use super::run_emulated;
use crate::builder::ModelBuilder;
use crate::ops::Attribute::Float;
use crate::{OnnxCompiler, OnnxModel, OnnxOptions, Tensor, TensorData, run_on_host};

/// Rows of the tall input: row groups of eight rows a block, the last block part empty.
const TALL: usize = 2060;

fn values(dims: &[usize], seed: usize) -> Tensor {
    let n: usize = dims.iter().product();
    let v = (0..n).map(|i| ((i * 7919 + seed * 104_729) % 211) as f32 / 53.0 - 2.0).collect();
    Tensor::new(dims.to_vec(), TensorData::F32(v)).unwrap()
}

fn scalar(data: TensorData) -> Tensor {
    Tensor::new(vec![], data).unwrap()
}

/// The model, and how many of its outputs are quantised (the first ones).
fn model() -> (OnnxModel, usize) {
    let mut b = ModelBuilder::new(17);
    b.input("x", DType::F32, &[Dim::Fixed(12), Dim::Fixed(8)]);
    b.input("r", DType::F32, &[Dim::Fixed(12), Dim::Fixed(8)]);
    b.input("xt", DType::F32, &[Dim::Fixed(TALL as u64), Dim::Fixed(8)]);
    b.input("x5", DType::F32, &[Dim::Fixed(3), Dim::Fixed(5)]);
    for (name, n, seed) in [("p8", 8, 1), ("p5", 5, 3)] {
        b.initializer(&format!("{name}_g"), &values(&[n], seed));
        b.initializer(&format!("{name}_b"), &values(&[n], seed + 10));
    }
    b.initializer("s", &scalar(TensorData::F32(vec![0.02])));
    b.initializer("z8", &scalar(TensorData::I8(vec![3])));
    b.initializer("zu", &scalar(TensorData::U8(vec![128])));
    // (norm input, parameters, zero point, f32 result kept)
    let norms = [
        ("sa", "p8", "z8", false),
        ("sb", "p8", "zu", false),
        ("sc", "p8", "z8", true),
        ("st", "p8", "z8", false),
        ("se", "p5", "zu", false),
        ("x", "p8", "z8", false),
    ];
    b.node("Add", &["x", "r"], &["sa"], &[]);
    b.node("Mul", &["x", "r"], &["sb"], &[]);
    b.node("Sub", &["x", "r"], &["sc"], &[]);
    b.node("Add", &["xt", "xt"], &["st"], &[]);
    b.node("Add", &["x5", "x5"], &["se"], &[]);
    let mut kept = Vec::new();
    for (x, p, z, keep) in norms {
        let (y, q) = (format!("{x}_y"), format!("{x}_q"));
        b.node("LayerNormalization", &[x, &format!("{p}_g"), &format!("{p}_b")], &[&y], &[("epsilon", Float(1e-3))]);
        b.node("QuantizeLinear", &[&y, "s", z], &[&q], &[]);
        b.output(&q, if z == "zu" { DType::U8 } else { DType::I8 }, &[]);
        if keep {
            kept.push(y);
        }
    }
    for y in &kept {
        b.output(y, DType::F32, &[]);
    }
    let model = OnnxModel::from_bytes(&b.to_bytes(), "quant_norms", &crate::ImportLimits::default()).unwrap();
    (model, norms.len())
}

/// Each norm with an input group stores its quantised copy itself, the f32 result beside it only
/// where the graph reads it; the plan's results equal the unfused host's, and the emulated GPU's
/// quantised values are the host's or one step away (another order of summation moves the f32
/// result by its last bits, which may cross a rounding boundary).
#[test]
fn norms_storing_their_quantisation_match_the_host_when_run_on_the_cpu() {
    let (model, quantised) = model();
    let inputs = vec![values(&[12, 8], 6), values(&[12, 8], 7), values(&[TALL, 8], 10), values(&[3, 5], 8)];
    let dims: Vec<Vec<u64>> = inputs.iter().map(|t| t.dims().iter().map(|&d| d as u64).collect()).collect();
    let compiler = OnnxCompiler::new(model.clone(), OnnxOptions::default());
    let lowered = compiler.lower(&dims, &[], BackendKind::Cuda).unwrap();
    let groups = &lowered.labels.groups;
    let stored = groups.iter().filter(|g| g.ops.ends_with(&["LayerNormalization".into(), "QuantizeLinear".into()]));
    let alone = groups.iter().filter(|g| g.ops == ["QuantizeLinear"]).count();
    assert_eq!((stored.count(), alone), (5, 1), "{groups:?}");
    let code = compiler.source(&lowered).code;
    for params in [", float* __restrict__ y, signed char* __restrict__ yq)", "in5, unsigned char* __restrict__ yq)"] {
        assert!(code.contains(params), "a kernel ending in `{params}`");
    }
    assert!(code.contains("((char4*)yq)[row * cols4 + q] = make_char4("), "four elements a store");
    let want = run_on_host(&compiler, &inputs).unwrap();
    let unfused = OnnxCompiler::new(model, OnnxOptions::default().with_fusion(false));
    for (k, (fused, each)) in want.iter().zip(run_on_host(&unfused, &inputs).unwrap()).enumerate() {
        assert_eq!(fused.to_le_bytes(), each.to_le_bytes(), "host output {k} with and without fusion");
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(got) = run_emulated(&compiler, &inputs, dir.path()) else { return };
    let mut differ = 0;
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        let w = w.to_le_bytes();
        assert_eq!(g.len(), w.len(), "output {k}");
        if k < quantised {
            let signed = want[k].dtype() == DType::I8;
            let value = |b: u8| if signed { i32::from(b as i8) } else { i32::from(b) };
            for (i, (&a, &b)) in g.iter().zip(&w).enumerate() {
                assert!((value(a) - value(b)).abs() <= 1, "output {k} element {i}: {} vs {}", value(a), value(b));
                differ += usize::from(a != b);
            }
        } else {
            let (g, w) = (Tensor::from_le_bytes(DType::F32, vec![w.len() / 4], g).unwrap(), want[k].to_f32s().unwrap());
            for (i, (a, b)) in g.to_f32s().unwrap().iter().zip(w).enumerate() {
                assert!((a - b).abs() <= 1e-4 * (1.0 + b.abs()), "output {k} element {i}: {a} vs {b}");
            }
        }
    }
    let total: usize = got.iter().take(quantised).map(Vec::len).sum();
    assert!(differ * 100 <= total, "{differ} of {total} quantised values differ from the host's");
}

/// `Int8Product`'s `i32` result dequantised, biased, through the erf GELU (whose input two nodes
/// read) and requantised: one kernel from `i32` to `i8`, four elements a step (the per-column scale
/// and bias four a load), whose values are the host's or one step away.
#[test]
fn an_int8_products_gelu_chain_is_one_kernel_matching_the_host_when_run_on_the_cpu() {
    let mut b = ModelBuilder::new(17);
    b.input("acc", DType::I32, &[Dim::Fixed(64), Dim::Fixed(12)]);
    let n = 12;
    let scales: Vec<f32> = (0..n).map(|c| 1e-3 * (1.0 + c as f32 / 4.0)).collect();
    b.initializer("sw", &Tensor::new(vec![n], TensorData::F32(scales)).unwrap());
    b.initializer("bias", &values(&[n], 5));
    b.initializer("root2", &scalar(TensorData::F32(vec![std::f32::consts::SQRT_2])));
    b.initializer("one", &scalar(TensorData::F32(vec![1.0])));
    b.initializer("half", &scalar(TensorData::F32(vec![0.5])));
    b.initializer("s", &scalar(TensorData::F32(vec![0.01])));
    b.initializer("z", &scalar(TensorData::I8(vec![0])));
    b.node("Cast", &["acc"], &["f"], &[("to", crate::ops::Attribute::Int(1))]);
    b.node("Mul", &["f", "sw"], &["d"], &[]);
    b.node("Add", &["d", "bias"], &["a"], &[]);
    b.node("Div", &["a", "root2"], &["t"], &[]);
    b.node("Erf", &["t"], &["e"], &[]);
    b.node("Add", &["e", "one"], &["e1"], &[]);
    b.node("Mul", &["a", "e1"], &["g"], &[]);
    b.node("Mul", &["g", "half"], &["h"], &[]);
    b.node("QuantizeLinear", &["h", "s", "z"], &["q"], &[]);
    b.output("q", DType::I8, &[]);
    let model = OnnxModel::from_bytes(&b.to_bytes(), "gelu_chain", &crate::ImportLimits::default()).unwrap();
    let acc: Vec<i32> = (0..64 * n).map(|i| ((i * 7919) % 4001) as i32 - 2000).collect();
    let inputs = vec![Tensor::new(vec![64, n], TensorData::I32(acc)).unwrap()];
    let compiler = OnnxCompiler::new(model, OnnxOptions::default());
    let lowered = compiler.lower(&[vec![64, n as u64]], &[], BackendKind::Cuda).unwrap();
    assert_eq!(lowered.labels.groups.len(), 1, "{:?}", lowered.labels.groups);
    let code = compiler.source(&lowered).code;
    assert!(code.contains("x0 = ((const int4*)in0)[q];") && code.contains("((char4*)out)[q] = r;"), "{code}");
    // The per-column scale and the bias, rows of three vectors, are read a vector a load.
    assert!(code.contains("else if (row1) x1 = ((const float4*)in1)[n32 ? "), "{code}");
    let want = run_on_host(&compiler, &inputs).unwrap().remove(0).to_le_bytes();
    let dir = tempfile::tempdir().unwrap();
    let Some(got) = run_emulated(&compiler, &inputs, dir.path()) else { return };
    for (i, (&a, &b)) in got[0].iter().zip(&want).enumerate() {
        assert!((i32::from(a as i8) - i32::from(b as i8)).abs() <= 1, "element {i}: {} vs {}", a as i8, b as i8);
    }
}
