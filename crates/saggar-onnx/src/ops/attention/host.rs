//! Attention on the host: per query row the scores, the bias and the softmax as the GPU kernel
//! computes them (one pass over the keys, then the weighted sum of the values), and the present
//! caches copied from the past and new keys and values.

use super::geometry::{Geometry, Strides};
use super::sdpa::{Attention, present_strides, shapes};
use crate::ops::{EvalInputs, OpError};
use crate::tensor::{DataRef, TensorMut};

/// A mask's elements.
#[derive(Clone, Copy)]
enum Mask<'a> {
    Bool(&'a [u8]),
    Float(&'a [f32]),
}

/// The f32 operands of one evaluation.
struct Operands<'a> {
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
    past_k: &'a [f32],
    past_v: &'a [f32],
    mask: Option<Mask<'a>>,
    nonpad: Option<&'a [i64]>,
}

fn at(s: &Strides, b: usize, h: usize, p: usize, d: usize) -> usize {
    b * s[0] + h * s[1] + p * s[2] + d * s[3]
}

/// Fails unless the last element `strides` address over `dims` lies in `data`.
fn fits(data: usize, dims: [usize; 4], s: &Strides) -> Result<(), OpError> {
    let last = dims.iter().zip(s).map(|(&d, &s)| d.saturating_sub(1) * s).sum::<usize>();
    if dims.contains(&0) || last < data {
        Ok(())
    } else {
        Err(OpError::eval("Attention: an operand is smaller than its shape"))
    }
}

pub(super) fn eval(op: &Attention, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
    let g = op.geometry(&shapes(|i| inputs.get(i).map(|v| v.dims))).map_err(|e| OpError::eval(e.to_string()))?;
    let f32s = |i: usize| inputs.get(i).map(|v| v.f32s()).transpose().map(Option::unwrap_or_default);
    let mask = match inputs.get(3).map(|m| m.data) {
        None => None,
        Some(DataRef::Bool(m)) => Some(Mask::Bool(m)),
        Some(DataRef::F32(m)) => Some(Mask::Float(m)),
        Some(other) => return Err(OpError::eval(format!("Attention's mask cannot be {}", other.dtype()))),
    };
    let nonpad = inputs.get(6).map(|n| n.i64s()).transpose()?;
    if nonpad.is_some_and(|n| n.len() != g.b) {
        return Err(OpError::eval("Attention: nonpad_kv_seqlen does not hold one length per batch"));
    }
    let ops = Operands { q: f32s(0)?, k: f32s(1)?, v: f32s(2)?, past_k: f32s(4)?, past_v: f32s(5)?, mask, nonpad };
    let (pk, pv) = (g.past_strides(g.dk), g.past_strides(g.dv));
    fits(ops.q.len(), [g.b, g.hq, g.sq, g.dk], &g.q)?;
    fits(ops.k.len(), [g.b, g.hkv, g.skv, g.dk], &g.k)?;
    fits(ops.v.len(), [g.b, g.hkv, g.skv, g.dv], &g.v)?;
    fits(ops.past_k.len(), [g.b, g.hkv, g.past, g.dk], &pk)?;
    fits(ops.past_v.len(), [g.b, g.hkv, g.past, g.dv], &pv)?;
    if let (Some(m), Some(mg)) = (mask, g.mask) {
        let len = match m {
            Mask::Bool(m) => m.len(),
            Mask::Float(m) => m.len(),
        };
        fits(len, [g.b, g.hq, g.sq, mg.len], &mg.strides)?;
    }
    let mut outs = outputs.iter_mut();
    let y = outs.next().ok_or_else(|| OpError::eval("Attention needs an output"))?.f32s()?;
    let mut present: Vec<&mut [f32]> = Vec::new();
    for _ in 0..2 {
        if let Some(o) = outs.next() {
            present.push(o.f32s()?);
        }
    }
    let qk = outs.next().map(|o| o.f32s()).transpose()?;
    let t = g.total();
    if y.len() != g.b * g.hq * g.sq * g.dv || qk.as_ref().is_some_and(|qk| qk.len() != g.b * g.hq * g.sq * t) {
        return Err(OpError::eval("Attention: the outputs do not match the inputs"));
    }
    rows(op, &g, &ops, y, qk)?;
    for (which, out) in present.into_iter().enumerate() {
        let (d, new, new_s, past, past_s) =
            if which == 0 { (g.dk, ops.k, g.k, ops.past_k, pk) } else { (g.dv, ops.v, g.v, ops.past_v, pv) };
        let to = present_strides(&g, d);
        if out.len() != g.b * g.hkv * t * d {
            return Err(OpError::eval("Attention: a present output does not match the caches"));
        }
        for (b, h, j, e) in
            (0..g.b * g.hkv * t * d).map(|i| (i / (g.hkv * t * d), i / (t * d) % g.hkv, i / d % t, i % d))
        {
            out[at(&to, b, h, j, e)] =
                if j < g.past { past[at(&past_s, b, h, j, e)] } else { new[at(&new_s, b, h, j - g.past, e)] };
        }
    }
    Ok(())
}

/// Y (and `qk_matmul_output`) row by row.
fn rows(
    op: &Attention,
    g: &Geometry,
    ops: &Operands<'_>,
    y: &mut [f32],
    mut qk: Option<&mut [f32]>,
) -> Result<(), OpError> {
    let t = g.total();
    let (scale, softcap) = (op.scale_for(g.dk), op.softcap);
    let (pk, pv) = (g.past_strides(g.dk), g.past_strides(g.dv));
    let mut scores = vec![0.0f32; t];
    let mut acc = vec![0.0f32; g.dv];
    let group = g.hq / g.hkv;
    for row in 0..g.b * g.hq * g.sq {
        let (i, h, b) = (row % g.sq, row / g.sq % g.hq, row / (g.sq * g.hq));
        let kh = h / group;
        let (offset, limit) = match ops.nonpad {
            Some(n) => (n[b].saturating_sub(g.sq as i64), n[b]),
            None => (g.past as i64, t as i64),
        };
        let mut any = false;
        for (j, score) in scores.iter_mut().enumerate() {
            let mut dot = 0.0f32;
            for d in 0..g.dk {
                let key =
                    if j < g.past { ops.past_k[at(&pk, b, kh, j, d)] } else { ops.k[at(&g.k, b, kh, j - g.past, d)] };
                dot += ops.q[at(&g.q, b, h, i, d)] * key;
            }
            let raw = dot * scale;
            let capped = if softcap > 0.0 { softcap * (raw / softcap).tanh() } else { raw };
            let mut bias = match (ops.mask, g.mask) {
                (Some(m), Some(mg)) if j < mg.len => {
                    let o = at(&mg.strides, b, h, i, j);
                    match m {
                        Mask::Bool(m) => {
                            if m[o] != 0 {
                                0.0
                            } else {
                                f32::NEG_INFINITY
                            }
                        }
                        Mask::Float(m) => m[o],
                    }
                }
                (Some(_), _) => f32::NEG_INFINITY,
                _ => 0.0,
            };
            if (op.causal && j as i64 > i as i64 + offset) || j as i64 >= limit {
                bias = f32::NEG_INFINITY;
            }
            any |= bias != f32::NEG_INFINITY;
            *score = capped + bias;
            if let Some(qk) = qk.as_deref_mut().filter(|_| op.mode < 3) {
                qk[row * t + j] = [raw, capped, *score][usize::from(op.mode)];
            }
        }
        let m = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        for s in scores.iter_mut() {
            *s = if *s == f32::NEG_INFINITY || m == f32::NEG_INFINITY { 0.0 } else { (*s - m).exp() };
        }
        let l: f32 = scores.iter().sum();
        let inv = if any && l > 0.0 { 1.0 / l } else { 0.0 };
        acc.fill(0.0);
        for (j, &p) in scores.iter().enumerate() {
            for (d, a) in acc.iter_mut().enumerate() {
                let value =
                    if j < g.past { ops.past_v[at(&pv, b, kh, j, d)] } else { ops.v[at(&g.v, b, kh, j - g.past, d)] };
                *a += p * value;
            }
        }
        for (d, a) in acc.iter().enumerate() {
            y[at(&g.y, b, h, i, d)] = if any { a * inv } else { 0.0 };
        }
        if let Some(qk) = qk.as_deref_mut().filter(|_| op.mode == 3) {
            for (j, &p) in scores.iter().enumerate() {
                qk[row * t + j] = if any { p * inv } else { 0.0 };
            }
        }
    }
    Ok(())
}
