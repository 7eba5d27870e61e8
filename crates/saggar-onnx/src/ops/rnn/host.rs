//! The host kernel of the recurrent ops: each direction and batch entry in turn, step by step, the
//! state in three vectors of the hidden size (the state, the next state, and LSTM's cell state or
//! GRU's reset products), as the GPU kernel keeps them in shared memory.

use super::activation::Act;
use super::{Cell, Extents, Recurrent};
use crate::ops::{EvalInputs, OpError};
use crate::tensor::TensorMut;

/// One direction's weights and functions.
struct Params<'a> {
    /// `[gates * hidden, input]`.
    w: &'a [f32],
    /// `[gates * hidden, hidden]`.
    r: &'a [f32],
    /// `Wb` and `Rb`, `[gates * hidden]` each.
    bias: Option<(&'a [f32], &'a [f32])>,
    /// LSTM's `P[iof]`, `[3 * hidden]`.
    peep: Option<&'a [f32]>,
    acts: &'a [Act],
    clip: Option<f32>,
    input: usize,
    hidden: usize,
}

fn dot(acc: f32, a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).fold(acc, |s, (x, y)| s + x * y)
}

impl Params<'_> {
    /// The input's products of gate `q`'s row for unit `j`, from 0.
    fn input_part(&self, q: usize, j: usize, x: &[f32]) -> f32 {
        let row = q * self.hidden + j;
        dot(0.0, x, &self.w[row * self.input..][..self.input])
    }

    /// `acc` plus the recurrence's products of gate `q`'s row for unit `j` with `h`.
    fn recurrent_part(&self, acc: f32, q: usize, j: usize, h: &[f32]) -> f32 {
        let row = q * self.hidden + j;
        dot(acc, h, &self.r[row * self.hidden..][..self.hidden])
    }

    /// `acc` plus `Wb` then `Rb` of gate `q` for unit `j` (`wb`, `rb` choose which).
    fn biased(&self, mut acc: f32, q: usize, j: usize, wb: bool, rb: bool) -> f32 {
        if let Some((w, r)) = self.bias {
            let row = q * self.hidden + j;
            if wb {
                acc += w[row];
            }
            if rb {
                acc += r[row];
            }
        }
        acc
    }

    /// Gate `q`'s whole pre-activation for unit `j`: input, recurrence with `h`, biases.
    fn pre(&self, q: usize, j: usize, x: &[f32], h: &[f32]) -> f32 {
        let acc = self.recurrent_part(self.input_part(q, j, x), q, j, h);
        self.biased(acc, q, j, true, true)
    }

    /// Activation `k` of this direction at `v`, clipped first.
    fn act(&self, k: usize, v: f32) -> f32 {
        let v = self.clip.map_or(v, |c| v.max(-c).min(c));
        self.acts[k].apply(v)
    }

    fn peephole(&self, gate: usize, j: usize) -> Option<f32> {
        self.peep.map(|p| p[gate * self.hidden + j])
    }
}

/// One step of `cell` from the state `h` at input `x`: the next state into `hn`; `s3` is LSTM's cell
/// state (updated in place) or GRU's reset products.
fn step(cell: Cell, p: &Params<'_>, x: &[f32], h: &[f32], hn: &mut [f32], s3: &mut [f32]) {
    match cell {
        Cell::Rnn => {
            for (j, out) in hn.iter_mut().enumerate() {
                *out = p.act(0, p.pre(0, j, x, h));
            }
        }
        Cell::Lstm { input_forget } => {
            for (j, (out, c)) in hn.iter_mut().zip(s3.iter_mut()).enumerate() {
                let (mut ai, mut ao, mut af, ac) =
                    (p.pre(0, j, x, h), p.pre(1, j, x, h), p.pre(2, j, x, h), p.pre(3, j, x, h));
                let cp = *c;
                if let (Some(pi), Some(pf)) = (p.peephole(0, j), p.peephole(2, j)) {
                    ai += pi * cp;
                    af += pf * cp;
                }
                let ig = p.act(0, ai);
                let fg = if input_forget { 1.0 - ig } else { p.act(0, af) };
                let cg = p.act(1, ac);
                let cn = fg * cp + ig * cg;
                if let Some(po) = p.peephole(1, j) {
                    ao += po * cn;
                }
                let og = p.act(0, ao);
                *out = og * p.act(2, cn);
                *c = cn;
            }
        }
        Cell::Gru { linear_before_reset } => {
            // The update gate waits in `hn`; `s3` holds r, or r * h without linear_before_reset.
            for j in 0..p.hidden {
                let z = p.act(0, p.pre(0, j, x, h));
                let r = p.act(0, p.pre(1, j, x, h));
                hn[j] = z;
                s3[j] = if linear_before_reset { r } else { r * h[j] };
            }
            for j in 0..p.hidden {
                let acc = p.input_part(2, j, x);
                let pre = if linear_before_reset {
                    let rec = p.biased(p.recurrent_part(0.0, 2, j, h), 2, j, false, true);
                    p.biased(acc + s3[j] * rec, 2, j, true, false)
                } else {
                    p.biased(p.recurrent_part(acc, 2, j, s3), 2, j, true, true)
                };
                let hc = p.act(1, pre);
                let z = hn[j];
                hn[j] = (1.0 - z) * hc + z * h[j];
            }
        }
    }
}

/// An input's elements, checked against its shape.
fn floats<'a>(inputs: &EvalInputs<'a>, i: usize) -> Result<Option<&'a [f32]>, OpError> {
    let Some(v) = inputs.get(i) else { return Ok(None) };
    let data = v.f32s()?;
    if data.len() != v.dims.iter().product::<usize>() {
        return Err(OpError::eval(format!("input {i}'s data does not match its shape {:?}", v.dims)));
    }
    Ok(Some(data))
}

/// The sequence lengths, checked, or `None` (every entry runs the whole sequence).
fn lengths<'a>(op: &Recurrent, inputs: &EvalInputs<'a>, e: &Extents) -> Result<Option<&'a [i32]>, OpError> {
    let Some(v) = inputs.get(4) else { return Ok(None) };
    let lens = v.i32s()?;
    if lens.len() != e.batch {
        return Err(OpError::eval(format!(
            "{}: sequence_lens holds {} values for {} entries",
            op.cell.name(),
            lens.len(),
            e.batch
        )));
    }
    let wide: Vec<i64> = lens.iter().map(|&l| i64::from(l)).collect();
    op.check_lens(&wide, Some(e.seq as u64))?;
    Ok(Some(lens))
}

pub(super) fn eval(op: &Recurrent, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
    let dims: Vec<Option<&[usize]>> = (0..inputs.len()).map(|i| inputs.get(i).map(|v| v.dims)).collect();
    let e = op.extents(&dims)?;
    let s = e.strides(op.batch_major);
    let (x, w, r) = (floats(inputs, 0)?, floats(inputs, 1)?, floats(inputs, 2)?);
    let (Some(x), Some(w), Some(r)) = (x, w, r) else { return Err(OpError::eval("X, W and R are required")) };
    let (bias, h0) = (floats(inputs, 3)?, floats(inputs, 5)?);
    let (c0, peep) =
        if let Cell::Lstm { .. } = op.cell { (floats(inputs, 6)?, floats(inputs, 7)?) } else { (None, None) };
    let lens = lengths(op, inputs, &e)?;
    let mut outs = outputs.iter_mut().map(TensorMut::f32s).collect::<Result<Vec<_>, _>>()?;
    let state_len = e.dirs * e.batch * e.hidden;
    for (k, out) in outs.iter().enumerate() {
        let want = if k == 0 { e.seq * state_len } else { state_len };
        if out.len() != want {
            return Err(OpError::eval(format!(
                "{}: output {k} holds {} values, expected {want}",
                op.cell.name(),
                out.len()
            )));
        }
    }
    let (g, hid, n) = (op.cell.gates(), e.hidden, op.cell.activations());
    let mut scratch = vec![0.0f32; 3 * hid];
    let (h_buf, rest) = scratch.split_at_mut(hid);
    let (hn_buf, s3) = rest.split_at_mut(hid);
    for d in 0..e.dirs {
        let p = Params {
            w: &w[d * g * hid * e.input..][..g * hid * e.input],
            r: &r[d * g * hid * hid..][..g * hid * hid],
            bias: bias.map(|b| b[d * 2 * g * hid..][..2 * g * hid].split_at(g * hid)),
            peep: peep.map(|p| &p[d * 3 * hid..][..3 * hid]),
            acts: &op.acts[d * n..][..n],
            clip: op.clip,
            input: e.input,
            hidden: hid,
        };
        for b in 0..e.batch {
            let len = lens.map_or(e.seq, |l| l[b] as usize);
            let st = d * s.sd + b * s.sb;
            let (mut h, mut hn) = (&mut *h_buf, &mut *hn_buf);
            match h0 {
                Some(h0) => h.copy_from_slice(&h0[st..][..hid]),
                None => h.fill(0.0),
            }
            match c0 {
                Some(c0) => s3.copy_from_slice(&c0[st..][..hid]),
                None => s3.fill(0.0),
            }
            for t in (0..e.seq).map(|k| if op.direction.reversed(d) { e.seq - 1 - k } else { k }) {
                let row = t * s.yt + d * s.yd + b * s.yb;
                if t < len {
                    step(op.cell, &p, &x[t * s.xt + b * s.xb..][..e.input], h, hn, s3);
                    std::mem::swap(&mut h, &mut hn);
                }
                if let Some(y) = outs.first_mut() {
                    let y = &mut y[row..][..hid];
                    if t < len { y.copy_from_slice(h) } else { y.fill(0.0) }
                }
            }
            for (k, state) in [(1, &*h), (2, &*s3)] {
                if let Some(out) = outs.get_mut(k) {
                    out[st..][..hid].copy_from_slice(state);
                }
            }
        }
    }
    Ok(())
}
