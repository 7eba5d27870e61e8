//! The kernel kinds that take every numeric element type (reductions, ArgMax, CumSum, TopK, Einsum,
//! Cast, Clip, Where and the copies; MaxPool of i8 and u8): a model that casts its f32 input to f64, i8, u8, i16, u16,
//! u32 and u64 and runs each kind on each, through the emulation against the host backend.

use saggar_shape::{DType, Dim};

use super::{Kinds, matches_the_host};
use crate::OnnxModel;
use crate::builder::ModelBuilder;
use crate::import::proto::dtype_to_onnx;
use crate::ops::Attribute::{Int, Ints, String as Str};
use crate::tensor::Tensor;

/// The element types beyond f32, i64, i32 and bool, with a short name for value names.
pub(super) const TYPES: [(DType, &str); 7] = [
    (DType::F64, "f64"),
    (DType::I8, "i8"),
    (DType::U8, "u8"),
    (DType::I16, "i16"),
    (DType::U16, "u16"),
    (DType::U32, "u32"),
    (DType::U64, "u64"),
];

/// A name made of parts, leaked for the model's lifetime (a test).
pub(super) fn name(parts: &[&str]) -> &'static str {
    parts.join("_").leak()
}

/// The nodes of one element type `t`, reading `xt` (the input, times 10 and floored, cast to `t`).
fn typed_nodes(k: &mut Kinds, t: DType, s: &str) {
    let xt = name(&["x", s]);
    let x = xt;
    k.hidden("Cast", &["x10"], &[xt], &[("to", Int(i64::from(dtype_to_onnx(t))))]);
    for op in ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceMean", "ReduceProd", "ReduceL1", "ReduceSumSquare"] {
        let out = name(&[op, s]);
        k.node(op, &[x, "red_axes"], &[out], &[("keepdims", Int(0))], t);
    }
    if t == DType::F64 {
        for op in ["ReduceL2", "ReduceLogSumExp", "ReduceLogSum"] {
            let input = if op == "ReduceLogSum" { "x_pos_f64" } else { x };
            let out = name(&[op, s]);
            k.node(op, &[input, "red_axes"], &[out], &[], t);
        }
    }
    k.node("ArgMax", &[x], &[name(&["argmax", s])], &[("axis", Int(3)), ("select_last_index", Int(1))], DType::I64);
    k.node("ArgMin", &[x], &[name(&["argmin", s])], &[("axis", Int(1))], DType::I64);
    if matches!(t, DType::F64 | DType::U32 | DType::U64) {
        k.node("CumSum", &[x, "cs_axis"], &[name(&["cumsum", s])], &[("reverse", Int(1))], t);
    }
    if matches!(t, DType::I8 | DType::U8) {
        let attrs = [("kernel_shape", Ints(vec![2, 2])), ("pads", Ints(vec![0, 1, 1, 0]))];
        k.node("MaxPool", &[x], &[name(&["maxpool", s])], &attrs, t);
    }
    let (vals, idx) = (name(&["topk", s]), name(&["topk_i", s]));
    k.b.node("TopK", &[x, "k3"], &[vals, idx], &[("axis", Int(2))]);
    k.outputs.extend([(vals, t), (idx, DType::I64)]);
    let eq = ("equation", Str(b"abcd,abed->abce".to_vec()));
    k.node("Einsum", &[x, x], &[name(&["einsum", s])], &[eq], t);
    k.node("Transpose", &[x], &[name(&["transpose", s])], &[("perm", Ints(vec![3, 1, 0, 2]))], t);
    k.node("Clip", &[x], &[name(&["clip", s])], &[], t);
    k.node("Where", &["cond", x, name(&["transpose_back", s])], &[name(&["where", s])], &[], t);
    k.hidden(
        "Transpose",
        &[name(&["transpose", s])],
        &[name(&["transpose_back", s])],
        &[("perm", Ints(vec![2, 1, 3, 0]))],
    );
    k.node("Cast", &[x], &[name(&["to_f32", s])], &[("to", Int(1))], DType::F32);
}

fn model() -> OnnxModel {
    let mut k = Kinds { b: ModelBuilder::new(21), outputs: Vec::new() };
    k.b.input("x", DType::F32, &[2, 3, 4, 5].map(Dim::Fixed));
    k.init("ten", Tensor::new(vec![], crate::TensorData::F32(vec![10.0])).unwrap());
    k.init("red_axes", Tensor::from_i64s(vec![1, 3]));
    k.init("cs_axis", Tensor::from_i64s(vec![2]));
    k.init("k3", Tensor::from_i64s(vec![3]));
    k.init("zero", Tensor::new(vec![], crate::TensorData::F32(vec![0.0])).unwrap());
    k.hidden("Mul", &["x", "ten"], &["x10f"], &[]);
    k.hidden("Floor", &["x10f"], &["x10"], &[]);
    k.hidden("Greater", &["x", "zero"], &["cond"], &[]);
    k.hidden("Abs", &["x"], &["x_abs"], &[]);
    k.hidden("Cast", &["x_abs"], &["x_pos_f64"], &[("to", Int(11))]);
    for (t, s) in TYPES {
        typed_nodes(&mut k, t, s);
    }
    // EyeLike writes the bits of 1 in its output type (f64 has its own).
    k.hidden("Flatten", &["x"], &["x_flat"], &[]);
    k.node("EyeLike", &["x_flat"], &["eye_f64"], &[("dtype", Int(11)), ("k", Int(1))], DType::F64);
    // ConstantOfShape above the per-compile fold limit runs on the device: a fill of its bits.
    k.b.initializer("fill_shape", &Tensor::from_i64s(vec![300, 300]));
    let value = Tensor::new(vec![1], crate::tensor::TensorData::F64(vec![-2.5])).unwrap();
    k.node(
        "ConstantOfShape",
        &["fill_shape"],
        &["fill_f64"],
        &[("value", crate::ops::Attribute::Tensor(value))],
        DType::F64,
    );
    // An inference Dropout whose mask is read: a copy and a fill of true.
    k.hidden("Dropout", &["x_flat"], &["dropped", "drop_mask"], &[]);
    k.outputs.push(("drop_mask", DType::Bool));
    for (name, dtype) in &k.outputs {
        k.b.output(name, *dtype, &[]);
    }
    OnnxModel::from_bytes(&k.b.to_bytes(), "element_types", &crate::ImportLimits::default()).unwrap()
}

#[test]
fn every_element_type_matches_the_host_when_run_on_the_cpu() {
    matches_the_host(model(), 7 * 16 + 3 + 3 + 2 + 1 + 1 + 1);
}
