//! `RotaryEmbedding` (opset 23): rotary position embeddings. X is `[batch, heads, seq, head]` or
//! `[batch, seq, heads * head]` (with `num_heads`); the first `rotary_embedding_dim` elements of
//! each head vector (all of them when 0) rotate, as halves or (`interleaved`) as adjacent pairs, by
//! the angles of their token: row `position_ids[b, s]` of `[positions, rot / 2]` caches, or row
//! `(b, s)` of `[batch, seq, rot / 2]` caches without `position_ids`. A negative position counts
//! from the end of the cache (numpy indexing, as the reference); one outside it is an error on the
//! host and reads cos and sin 0 on the GPU.

use saggar_shape::DType;

use super::gpu::RotaryKernel;
use crate::ops::elementwise::require_dtype;
use crate::ops::gpu::{GpuCtx, GpuLaunch, GpuNode, Slot, Work, ext, numel};
use crate::ops::{EvalInputs, InferInputs, NodeCtx, Op, OpError, ValueType};
use crate::tensor::TensorMut;

/// `RotaryEmbedding`.
#[derive(Debug)]
struct Rotary {
    interleaved: bool,
    /// `rotary_embedding_dim` (0: the whole head).
    rot: usize,
    /// `num_heads` (0: absent).
    heads: usize,
}

pub(super) fn build_rotary(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    let non_negative = |name: &str| -> Result<usize, OpError> {
        let v = ctx.int_or(name, 0)?;
        usize::try_from(v).map_err(|_| OpError::attribute(name, format!("must not be negative, found {v}")))
    };
    let interleaved = match ctx.int_or("interleaved", 0)? {
        0 => false,
        1 => true,
        other => return Err(OpError::attribute("interleaved", format!("must be 0 or 1, found {other}"))),
    };
    Ok(Box::new(Rotary { interleaved, rot: non_negative("rotary_embedding_dim")?, heads: non_negative("num_heads")? }))
}

/// X's layout: `[b, s, h, d]` extents, the rotated width, and whether heads are the last axis' blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Geometry {
    b: usize,
    s: usize,
    h: usize,
    d: usize,
    rot: usize,
    heads_last: bool,
}

impl Rotary {
    fn geometry(&self, x: &[usize]) -> Result<Geometry, OpError> {
        let (b, s, h, d, heads_last) = match *x {
            [b, h, s, d] => (b, s, h, d, false),
            [b, s, hidden] => {
                if self.heads == 0 || hidden % self.heads != 0 {
                    return Err(OpError::infer(format!(
                        "RotaryEmbedding of a 3-D input needs num_heads dividing its hidden size {hidden}, found {}",
                        self.heads
                    )));
                }
                (b, s, self.heads, hidden / self.heads, true)
            }
            _ => return Err(OpError::infer(format!("RotaryEmbedding takes a 3-D or 4-D input, found {x:?}"))),
        };
        let rot = if self.rot == 0 { d } else { self.rot };
        if rot > d || rot % 2 != 0 {
            return Err(OpError::infer(format!(
                "RotaryEmbedding's rotary dimension {rot} must be even and at most the head size {d}"
            )));
        }
        Ok(Geometry { b, s, h, d, rot, heads_last })
    }

    /// Checks the caches (and positions) against the geometry; gives the cache's row count.
    fn check_caches(g: &Geometry, cos: &[usize], sin: &[usize], pos: Option<&[usize]>) -> Result<usize, OpError> {
        let half = g.rot / 2;
        let rows = match (pos, cos) {
            (Some(p), [rows, w]) if p == [g.b, g.s] && *w == half => *rows,
            (None, [b, s, w]) if [*b, *s, *w] == [g.b, g.s, half] => b * s,
            _ => {
                return Err(OpError::infer(format!(
                    "RotaryEmbedding's caches must be [positions, {half}] with position_ids [{}, {}], or [{}, {}, {half}] \
                     without; found cos {cos:?}, sin {sin:?}, position_ids {pos:?}",
                    g.b, g.s, g.b, g.s
                )));
            }
        };
        if sin != cos {
            return Err(OpError::infer(format!(
                "RotaryEmbedding's sin cache {sin:?} differs from its cos cache {cos:?}"
            )));
        }
        Ok(rows)
    }
}

impl Op for Rotary {
    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        Some((|| {
            let x = ctx.input(0)?;
            let g = self.geometry(&x.dims)?;
            let pos = ctx.inputs.get(3).and_then(Option::as_ref);
            let rows = Rotary::check_caches(&g, &ctx.input(1)?.dims, &ctx.input(2)?.dims, pos.map(|p| &p.dims[..]))?;
            let mut slots = vec![Slot::In(0), Slot::In(1), Slot::In(2)];
            slots.extend(pos.map(|_| Slot::In(3)));
            slots.push(Slot::Out(0));
            let meta = [g.b, g.s, g.h, g.d, g.rot, usize::from(g.heads_last), usize::from(self.interleaved), rows];
            Ok(GpuNode::Launches(vec![GpuLaunch::new(
                RotaryKernel { position_ids: pos.is_some() },
                meta.map(ext).to_vec(),
                Work::Elements(numel(&x.dims)),
                slots,
            )]))
        })())
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let x = inputs.req(0)?.ty;
        for i in 0..3 {
            require_dtype("RotaryEmbedding", inputs.req(i)?.ty.dtype, &[DType::F32])?;
        }
        if let Some(p) = inputs.get(3) {
            require_dtype("RotaryEmbedding's position_ids", p.ty.dtype, &[DType::I64])?;
        }
        // Checked in full where every extent is known.
        let fixed = |i: usize| inputs.get(i).and_then(|v| v.ty.fixed_dims());
        match (x.fixed_dims(), fixed(1), fixed(2)) {
            (Some(xd), Some(cos), Some(sin)) => {
                let g = self.geometry(&xd)?;
                match (inputs.get(3), fixed(3)) {
                    (Some(_), None) => {}
                    (_, pos) => {
                        Rotary::check_caches(&g, &cos, &sin, pos.as_deref())?;
                    }
                }
            }
            _ if !matches!(x.rank(), 3 | 4) => {
                return Err(OpError::infer(format!("RotaryEmbedding takes a 3-D or 4-D input, found {x}")));
            }
            _ => {}
        }
        Ok(vec![x.clone()])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let (xv, cv, sv) = (inputs.req(0)?, inputs.req(1)?, inputs.req(2)?);
        let pv = inputs.get(3);
        let g = self.geometry(xv.dims)?;
        let rows = Rotary::check_caches(&g, cv.dims, sv.dims, pv.map(|p| p.dims))?;
        let (x, cos, sin, y) = (xv.f32s()?, cv.f32s()?, sv.f32s()?, outputs[0].f32s()?);
        let pos = pv.map(|p| p.i64s()).transpose()?;
        let half = g.rot / 2;
        if y.len() != x.len() || x.len() != g.b * g.s * g.h * g.d || cos.len() != rows * half || sin.len() != cos.len()
        {
            return Err(OpError::eval("RotaryEmbedding: the tensors do not match their shapes"));
        }
        for b in 0..g.b {
            for s in 0..g.s {
                let row = match pos {
                    Some(p) => {
                        let v = p[b * g.s + s];
                        let at = if v < 0 { v + rows as i64 } else { v };
                        usize::try_from(at).ok().filter(|&r| r < rows).ok_or_else(|| {
                            OpError::eval(format!("RotaryEmbedding: position {v} is outside the {rows} cache rows"))
                        })?
                    }
                    None => b * g.s + s,
                };
                let (c, sn) = (&cos[row * half..(row + 1) * half], &sin[row * half..(row + 1) * half]);
                for h in 0..g.h {
                    let at =
                        if g.heads_last { ((b * g.s + s) * g.h + h) * g.d } else { ((b * g.h + h) * g.s + s) * g.d };
                    let (xs, ys) = (&x[at..at + g.d], &mut y[at..at + g.d]);
                    ys[g.rot..].copy_from_slice(&xs[g.rot..]);
                    for k in 0..half {
                        let (i, j) = if self.interleaved { (2 * k, 2 * k + 1) } else { (k, k + half) };
                        ys[i] = c[k] * xs[i] - sn[k] * xs[j];
                        ys[j] = sn[k] * xs[i] + c[k] * xs[j];
                    }
                }
            }
        }
        Ok(())
    }
}
