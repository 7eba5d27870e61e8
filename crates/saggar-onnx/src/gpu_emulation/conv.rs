//! The convolution-as-GEMM kernels on the CPU: every im2col variant against the host's patch
//! matrix, and convolution blocks (bias, ReLU, residual add, the cast to half before the next
//! product) and broadcast elementwise groups at every precision against the host, with the plans
//! checked to take the planar im2col and the four-element path of the fused groups.

use std::collections::HashSet;

use saggar_device::BackendKind;
use saggar_shape::{DType, Dim};

use super::single::SingleLaunches;
use super::{assert_close, run_emulated};
use crate::builder::ModelBuilder;
use crate::ops::Attribute::{Int, Ints};
use crate::ops::conv::gpu::Im2colKernel;
use crate::ops::conv::im2col::Im2col;
use crate::ops::conv::{AutoPad, Window, im2col};
use crate::ops::gpu::{GpuCtx, GpuNode, Operand, kernel_definition};
use crate::ops::{InferInputs, Op};
use crate::plan::{ArgSource, Lowered, PlanStep};
use crate::{ConvEngine, OnnxCompiler, OnnxModel, OnnxOptions, Precision, Tensor, TensorData, run_on_host};

/// `(x dims, kernel, strides, dilations, pads)` of the im2col cases: a 7x7 plane padded by one, a
/// padded (unevenly), strided and dilated plane, taps wholly in the padding, one axis, three axes.
type Geometry = (&'static [usize], &'static [usize], &'static [usize], &'static [usize], &'static [usize]);
const GEOMETRIES: [Geometry; 5] = [
    (&[2, 3, 7, 7], &[3, 3], &[1, 1], &[1, 1], &[1, 1, 1, 1]),
    (&[1, 2, 9, 8], &[3, 2], &[2, 3], &[2, 1], &[2, 1, 0, 3]),
    (&[1, 2, 3, 4], &[3, 3], &[1, 1], &[1, 1], &[3, 3, 3, 3]),
    (&[2, 3, 11], &[3], &[2], &[2], &[1, 2]),
    (&[1, 2, 4, 5, 3], &[2, 3, 2], &[1, 2, 1], &[1, 1, 2], &[1, 0, 1, 0, 1, 1]),
];

/// Each geometry's Im2col launch as the op makes it, run by its own kernel in 32-bit and in 64-bit
/// indices and (for the planar kernel) by the kernel of any rank on the same tables, on fewer threads
/// than positions; every patch matrix equals the host's, bit for bit.
#[test]
fn every_im2col_variant_matches_the_host_patch_matrix_when_run_on_the_cpu() {
    let mut runs = SingleLaunches::new();
    for &(xd, kernel, strides, dilations, pads) in &GEOMETRIES {
        let window = Window {
            kernel: kernel.to_vec(),
            strides: strides.to_vec(),
            dilations: dilations.to_vec(),
            pads: pads.to_vec(),
            auto_pad: AutoPad::NotSet,
            ceil_mode: false,
        };
        let op = Im2col { axes: window.resolve(&xd[2..], kernel).unwrap() };
        let [n, rows, plane] = op.output_dims(xd).unwrap();
        for bytes in [2u8, 4] {
            let inputs = [Some(Operand { dtype: if bytes == 2 { DType::F16 } else { DType::F32 }, dims: xd.to_vec() })];
            let ctx = GpuCtx { inputs: &inputs, outputs: &[], infer: &InferInputs::new(&[]) };
            let Some(Ok(GpuNode::Launches(launches))) = op.gpu(&ctx) else { panic!("Im2col lowers") };
            let launch = &launches[0];
            let own = *launch.kernel_as::<Im2colKernel>().unwrap();
            assert_eq!((own.bytes, own.planar, launch.meta.last()), (bytes, xd.len() <= 4, Some(&1)), "{xd:?}");
            // Each body: 32-bit indices as the launch asks, 64-bit ones with the flag cleared.
            let wide = [&launch.meta[..launch.meta.len() - 1], &[0]].concat();
            let mut variants = vec![(own, launch.meta.clone()), (own, wide.clone())];
            if own.planar {
                let rank = Im2colKernel { planar: false, ..own };
                variants.extend([(rank, launch.meta.clone()), (rank, wide)]);
            }
            // Elements numbered from 1, so that a padding tap (0) is told from element 0.
            let count: usize = xd.iter().product();
            let x: Vec<u32> = (1..=count as u32).collect();
            let x_bytes: Vec<u8> = x.iter().flat_map(|&v| v.to_le_bytes()[..bytes as usize].to_vec()).collect();
            let mut want = vec![0u32; n * rows * plane];
            for (xi, ci) in x.chunks_exact(count / n).zip(want.chunks_exact_mut(rows * plane)) {
                im2col(xi, xd[1], &op.axes, ci);
            }
            let want: Vec<u8> = want.iter().flat_map(|&v| v.to_le_bytes()[..bytes as usize].to_vec()).collect();
            for (kernel, meta) in &variants {
                let what = format!("{xd:?} {kernel:?} narrow {}", meta[meta.len() - 1]);
                runs.push(kernel, meta, (&x_bytes, 0), (3, 32), want.clone(), what);
            }
        }
    }
    runs.check();
}

/// The launches of `lowered` whose kernel name starts with `prefix`, each with the words of its `meta`
/// table from the one at `k` on (`meta(k)` is word `k`).
pub(super) fn launches<'a>(
    lowered: &'a Lowered,
    prefix: &'a str,
) -> impl Iterator<Item = (usize, impl Fn(usize) -> i64 + 'a)> {
    lowered.steps.iter().filter_map(move |step| {
        let PlanStep::Launch(step) = step else { return None };
        let (true, Some(ArgSource::Local(at))) = (step.kernel.starts_with(prefix), step.args.first()) else {
            return None;
        };
        let at = *at;
        let word = move |k: usize| {
            let b = at + 8 * k;
            i64::from_le_bytes(lowered.local_constants[b..b + 8].try_into().unwrap())
        };
        Some((step.args.len(), word))
    })
}

/// The element count and the `[mode, m, c]` broadcast form of each external input of every fused
/// elementwise launch of `lowered` (read back from its `meta` table).
fn fused_broadcasts(lowered: &Lowered) -> Vec<(i64, Vec<[i64; 3]>)> {
    launches(lowered, "onnx_fused_")
        .map(|(args, meta)| {
            let (externals, rank) = (args - 2, meta(0) as usize);
            let (modes, counts) = (2 + rank + externals * rank, 3 + rank + externals * (rank + 2));
            let forms = (0..externals).map(|k| [meta(modes + 2 * k), meta(modes + 2 * k + 1), meta(counts + k)]);
            (meta(1), forms.collect())
        })
        .collect()
}

/// The names of the kernels `lowered` launches.
fn launched(lowered: &Lowered) -> HashSet<String> {
    lowered
        .steps
        .iter()
        .filter_map(|s| if let PlanStep::Launch(l) = s { Some(l.kernel.clone()) } else { None })
        .collect()
}

/// Runs `model` on `inputs` at every precision on the host and emulated, and checks each plan with
/// `check`.
pub(super) fn matches_the_host_at_every_precision(
    bytes: &[u8],
    inputs: &[Tensor],
    check: impl Fn(Precision, &Lowered),
) {
    matches_the_host_with(bytes, inputs, ConvEngine::default(), check);
}

/// [`matches_the_host_at_every_precision`] with the convolutions lowered by `conv`.
fn matches_the_host_with(bytes: &[u8], inputs: &[Tensor], conv: ConvEngine, check: impl Fn(Precision, &Lowered)) {
    let dims: Vec<Vec<u64>> = inputs.iter().map(|t| t.dims().iter().map(|&d| d as u64).collect()).collect();
    for precision in [Precision::Fp32, Precision::Fp16, Precision::Bf16] {
        let model = OnnxModel::from_bytes(bytes, "conv_blocks", &crate::ImportLimits::default()).unwrap();
        let compiler = OnnxCompiler::new(model, OnnxOptions::default().with_precision(precision).with_conv(conv));
        check(precision, &compiler.lower(&dims, &[], BackendKind::Cuda).unwrap());
        let want = run_on_host(&compiler, inputs).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let Some(got) = run_emulated(&compiler, inputs, dir.path()) else { return };
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_close(g, w, &format!("output {k} at {precision}"));
        }
    }
}

pub(super) fn values(dims: &[usize], seed: usize) -> Tensor {
    let n: usize = dims.iter().product();
    let v = (0..n).map(|i| ((i * 7919 + seed * 104_729) % 211) as f32 / 105.0 - 1.0).collect();
    Tensor::new(dims.to_vec(), TensorData::F32(v)).unwrap()
}

/// A residual block over 7x7 planes (conv, bias, ReLU, conv, bias, residual add, ReLU), a padded,
/// strided and dilated conv, a one-axis and a three-axis conv, all with biases, at f32, fp16 and
/// bf16: the same results as the host, through the planar im2col (the kernel of any rank for three
/// axes) and fused groups that read the per-channel biases four elements a step.
#[test]
fn conv_blocks_with_bias_relu_and_residual_match_the_host_when_run_on_the_cpu() {
    let mut b = ModelBuilder::new(17);
    let fixed = |d: &[u64]| d.iter().map(|&v| Dim::Fixed(v)).collect::<Vec<_>>();
    let inputs = [values(&[2, 8, 7, 7], 1), values(&[2, 3, 11], 2), values(&[1, 2, 4, 5, 3], 3)];
    for (name, t) in ["x", "x1", "x3"].iter().zip(&inputs) {
        b.input(name, DType::F32, &fixed(&t.dims().iter().map(|&d| d as u64).collect::<Vec<_>>()));
    }
    let weights: [(&str, &[usize]); 10] = [
        ("wa", &[8, 8, 3, 3]),
        ("ba", &[8]),
        ("wb", &[8, 8, 3, 3]),
        ("bb", &[8]),
        ("wc", &[4, 8, 3, 2]),
        ("bc", &[4]),
        ("w1", &[5, 3, 3]),
        ("b1", &[5]),
        ("w3", &[4, 2, 2, 3, 2]),
        ("b3", &[4]),
    ];
    for (seed, (name, dims)) in weights.iter().enumerate() {
        let t = values(dims, seed + 10);
        let scaled = t.to_f32s().unwrap().iter().map(|v| v * 0.25).collect();
        b.initializer(name, &Tensor::new(dims.to_vec(), TensorData::F32(scaled)).unwrap());
    }
    let same = [("pads", Ints(vec![1, 1, 1, 1]))];
    b.node("Conv", &["x", "wa", "ba"], &["ya"], &same);
    b.node("Relu", &["ya"], &["ra"], &[]);
    b.node("Conv", &["ra", "wb", "bb"], &["yb"], &same);
    b.node("Add", &["yb", "x"], &["sb"], &[]);
    b.node("Relu", &["sb"], &["block"], &[]);
    let strided = [("strides", Ints(vec![2, 1])), ("dilations", Ints(vec![2, 2])), ("pads", Ints(vec![2, 1, 1, 0]))];
    b.node("Conv", &["x", "wc", "bc"], &["yc"], &strided);
    b.node("Relu", &["yc"], &["strided"], &[]);
    let line = [("strides", Ints(vec![2])), ("dilations", Ints(vec![2])), ("pads", Ints(vec![1, 2]))];
    b.node("Conv", &["x1", "w1", "b1"], &["line"], &line);
    let volume = [("strides", Ints(vec![1, 2, 1])), ("pads", Ints(vec![1, 0, 1, 0, 1, 1]))];
    b.node("Conv", &["x3", "w3", "b3"], &["volume"], &volume);
    for name in ["block", "strided", "line", "volume"] {
        b.output(name, DType::F32, &[]);
    }
    matches_the_host_at_every_precision(&b.to_bytes(), &inputs, |precision, lowered| {
        let kernels = launched(lowered);
        let bytes = if precision == Precision::Fp32 { 4 } else { 2 };
        for (planar, what) in [(true, "the planar im2col"), (false, "the im2col of any rank")] {
            let (name, _) = kernel_definition(&Im2colKernel { bytes, planar });
            assert!(kernels.contains(&name), "{precision}: {what} runs");
        }
        let narrow: Vec<i64> =
            launches(lowered, "onnx_im2col_").map(|(_, meta)| meta(3 + 6 * meta(0) as usize)).collect();
        assert_eq!(narrow, [1; 5], "{precision}: every im2col in 32-bit indices");
        // The 7x7 groups (biases over 49 elements a channel) and the strided conv's (18) read their
        // bias as blocks, every input in a common form: the kernel takes four elements a step.
        let fused = fused_broadcasts(lowered);
        for inner in [49, 18] {
            let group = fused.iter().find(|(_, forms)| forms.iter().any(|f| f[0] == 5 && f[1] == inner));
            let Some((n, forms)) = group else { panic!("{precision}: no per-channel group over {inner}: {fused:?}") };
            assert!(n % 4 == 0 && forms.iter().all(|f| f[0] != 0), "{precision}: {forms:?}");
        }
    });
}

/// A channels-last network on the CPU at f32, fp16 and bf16: a three-channel stem (its channels
/// padded to four), a max pool (over eight channels) and an average pool (over six) that take the
/// channels-last form, a padded and a strided convolution, a residual add, and a one-axis
/// convolution; the same results as the host, through the channels-last im2col (16-byte units,
/// 8-byte ones for the padded half stem) and the channels-last pooling.
#[test]
fn channels_last_convolutions_and_pools_match_the_host_when_run_on_the_cpu() {
    use crate::ops::conv::im2col_nhwc::Im2colNhwcKernel;
    let mut b = ModelBuilder::new(17);
    let inputs = [values(&[2, 3, 9, 9], 1), values(&[2, 6, 10], 2)];
    b.input("x", DType::F32, &[Dim::Fixed(2), Dim::Fixed(3), Dim::Fixed(9), Dim::Fixed(9)]);
    b.input("x1", DType::F32, &[Dim::Fixed(2), Dim::Fixed(6), Dim::Fixed(10)]);
    let weights: [(&str, &[usize]); 10] = [
        ("w0", &[8, 3, 3, 3]),
        ("b0", &[8]),
        ("w1", &[8, 8, 3, 3]),
        ("b1", &[8]),
        ("w2", &[8, 8, 1, 1]),
        ("b2", &[8]),
        ("w3", &[6, 8, 3, 3]),
        ("b3", &[6]),
        ("wl", &[4, 6, 3]),
        ("bl", &[4]),
    ];
    for (seed, (name, dims)) in weights.iter().enumerate() {
        let scaled = values(dims, seed + 10).to_f32s().unwrap().iter().map(|v| v * 0.25).collect();
        b.initializer(name, &Tensor::new(dims.to_vec(), TensorData::F32(scaled)).unwrap());
    }
    let same = [("pads", Ints(vec![1, 1, 1, 1]))];
    b.node("Conv", &["x", "w0", "b0"], &["c0"], &same);
    b.node("Relu", &["c0"], &["r0"], &[]);
    let pool = [("kernel_shape", Ints(vec![3, 3])), ("strides", Ints(vec![2, 2])), ("pads", Ints(vec![1, 1, 1, 1]))];
    b.node("MaxPool", &["r0"], &["p0"], &pool);
    b.node("Conv", &["p0", "w1", "b1"], &["c1"], &same);
    b.node("Relu", &["c1"], &["r1"], &[]);
    b.node("Conv", &["r1", "w2", "b2"], &["c2"], &[]);
    b.node("Add", &["c2", "p0"], &["s2"], &[]);
    b.node("Relu", &["s2"], &["r2"], &[]);
    let average = [("kernel_shape", Ints(vec![2, 2])), ("count_include_pad", Int(1)), ("pads", Ints(vec![0, 0, 1, 1]))];
    b.node("Conv", &["r2", "w3", "b3"], &["c3"], &[("strides", Ints(vec![2, 1]))]);
    b.node("AveragePool", &["c3"], &["y"], &average);
    b.node("Conv", &["x1", "wl", "bl"], &["line"], &[("pads", Ints(vec![1, 1]))]);
    b.output("y", DType::F32, &[]);
    b.output("line", DType::F32, &[]);
    matches_the_host_with(&b.to_bytes(), &inputs, ConvEngine::Nhwc, |precision, lowered| {
        let kernels = launched(lowered);
        let units: &[u8] = if precision == Precision::Fp32 { &[16] } else { &[16, 8] };
        for &unit in units {
            let (name, _) = kernel_definition(&Im2colNhwcKernel { unit });
            assert!(kernels.contains(&name), "{precision}: the channels-last im2col of {unit}-byte units runs");
        }
        let pools: Vec<Vec<i64>> =
            launches(lowered, "onnx_pool_").map(|(_, meta)| (0..19).map(meta).collect()).collect();
        assert_eq!(pools.len(), 2, "{precision}: both pools run");
        // Eight channels (four a thread) and six (one).
        let channels: Vec<i64> = pools.iter().map(|m| m[18]).collect();
        assert_eq!(channels, [8, 6], "{precision}: channels-last pools: {pools:?}");
    });
}

/// Elementwise groups over inputs read in blocks (modes 2, 4 and 5, blocks of 2 and 3 elements that
/// a four-element step straddles) at f32 and in half precision (a half input, a cast to half at the
/// end): the same results as the host from the four-element path.
#[test]
fn block_broadcasts_take_four_elements_a_step_and_match_the_host_when_run_on_the_cpu() {
    let mut b = ModelBuilder::new(17);
    b.input("e", DType::F32, &[4, 5, 3].map(Dim::Fixed));
    b.input("s", DType::F32, &[2, 3, 2].map(Dim::Fixed));
    b.input("h", DType::F16, &[4, 5, 3].map(Dim::Fixed));
    for (name, dims, seed) in [("c5", &[5, 1][..], 1), ("r4", &[4, 1, 1], 2), ("t", &[5, 3], 3), ("c3", &[3, 1], 4)] {
        b.initializer(name, &values(dims, seed));
    }
    b.initializer("hc", &values(&[5, 1], 5).narrowed(DType::F16).unwrap());
    b.node("Add", &["e", "c5"], &["ec"], &[]);
    b.node("Mul", &["ec", "r4"], &["er"], &[]);
    b.node("Sub", &["er", "t"], &["et"], &[]);
    b.node("Relu", &["et"], &["blocks"], &[]);
    b.node("Add", &["s", "c3"], &["sc"], &[]);
    b.node("Cast", &["sc"], &["pairs"], &[("to", Int(10))]);
    b.node("Mul", &["h", "hc"], &["halves"], &[]);
    for (name, dtype) in [("blocks", DType::F32), ("pairs", DType::F16), ("halves", DType::F16)] {
        b.output(name, dtype, &[]);
    }
    let inputs = [values(&[4, 5, 3], 6), values(&[2, 3, 2], 7), values(&[4, 5, 3], 8).narrowed(DType::F16).unwrap()];
    matches_the_host_at_every_precision(&b.to_bytes(), &inputs, |precision, lowered| {
        let fused = fused_broadcasts(lowered);
        let modes: HashSet<[i64; 2]> = fused.iter().flat_map(|(_, f)| f.iter().map(|f| [f[0], f[1]])).collect();
        for form in [[5, 3], [4, 15], [2, 15], [5, 2]] {
            assert!(modes.contains(&form), "{precision}: {form:?} in {fused:?}");
        }
        assert!(fused.iter().all(|(n, f)| n % 4 == 0 && f.iter().all(|f| f[0] != 0)), "{precision}: {fused:?}");
    });
}
