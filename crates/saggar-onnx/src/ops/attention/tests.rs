//! Tests of the attention family: Attention's hand-computed rows (masks, causal, caches, grouped
//! heads, 3-D inputs, soft-capping, every `qk_matmul_output` mode, `nonpad_kv_seqlen`),
//! RotaryEmbedding in halves and interleaved, and every typed error.

use crate::ops::gpu::GpuKernel;
use crate::ops::testing::{f32s, iota, run_op, run_op_outputs, values};
use crate::ops::{Attribute, Attributes, OpError};
use crate::tensor::{Tensor, TensorData};

fn attrs(pairs: &[(&str, Attribute)]) -> Attributes {
    Attributes(pairs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect())
}

fn attention(
    opset: u32,
    a: &[(&str, Attribute)],
    ins: &[Option<&Tensor>],
    outs: usize,
) -> Result<Vec<Tensor>, OpError> {
    run_op_outputs("Attention", opset, &attrs(a), ins, outs)
}

fn close(got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() <= 1e-5 * w.abs().max(1.0), "{got:?} vs {want:?}");
    }
}

/// `softmax([a, b])`.
fn soft2(a: f32, b: f32) -> (f32, f32) {
    let (ea, eb) = (a.exp(), b.exp());
    (ea / (ea + eb), eb / (ea + eb))
}

#[test]
fn one_query_over_two_keys_with_scale_softcap_and_masks() {
    let q = f32s(&[1, 1, 1, 1], &[1.0]);
    let k = f32s(&[1, 1, 2, 1], &[1.0, 0.0]);
    let v = f32s(&[1, 1, 2, 1], &[2.0, 4.0]);
    let (p0, p1) = soft2(1.0, 0.0);
    let y = attention(23, &[], &[Some(&q), Some(&k), Some(&v)], 1).unwrap();
    close(values(&y[0]), &[2.0 * p0 + 4.0 * p1]);
    let (s0, s1) = soft2(0.5, 0.0);
    let y = attention(23, &[("scale", Attribute::Float(0.5))], &[Some(&q), Some(&k), Some(&v)], 1).unwrap();
    close(values(&y[0]), &[2.0 * s0 + 4.0 * s1]);
    let (c0, c1) = soft2(0.5 * 8.0f32.tanh(), 0.0);
    let capped = [("scale", Attribute::Float(4.0)), ("softcap", Attribute::Float(0.5))];
    let y = attention(23, &capped, &[Some(&q), Some(&k), Some(&v)], 1).unwrap();
    close(values(&y[0]), &[2.0 * c0 + 4.0 * c1]);
    // A float mask adds; a bool mask of [true, false] keeps key 0 only; a short mask masks the rest.
    let add = f32s(&[2], &[0.0, 1.0]);
    let (m0, m1) = soft2(1.0, 1.0);
    let y = attention(23, &[], &[Some(&q), Some(&k), Some(&v), Some(&add)], 1).unwrap();
    close(values(&y[0]), &[2.0 * m0 + 4.0 * m1]);
    let keep0 = Tensor::new(vec![1, 2], TensorData::Bool(vec![1, 0])).unwrap();
    let y = attention(23, &[], &[Some(&q), Some(&k), Some(&v), Some(&keep0)], 1).unwrap();
    close(values(&y[0]), &[2.0]);
    let short = f32s(&[1], &[0.0]);
    let y = attention(23, &[], &[Some(&q), Some(&k), Some(&v), Some(&short)], 1).unwrap();
    close(values(&y[0]), &[2.0]);
    let none = Tensor::new(vec![2], TensorData::Bool(vec![0, 0])).unwrap();
    let y = attention(23, &[], &[Some(&q), Some(&k), Some(&v), Some(&none)], 1).unwrap();
    assert_eq!(values(&y[0]), &[0.0], "a row with every key masked is zeros");
}

#[test]
fn qk_matmul_output_in_each_mode() {
    let q = f32s(&[1, 1, 1, 1], &[1.0]);
    let k = f32s(&[1, 1, 2, 1], &[2.0, 0.0]);
    let v = f32s(&[1, 1, 2, 1], &[2.0, 4.0]);
    let mask = f32s(&[2], &[0.5, 0.0]);
    let raw = 2.0f32;
    let capped = 1.5 * (raw / 1.5).tanh();
    let (p0, p1) = soft2(capped + 0.5, 0.0);
    let want = [vec![raw, 0.0], vec![capped, 0.0], vec![capped + 0.5, 0.0], vec![p0, p1]];
    for (mode, want) in want.iter().enumerate() {
        let a = [("softcap", Attribute::Float(1.5)), ("qk_matmul_output_mode", Attribute::Int(mode as i64))];
        let out = attention(23, &a, &[Some(&q), Some(&k), Some(&v), Some(&mask)], 4).unwrap();
        assert_eq!(out[3].dims(), &[1, 1, 1, 2]);
        close(values(&out[3]), want);
        close(values(&out[0]), &[2.0 * p0 + 4.0 * p1]);
    }
}

#[test]
fn causal_rows_past_caches_and_present_outputs() {
    // Two queries over two keys: query 0 sees key 0 only.
    let q = f32s(&[1, 1, 2, 1], &[1.0, 1.0]);
    let k = f32s(&[1, 1, 2, 1], &[1.0, 0.0]);
    let v = f32s(&[1, 1, 2, 1], &[2.0, 4.0]);
    let (p0, p1) = soft2(1.0, 0.0);
    let causal = [("is_causal", Attribute::Int(1))];
    let y = attention(23, &causal, &[Some(&q), Some(&k), Some(&v)], 1).unwrap();
    close(values(&y[0]), &[2.0, 2.0 * p0 + 4.0 * p1]);
    // Key 0 from the past, key 1 new: one query sees both (bottom-right alignment).
    let (pk, pv) = (f32s(&[1, 1, 1, 1], &[1.0]), f32s(&[1, 1, 1, 1], &[2.0]));
    let (k1, v1) = (f32s(&[1, 1, 1, 1], &[0.0]), f32s(&[1, 1, 1, 1], &[4.0]));
    let q1 = f32s(&[1, 1, 1, 1], &[1.0]);
    let ins = [Some(&q1), Some(&k1), Some(&v1), None, Some(&pk), Some(&pv)];
    let out = attention(23, &causal, &ins, 3).unwrap();
    close(values(&out[0]), &[2.0 * p0 + 4.0 * p1]);
    assert_eq!((out[1].dims(), values(&out[1])), (&[1, 1, 2, 1][..], &[1.0, 0.0][..]));
    assert_eq!(values(&out[2]), &[2.0, 4.0]);
}

#[test]
fn grouped_heads_and_3d_inputs_match_the_4d_form() {
    // Q: 2 heads over 1 kv head, 3 queries, head 2; K, V: 4 keys.
    let q4 = iota(&[1, 2, 3, 2]);
    let k4 = f32s(&[1, 1, 4, 2], &[0.1, -0.2, 0.3, 0.0, -0.1, 0.2, 0.05, 0.1]);
    let v4 = f32s(&[1, 1, 4, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
    let y4 = attention(23, &[], &[Some(&q4), Some(&k4), Some(&v4)], 1).unwrap();
    // Head 1 is head 0's queries shifted; both read the one kv head: compare head by head with MHA.
    for h in 0..2 {
        let qh = f32s(&[1, 1, 3, 2], &values(&q4)[h * 6..h * 6 + 6]);
        let yh = attention(23, &[], &[Some(&qh), Some(&k4), Some(&v4)], 1).unwrap();
        close(&values(&y4[0])[h * 6..h * 6 + 6], values(&yh[0]));
    }
    // The same as 3-D: [1, 3, 2 * 2] queries, [1, 4, 2] keys and values.
    let qv = values(&q4);
    let q3: Vec<f32> =
        (0..3).flat_map(|s| (0..2).flat_map(move |h| (0..2).map(move |d| qv[(h * 3 + s) * 2 + d]))).collect();
    let heads = [("q_num_heads", Attribute::Int(2)), ("kv_num_heads", Attribute::Int(1))];
    let k3 = f32s(&[1, 4, 2], values(&k4));
    let v3 = f32s(&[1, 4, 2], values(&v4));
    let y3 = attention(24, &heads, &[Some(&f32s(&[1, 3, 4], &q3)), Some(&k3), Some(&v3)], 1).unwrap();
    assert_eq!(y3[0].dims(), &[1, 3, 4]);
    let yv = values(&y4[0]);
    let want: Vec<f32> =
        (0..3).flat_map(|s| (0..2).flat_map(move |h| (0..2).map(move |d| yv[(h * 3 + s) * 2 + d]))).collect();
    close(values(&y3[0]), &want);
}

#[test]
fn nonpad_kv_seqlen_masks_padding_and_moves_the_causal_frontier() {
    // Batch 2, one query, three keys: batch 0 has two real keys, batch 1 one.
    let q = f32s(&[2, 1, 1, 1], &[1.0, 1.0]);
    let k = f32s(&[2, 1, 3, 1], &[1.0, 0.0, 5.0, 1.0, 5.0, 5.0]);
    let v = f32s(&[2, 1, 3, 1], &[2.0, 4.0, 100.0, 3.0, 100.0, 100.0]);
    let n = Tensor::from_i64s(vec![2, 1]);
    let (p0, p1) = soft2(1.0, 0.0);
    let causal = [("is_causal", Attribute::Int(1))];
    let y = attention(24, &causal, &[Some(&q), Some(&k), Some(&v), None, None, None, Some(&n)], 1).unwrap();
    close(values(&y[0]), &[2.0 * p0 + 4.0 * p1, 3.0]);
    assert!(attention(23, &[], &[Some(&q), Some(&k), Some(&v), None, None, None, Some(&n)], 1).is_err(), "from 24");
}

#[test]
fn bad_shapes_and_attributes_are_typed_errors() {
    let q = iota(&[1, 2, 3, 4]);
    let k = iota(&[1, 2, 5, 4]);
    let v = iota(&[1, 2, 5, 4]);
    let infer = |r: Result<Vec<Tensor>, OpError>| assert!(matches!(r, Err(OpError::Infer(_))), "{r:?}");
    infer(attention(23, &[], &[Some(&q), Some(&iota(&[1, 2, 5, 3])), Some(&v)], 1));
    infer(attention(23, &[], &[Some(&q), Some(&iota(&[1, 3, 5, 4])), Some(&iota(&[1, 3, 5, 4]))], 1));
    infer(attention(23, &[], &[Some(&iota(&[1, 3, 8])), Some(&iota(&[1, 5, 8])), Some(&iota(&[1, 5, 8]))], 1));
    infer(attention(23, &[], &[Some(&q), Some(&iota(&[2, 5, 8])), Some(&v)], 1));
    infer(attention(23, &[], &[Some(&q), Some(&k), Some(&v), None, Some(&iota(&[1, 2, 1, 4]))], 1));
    infer(attention(23, &[], &[Some(&q), Some(&k), Some(&v), Some(&iota(&[2, 5]))], 1));
    infer(attention(23, &[], &[Some(&q), Some(&k), Some(&v), Some(&iota(&[3, 6]))], 1));
    let ints = Tensor::from_i64s(vec![1; 5]);
    assert!(attention(23, &[], &[Some(&q), Some(&k), Some(&v), Some(&ints)], 1).is_err());
    let bad_mode = [("qk_matmul_output_mode", Attribute::Int(4))];
    assert!(matches!(attention(23, &bad_mode, &[Some(&q), Some(&k), Some(&v)], 1), Err(OpError::Attribute { .. })));
    let double = [("softmax_precision", Attribute::Int(11))];
    assert!(matches!(attention(23, &double, &[Some(&q), Some(&k), Some(&v)], 1), Err(OpError::Unsupported { .. })));
    let zero_heads = [("q_num_heads", Attribute::Int(0))];
    assert!(matches!(attention(23, &zero_heads, &[Some(&q), Some(&k), Some(&v)], 1), Err(OpError::Attribute { .. })));
    assert!(attention(22, &[], &[Some(&q), Some(&k), Some(&v)], 1).is_err());
}

fn rotary(a: &[(&str, Attribute)], ins: &[Option<&Tensor>]) -> Result<Vec<f32>, OpError> {
    run_op("RotaryEmbedding", 23, &attrs(a), ins).map(|o| values(&o[0]).to_vec())
}

#[test]
fn rotary_embedding_in_halves_interleaved_partial_and_by_position() {
    let x = f32s(&[1, 1, 1, 4], &[1.0, 2.0, 3.0, 4.0]);
    let (c, s) = ([0.5f32, 0.25], [0.75f32, -1.0]);
    let cos = f32s(&[1, 1, 2], &c);
    let sin = f32s(&[1, 1, 2], &s);
    let halves = rotary(&[], &[Some(&x), Some(&cos), Some(&sin)]).unwrap();
    close(&halves, &[c[0] - s[0] * 3.0, c[1] * 2.0 - s[1] * 4.0, s[0] + c[0] * 3.0, s[1] * 2.0 + c[1] * 4.0]);
    let inter = rotary(&[("interleaved", Attribute::Int(1))], &[Some(&x), Some(&cos), Some(&sin)]).unwrap();
    close(&inter, &[c[0] - s[0] * 2.0, s[0] + c[0] * 2.0, c[1] * 3.0 - s[1] * 4.0, s[1] * 3.0 + c[1] * 4.0]);
    // Partial: the first two rotate (halves of one), the last two are copied.
    let (c1, s1) = (f32s(&[1, 1, 1], &[0.5]), f32s(&[1, 1, 1], &[0.75]));
    let partial = rotary(&[("rotary_embedding_dim", Attribute::Int(2))], &[Some(&x), Some(&c1), Some(&s1)]).unwrap();
    close(&partial, &[0.5 - 0.75 * 2.0, 0.75 + 0.5 * 2.0, 3.0, 4.0]);
    // Position ids pick cache rows (-1 the last); a 3-D input with two heads of two.
    let x3 = f32s(&[1, 2, 4], &[1.0, 2.0, 3.0, 4.0, 1.0, 2.0, 3.0, 4.0]);
    let table_c = f32s(&[3, 1], &[1.0, 0.0, -1.0]);
    let table_s = f32s(&[3, 1], &[0.0, 1.0, 0.0]);
    let pos = Tensor::new(vec![1, 2], TensorData::I64(vec![1, -1])).unwrap();
    let heads = [("num_heads", Attribute::Int(2))];
    let got = rotary(&heads, &[Some(&x3), Some(&table_c), Some(&table_s), Some(&pos)]).unwrap();
    close(&got, &[-2.0, 1.0, -4.0, 3.0, -1.0, -2.0, -3.0, -4.0]);
    let far = Tensor::new(vec![1, 2], TensorData::I64(vec![3, 0])).unwrap();
    let e = rotary(&heads, &[Some(&x3), Some(&table_c), Some(&table_s), Some(&far)]).unwrap_err();
    assert!(e.to_string().contains("position 3"), "{e}");
}

#[test]
fn rotary_embedding_shape_errors_are_typed() {
    let x = iota(&[1, 2, 3, 4]);
    let (c, s) = (iota(&[1, 3, 2]), iota(&[1, 3, 2]));
    assert!(rotary(&[], &[Some(&x), Some(&c), Some(&s)]).is_ok());
    let infer = |r: Result<Vec<f32>, OpError>| assert!(matches!(r, Err(OpError::Infer(_))), "{r:?}");
    infer(rotary(&[], &[Some(&x), Some(&iota(&[1, 3, 3])), Some(&iota(&[1, 3, 3]))]));
    infer(rotary(&[], &[Some(&x), Some(&c), Some(&iota(&[1, 3, 3]))]));
    infer(rotary(&[("rotary_embedding_dim", Attribute::Int(3))], &[Some(&x), Some(&c), Some(&s)]));
    infer(rotary(&[("rotary_embedding_dim", Attribute::Int(6))], &[Some(&x), Some(&c), Some(&s)]));
    infer(rotary(&[], &[Some(&iota(&[1, 3, 8])), Some(&c), Some(&s)]));
    infer(rotary(&[("num_heads", Attribute::Int(3))], &[Some(&iota(&[1, 3, 8])), Some(&c), Some(&s)]));
    infer(rotary(&[], &[Some(&iota(&[2, 3])), Some(&c), Some(&s)]));
    let pos = Tensor::from_i64s(vec![0, 1]);
    infer(rotary(&[], &[Some(&x), Some(&iota(&[4, 2])), Some(&iota(&[4, 2])), Some(&pos)]));
    let negative = [("rotary_embedding_dim", Attribute::Int(-2))];
    assert!(matches!(rotary(&negative, &[Some(&x), Some(&c), Some(&s)]), Err(OpError::Attribute { .. })));
}

#[test]
fn kernels_render() {
    use super::gpu::{AttentionKernel, MaskKind, RotaryKernel};
    let mut kinds: Vec<Box<dyn GpuKernel>> =
        vec![Box::new(RotaryKernel { position_ids: false }), Box::new(RotaryKernel { position_ids: true })];
    for mask in [MaskKind::None, MaskKind::Bool, MaskKind::Float] {
        for flags in 0..8 {
            let (past, nonpad, qk) = (flags & 1 != 0, flags & 2 != 0, flags & 4 != 0);
            kinds.push(Box::new(AttentionKernel { past, mask, nonpad, qk }));
        }
    }
    crate::ops::testing::assert_kernels_render(&kinds);
}
