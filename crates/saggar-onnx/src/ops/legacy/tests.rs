//! Tests of the opset 1-6 forms: hand-computed values and each refusal.

use crate::ops::evaluate::evaluate;
use crate::ops::testing::{f32s, ints, iota, run_op, run_op_outputs, values};
use crate::ops::{Attribute, Attributes, NodeCtx, OpError, lookup};
use crate::tensor::{Tensor, TensorData};

fn attrs(list: &[(&str, Attribute)]) -> Attributes {
    Attributes(list.iter().map(|(n, a)| (n.to_string(), a.clone())).collect())
}

/// Builds `op_type` at `opset` as the importer does and runs it, the views its builder inserts
/// running first on their inputs.
fn run(op_type: &str, opset: u32, list: &[(&str, Attribute)], inputs: &[&Tensor]) -> Result<Tensor, OpError> {
    let a = attrs(list);
    let entry = lookup(op_type, opset).expect("declared");
    let mut ctx = NodeCtx::new(&a, opset, inputs.len(), 1);
    let op = (entry.build)(&mut ctx)?;
    if let Some(name) = ctx.unread().first() {
        return Err(OpError::attribute(name, "unread"));
    }
    let mut ins: Vec<Tensor> = inputs.iter().map(|t| (*t).clone()).collect();
    for view in ctx.take_views() {
        let args: Vec<Option<&Tensor>> =
            std::iter::once(view.input).chain(view.with.iter().copied()).map(|i| Some(&ins[i])).collect();
        let out = evaluate(view.op.as_ref(), &args, 1 << 20)?.remove(0);
        ins[view.input] = out;
    }
    let args: Vec<Option<&Tensor>> = ins.iter().map(Some).collect();
    Ok(evaluate(op.as_ref(), &args, 1 << 20)?.remove(0))
}

#[test]
fn broadcast_with_axis_aligns_b_inside_a() {
    // A (2, 3, 2) + B (3,) at axis 1: B[j] is added along the middle axis.
    let (a, b) = (iota(&[2, 3, 2]), f32s(&[3], &[10.0, 20.0, 30.0]));
    let y = run("Add", 6, &[("broadcast", Attribute::Int(1)), ("axis", Attribute::Int(1))], &[&a, &b]).unwrap();
    assert_eq!(y.dims(), &[2, 3, 2]);
    assert_eq!(values(&y), &[10.0, 11.0, 22.0, 23.0, 34.0, 35.0, 16.0, 17.0, 28.0, 29.0, 40.0, 41.0]);
    // Axis 0 with a 1-extent in B (the exporter's size-1 broadcast): B (2, 1) onto A (2, 3).
    let (a, b) = (iota(&[2, 3]), f32s(&[2, 1], &[100.0, 200.0]));
    let y = run("Sub", 6, &[("broadcast", Attribute::Int(1)), ("axis", Attribute::Int(0))], &[&a, &b]).unwrap();
    assert_eq!(values(&y), &[-100.0, -99.0, -98.0, -197.0, -196.0, -195.0]);
    // The trailing alignment: axis equal to rank(A) - rank(B).
    let y = run(
        "Mul",
        1,
        &[("broadcast", Attribute::Int(1)), ("axis", Attribute::Int(1)), ("consumed_inputs", ints(&[0]))],
        &[&iota(&[2, 2]), &f32s(&[2], &[2.0, 3.0])],
    )
    .unwrap();
    assert_eq!(values(&y), &[0.0, 3.0, 4.0, 9.0]);
}

#[test]
fn broadcast_without_axis_is_suffix_matching() {
    let (a, b) = (iota(&[2, 3]), f32s(&[3], &[1.0, 2.0, 4.0]));
    let y = run("Div", 6, &[("broadcast", Attribute::Int(1))], &[&a, &b]).unwrap();
    assert_eq!(values(&y), &[0.0, 0.5, 0.5, 3.0, 2.0, 1.25]);
    // A one-element B of any rank up to A's.
    let y = run("Pow", 6, &[("broadcast", Attribute::Int(1))], &[&a, &f32s(&[1, 1], &[2.0])]).unwrap();
    assert_eq!(values(&y), &[0.0, 1.0, 4.0, 9.0, 16.0, 25.0]);
}

#[test]
fn broadcast_refusals() {
    let a = iota(&[2, 3]);
    // Without broadcast=1 the shapes must be equal.
    let err = run("Add", 6, &[], &[&a, &f32s(&[3], &[1.0; 3])]).unwrap_err();
    assert!(err.to_string().contains("equal shapes"), "{err}");
    assert_eq!(values(&run("Add", 6, &[], &[&a, &a]).unwrap()), &[0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
    // B may not enlarge A (numpy would give (2, 3) from (1, 3) and (2, 1)).
    let err = run("Add", 6, &[("broadcast", Attribute::Int(1))], &[&iota(&[1, 3]), &iota(&[2, 1])]).unwrap_err();
    assert!(err.to_string().contains("without enlarging A"), "{err}");
    // B not fitting A from `axis`.
    let err = run("Add", 6, &[("broadcast", Attribute::Int(1)), ("axis", Attribute::Int(1))], &[&a, &iota(&[2])])
        .unwrap_err();
    assert!(err.to_string().contains("axis=1"), "{err}");
    let err = run("Add", 6, &[("broadcast", Attribute::Int(2))], &[&a, &a]).unwrap_err();
    assert!(matches!(err, OpError::Unsupported { ref name, .. } if name == "broadcast"), "{err}");
    let err = run("Add", 6, &[("broadcast", Attribute::Int(1)), ("axis", Attribute::Int(-1))], &[&a, &a]).unwrap_err();
    assert!(matches!(err, OpError::Unsupported { ref name, .. } if name == "axis"), "{err}");
    // `consumed_inputs` belongs to opsets 1-5 only.
    assert!(run("Add", 6, &[("consumed_inputs", ints(&[0]))], &[&a, &a]).is_err());
}

#[test]
fn comparisons_and_logic_take_the_legacy_attributes() {
    let (a, b) = (f32s(&[2, 2], &[1.0, 5.0, 3.0, 0.0]), f32s(&[2], &[2.0, 2.0]));
    let y = run("Greater", 6, &[("broadcast", Attribute::Int(1))], &[&a, &b]).unwrap();
    assert_eq!(y.data(), &TensorData::Bool(vec![0, 1, 1, 0]));
    let t = Tensor::new(vec![2], TensorData::Bool(vec![1, 0])).unwrap();
    let y = run("And", 1, &[("broadcast", Attribute::Int(0))], &[&t, &t]).unwrap();
    assert_eq!(y.data(), &TensorData::Bool(vec![1, 0]));
}

#[test]
fn variadic_ops_before_8_need_equal_shapes() {
    let (a, b) = (f32s(&[2], &[1.0, 4.0]), f32s(&[2], &[3.0, 2.0]));
    assert_eq!(values(&run("Max", 6, &[], &[&a, &b]).unwrap()), &[3.0, 4.0]);
    assert_eq!(values(&run("Sum", 1, &[("consumed_inputs", ints(&[0, 1]))], &[&a, &b]).unwrap()), &[4.0, 6.0]);
    let err = run("Sum", 7, &[], &[&a, &f32s(&[1], &[1.0])]).unwrap_err();
    assert!(err.to_string().contains("equal shapes"), "{err}");
    assert_eq!(values(&run("Sum", 8, &[], &[&a, &f32s(&[1], &[1.0])]).unwrap()), &[2.0, 5.0]);
}

#[test]
fn gemm_broadcasts_c_only_with_broadcast_1() {
    let (a, b) = (iota(&[2, 2]), f32s(&[2, 2], &[1.0, 0.0, 0.0, 1.0]));
    let c = f32s(&[2], &[10.0, 20.0]);
    let y =
        run("Gemm", 6, &[("broadcast", Attribute::Int(1)), ("beta", Attribute::Float(2.0))], &[&a, &b, &c]).unwrap();
    assert_eq!(values(&y), &[20.0, 41.0, 22.0, 43.0]);
    let err = run("Gemm", 6, &[], &[&a, &b, &c]).unwrap_err();
    assert!(err.to_string().contains("without broadcast=1, C must have the output's shape"), "{err}");
    let y = run("Gemm", 1, &[("transB", Attribute::Int(1))], &[&a, &iota(&[2, 2]), &iota(&[2, 2])]).unwrap();
    assert_eq!(values(&y), &[1.0, 4.0, 5.0, 16.0]);
}

#[test]
fn batch_norm_is_inference_only() {
    let x = iota(&[1, 2, 2]);
    let p = |v: [f32; 2]| f32s(&[2], &v);
    let (scale, bias, mean, var) = (p([1.0, 2.0]), p([0.0, 1.0]), p([1.0, 2.0]), p([1.0, 4.0]));
    let ins = [&x, &scale, &bias, &mean, &var];
    let eps = ("epsilon", Attribute::Float(0.0));
    let test = ("is_test", Attribute::Int(1));
    let want = [-1.0, 0.0, 1.0, 2.0];
    let y = run("BatchNormalization", 6, &[eps.clone(), test.clone(), ("momentum", Attribute::Float(0.9))], &ins);
    assert_eq!(values(&y.unwrap()), &want);
    for list in [vec![eps.clone()], vec![eps.clone(), ("is_test", Attribute::Int(0))]] {
        let err = run("BatchNormalization", 6, &list, &ins).unwrap_err();
        assert!(matches!(err, OpError::Unsupported { ref name, .. } if name == "is_test"), "{err}");
    }
    let consumed = ("consumed_inputs", ints(&[0, 0, 0, 1, 1]));
    let y = run("BatchNormalization", 5, &[eps.clone(), test.clone(), consumed], &ins).unwrap();
    assert_eq!(values(&y), &want);
    // spatial=0 with [C] parameters computes what spatial=1 does; per-element parameters are refused.
    let y = run("BatchNormalization", 7, &[eps.clone(), ("spatial", Attribute::Int(0))], &ins).unwrap();
    assert_eq!(values(&y), &want);
    let pe = iota(&[2, 2]);
    let err = run("BatchNormalization", 8, &[("spatial", Attribute::Int(0))], &[&x, &pe, &pe, &pe, &pe]).unwrap_err();
    assert!(err.to_string().contains("spatial=0"), "{err}");
    // `is_test` went away in 7.
    assert!(run("BatchNormalization", 7, &[test], &ins).is_err());
}

#[test]
fn concat_before_4_defaults_to_axis_1() {
    let (a, b) = (iota(&[2, 1]), f32s(&[2, 1], &[7.0, 8.0]));
    let y = run("Concat", 3, &[], &[&a, &b]).unwrap();
    assert_eq!((y.dims(), values(&y)), (&[2usize, 2][..], &[0.0, 7.0, 1.0, 8.0][..]));
    assert!(run("Concat", 4, &[], &[&a, &b]).is_err());
}

#[test]
fn pad_2_reads_the_pads_attribute() {
    let a = attrs(&[("pads", ints(&[0, 1, 0, 0])), ("value", Attribute::Float(9.0))]);
    let y = run_op("Pad", 2, &a, &[Some(&iota(&[2, 1]))]).unwrap();
    assert_eq!(values(&y[0]), &[9.0, 0.0, 9.0, 1.0]);
}

#[test]
fn unary_and_activation_forms_before_6_drop_consumed_inputs() {
    let x = f32s(&[2], &[-1.0, 2.0]);
    let consumed = ("consumed_inputs", ints(&[0]));
    assert_eq!(values(&run("Relu", 1, std::slice::from_ref(&consumed), &[&x]).unwrap()), &[0.0, 2.0]);
    assert!(run("Relu", 6, std::slice::from_ref(&consumed), &[&x]).is_err());
    let y = run("LeakyRelu", 5, &[consumed.clone(), ("alpha", Attribute::Float(0.5))], &[&x]).unwrap();
    assert_eq!(values(&y), &[-0.5, 2.0]);
    // Selu 1's defaults were rounded to four decimals.
    let y = run("Selu", 1, &[], &[&x]).unwrap();
    let want = [1.0507 * 1.6732 * ((-1.0f32).exp() - 1.0), 1.0507 * 2.0];
    assert!(values(&y).iter().zip(want).all(|(g, w)| (g - w).abs() < 1e-6), "{:?}", values(&y));
    let y = run("Clip", 1, &[consumed, ("max", Attribute::Float(1.0))], &[&x]).unwrap();
    assert_eq!(values(&y), &[-1.0, 1.0]);
}

#[test]
fn dropout_before_7_needs_is_test() {
    let x = f32s(&[2], &[1.0, 2.0]);
    assert_eq!(values(&run("Dropout", 6, &[("is_test", Attribute::Int(1))], &[&x]).unwrap()), &[1.0, 2.0]);
    for list in [vec![], vec![("is_test", Attribute::Int(0))]] {
        let err = run("Dropout", 6, &list, &[&x]).unwrap_err();
        assert!(matches!(err, OpError::Unsupported { ref name, .. } if name == "is_test"), "{err}");
    }
}

#[test]
fn cast_1_names_the_type() {
    let x = f32s(&[2], &[1.5, -2.0]);
    let y = run("Cast", 1, &[("to", Attribute::String(b"INT64".to_vec()))], &[&x]).unwrap();
    assert_eq!(y.data(), &TensorData::I64(vec![1, -2]));
    assert!(run("Cast", 5, &[("to", Attribute::String(b"QUATERNION".to_vec()))], &[&x]).is_err());
}

#[test]
fn pools_before_opset_8_have_their_own_attribute_sets() {
    let x = iota(&[1, 1, 4]);
    let window = [("kernel_shape", ints(&[2])), ("strides", ints(&[2]))];
    assert_eq!(values(&run("MaxPool", 1, &window, &[&x]).unwrap()), &[1.0, 3.0]);
    assert_eq!(values(&run("AveragePool", 6, &window, &[&x]).unwrap()), &[0.5, 2.5]);
    let mut more = window.to_vec();
    more.push(("count_include_pad", Attribute::Int(1)));
    assert!(run("AveragePool", 6, &more, &[&x]).is_err());
    let err = run_op_outputs("MaxPool", 7, &attrs(&window), &[Some(&x)], 2).unwrap_err();
    assert!(matches!(err, OpError::Unsupported { ref name, .. } if name == "outputs"), "{err}");
    let y = run("LpPool", 1, &[window[0].clone(), window[1].clone(), ("p", Attribute::Float(1.0))], &[&x]).unwrap();
    assert_eq!(values(&y), &[1.0, 5.0]);
    assert!(run("GlobalLpPool", 1, &[("p", Attribute::Float(1.5))], &[&x]).is_err());
}

#[test]
fn upsample_1_scales_height_and_width() {
    let x = iota(&[1, 1, 1, 2]);
    let scales = [("height_scale", Attribute::Float(2.0)), ("width_scale", Attribute::Float(2.0))];
    let y = run("Upsample", 6, &scales, &[&x]).unwrap();
    assert_eq!((y.dims(), values(&y)), (&[1usize, 1, 2, 4][..], &[0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0][..]));
}

#[test]
fn split_1_needs_its_axis() {
    let a = attrs(&[("axis", Attribute::Int(0)), ("split", ints(&[1, 2]))]);
    let y = run_op_outputs("Split", 1, &a, &[Some(&iota(&[3]))], 2);
    assert!(y.is_ok(), "{y:?}");
    let err = run_op_outputs("Split", 1, &attrs(&[("split", ints(&[1, 2]))]), &[Some(&iota(&[3]))], 2).unwrap_err();
    assert!(err.to_string().contains("axis"), "{err}");
}

#[test]
fn prelu_before_7_takes_one_slope_per_channel() {
    let x = f32s(&[1, 2, 2], &[-1.0, 1.0, -2.0, 2.0]);
    let y = run("PRelu", 6, &[], &[&x, &f32s(&[2], &[0.5, 0.25])]).unwrap();
    assert_eq!(values(&y), &[-0.5, 1.0, -0.5, 2.0]);
    let y = run("PRelu", 1, &[("consumed_inputs", ints(&[0]))], &[&x, &f32s(&[1], &[0.1])]).unwrap();
    assert_eq!(values(&y), &[-0.1, 1.0, -0.2, 2.0]);
    assert!(run("PRelu", 6, &[], &[&x, &f32s(&[3], &[0.5; 3])]).is_err());
}
