//! LayerNormalizations storing the half-precision Cast of their result in their own kernel, run
//! through the emulation against the host backend: with and without an input group, keeping the f32
//! result or not, four elements a step, one at a time and rows too wide for the row cache, for an
//! explicit Cast and for the precision pass's Cast of a product's activation; and the plan of a
//! BERT-style encoder at half precision.

use saggar_device::BackendKind;
use saggar_shape::{DType, Dim};

use super::run_emulated;
use crate::builder::ModelBuilder;
use crate::ops::Attribute::Float;
use crate::{OnnxCompiler, OnnxModel, OnnxOptions, Precision, Tensor, TensorData, run_on_host};

/// Rows of the tall input: row groups of eight rows a block, the last block part empty.
const TALL: usize = 2060;
/// Columns of the rows too wide for a block's shared memory.
const WIDE: usize = 12_300;

fn values(dims: &[usize], seed: usize) -> Tensor {
    let n: usize = dims.iter().product();
    let v = (0..n).map(|i| ((i * 7919 + seed * 104_729) % 211) as f32 / 53.0 - 2.0).collect();
    Tensor::new(dims.to_vec(), TensorData::F32(v)).unwrap()
}

/// A `[rows, picked.len()]` weight picking columns `picked` of its activation: its products are the
/// half copies of those columns, widened exactly (one product by 1 each, the others by 0).
fn picker(rows: usize, picked: &[usize]) -> Tensor {
    let mut v = vec![0.0; rows * picked.len()];
    for (k, &c) in picked.iter().enumerate() {
        v[c * picked.len() + k] = 1.0;
    }
    Tensor::new(vec![rows, picked.len()], TensorData::F32(v)).unwrap()
}

/// Columns the wide rows' product picks.
const WIDE_PICKED: [usize; 4] = [0, 1, 6150, WIDE - 1];

/// The model being built, its outputs, and the checks of exact rounding: `(f32 result, product of
/// its half copy, columns the product picks)`.
struct Norms {
    b: ModelBuilder,
    outputs: usize,
    exact: Vec<(usize, usize, Vec<usize>)>,
}

impl Norms {
    fn output(&mut self, name: &str) -> usize {
        self.b.output(name, DType::F32, &[]);
        self.outputs += 1;
        self.outputs - 1
    }

    /// `y = LayerNormalization(x)` with the parameters `{params}_g`, `{params}_b`, and its product
    /// by the picker `pick` (columns `picked`) an output; with `keep` the result `y` is one too.
    fn norm_product(&mut self, x: &str, params: &str, y: &str, keep: bool, (pick, picked): (&str, &[usize])) {
        let (g, b, m) = (format!("{params}_g"), format!("{params}_b"), format!("{y}_m"));
        self.b.node("LayerNormalization", &[x, &g, &b], &[y], &[("epsilon", Float(1e-3))]);
        self.b.node("MatMul", &[y, pick], &[&m], &[]);
        let m_out = self.output(&m);
        if keep {
            let y_out = self.output(y);
            self.exact.push((y_out, m_out, picked.to_vec()));
        }
    }
}

/// The model and its exact-rounding checks (see [`Norms`]).
fn model() -> (OnnxModel, Vec<(usize, usize, Vec<usize>)>) {
    let mut m = Norms { b: ModelBuilder::new(17), outputs: 0, exact: Vec::new() };
    let b = &mut m.b;
    b.input("x", DType::F32, &[Dim::Fixed(12), Dim::Fixed(8)]);
    b.input("r", DType::F32, &[Dim::Fixed(12), Dim::Fixed(8)]);
    b.input("xt", DType::F32, &[Dim::Fixed(TALL as u64), Dim::Fixed(8)]);
    b.input("x5", DType::F32, &[Dim::Fixed(3), Dim::Fixed(5)]);
    b.input("xw", DType::F32, &[Dim::Fixed(2), Dim::Fixed(WIDE as u64)]);
    for (name, n, seed) in [("p8", 8, 1), ("q8", 8, 2), ("p5", 5, 3), ("pw", WIDE, 4)] {
        b.initializer(&format!("{name}_g"), &values(&[n], seed));
        b.initializer(&format!("{name}_b"), &values(&[n], seed + 10));
    }
    let (all8, all5): (Vec<usize>, Vec<usize>) = ((0..8).collect(), (0..5).collect());
    b.initializer("i8", &picker(8, &all8));
    b.initializer("i5", &picker(5, &all5));
    b.initializer("iw", &picker(WIDE, &WIDE_PICKED));
    b.initializer("two", &Tensor::new(vec![], TensorData::F32(vec![2.0])).unwrap());
    let (i8, i5, iw) = (("i8", &all8[..]), ("i5", &all5[..]), ("iw", &WIDE_PICKED[..]));
    // An input group, four elements a step: the f32 result kept (an output), and not kept.
    b.node("Add", &["x", "r"], &["sa"], &[]);
    m.norm_product("sa", "p8", "ya", true, i8);
    m.b.node("Mul", &["x", "r"], &["sb"], &[]);
    m.norm_product("sb", "q8", "yb", false, i8);
    // No input group (the op's own kernel): kept, and not.
    m.norm_product("x", "p8", "yc", true, i8);
    m.norm_product("r", "q8", "yd", false, i8);
    // Many rows: groups of rows a block, with and without an input group.
    m.b.node("Add", &["xt", "xt"], &["st"], &[]);
    m.norm_product("st", "p8", "yt", true, i8);
    m.norm_product("xt", "q8", "yt2", false, i8);
    // Rows of 5: the input group one element at a time.
    m.b.node("Add", &["x5", "x5"], &["se"], &[]);
    m.norm_product("se", "p5", "ye", true, i5);
    m.b.node("Sub", &["x5", "two"], &["se2"], &[]);
    m.norm_product("se2", "p5", "ye2", false, i5);
    // Rows too wide for the row cache.
    m.b.node("Add", &["xw", "xw"], &["sw"], &[]);
    m.norm_product("sw", "pw", "yw", false, iw);
    m.norm_product("xw", "pw", "yw2", true, iw);
    // The f32 result read after the product by an elementwise node: stored in half only, the Mul
    // reading it widened (`half_storage`).
    m.b.node("Sub", &["x", "r"], &["sg"], &[]);
    m.norm_product("sg", "q8", "yg", false, i8);
    m.b.node("Mul", &["yg", "two"], &["zg"], &[]);
    m.output("zg");
    // A first reader that is no Cast: the Cast stays a kernel of its own, and the f32 result, read
    // before the Cast, is stored.
    m.b.node("Add", &["r", "r"], &["sh"], &[]);
    m.b.node("LayerNormalization", &["sh", "p8_g", "p8_b"], &["yh"], &[]);
    m.b.node("Neg", &["yh"], &["zh"], &[]);
    m.output("zh");
    m.b.node("MatMul", &["yh", "i8"], &["mh"], &[]);
    m.output("mh");
    let model = OnnxModel::from_bytes(&m.b.to_bytes(), "half_norms", &crate::ImportLimits::default()).unwrap();
    (model, m.exact)
}

fn inputs() -> Vec<Tensor> {
    vec![values(&[12, 8], 6), values(&[12, 8], 7), values(&[TALL, 8], 10), values(&[3, 5], 8), values(&[2, WIDE], 9)]
}

/// Whether each product in `m` of a picker is its f32 activation `y`'s picked columns rounded to
/// `half` by the host's conversion, then widened.
fn products_of_rounded(y: &Tensor, m: &Tensor, picked: &[usize], half: DType) -> bool {
    let rounded = y.clone().narrowed(half).unwrap().to_f32s().unwrap();
    let (cols, m) = (y.dims()[1], m.to_f32s().unwrap());
    m.iter()
        .enumerate()
        .all(|(i, v)| v.to_bits() == rounded[i / picked.len() * cols + picked[i % picked.len()]].to_bits())
}

/// At fp16 and bf16 every Cast of a normalised value that a product reads is stored by the norm's
/// kernel (one Cast whose value another node reads first excepted), on the GPU plan and on the
/// host; the two agree, each stored copy is exactly the Cast of the f32 value its kernel computed,
/// and the host's results are those of the unfused nodes.
#[test]
fn norms_storing_their_half_casts_match_the_host_when_run_on_the_cpu() {
    let (model, exact) = model();
    let inputs = inputs();
    let dims: Vec<Vec<u64>> = inputs.iter().map(|t| t.dims().iter().map(|&d| d as u64).collect()).collect();
    for (half, precision) in [(DType::F16, Precision::Fp16), (DType::BF16, Precision::Bf16)] {
        let options = OnnxOptions::default().with_precision(precision);
        let compiler = OnnxCompiler::new(model.clone(), options.clone());
        let lowered = compiler.lower(&dims, &[], BackendKind::Cuda).unwrap();
        let groups = &lowered.labels.groups;
        let alone = groups.iter().filter(|g| g.ops == ["Cast"]).count();
        let stored = groups.iter().filter(|g| g.ops.ends_with(&["LayerNormalization".into(), "Cast".into()])).count();
        assert_eq!((alone, stored), (1, 11), "{half}: {groups:?}");
        let code = compiler.source(&lowered).code;
        for params in
            [", float* __restrict__ y, unsigned short* __restrict__ yh)", "bias, unsigned short* __restrict__ yh)"]
        {
            assert!(code.contains(params), "{half}: a kernel ending in `{params}`");
        }
        let want = run_on_host(&compiler, &inputs).unwrap();
        let unfused = OnnxCompiler::new(model.clone(), options.with_fusion(false));
        for (k, (fused, each)) in want.iter().zip(run_on_host(&unfused, &inputs).unwrap()).enumerate() {
            assert_eq!(fused.to_le_bytes(), each.to_le_bytes(), "{half}: host output {k} with and without fusion");
        }
        for (y, m, picked) in &exact {
            assert!(products_of_rounded(&want[*y], &want[*m], picked, half), "{half}: host output {m}");
        }
        let dir = tempfile::tempdir().unwrap();
        let Some(got) = run_emulated(&compiler, &inputs, dir.path()) else { return };
        let got: Vec<Tensor> = got
            .iter()
            .zip(&want)
            .map(|(g, w)| Tensor::from_le_bytes(DType::F32, w.dims().to_vec(), g).unwrap())
            .collect();
        for (y, m, picked) in &exact {
            assert!(products_of_rounded(&got[*y], &got[*m], picked, half), "{half}: emulated output {m}");
        }
        // The GPU's f32 results may differ from the host's in their last bits (another order of
        // summation), and the half copies then by one unit of the half precision.
        let unit = if half == DType::F16 { 1.0 / 1024.0 } else { 1.0 / 128.0 };
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            for (i, (a, b)) in g.to_f32s().unwrap().iter().zip(w.to_f32s().unwrap()).enumerate() {
                assert!((a - b).abs() <= 1e-4 + unit * b.abs(), "{half}: output {k} element {i}: {a} vs {b}");
            }
        }
    }
}

/// A BERT-style encoder at fp16 and bf16: each LayerNormalization whose result products read (the
/// embeddings', each layer's first, and each layer's second but the last's: `2 * layers`) stores
/// their half copy itself, and the fused attention stores the half copy its output projection
/// reads, so no Cast is a kernel of its own and the plan has as many steps as the fp32 plan (with
/// separate Casts it had `3 * layers` more).
#[test]
fn an_encoders_half_precision_plan_has_no_casts_after_its_norms() {
    use crate::synthetic::{EncoderConfig, bert_like_encoder};
    let cfg = EncoderConfig { layers: 3, ..EncoderConfig::default() };
    let bytes = bert_like_encoder(cfg).to_bytes();
    let model = OnnxModel::from_bytes(&bytes, "encoder", &crate::ImportLimits::default()).unwrap();
    let dims = [vec![2, 16], vec![2, 16]];
    let plan = |precision| {
        let compiler = OnnxCompiler::new(model.clone(), OnnxOptions::default().with_precision(precision));
        compiler.lower(&dims, &[], BackendKind::Cuda).unwrap()
    };
    let fp32 = plan(Precision::Fp32).steps.len();
    for precision in [Precision::Fp16, Precision::Bf16] {
        let lowered = plan(precision);
        let groups = &lowered.labels.groups;
        let stored = groups.iter().filter(|g| g.ops.ends_with(&["LayerNormalization".into(), "Cast".into()]));
        assert_eq!(stored.count(), 2 * cfg.layers, "{precision}: {groups:?}");
        let attention =
            groups.iter().filter(|g| g.ops.contains(&"Softmax".into()) && g.ops.last().is_some_and(|o| o == "Cast"));
        assert_eq!(attention.count(), cfg.layers, "{precision}: the attention groups end in the Cast: {groups:?}");
        assert_eq!(groups.iter().filter(|g| g.ops == ["Cast"]).count(), 0, "{precision}: {groups:?}");
        assert_eq!(lowered.steps.len(), fp32, "{precision}");
    }
}
