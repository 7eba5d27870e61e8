//! `Attention` (opsets 23 and 24, the errata-corrected spec): scaled dot-product attention of Q, K
//! and V, 4-D `[batch, heads, seq, head]` or 3-D `[batch, seq, heads * head]` (with `q_num_heads`
//! and `kv_num_heads`), grouped-query heads (query head `h` reads key/value head
//! `h / (q_heads / kv_heads)`), a bool or float `attn_mask` broadcast to `[batch, q_heads, q_seq,
//! total]` (keys past its last axis masked), `past_key` / `past_value` before the new keys (and the
//! `present_*` outputs holding both), `is_causal` aligned bottom-right (query `i` sees key `j` when
//! `j <= i + past`), `nonpad_kv_seqlen` (24: keys from it on masked, the causal frontier at
//! `nonpad - q_seq`), `scale` (default `1 / sqrt(head)`), `softcap` (before the mask), an f32
//! softmax, a row with every key masked giving zeros, and `qk_matmul_output` in each of its four
//! modes (0 the scaled scores, 1 soft-capped, 2 with the mask, 3 the probabilities).
//! `softmax_precision` may name f32 or a half precision (computed in f32); double is refused.

use saggar_shape::{DType, Dim};

use super::geometry::{Geometry, Shapes, Strides};
use super::gpu::MaskKind;
use crate::ops::elementwise::require_dtype;
use crate::ops::gpu::{GpuCtx, GpuNode};
use crate::ops::{EvalInputs, InferInputs, NodeCtx, Op, OpError, ValueType, unknown_dim};
use crate::tensor::TensorMut;

/// `Attention`.
#[derive(Debug)]
pub(super) struct Attention {
    pub(super) causal: bool,
    pub(super) q_heads: Option<usize>,
    pub(super) kv_heads: Option<usize>,
    pub(super) scale: Option<f32>,
    pub(super) softcap: f32,
    /// `qk_matmul_output_mode`.
    pub(super) mode: u8,
    /// Outputs of the node (1 to 4).
    pub(super) outputs: usize,
}

pub(super) fn build_attention(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    let max_inputs = if ctx.opset() >= 24 { 7 } else { 6 };
    if ctx.num_inputs() > max_inputs || ctx.num_outputs() > 4 {
        return Err(OpError::infer(format!(
            "Attention at opset {} takes at most {max_inputs} inputs and 4 outputs, the node has {} and {}",
            ctx.opset(),
            ctx.num_inputs(),
            ctx.num_outputs()
        )));
    }
    let heads = |name: &str| -> Result<Option<usize>, OpError> {
        ctx.int(name)?
            .map(|v| {
                usize::try_from(v)
                    .ok()
                    .filter(|&v| v > 0)
                    .ok_or_else(|| OpError::attribute(name, format!("must be positive, found {v}")))
            })
            .transpose()
    };
    let causal = match ctx.int_or("is_causal", 0)? {
        0 => false,
        1 => true,
        other => return Err(OpError::attribute("is_causal", format!("must be 0 or 1, found {other}"))),
    };
    let mode = match ctx.int_or("qk_matmul_output_mode", 0)? {
        m @ 0..=3 => m as u8,
        other => return Err(OpError::attribute("qk_matmul_output_mode", format!("must be 0 to 3, found {other}"))),
    };
    match ctx.int("softmax_precision")? {
        None | Some(1 | 10 | 16) => {}
        Some(11) => {
            return Err(ctx.unsupported("softmax_precision", 11, "1 (float; 10 and 16 are computed in float too)"));
        }
        Some(other) => return Err(OpError::attribute("softmax_precision", format!("{other} is not a float type"))),
    }
    Ok(Box::new(Attention {
        causal,
        q_heads: heads("q_num_heads")?,
        kv_heads: heads("kv_num_heads")?,
        scale: ctx.float("scale")?,
        softcap: ctx.float_or("softcap", 0.0)?,
        mode,
        outputs: ctx.num_outputs().max(1),
    }))
}

/// The `Dim` sum `a + b`, unknown unless both are fixed.
fn dim_sum(a: &Dim, b: &Dim) -> Dim {
    match (a.as_fixed(), b.as_fixed()) {
        (Some(x), Some(y)) => Dim::Fixed(x + y),
        _ => unknown_dim(),
    }
}

/// The `Dim` quotient `a / n`, unknown unless `a` is fixed.
fn dim_div(a: &Dim, n: Option<usize>) -> Dim {
    match (a.as_fixed(), n) {
        (Some(x), Some(n)) if n > 0 => Dim::Fixed(x / n as u64),
        _ => unknown_dim(),
    }
}

impl Attention {
    pub(super) fn geometry(&self, s: &Shapes<'_>) -> Result<Geometry, OpError> {
        Geometry::new(s, self.q_heads, self.kv_heads)
    }

    pub(super) fn scale_for(&self, dk: usize) -> f32 {
        self.scale.unwrap_or_else(|| 1.0 / (dk as f32).sqrt())
    }

    /// The outputs' types where some extent is symbolic: `[batch, heads, seq, head]` pieces as known.
    fn symbolic(&self, q: &ValueType, k: &ValueType, v: &ValueType, past: Option<&ValueType>) -> Vec<ValueType> {
        let four = q.rank() == 4;
        let (b, sq) = (q.dims[0].clone(), q.dims[if four { 2 } else { 1 }].clone());
        let hq = if four { q.dims[1].clone() } else { self.q_heads.map_or(unknown_dim(), |h| Dim::Fixed(h as u64)) };
        let hkv = if four { k.dims[1].clone() } else { self.kv_heads.map_or(unknown_dim(), |h| Dim::Fixed(h as u64)) };
        let skv = k.dims[if four { 2 } else { 1 }].clone();
        let head = |t: &ValueType| if four { t.dims[3].clone() } else { dim_div(&t.dims[2], self.kv_heads) };
        let total = past.map_or(skv.clone(), |p| dim_sum(&p.dims[2], &skv));
        let y = if four {
            vec![b.clone(), hq.clone(), sq.clone(), head(v)]
        } else {
            let hidden = match (head(v).as_fixed(), self.q_heads) {
                (Some(d), Some(h)) => Dim::Fixed(d * h as u64),
                _ => unknown_dim(),
            };
            vec![b.clone(), sq.clone(), hidden]
        };
        let mut out = vec![ValueType::new(DType::F32, y)];
        out.push(ValueType::new(DType::F32, vec![b.clone(), hkv.clone(), total.clone(), head(k)]));
        out.push(ValueType::new(DType::F32, vec![b.clone(), hkv, total.clone(), head(v)]));
        out.push(ValueType::new(DType::F32, vec![b, hq, sq, total]));
        out.truncate(self.outputs);
        out
    }
}

impl Op for Attention {
    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        Some(super::launch::gpu(self, ctx))
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let (q, k, v) = (inputs.req(0)?.ty, inputs.req(1)?.ty, inputs.req(2)?.ty);
        for (i, t) in [(0, q), (1, k), (2, v)] {
            require_dtype(["Attention's Q", "Attention's K", "Attention's V"][i], t.dtype, &[DType::F32])?;
        }
        if let Some(m) = inputs.get(3) {
            require_dtype("Attention's attn_mask", m.ty.dtype, &[DType::Bool, DType::F32])?;
        }
        for i in [4, 5] {
            if let Some(p) = inputs.get(i) {
                require_dtype("Attention's past_key and past_value", p.ty.dtype, &[DType::F32])?;
            }
        }
        if let Some(n) = inputs.get(6) {
            require_dtype("Attention's nonpad_kv_seqlen", n.ty.dtype, &[DType::I64])?;
        }
        let fixed: Vec<Option<Vec<usize>>> =
            (0..7).map(|i| inputs.get(i).map(|x| x.ty.fixed_dims().unwrap_or_default())).collect();
        let all_fixed = (0..7).all(|i| inputs.get(i).is_none_or(|x| x.ty.fixed_dims().is_some()));
        if !all_fixed {
            if !matches!(q.rank(), 3 | 4) || k.rank() != q.rank() || v.rank() != q.rank() {
                return Err(OpError::infer(format!("Attention takes Q, K and V of rank 3 or 4, found {q}, {k}, {v}")));
            }
            return Ok(self.symbolic(q, k, v, inputs.get(4).map(|p| p.ty)));
        }
        let dims = |i: usize| fixed[i].as_deref();
        let g = self.geometry(&shapes(dims))?;
        let t = g.total();
        let mut out = vec![
            ValueType::fixed(DType::F32, &g.y_dims()),
            ValueType::fixed(DType::F32, &[g.b, g.hkv, t, g.dk]),
            ValueType::fixed(DType::F32, &[g.b, g.hkv, t, g.dv]),
            ValueType::fixed(DType::F32, &[g.b, g.hq, g.sq, t]),
        ];
        out.truncate(self.outputs);
        Ok(out)
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        super::host::eval(self, inputs, outputs)
    }
}

/// The [`Shapes`] of the inputs `dims` gives (by input slot).
pub(super) fn shapes<'a>(dims: impl Fn(usize) -> Option<&'a [usize]>) -> Shapes<'a> {
    Shapes {
        q: dims(0).unwrap_or_default(),
        k: dims(1).unwrap_or_default(),
        v: dims(2).unwrap_or_default(),
        mask: dims(3),
        past_key: dims(4),
        past_value: dims(5),
        nonpad: dims(6),
    }
}

/// The mask's element kind, from its type.
pub(super) fn mask_kind(dtype: Option<DType>) -> MaskKind {
    match dtype {
        None => MaskKind::None,
        Some(DType::Bool) => MaskKind::Bool,
        Some(_) => MaskKind::Float,
    }
}

/// `[B, Hkv, T, D]` strides of a present cache of head size `d`.
pub(super) fn present_strides(g: &Geometry, d: usize) -> Strides {
    let t = g.total();
    [g.hkv * t * d, t * d, d, 1]
}
