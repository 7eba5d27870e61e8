//! A model with a node of every GPU kernel kind (and the fused forms around them), run through the
//! emulation against the host backend.

mod data_dependent;
mod element_types;
mod elementwise_types;
mod quantize;
mod sampling_signal_loss;

use saggar_shape::{DType, Dim};

use super::{assert_close, run_emulated};

mod llm_and_linalg;
use crate::builder::ModelBuilder;
use crate::ops::Attribute::{self, Float, Floats, Int, Ints, String as Str};
use crate::{OnnxCompiler, OnnxModel, OnnxOptions, Tensor, TensorData, run_on_host};

/// Columns of the rows too wide for a block's shared memory.
const WIDE: usize = 12_300;

/// The model being built and its outputs.
struct Kinds {
    b: ModelBuilder,
    outputs: Vec<(&'static str, DType)>,
}

impl Kinds {
    fn init(&mut self, name: &str, t: Tensor) {
        self.b.initializer(name, &t);
    }

    /// A node whose outputs are model outputs of `dtype`.
    fn node(&mut self, op: &str, ins: &[&str], outs: &[&'static str], attrs: &[(&str, Attribute)], dtype: DType) {
        self.b.node(op, ins, outs, attrs);
        self.outputs.extend(outs.iter().map(|o| (*o, dtype)));
    }

    /// A node whose outputs only feed other nodes.
    fn hidden(&mut self, op: &str, ins: &[&str], outs: &[&str], attrs: &[(&str, Attribute)]) {
        self.b.node(op, ins, outs, attrs);
    }
}

fn f32s(dims: &[usize], seed: usize) -> Tensor {
    let n: usize = dims.iter().product();
    let v = (0..n).map(|i| ((i * 7919 + seed * 104_729) % 211) as f32 / 105.0 - 1.0).collect();
    Tensor::new(dims.to_vec(), TensorData::F32(v)).unwrap()
}

fn i64s(dims: &[usize], v: Vec<i64>) -> Tensor {
    Tensor::new(dims.to_vec(), TensorData::I64(v)).unwrap()
}

fn initializers(k: &mut Kinds) {
    k.init("starts", Tensor::from_i64s(vec![0, 3, 1]));
    k.init("ends", Tensor::from_i64s(vec![2, -100, 5]));
    k.init("axes_s", Tensor::from_i64s(vec![1, 2, 3]));
    k.init("steps", Tensor::from_i64s(vec![1, -1, 2]));
    k.init("split", Tensor::from_i64s(vec![2, 3]));
    k.init("eb", f32s(&[3, 1, 1], 1));
    k.init("eshape", Tensor::from_i64s(vec![2, 3, 4, 5]));
    k.init("pads", Tensor::from_i64s(vec![0, 1, 2, -1, 0, 0, 1, 2]));
    k.init("pv", Tensor::new(vec![], TensorData::F32(vec![1.5])).unwrap());
    k.init("gi", Tensor::from_i64s(vec![-1, 1, 0]));
    k.init("gei", i64s(&[2, 3, 4, 2], (0..48).map(|i| (i * 3 % 5) as i64 - 2).collect()));
    k.init("gndi", i64s(&[2, 2], vec![1, -1, 0, 2]));
    k.init("ga", f32s(&[3, 4], 2));
    k.init("gb", f32s(&[5, 3], 3));
    k.init("gc", f32s(&[1, 5], 4));
    k.init("mw", f32s(&[5, 6], 5));
    k.init("ma", f32s(&[3, 4, 5], 6));
    k.init("mb", f32s(&[2, 1, 5, 4], 7));
    k.init("ls", f32s(&[5], 8));
    k.init("lb", f32s(&[5], 9));
    k.init("pre", f32s(&[2, 3, 4, 1], 16));
    k.init("mid", f32s(&[3, 1, 1], 17));
    k.init("tall_shape", Tensor::from_i64s(vec![86, 2, 3, 4, 5]));
    k.init("axes123", Tensor::from_i64s(vec![1, 2, 3]));
    k.init("shape21", Tensor::from_i64s(vec![2, 1]));
    k.init("wrow", f32s(&[1, WIDE], 18));
    k.init("wsrc", f32s(&[2, WIDE], 19));
    k.init("wls", f32s(&[WIDE], 20));
    k.init("wlb", f32s(&[WIDE], 21));
    k.init("w58", f32s(&[5, 8], 22));
    k.init("v8", f32s(&[8], 23));
    k.init("ls8", f32s(&[8], 24));
    k.init("lb8", f32s(&[8], 25));
    k.init("tall8_shape", Tensor::from_i64s(vec![86, 2, 3, 4, 8]));
    k.init("c3a", f32s(&[3], 10));
    k.init("c3b", f32s(&[3], 11));
    k.init("c3v", Tensor::new(vec![3], TensorData::F32(vec![0.5, 1.0, 2.0])).unwrap());
    k.init("raxes", Tensor::from_i64s(vec![1, 3]));
    k.init("cw", f32s(&[4, 3, 3, 3], 12));
    k.init("cbias", f32s(&[4], 13));
    k.init("gw", f32s(&[3, 1, 2, 2], 14));
    k.init("pwc", f32s(&[4, 3, 1, 1], 15));
    k.init("two", Tensor::new(vec![], TensorData::F32(vec![2.0])).unwrap());
    k.init("zero", Tensor::new(vec![], TensorData::F32(vec![0.0])).unwrap());
    k.init("three", Tensor::from_i64s(vec![3]));
    k.init("rs_up", Tensor::new(vec![4], TensorData::F32(vec![1.0, 1.0, 2.0, 1.5])).unwrap());
    k.init("rs_mixed", Tensor::new(vec![4], TensorData::F32(vec![1.0, 1.0, 0.6, 1.7])).unwrap());
    k.init("rs_down", Tensor::from_i64s(vec![2, 3, 2, 3]));
    k.init("rs_sizes", Tensor::from_i64s(vec![2, 3, 7, 3]));
    k.init("rs_roi", Tensor::new(vec![4], TensorData::F32(vec![0.2, -0.3, 0.9, 1.1])).unwrap());
    k.init("rs_hw", Tensor::from_i64s(vec![6, 4]));
    k.init("ctw", f32s(&[3, 2, 3, 3], 26));
    k.init("ctb", f32s(&[2], 27));
    k.init("ctgw", f32s(&[3, 1, 2, 2], 28));
    k.init("g6s", f32s(&[6], 29));
    k.init("g6b", f32s(&[6], 30));
    k.init("unshape", Tensor::from_i64s(vec![2, 3, 4, 5]));
}

/// Copies, gathers, GEMMs, Softmax and the normalisations.
fn movement_and_matmul_nodes(k: &mut Kinds) {
    let f = DType::F32;
    k.node("Transpose", &["x"], &["t"], &[("perm", Ints(vec![0, 2, 3, 1]))], f);
    k.node("Slice", &["x", "starts", "ends", "axes_s", "steps"], &["sl"], &[], f);
    k.node("Concat", &["x", "x"], &["cat"], &[("axis", Int(1))], f);
    k.node("Split", &["x", "split"], &["sp0", "sp1"], &[("axis", Int(3))], f);
    k.node("Expand", &["eb", "eshape"], &["ex"], &[], f);
    k.node("Pad", &["x", "pads", "pv"], &["pc"], &[], f);
    k.node("Pad", &["x", "pads"], &["pr"], &[("mode", Str(b"reflect".to_vec()))], f);
    k.node("Pad", &["x", "pads"], &["pe"], &[("mode", Str(b"edge".to_vec()))], f);
    k.node("Pad", &["x", "pads"], &["pwrap"], &[("mode", Str(b"wrap".to_vec()))], f);
    k.node("Gather", &["x", "gi"], &["ga_"], &[("axis", Int(2))], f);
    k.node("GatherElements", &["x", "gei"], &["gel"], &[("axis", Int(3))], f);
    k.node("GatherND", &["x", "gndi"], &["gnd"], &[], f);
    k.node(
        "Gemm",
        &["ga", "gb", "gc"],
        &["gm"],
        &[("transA", Int(1)), ("transB", Int(1)), ("alpha", Float(0.5)), ("beta", Float(2.0))],
        f,
    );
    k.node("MatMul", &["x", "mw"], &["mm"], &[], f);
    k.node("MatMul", &["ma", "mb"], &["mmb"], &[], f);
    k.node("Softmax", &["x"], &["sm"], &[("axis", Int(1))], f);
    k.node("LogSoftmax", &["x"], &["lsm"], &[], f);
    k.node("LayerNormalization", &["x", "ls", "lb"], &["ln", "lnm", "lni"], &[], f);
    k.node("InstanceNormalization", &["x", "c3a", "c3b"], &["inn"], &[], f);
}

/// LayerNormalization's row-group paths: rows past the last, tall, too wide, four elements a step.
fn layer_norm_nodes(k: &mut Kinds) {
    let f = DType::F32;
    // 12 rows: the second block of row groups has groups past the last row. The Add is computed in
    // the normalisation's kernel (it is no output).
    k.hidden("Add", &["ma", "ma"], &["maa"], &[]);
    k.node("LayerNormalization", &["maa", "ls", "lb"], &["ln12"], &[], f);
    // 2064 rows: a warp a row, eight rows a block, the last block with two live rows.
    k.hidden("Expand", &["x", "tall_shape"], &["tall"], &[]);
    k.node("LayerNormalization", &["tall", "ls", "lb"], &["lntall"], &[], f);
    // Rows too wide for shared memory (the kernels read their input three times): plain, and
    // with an Add computed in the normalisation's kernel.
    k.hidden("ReduceSum", &["x", "axes123"], &["xsum"], &[]);
    k.hidden("Reshape", &["xsum", "shape21"], &["xsum21"], &[]);
    k.hidden("MatMul", &["xsum21", "wrow"], &["wide"], &[]);
    k.node("LayerNormalization", &["wide", "wls", "wlb"], &["lnwide"], &[], f);
    k.hidden("Add", &["wide", "wsrc"], &["wide2"], &[]);
    k.node("LayerNormalization", &["wide2", "wls", "wlb"], &["lnwide2"], &[], f);
    // Rows of 8 (whole four-element vectors): the normalisation's four-element path, with its
    // group reading each broadcast it takes (the row, a per-row value, a shared row, a scalar),
    // a block a row and (2064 rows) eight rows a block.
    k.hidden("MatMul", &["x", "w58"], &["mm8"], &[]);
    k.hidden("Mul", &["mm8", "pre"], &["e8a"], &[]);
    k.hidden("Add", &["e8a", "v8"], &["e8b"], &[]);
    k.hidden("Mul", &["e8b", "two"], &["e8c"], &[]);
    k.hidden("Add", &["e8c", "mm8"], &["e8d"], &[]);
    k.node("LayerNormalization", &["e8d", "ls8", "lb8"], &["ln8"], &[], f);
    k.hidden("Expand", &["mm8", "tall8_shape"], &["tall8"], &[]);
    k.hidden("Add", &["tall8", "v8"], &["tall8b"], &[]);
    k.node("LayerNormalization", &["tall8b", "ls8", "lb8"], &["ln8tall"], &[], f);
}

/// Broadcast modes, channel norms, reductions.
fn broadcast_and_reduce_nodes(k: &mut Kinds) {
    let f = DType::F32;
    // Each broadcast mode of a fused input: same shape, trailing block, leading block, general.
    k.node("Add", &["x", "ls"], &["xbias"], &[], f);
    k.node("Mul", &["x", "pre"], &["xpre"], &[], f);
    k.node("Mul", &["x", "mid"], &["xmid"], &[], f);
    k.node("BatchNormalization", &["x", "c3a", "c3b", "c3b", "c3v"], &["bn"], &[], f);
    k.node("LRN", &["x"], &["lrn"], &[("size", Int(3)), ("alpha", Float(0.2))], f);
    for (op, out) in [
        ("ReduceSum", "rs"),
        ("ReduceMean", "rme"),
        ("ReduceMax", "rma"),
        ("ReduceMin", "rmi"),
        ("ReduceProd", "rp"),
        ("ReduceL1", "rl1"),
        ("ReduceL2", "rl2"),
        ("ReduceSumSquare", "rss"),
        ("ReduceLogSumExp", "rlse"),
    ] {
        k.node(op, &["x", "raxes"], &[out], &[("keepdims", Int(i64::from(out.len() % 2 == 0)))], f);
    }
    k.node("Abs", &["x"], &["ax"], &[], f);
    k.node("ReduceLogSum", &["ax", "raxes"], &["rls"], &[], f);
    k.node("ArgMax", &["x"], &["amax"], &[("axis", Int(2)), ("select_last_index", Int(1))], DType::I64);
    k.node("ArgMin", &["x"], &["amin"], &[("axis", Int(1)), ("keepdims", Int(0))], DType::I64);
}

/// Convolutions, pooling, elementwise chains of mixed types.
fn conv_pool_and_chain_nodes(k: &mut Kinds) {
    let f = DType::F32;
    k.node(
        "Conv",
        &["x", "cw", "cbias"],
        &["cv"],
        &[("pads", Ints(vec![1, 1, 1, 1])), ("strides", Ints(vec![1, 2]))],
        f,
    );
    // 1x1 stride 1 without bias: a matmul over the input viewed [N, C, H*W], no im2col.
    k.node("Conv", &["x", "pwc"], &["pcv"], &[], f);
    k.node("Conv", &["x", "gw"], &["gcv"], &[("group", Int(3)), ("dilations", Ints(vec![2, 2]))], f);
    k.node(
        "MaxPool",
        &["x"],
        &["mp"],
        &[("kernel_shape", Ints(vec![2, 2])), ("strides", Ints(vec![2, 2])), ("ceil_mode", Int(1))],
        f,
    );
    k.node(
        "AveragePool",
        &["x"],
        &["ap"],
        &[("kernel_shape", Ints(vec![3, 3])), ("pads", Ints(vec![1, 1, 1, 1])), ("count_include_pad", Int(1))],
        f,
    );
    k.node("AveragePool", &["x"], &["ap0"], &[("kernel_shape", Ints(vec![2, 3])), ("pads", Ints(vec![1, 0, 1, 1]))], f);
    k.node("GlobalAveragePool", &["x"], &["gap"], &[], f);
    k.node("GlobalMaxPool", &["x"], &["gmp"], &[], f);
    // Elementwise chains (fused), mixed types.
    k.hidden("Greater", &["x", "zero"], &["pos"], &[]);
    k.hidden("Neg", &["x"], &["nx"], &[]);
    k.node("Where", &["pos", "x", "nx"], &["wh"], &[], f);
    k.hidden("Mul", &["x", "two"], &["x2"], &[]);
    k.hidden("Cast", &["x2"], &["xi"], &[("to", Int(7))]);
    k.node("Div", &["xi", "three"], &["di"], &[], DType::I64);
    k.hidden("Pow", &["x", "two"], &["pw"], &[]);
    k.hidden("Clip", &["pw", "zero", "two"], &["cl"], &[]);
    k.hidden("Erf", &["cl"], &["er"], &[]);
    k.node("Sigmoid", &["er"], &["sg"], &[], f);
    k.hidden("IsNaN", &["x"], &["nan"], &[]);
    k.hidden("Not", &["nan"], &["nn"], &[]);
    k.node("And", &["nn", "pos"], &["an"], &[], DType::Bool);
}

/// Activations and math of one f32 input, each its own fused expression (or a short chain).
fn activation_and_math_nodes(k: &mut Kinds) {
    let f = DType::F32;
    k.init("half", Tensor::new(vec![], TensorData::F32(vec![0.5])).unwrap());
    k.init("ten", Tensor::new(vec![], TensorData::F32(vec![10.0])).unwrap());
    k.hidden("Mul", &["x", "ten"], &["x10"], &[]);
    k.hidden("Mul", &["x", "half"], &["xh"], &[]);
    k.hidden("Add", &["x", "two"], &["xp2"], &[]);
    for (op, input, out) in [
        ("Sin", "x", "sin"),
        ("Cos", "x", "cos"),
        ("Tan", "x", "tan"),
        ("Asin", "xh", "asin"),
        ("Acos", "xh", "acos"),
        ("Atan", "x10", "atan"),
        ("Sinh", "x", "sinh"),
        ("Cosh", "x", "cosh"),
        ("Asinh", "x10", "asinh"),
        ("Acosh", "xp2", "acosh"),
        ("Atanh", "xh", "atanh"),
        ("Floor", "x10", "floor"),
        ("Ceil", "x10", "ceil"),
        ("Sign", "x", "signf"),
        ("HardSwish", "x10", "hswish"),
        ("Softplus", "x10", "softplus"),
        ("Softsign", "x10", "softsign"),
        ("Mish", "x10", "mish"),
        ("Selu", "x", "selu"),
    ] {
        k.node(op, &[input], &[out], &[], f);
    }
    k.node("HardSigmoid", &["x10"], &["hsig"], &[("alpha", Float(0.3)), ("beta", Float(0.4))], f);
    k.node("LeakyRelu", &["x"], &["leaky"], &[("alpha", Float(0.2))], f);
    k.node("Elu", &["x"], &["elu"], &[("alpha", Float(1.5))], f);
    k.node("Celu", &["x"], &["celu"], &[("alpha", Float(0.7))], f);
    k.node("ThresholdedRelu", &["x"], &["trelu"], &[("alpha", Float(0.3))], f);
    k.node("Shrink", &["x"], &["shrink"], &[("lambd", Float(0.4)), ("bias", Float(0.1))], f);
    // The slope as a trailing block and in a middle axis (the fused kernel's general walk).
    k.node("PRelu", &["x", "ls"], &["prelu"], &[], f);
    k.node("PRelu", &["x", "mid"], &["prelum"], &[], f);
    k.node("Mod", &["x", "ls"], &["fmodf"], &[("fmod", Int(1))], f);
    // Exact halves (integers times 0.5): Round goes to even.
    k.hidden("Cast", &["x10"], &["x10i"], &[("to", Int(7))]);
    k.hidden("Cast", &["x10i"], &["x10r"], &[("to", Int(1))]);
    k.hidden("Mul", &["x10r", "half"], &["halves"], &[]);
    k.node("Round", &["halves"], &["round"], &[], f);
    // Infinities of both signs (and NaN at 0) for IsInf.
    k.hidden("Div", &["x", "zero"], &["xinf"], &[]);
    k.node("IsInf", &["xinf"], &["isinf"], &[], DType::Bool);
    k.node("IsInf", &["xinf"], &["isposinf"], &[("detect_negative", Int(0))], DType::Bool);
    k.node("IsInf", &["xinf"], &["isneginf"], &[("detect_positive", Int(0))], DType::Bool);
}

/// Mod, the bitwise ops, Sign, Shrink and PRelu on i64 and i32 values made from the input, with
/// divisors at the edges C leaves undefined (0, -1); BitShift (unsigned types) is in
/// [`elementwise_types`].
fn integer_nodes(k: &mut Kinds) {
    let i32s = |v: Vec<i32>| Tensor::new(vec![v.len()], TensorData::I32(v)).unwrap();
    k.init("dl", Tensor::from_i64s(vec![3, -4, 0, -1, 7]));
    k.init("ds", i32s(vec![3, -4, 0, -1, 7]));
    k.init("bl", Tensor::from_i64s(vec![0x0f, -1, 0, 0x55, -16]));
    k.init("bs", i32s(vec![0x0f, -1, 0, 0x55, -16]));
    k.hidden("Cast", &["x10"], &["xl"], &[("to", Int(7))]);
    k.hidden("Cast", &["x10"], &["xs"], &[("to", Int(6))]);
    for (ty, x, d, b) in [(DType::I64, "xl", "dl", "bl"), (DType::I32, "xs", "ds", "bs")] {
        let name = |s: &str| -> &'static str { format!("{s}_{x}").leak() };
        k.node("Mod", &[x, d], &[name("mod")], &[], ty);
        k.node("Mod", &[x, d], &[name("fmod")], &[("fmod", Int(1))], ty);
        k.node("BitwiseAnd", &[x, b], &[name("and")], &[], ty);
        k.node("BitwiseOr", &[x, b], &[name("or")], &[], ty);
        k.node("BitwiseXor", &[x, b], &[name("xor")], &[], ty);
        k.node("BitwiseNot", &[x], &[name("not")], &[], ty);
        k.node("Sign", &[x], &[name("sign")], &[], ty);
        k.node("PRelu", &[x, d], &[name("prelu")], &[], ty);
        k.node("Shrink", &[x], &[name("shrink")], &[("lambd", Float(2.0)), ("bias", Float(0.5))], ty);
    }
}

/// Resize: nearest (every rounding, bits of two widths, extrapolated), linear and cubic over every
/// coordinate mode of opset 18, exclude_outside, antialias, axes.
fn resize_nodes(k: &mut Kinds) {
    let (f, coord) = (DType::F32, |m: &str| ("coordinate_transformation_mode", Str(m.as_bytes().to_vec())));
    let mode = |m: &str| ("mode", Str(m.as_bytes().to_vec()));
    let nearest = |m: &str| ("nearest_mode", Str(m.as_bytes().to_vec()));
    k.node("Resize", &["x", "", "rs_up"], &["rz_n"], &[], f);
    k.node("Resize", &["x", "", "rs_mixed"], &["rz_nc"], &[nearest("round_prefer_ceil"), coord("asymmetric")], f);
    k.node("Resize", &["x", "", "", "rs_sizes"], &["rz_nf"], &[nearest("floor"), coord("align_corners")], f);
    k.node("Resize", &["x", "", "rs_mixed"], &["rz_ncl"], &[nearest("ceil"), coord("pytorch_half_pixel")], f);
    k.node(
        "Resize",
        &["xi", "rs_roi", "", "rs_hw"],
        &["rz_ni"],
        &[coord("tf_crop_and_resize"), ("axes", Ints(vec![2, 3]))],
        DType::I64,
    );
    k.node("Resize", &["x", "", "rs_mixed"], &["rz_l"], &[mode("linear")], f);
    k.node("Resize", &["x", "", "", "rs_sizes"], &["rz_la"], &[mode("linear"), coord("align_corners")], f);
    k.node(
        "Resize",
        &["x", "rs_roi", "", "rs_hw"],
        &["rz_lt"],
        &[
            mode("linear"),
            coord("tf_crop_and_resize"),
            ("axes", Ints(vec![2, 3])),
            ("extrapolation_value", Float(-2.0)),
        ],
        f,
    );
    k.node("Resize", &["x", "", "", "rs_down"], &["rz_lx"], &[mode("linear"), ("antialias", Int(1))], f);
    k.node("Resize", &["x", "", "rs_up"], &["rz_c"], &[mode("cubic"), coord("asymmetric")], f);
    k.node(
        "Resize",
        &["x", "", "rs_mixed"],
        &["rz_ce"],
        &[mode("cubic"), ("cubic_coeff_a", Float(-0.5)), ("exclude_outside", Int(1)), coord("pytorch_half_pixel")],
        f,
    );
    k.node("Resize", &["x", "", "", "rs_down"], &["rz_cx"], &[mode("cubic"), ("antialias", Int(1))], f);
}

/// Transposed convolutions (one of stride equal to its kernel), Lp and indexed pooling, unpooling,
/// the group and axes normalisations.
fn transpose_unpool_and_axes_nodes(k: &mut Kinds) {
    let f = DType::F32;
    k.node(
        "ConvTranspose",
        &["x", "ctw", "ctb"],
        &["ctv"],
        &[
            ("strides", Ints(vec![2, 1])),
            ("pads", Ints(vec![1, 0, 0, 1])),
            ("output_padding", Ints(vec![1, 0])),
            ("dilations", Ints(vec![1, 2])),
        ],
        f,
    );
    k.node("ConvTranspose", &["x", "ctw", "ctb"], &["ctk"], &[("strides", Ints(vec![3, 3]))], f);
    k.node(
        "ConvTranspose",
        &["x", "ctgw"],
        &["ctg"],
        &[("group", Int(3)), ("auto_pad", Str(b"SAME_UPPER".to_vec())), ("strides", Ints(vec![2, 2]))],
        f,
    );
    // MaxPool's Indices, column-major, as an output; row-major into MaxUnpool.
    let window = |strides: Vec<i64>| vec![("kernel_shape", Ints(vec![2, 2])), ("strides", Ints(strides))];
    let mut indexed = window(vec![1, 2]);
    indexed.extend([("pads", Ints(vec![0, 1, 1, 0])), ("storage_order", Int(1))]);
    k.b.node("MaxPool", &["x"], &["mpv", "mpi"], &indexed);
    k.outputs.extend([("mpv", f), ("mpi", DType::I64)]);
    k.hidden("MaxPool", &["x"], &["mph", "mphi"], &window(vec![2, 2]));
    k.node("MaxUnpool", &["mph", "mphi", "unshape"], &["unp"], &window(vec![2, 2]), f);
    // Kernel 2x1, strides 2x1: the geometry alone gives back the 4x5 input.
    let tall = [("kernel_shape", Ints(vec![2, 1])), ("strides", Ints(vec![2, 1]))];
    k.hidden("MaxPool", &["x"], &["mpt", "mpti"], &tall);
    k.node("MaxUnpool", &["mpt", "mpti"], &["unp2"], &tall, f);
    let lp = [("kernel_shape", Ints(vec![2, 3])), ("pads", Ints(vec![1, 0, 1, 1])), ("p", Int(3))];
    k.node("LpPool", &["x"], &["lpp"], &lp, f);
    let mut ceil = window(vec![2, 2]);
    ceil.push(("ceil_mode", Int(1)));
    k.node("LpPool", &["x"], &["lpp2"], &ceil, f);
    k.node("GlobalLpPool", &["x"], &["glp3"], &[("p", Int(3))], f);
    k.node("GlobalLpPool", &["x"], &["glp1"], &[("p", Int(1))], f);
    k.node("GroupNormalization", &["cat", "g6s", "g6b"], &["gn"], &[("num_groups", Int(2))], f);
    k.node("LpNormalization", &["x"], &["lpn"], &[("axis", Int(1))], f);
    k.node("LpNormalization", &["x"], &["lpn1"], &[("p", Int(1))], f);
    k.node("MeanVarianceNormalization", &["x"], &["mvn"], &[], f);
    k.node("MeanVarianceNormalization", &["x"], &["mvn2"], &[("axes", Ints(vec![1, 3]))], f);
}

/// Indexed writes, scans, generated tensors and rearrangements: every scatter reduction (with
/// duplicate and negative indices), CumSum's modes, Trilu, Tile, OneHot, EyeLike, Size (folded),
/// both forms of CastLike, DepthToSpace, SpaceToDepth, Hardmax, ReverseSequence.
fn tensor_op_nodes(k: &mut Kinds) {
    let (f, i) = (DType::F32, DType::I64);
    let scalar = |v: i64| Tensor::new(vec![], TensorData::I64(vec![v])).unwrap();
    k.init("ax2", scalar(2));
    k.init("axm1", Tensor::new(vec![1], TensorData::I32(vec![-1])).unwrap());
    k.init("diag", scalar(-1));
    k.init("nd_rows", i64s(&[2, 2], vec![1, -1, 0, 2]));
    k.init("nd_upd", f32s(&[2, 4, 5], 30));
    k.init("nd_dup", i64s(&[3, 1], vec![1, 1, -2]));
    k.init("nd_dupd", f32s(&[3, 3, 4, 5], 31));
    k.init("se_idx", i64s(&[2, 3, 3, 5], (0..90).map(|v| (v * 5 % 8) as i64 - 4).collect()));
    k.init(
        "se_i32",
        Tensor::new(vec![2, 3, 3, 5], TensorData::I32((0..90).map(|v: i32| v * 3 % 5 - 2).collect())).unwrap(),
    );
    k.init("se_upd", f32s(&[2, 3, 3, 5], 32));
    k.init("reps", Tensor::from_i64s(vec![1, 2, 1, 2]));
    k.init("depth2", Tensor::new(vec![1], TensorData::F32(vec![2.5])).unwrap());
    k.init("depth3", scalar(3));
    k.init("off_on", Tensor::new(vec![2], TensorData::F32(vec![-1.0, 3.0])).unwrap());
    k.init("off_on_i", Tensor::from_i64s(vec![7, -7]));
    k.init("s2d", Tensor::from_i64s(vec![12, 10]));
    k.init("s8", Tensor::from_i64s(vec![1, 8, 3, 5]));
    k.init("s5", Tensor::from_i64s(vec![5, 3, 2, 4]));
    k.init("lens_t", Tensor::from_i64s(vec![12, 0, 1, 5, 3, 7, 12, 2, 9, 4]));
    k.init("lens_b", Tensor::from_i64s(vec![10, 0, 1, 5, 3, 7, 10, 2, 9, 4, 6, 8]));
    k.node("CumSum", &["x", "ax2"], &["cs"], &[], f);
    k.node("CumSum", &["x", "axm1"], &["cser"], &[("exclusive", Int(1)), ("reverse", Int(1))], f);
    // An axis computed from the input: the kernel reads it.
    k.init("s120", Tensor::from_i64s(vec![120]));
    k.init("st0", Tensor::from_i64s(vec![0]));
    k.init("en4", Tensor::from_i64s(vec![4]));
    k.hidden("Reshape", &["x", "s120"], &["xflat"], &[]);
    k.hidden("Slice", &["xflat", "st0", "en4"], &["x4"], &[]);
    k.hidden("ArgMax", &["x4"], &["axdyn"], &[]);
    k.node("CumSum", &["x", "axdyn"], &["csdyn"], &[("reverse", Int(1))], f);
    k.hidden("Cast", &["x2"], &["x32"], &[("to", Int(6))]);
    k.node("CumSum", &["x32", "ax2"], &["csi"], &[("exclusive", Int(1))], DType::I32);
    k.node("Trilu", &["x", "diag"], &["triu"], &[], f);
    k.node("Trilu", &["x"], &["tril"], &[("upper", Int(0))], f);
    k.node("ScatterND", &["x", "nd_rows", "nd_upd"], &["snd"], &[], f);
    for (r, out) in [("add", "snda"), ("mul", "sndm"), ("max", "sndx"), ("min", "sndn")] {
        k.node("ScatterND", &["x", "nd_dup", "nd_dupd"], &[out], &[("reduction", Str(r.as_bytes().to_vec()))], f);
    }
    k.node("ScatterElements", &["x", "se_idx", "se_upd"], &["sel"], &[("axis", Int(2))], f);
    k.node(
        "ScatterElements",
        &["x", "se_idx", "se_upd"],
        &["sela"],
        &[("axis", Int(-2)), ("reduction", Str(b"add".to_vec()))],
        f,
    );
    k.node(
        "ScatterElements",
        &["x", "se_i32", "se_upd"],
        &["selx"],
        &[("axis", Int(1)), ("reduction", Str(b"max".to_vec()))],
        f,
    );
    k.node("Tile", &["x", "reps"], &["tile"], &[], f);
    // Indices from the input: ArgMax over an axis of 4 less 3 (negative, one out of range for a
    // depth of 2.5, truncated), and f32 indices (the input doubled) truncated toward zero.
    k.hidden("ArgMax", &["x"], &["oh_am"], &[("axis", Int(2))]);
    k.hidden("Sub", &["oh_am", "three"], &["oh_idx"], &[]);
    k.node("OneHot", &["oh_idx", "depth2", "off_on"], &["oh"], &[("axis", Int(1))], f);
    k.node("OneHot", &["x2", "depth3", "off_on_i"], &["ohf"], &[], i);
    k.hidden("Reshape", &["x", "s2d"], &["x2d"], &[]);
    k.node("EyeLike", &["x2d"], &["eye"], &[("k", Int(-3))], f);
    k.node("EyeLike", &["x2d"], &["eyei"], &[("k", Int(1)), ("dtype", Int(7))], i);
    k.hidden("Size", &["x"], &["size"], &[]);
    k.hidden("CastLike", &["size", "x"], &["sizef"], &[]);
    k.node("Mul", &["x", "sizef"], &["xsize"], &[], f);
    k.node("CastLike", &["x", "three"], &["xcl"], &[], i);
    k.hidden("Reshape", &["x", "s8"], &["x8"], &[]);
    k.node("DepthToSpace", &["x8"], &["d2s"], &[("blocksize", Int(2))], f);
    k.node("DepthToSpace", &["x8"], &["d2sc"], &[("blocksize", Int(2)), ("mode", Str(b"CRD".to_vec()))], f);
    k.hidden("Reshape", &["x", "s5"], &["x5"], &[]);
    k.node("SpaceToDepth", &["x5"], &["s2dp"], &[("blocksize", Int(2))], f);
    k.node("Hardmax", &["x"], &["hm"], &[("axis", Int(2))], f);
    k.node("Hardmax", &["sm"], &["hml"], &[], f);
    k.node("ReverseSequence", &["x2d", "lens_t"], &["rvt"], &[], f);
    k.node("ReverseSequence", &["x2d", "lens_b"], &["rvb"], &[("batch_axis", Int(0)), ("time_axis", Int(1))], f);
}

/// RNN, GRU and LSTM over sequences reshaped from the input (so they are not folded at import):
/// every activation function, clip, peepholes, lengths (0 among them), initial states, both layouts,
/// every direction, an absent Y, and a hidden size past a block's threads.
fn recurrent_nodes(k: &mut Kinds) {
    let f = DType::F32;
    let strs = |v: &[&str]| Attribute::Strings(v.iter().map(|s| s.as_bytes().to_vec()).collect());
    let dir = |d: &str| ("direction", Str(d.as_bytes().to_vec()));
    let (both, reverse, batch_major) = (dir("bidirectional"), dir("reverse"), ("layout", Int(1)));
    k.init("tbi", Tensor::from_i64s(vec![5, 4, 6]));
    k.init("bti", Tensor::from_i64s(vec![4, 5, 6]));
    k.hidden("Reshape", &["x", "tbi"], &["seq"], &[]);
    k.hidden("Reshape", &["x", "bti"], &["seqb"], &[]);
    k.init("lens", Tensor::new(vec![4], TensorData::I32(vec![5, 3, 0, 1])).unwrap());
    let mut weights = |prefix: &str, d: usize, g: usize, h: usize, seed: usize| {
        k.init(&format!("{prefix}w"), f32s(&[d, g * h, 6], seed));
        k.init(&format!("{prefix}r"), f32s(&[d, g * h, h], seed + 1));
        k.init(&format!("{prefix}b"), f32s(&[d, 2 * g * h], seed + 2));
        k.init(&format!("{prefix}h0"), f32s(&[d, 4, h], seed + 3));
        k.init(&format!("{prefix}h0b"), f32s(&[4, d, h], seed + 4));
        k.init(&format!("{prefix}p"), f32s(&[d, 3 * h], seed + 5));
    };
    weights("l2", 2, 4, 3, 30);
    weights("l1", 1, 4, 3, 40);
    weights("g2", 2, 3, 4, 50);
    weights("g1", 1, 3, 4, 60);
    weights("r2", 2, 1, 4, 70);
    weights("r1", 1, 1, 4, 80);
    weights("rbig", 1, 1, 300, 90);
    let hidden = |h: i64| ("hidden_size", Int(h));
    let lstm_all = ["seq", "l2w", "l2r", "l2b", "lens", "l2h0", "l2h0", "l2p"];
    k.node("LSTM", &lstm_all, &["ly", "lyh", "lyc"], &[hidden(3), both.clone(), ("clip", Float(0.9))], f);
    let coupled = [
        hidden(3),
        reverse.clone(),
        batch_major.clone(),
        ("input_forget", Int(1)),
        ("activations", strs(&["HardSigmoid", "Softsign", "ScaledTanh"])),
        ("activation_alpha", Floats(vec![0.3, 0.8])),
        ("activation_beta", Floats(vec![0.4, 1.2])),
    ];
    k.node("LSTM", &["seqb", "l1w", "l1r", "", "", "l1h0b", "l1h0b"], &["l1y", "l1yh", "l1yc"], &coupled, f);
    let elu = [("activations", strs(&["Sigmoid", "Elu"])), ("activation_alpha", Floats(vec![0.7]))];
    let gru_attrs =
        [hidden(4), reverse.clone(), batch_major, ("linear_before_reset", Int(1)), elu[0].clone(), elu[1].clone()];
    k.node("GRU", &["seqb", "g1w", "g1r", "g1b"], &["g1y", "g1yh"], &gru_attrs, f);
    // Y left out: only Y_h is an output.
    let per_direction = [
        hidden(4),
        both.clone(),
        ("activations", strs(&["Sigmoid", "Tanh", "HardSigmoid", "LeakyRelu"])),
        ("activation_alpha", Floats(vec![0.25, 0.05])),
    ];
    k.b.node("GRU", &["seq", "g2w", "g2r", "g2b", "lens", "g2h0"], &["", "g2yh"], &per_direction);
    k.outputs.push(("g2yh", f));
    k.node(
        "RNN",
        &["seq", "rbigw", "rbigr", "rbigb"],
        &["rby", "rbyh"],
        &[hidden(300), ("activations", strs(&["Softsign"]))],
        f,
    );
    let relu_affine = [
        both,
        ("activations", strs(&["Relu", "Affine"])),
        ("activation_alpha", Floats(vec![0.5])),
        ("activation_beta", Floats(vec![0.1])),
    ];
    k.node("RNN", &["seq", "r2w", "r2r", "r2b", "lens", "r2h0"], &["r2y", "r2yh"], &relu_affine, f);
    let thresholded = [reverse, ("activations", strs(&["ThresholdedRelu"])), ("activation_alpha", Floats(vec![0.2]))];
    k.node("RNN", &["seq", "r1w", "r1r", "r1b"], &["r1y"], &thresholded, f);
    let softplus = [("activations", strs(&["Softplus"])), ("clip", Float(1.5))];
    k.node("RNN", &["seq", "r1w", "r1r", "", "lens"], &["r1sy", "r1syh"], &softplus, f);
}

fn every_kind_model() -> OnnxModel {
    // Opset 21: GroupNormalization's per-channel scale and bias.
    let mut k = Kinds { b: ModelBuilder::new(21), outputs: Vec::new() };
    let fixed = |d: &[u64]| d.iter().map(|&v| Dim::Fixed(v)).collect::<Vec<_>>();
    k.b.input("x", DType::F32, &fixed(&[2, 3, 4, 5]));
    initializers(&mut k);
    movement_and_matmul_nodes(&mut k);
    layer_norm_nodes(&mut k);
    broadcast_and_reduce_nodes(&mut k);
    conv_pool_and_chain_nodes(&mut k);
    activation_and_math_nodes(&mut k);
    integer_nodes(&mut k);
    resize_nodes(&mut k);
    transpose_unpool_and_axes_nodes(&mut k);
    tensor_op_nodes(&mut k);
    recurrent_nodes(&mut k);
    sampling_signal_loss::sampling_signal_and_loss_nodes(&mut k);
    quantize::quantize_nodes(&mut k);
    data_dependent::data_dependent_nodes(&mut k);
    for (name, dtype) in &k.outputs {
        k.b.output(name, *dtype, &[]);
    }
    OnnxModel::from_bytes(&k.b.to_bytes(), "every_kind", &crate::ImportLimits::default()).unwrap()
}

#[test]
fn a_node_of_every_gpu_kind_matches_the_host_when_run_on_the_cpu() {
    matches_the_host(every_kind_model(), 45);
}

/// Resize's half_pixel_symmetric mode is opset 19's: a model of its own.
#[test]
fn a_resize_of_opset_19_matches_the_host_when_run_on_the_cpu() {
    let mut b = ModelBuilder::new(19);
    b.input("x", DType::F32, &[2, 3, 4, 5].map(Dim::Fixed));
    b.initializer("s", &Tensor::new(vec![2], TensorData::F32(vec![0.6, 1.7])).unwrap());
    let coord = Str(b"half_pixel_symmetric".to_vec());
    let attrs =
        [("mode", Str(b"linear".to_vec())), ("coordinate_transformation_mode", coord), ("axes", Ints(vec![2, 3]))];
    b.node("Resize", &["x", "", "s"], &["y"], &attrs);
    b.output("y", DType::F32, &[]);
    matches_the_host(OnnxModel::from_bytes(&b.to_bytes(), "resize19", &crate::ImportLimits::default()).unwrap(), 1);
}

/// Opset 6's forms: `broadcast`/`axis` (an aligning view of `B` ahead of the fused elementwise
/// group, on a constant and on an activation), Gemm's `broadcast`, BatchNormalization's `is_test`.
#[test]
fn an_opset_6_model_matches_the_host_when_run_on_the_cpu() {
    let mut b = ModelBuilder::new(6);
    b.input("x", DType::F32, &[2, 3, 4, 5].map(Dim::Fixed));
    b.initializer("b34", &f32s(&[3, 4], 1));
    b.initializer("c5", &f32s(&[5], 2));
    b.initializer("w", &f32s(&[60, 4], 3));
    b.initializer("c4", &f32s(&[4], 4));
    for (k, name) in ["s", "bb", "m"].iter().enumerate() {
        b.initializer(name, &f32s(&[3], 5 + k));
    }
    b.initializer("v", &Tensor::new(vec![3], TensorData::F32(vec![0.5, 1.0, 2.0])).unwrap());
    let bcast = ("broadcast", Int(1));
    b.node("Add", &["x", "b34"], &["y1"], &[bcast.clone(), ("axis", Int(1))]);
    b.node("Mul", &["y1", "c5"], &["y2"], std::slice::from_ref(&bcast));
    b.node("ReduceSum", &["x"], &["r"], &[("axes", Ints(vec![0, 3])), ("keepdims", Int(0))]);
    b.node("Sub", &["y2", "r"], &["y3"], &[bcast.clone(), ("axis", Int(1))]);
    b.node("Sum", &["y3", "x"], &["y4"], &[]);
    b.node("Flatten", &["x"], &["f"], &[("axis", Int(1))]);
    b.node("Gemm", &["f", "w", "c4"], &["g"], &[bcast, ("alpha", Float(0.5))]);
    b.node("BatchNormalization", &["x", "s", "bb", "m", "v"], &["bn"], &[("is_test", Int(1))]);
    for out in ["y1", "y4", "g", "bn"] {
        b.output(out, DType::F32, &[]);
    }
    let model = OnnxModel::from_bytes(&b.to_bytes(), "opset6", &crate::ImportLimits::default()).unwrap();
    // On the host, `b34` is added along axes 1 and 2 of x (2, 3, 4, 5).
    let compiler = OnnxCompiler::new(model.clone(), OnnxOptions::default());
    let x = f32s(&[2, 3, 4, 5], 9);
    let y1 = run_on_host(&compiler, std::slice::from_ref(&x)).unwrap().remove(0);
    let (xv, bv, yv) = (x.to_f32s().unwrap(), f32s(&[3, 4], 1).to_f32s().unwrap(), y1.to_f32s().unwrap());
    assert!((0..120).all(|i| yv[i] == xv[i] + bv[i / 5 % 12]), "{yv:?}");
    matches_the_host(model, 4);
}

/// Runs `model` (at least `min_outputs` outputs) on the host and emulated, and compares.
fn matches_the_host(model: OnnxModel, min_outputs: usize) {
    let compiler = OnnxCompiler::new(model.clone(), OnnxOptions::default());
    let x =
        Tensor::new(vec![2, 3, 4, 5], TensorData::F32((0..120).map(|i| ((i * 37 % 23) as f32 - 11.0) / 7.0).collect()))
            .unwrap();
    let want = run_on_host(&compiler, std::slice::from_ref(&x)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let Some(got) = run_emulated(&compiler, &[x], dir.path()) else { return };
    assert_eq!((got.len(), want.len()), (model.outputs().len(), model.outputs().len()));
    assert!(got.len() >= min_outputs, "{} outputs", got.len());
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_close(g, w, &format!("output {k} `{}`", model.outputs()[k].name()));
    }
}
