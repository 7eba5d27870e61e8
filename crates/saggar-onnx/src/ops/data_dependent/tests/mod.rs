//! The data-dependent ops' tests: hand-computed outputs of each op and mode, each checked against
//! its bounded form (the bounded output sliced to the count is the standard output, zeros after),
//! and the typed errors.

mod nms;
mod unique;

use saggar_shape::{DType, Dim};

use crate::ops::evaluate::evaluate;
use crate::ops::testing::{f32s, run_op_outputs};
use crate::ops::{
    Attribute, Attributes, InferInput, InferInputs, NodeCtx, Op, OpError, ValueType, lookup, unknown_dim,
};
use crate::tensor::{Tensor, TensorData};

pub(super) fn attrs(pairs: &[(&str, i64)]) -> Attributes {
    Attributes(pairs.iter().map(|(k, v)| (k.to_string(), Attribute::Int(*v))).collect())
}

pub(super) fn ints(t: &Tensor) -> &[i64] {
    match t.data() {
        TensorData::I64(v) => v,
        other => panic!("{other:?}"),
    }
}

pub(super) fn tensor(dims: &[usize], data: TensorData) -> Tensor {
    Tensor::new(dims.to_vec(), data).unwrap()
}

pub(super) fn bools(v: &[u8]) -> Tensor {
    tensor(&[v.len()], TensorData::Bool(v.to_vec()))
}

/// The op `op_type` of a node with `inputs` inputs and `outputs` outputs.
pub(super) fn build(op_type: &str, opset: u32, a: &Attributes, inputs: usize, outputs: usize) -> Box<dyn Op> {
    (lookup(op_type, opset).unwrap().build)(&mut NodeCtx::new(a, opset, inputs, outputs)).unwrap()
}

/// `op`'s inference on inputs of these types, none of them constant.
pub(super) fn infer_types(op: &dyn Op, types: &[Option<ValueType>]) -> Result<Vec<ValueType>, OpError> {
    let inputs: Vec<Option<InferInput<'_>>> =
        types.iter().map(|t| t.as_ref().map(|ty| InferInput { ty, value: None, dims_value: None })).collect();
    op.infer(&InferInputs::new(&inputs))
}

pub(super) fn fixed(dtype: DType, dims: &[usize]) -> Option<ValueType> {
    Some(ValueType::fixed(dtype, dims))
}

/// The first `count` slices of `t` along `axis`.
fn prefix(t: &Tensor, axis: usize, count: usize) -> (Tensor, Vec<u8>) {
    let dims = t.dims();
    let (outer, len, inner) =
        (dims[..axis].iter().product::<usize>(), dims[axis], dims[axis + 1..].iter().product::<usize>());
    let size = t.dtype().size_bytes();
    let bytes = t.to_le_bytes();
    let (mut kept, mut rest) = (Vec::new(), Vec::new());
    for o in 0..outer {
        let row = &bytes[o * len * inner * size..(o + 1) * len * inner * size];
        kept.extend_from_slice(&row[..count * inner * size]);
        rest.extend_from_slice(&row[count * inner * size..]);
    }
    let mut out = dims.to_vec();
    out[axis] = count;
    (Tensor::from_le_bytes(t.dtype(), out, &kept).unwrap(), rest)
}

/// Runs `op_type` and its bounded form on `inputs`; checks that every cut output of the bounded
/// form, sliced to the count, is the standard output with zeros after, and every other the same;
/// returns the standard outputs.
pub(super) fn run(
    op_type: &str,
    opset: u32,
    a: &Attributes,
    inputs: &[Option<&Tensor>],
    outputs: usize,
) -> Vec<Tensor> {
    let standard = run_op_outputs(op_type, opset, a, inputs, outputs).unwrap();
    let op = build(op_type, opset, a, inputs.len(), outputs);
    let bounded = op.bounded().expect("a bounded form");
    assert_eq!(bounded.cuts.len(), outputs);
    assert!(bounded.op_type.starts_with(op_type) && bounded.op_type.ends_with(".bounded"));
    let got = evaluate(&*bounded.op, inputs, 1 << 24).unwrap();
    let count = ints(&got[outputs])[0] as usize;
    assert_eq!(got[outputs].dims(), &[1]);
    for (i, want) in standard.iter().enumerate() {
        match bounded.cut_axis(i, got[i].dims().len()) {
            Some(axis) => {
                let (kept, rest) = prefix(&got[i], axis, count);
                let same = kept.dims() == want.dims() && kept.to_le_bytes() == want.to_le_bytes();
                assert!(same, "{op_type} output {i} cut at {count} along {axis}: {kept:?} vs {want:?}");
                assert!(rest.iter().all(|&b| b == 0), "{op_type} output {i}: nonzero past the count");
            }
            None => assert_eq!((got[i].dims(), got[i].to_le_bytes()), (want.dims(), want.to_le_bytes()), "output {i}"),
        }
    }
    standard
}

#[test]
fn nonzero_of_floats_in_row_major_order_with_signed_zeros_and_nan() {
    let x = f32s(&[2, 3], &[0.0, 1.0, -0.0, 2.0, f32::NAN, 0.0]);
    for opset in [9, 13] {
        let out = run("NonZero", opset, &attrs(&[]), &[Some(&x)], 1);
        assert_eq!(out[0].dims(), &[2, 3]);
        assert_eq!(ints(&out[0]), &[0, 1, 1, 1, 0, 1]);
    }
}

#[test]
fn nonzero_of_bools_halves_and_integers_of_rank_0_to_3() {
    let out = run("NonZero", 13, &attrs(&[]), &[Some(&bools(&[1, 0, 1, 1]))], 1);
    assert_eq!((out[0].dims(), ints(&out[0])), (&[1, 3][..], &[0, 2, 3][..]));
    // A scalar is a vector of one element.
    let five = tensor(&[], TensorData::I64(vec![5]));
    let out = run("NonZero", 13, &attrs(&[]), &[Some(&five)], 1);
    assert_eq!((out[0].dims(), ints(&out[0])), (&[1, 1][..], &[0][..]));
    let zero = tensor(&[], TensorData::U8(vec![0]));
    assert_eq!(run("NonZero", 13, &attrs(&[]), &[Some(&zero)], 1)[0].dims(), &[1, 0]);
    // f16: -0 (0x8000) is zero, 1.0 (0x3c00) and a NaN (0x7e00) are not.
    let half = tensor(&[4], TensorData::F16(vec![0x8000, 0x3c00, 0, 0x7e00]));
    assert_eq!(ints(&run("NonZero", 13, &attrs(&[]), &[Some(&half)], 1)[0]), &[1, 3]);
    let x = tensor(&[2, 2, 2], TensorData::I32(vec![0, 7, 0, 0, -1, 0, 0, 3]));
    let out = run("NonZero", 13, &attrs(&[]), &[Some(&x)], 1);
    assert_eq!(out[0].dims(), &[3, 3]);
    assert_eq!(ints(&out[0]), &[0, 1, 1, 0, 0, 1, 1, 0, 1]);
}

#[test]
fn nonzero_of_zeros_counts_none() {
    let x = f32s(&[2, 2], &[0.0, -0.0, 0.0, 0.0]);
    let out = run("NonZero", 13, &attrs(&[]), &[Some(&x)], 1);
    assert_eq!(out[0].dims(), &[2, 0]);
    let bounded = build("NonZero", 13, &attrs(&[]), 1, 1).bounded().unwrap();
    let got = evaluate(&*bounded.op, &[Some(&x)], 1 << 20).unwrap();
    assert_eq!((got[0].dims(), ints(&got[0]), ints(&got[1])), (&[2, 4][..], &[0; 8][..], &[0][..]));
}

#[test]
fn nonzero_extents_are_unknown_unless_constant_and_a_huge_worst_case_is_refused() {
    let op = build("NonZero", 13, &attrs(&[]), 1, 1);
    let out = infer_types(&*op, &[fixed(DType::F32, &[3, 4])]).unwrap();
    assert_eq!(out[0].dims, vec![Dim::Fixed(2), unknown_dim()]);
    let out = infer_types(&*op, &[fixed(DType::F32, &[3, 0])]).unwrap();
    assert_eq!(out[0].dims, vec![Dim::Fixed(2), Dim::Fixed(0)]);
    let bounded = op.bounded().unwrap();
    let out = infer_types(&*bounded.op, &[fixed(DType::Bool, &[3, 4])]).unwrap();
    // Then the GPU's working memory: a count per chunk of 4,096 elements, and the total.
    let working = ValueType::fixed(DType::I64, &[2]);
    assert_eq!(out, vec![ValueType::fixed(DType::I64, &[2, 12]), ValueType::fixed(DType::I64, &[1]), working]);
    let out = infer_types(&*bounded.op, &[fixed(DType::Bool, &[3, 4096])]).unwrap();
    assert_eq!(out[2], ValueType::fixed(DType::I64, &[4]));
    // 2 x 2^28 indices of 8 bytes: 4 GiB, refused without allocating anything.
    let err = infer_types(&*bounded.op, &[fixed(DType::Bool, &[1 << 14, 1 << 14])]).unwrap_err();
    assert!(matches!(&err, OpError::Infer(m) if m.contains("4294967296 bytes") && m.contains("limit")), "{err}");
    let err = infer_types(&*op, &[fixed(DType::Bool, &[])]).map(|_| ());
    assert!(err.is_ok());
}

#[test]
fn compress_along_an_axis_with_a_short_or_long_condition() {
    let x = f32s(&[3, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let a0 = attrs(&[("axis", 0)]);
    let out = run("Compress", 11, &a0, &[Some(&x), Some(&bools(&[0, 1, 1]))], 1);
    assert_eq!((out[0].dims(), out[0].to_f32s().unwrap()), (&[2, 2][..], vec![3.0, 4.0, 5.0, 6.0]));
    // Shorter than the axis: the rows past it are dropped.
    let out = run("Compress", 9, &a0, &[Some(&x), Some(&bools(&[0, 1]))], 1);
    assert_eq!((out[0].dims(), out[0].to_f32s().unwrap()), (&[1, 2][..], vec![3.0, 4.0]));
    // Longer: the entries past the axis are ignored.
    let out = run("Compress", 11, &a0, &[Some(&x), Some(&bools(&[1, 0, 1, 1, 1]))], 1);
    assert_eq!(out[0].to_f32s().unwrap(), vec![1.0, 2.0, 5.0, 6.0]);
    for axis in [1, -1] {
        let out = run("Compress", 11, &attrs(&[("axis", axis)]), &[Some(&x), Some(&bools(&[0, 1]))], 1);
        assert_eq!((out[0].dims(), out[0].to_f32s().unwrap()), (&[3, 1][..], vec![2.0, 4.0, 6.0]));
    }
    let out = run("Compress", 11, &a0, &[Some(&x), Some(&bools(&[0, 0, 0]))], 1);
    assert_eq!(out[0].dims(), &[0, 2]);
}

#[test]
fn compress_without_an_axis_flattens_and_moves_any_type() {
    let x = tensor(&[2, 3], TensorData::I64(vec![1, 2, 3, 4, 5, 6]));
    let out = run("Compress", 11, &attrs(&[]), &[Some(&x), Some(&bools(&[0, 1, 0, 0, 1]))], 1);
    assert_eq!((out[0].dims(), ints(&out[0])), (&[2][..], &[2, 5][..]));
    let h = tensor(&[2, 2], TensorData::F16(vec![1, 2, 3, 4]));
    let out = run("Compress", 11, &attrs(&[("axis", 1)]), &[Some(&h), Some(&bools(&[1, 0]))], 1);
    assert_eq!(out[0], tensor(&[2, 1], TensorData::F16(vec![1, 3])));
    let b = tensor(&[4], TensorData::Bool(vec![1, 0, 1, 1]));
    let out = run("Compress", 11, &attrs(&[("axis", 0)]), &[Some(&b), Some(&bools(&[0, 1, 1, 1]))], 1);
    assert_eq!(out[0], tensor(&[3], TensorData::Bool(vec![0, 1, 1])));
}

#[test]
fn compress_bounded_extents_and_cuts() {
    let op = build("Compress", 11, &attrs(&[("axis", -2)]), 2, 1);
    let bounded = op.bounded().unwrap();
    assert_eq!((bounded.cuts.clone(), bounded.cuts_from_end, bounded.cut_axis(0, 3)), (vec![Some(2)], true, Some(1)));
    let types = [fixed(DType::F32, &[2, 5, 3]), fixed(DType::Bool, &[7])];
    assert_eq!(infer_types(&*bounded.op, &types).unwrap()[0].dims, [2, 5, 3].map(Dim::Fixed).to_vec());
    let types = [fixed(DType::F32, &[2, 5, 3]), fixed(DType::Bool, &[4])];
    assert_eq!(infer_types(&*bounded.op, &types).unwrap()[0], ValueType::fixed(DType::F32, &[2, 4, 3]));
    assert_eq!(infer_types(&*op, &types).unwrap()[0].dims[1], unknown_dim());
    let flat = build("Compress", 11, &attrs(&[]), 2, 1).bounded().unwrap();
    assert_eq!(infer_types(&*flat.op, &types).unwrap()[0], ValueType::fixed(DType::F32, &[4]));
    assert_eq!((flat.cuts, flat.cuts_from_end), (vec![Some(0)], false));
}

#[test]
fn compress_refuses_malformed_inputs() {
    let x = f32s(&[3, 2], &[0.0; 6]);
    let cond2 = tensor(&[1, 2], TensorData::Bool(vec![1, 0]));
    let err = run_op_outputs("Compress", 11, &attrs(&[("axis", 0)]), &[Some(&x), Some(&cond2)], 1).unwrap_err();
    assert!(matches!(&err, OpError::Infer(m) if m.contains("rank 1")), "{err}");
    let not_bool = Tensor::from_i64s(vec![1, 0]);
    let err = run_op_outputs("Compress", 11, &attrs(&[]), &[Some(&x), Some(&not_bool)], 1).unwrap_err();
    assert!(matches!(&err, OpError::Infer(m) if m.contains("bool")), "{err}");
    let err = run_op_outputs("Compress", 11, &attrs(&[("axis", 2)]), &[Some(&x), Some(&bools(&[1]))], 1).unwrap_err();
    assert!(matches!(&err, OpError::Infer(m) if m.contains("axis 2")), "{err}");
    let err = run_op_outputs("Compress", 9, &attrs(&[("axis", -1)]), &[Some(&x), Some(&bools(&[1]))], 1).unwrap_err();
    assert!(matches!(&err, OpError::Attribute { name, .. } if name == "axis"), "{err}");
}

/// Every kernel kind's variants render completely under names of their own.
#[test]
fn every_kernel_variant_renders() {
    use super::gpu::{CompressKernel, NmsCompactKernel, NmsSelectKernel, NonZeroKernel, UniqueKernel};
    use crate::ops::gpu::GpuKernel;
    use crate::tensor::SUPPORTED_DTYPES;
    let mut kinds: Vec<Box<dyn GpuKernel>> = vec![Box::new(NmsSelectKernel), Box::new(NmsCompactKernel)];
    // Types of one width read alike (bool as u8) share a kernel: one of each.
    for dtype in [DType::F32, DType::F64, DType::F16, DType::U8, DType::U16, DType::U32, DType::U64] {
        kinds.push(Box::new(NonZeroKernel { dtype }));
    }
    for dtype in SUPPORTED_DTYPES.into_iter().filter(|&d| d != DType::Bool) {
        kinds.push(Box::new(UniqueKernel { dtype, sorted: true }));
        kinds.push(Box::new(UniqueKernel { dtype, sorted: false }));
    }
    kinds.extend([1, 2, 4, 8].map(|b| Box::new(CompressKernel { elem_bytes: b }) as Box<dyn GpuKernel>));
    crate::ops::testing::assert_kernels_render(&kinds);
}
