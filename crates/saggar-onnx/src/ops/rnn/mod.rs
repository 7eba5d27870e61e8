//! Recurrent layers over whole sequences: RNN, GRU and LSTM (opsets 7 to 21, with `layout` from
//! 14), forward, reverse or bidirectional, with their activation functions, `clip`, GRU's
//! `linear_before_reset` and LSTM's `input_forget` and peepholes.
//!
//! Inputs `X, W, R, B, sequence_lens, initial_h` (and LSTM's `initial_c, P`), every one after `R`
//! optional; outputs `Y, Y_h` (and LSTM's `Y_c`), every one optional. With `sequence_lens`, a step
//! at or past an entry's length keeps its state and writes zeros to `Y`, so `Y_h` and `Y_c` hold the
//! state after the entry's last step (the reverse direction starts at its last step, `len - 1`),
//! and `initial_h` and `initial_c` for a length of 0, as ONNX's reference does; a length below 0
//! or above the sequence's is an error on the host (and at import when constant), clamped on the
//! GPU, which cannot report it. f32 only; `sequence_lens` is int32 as the spec says.
//!
//! The host ([`host`]) and the GPU kernel ([`gpu`]) compute each unit's pre-activations in the same
//! order (the input's products, then the recurrence's, then the biases), so their results agree to
//! rounding.

mod activation;
pub(crate) mod gpu;
mod host;
#[cfg(test)]
mod tests;

use saggar_shape::{DType, Dim};

use self::activation::{Act, read_activations};
use crate::ops::shape_util::fmt_dims;
use crate::ops::{EvalInputs, InferInputs, NodeCtx, Op, OpEntry, OpError, ValueType};
use crate::tensor::TensorMut;

/// The ops of this family.
pub(crate) static OPS: &[OpEntry] = &[
    OpEntry { op_type: "RNN", since: 7, until: 13, build: |c| build(c, CellKind::Rnn, false) },
    OpEntry { op_type: "RNN", since: 14, until: 24, build: |c| build(c, CellKind::Rnn, true) },
    OpEntry { op_type: "GRU", since: 7, until: 13, build: |c| build(c, CellKind::Gru, false) },
    OpEntry { op_type: "GRU", since: 14, until: 24, build: |c| build(c, CellKind::Gru, true) },
    OpEntry { op_type: "LSTM", since: 7, until: 13, build: |c| build(c, CellKind::Lstm, false) },
    OpEntry { op_type: "LSTM", since: 14, until: 24, build: |c| build(c, CellKind::Lstm, true) },
];

#[derive(Debug, Clone, Copy)]
enum CellKind {
    Rnn,
    Gru,
    Lstm,
}

/// The recurrent cell with its own attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cell {
    /// `H = f(X W^T + H R^T + Wb + Rb)`.
    Rnn,
    /// Update gate `z`, reset gate `r`, hidden gate `h` (`W[zrh]`); with `linear_before_reset`
    /// the reset gate multiplies `H R_h^T + Rb_h` instead of `H`.
    Gru { linear_before_reset: bool },
    /// Input, output, forget and cell gates (`W[iofc]`); with `input_forget` the forget gate is
    /// `1 - i`.
    Lstm { input_forget: bool },
}

impl Cell {
    fn name(self) -> &'static str {
        match self {
            Cell::Rnn => "RNN",
            Cell::Gru { .. } => "GRU",
            Cell::Lstm { .. } => "LSTM",
        }
    }

    /// Rows of `W` and `R` per hidden unit.
    pub(crate) fn gates(self) -> usize {
        match self {
            Cell::Rnn => 1,
            Cell::Gru { .. } => 3,
            Cell::Lstm { .. } => 4,
        }
    }

    /// Activation functions per direction.
    pub(crate) fn activations(self) -> usize {
        match self {
            Cell::Rnn => 1,
            Cell::Gru { .. } => 2,
            Cell::Lstm { .. } => 3,
        }
    }

    /// Input slots (`initial_c` and `P` are LSTM's).
    fn max_inputs(self) -> usize {
        if let Cell::Lstm { .. } = self { 8 } else { 6 }
    }

    /// Outputs (`Y_c` is LSTM's).
    pub(crate) fn max_outputs(self) -> usize {
        if let Cell::Lstm { .. } = self { 3 } else { 2 }
    }
}

/// `direction`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    Forward,
    Reverse,
    Bidirectional,
}

impl Direction {
    fn count(self) -> usize {
        if self == Direction::Bidirectional { 2 } else { 1 }
    }

    /// Whether direction `d` (0 or 1) runs from the last step to the first.
    fn reversed(self, d: usize) -> bool {
        self == Direction::Reverse || (self == Direction::Bidirectional && d == 1)
    }
}

/// An RNN, GRU or LSTM node.
#[derive(Debug)]
struct Recurrent {
    cell: Cell,
    /// `hidden_size`, when given (else `R`'s last extent).
    hidden_size: Option<usize>,
    direction: Direction,
    /// `cell.activations()` functions for each direction.
    acts: Vec<Act>,
    /// `clip`: every activation's input is bounded to `[-clip, clip]`.
    clip: Option<f32>,
    /// `layout = 1`: X `[batch, seq, input]`, Y `[batch, seq, directions, hidden]`, states
    /// `[batch, directions, hidden]`.
    batch_major: bool,
    outputs: usize,
}

/// A 0 or 1 attribute.
fn flag(ctx: &NodeCtx<'_>, name: &str) -> Result<bool, OpError> {
    match ctx.int_or(name, 0)? {
        0 => Ok(false),
        1 => Ok(true),
        v => Err(ctx.unsupported(name, v, "0 or 1")),
    }
}

fn build(ctx: &mut NodeCtx<'_>, kind: CellKind, layout: bool) -> Result<Box<dyn Op>, OpError> {
    let cell = match kind {
        CellKind::Rnn => Cell::Rnn,
        CellKind::Gru => Cell::Gru { linear_before_reset: flag(ctx, "linear_before_reset")? },
        CellKind::Lstm => Cell::Lstm { input_forget: flag(ctx, "input_forget")? },
    };
    let name = cell.name();
    if ctx.num_inputs() > cell.max_inputs() || ctx.num_outputs() > cell.max_outputs() {
        return Err(OpError::infer(format!(
            "{name} takes at most {} inputs and {} outputs, found {} and {}",
            cell.max_inputs(),
            cell.max_outputs(),
            ctx.num_inputs(),
            ctx.num_outputs()
        )));
    }
    let hidden_size = match ctx.int("hidden_size")? {
        None => None,
        Some(h) => Some(
            usize::try_from(h)
                .ok()
                .filter(|&h| h > 0)
                .ok_or_else(|| OpError::attribute("hidden_size", format!("{h} is not a positive size")))?,
        ),
    };
    let direction = match ctx.string_or("direction", "forward")?.as_str() {
        "forward" => Direction::Forward,
        "reverse" => Direction::Reverse,
        "bidirectional" => Direction::Bidirectional,
        other => return Err(ctx.unsupported("direction", format!("{other:?}"), "forward, reverse, bidirectional")),
    };
    let defaults: &[&str] = match cell {
        Cell::Rnn => &["Tanh", "Tanh"],
        Cell::Gru { .. } => &["Sigmoid", "Tanh"],
        Cell::Lstm { .. } => &["Sigmoid", "Tanh", "Tanh"],
    };
    let acts = read_activations(ctx, defaults, cell.activations(), direction.count())?;
    let clip = match ctx.float("clip")? {
        Some(c) if c.is_nan() || c <= 0.0 => {
            return Err(OpError::attribute("clip", format!("{c} is not a positive threshold")));
        }
        c => c,
    };
    let batch_major = layout && flag(ctx, "layout")?;
    Ok(Box::new(Recurrent { cell, hidden_size, direction, acts, clip, batch_major, outputs: ctx.num_outputs() }))
}

/// The extents of one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Extents {
    pub(crate) seq: usize,
    pub(crate) batch: usize,
    pub(crate) input: usize,
    pub(crate) hidden: usize,
    pub(crate) dirs: usize,
}

/// Element strides of X (`xt` time, `xb` batch), Y (`yt`, `yd` direction, `yb`) and the states
/// (`sd`, `sb`) in the node's layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Strides {
    pub(crate) xt: usize,
    pub(crate) xb: usize,
    pub(crate) yt: usize,
    pub(crate) yd: usize,
    pub(crate) yb: usize,
    pub(crate) sd: usize,
    pub(crate) sb: usize,
}

impl Extents {
    fn strides(&self, batch_major: bool) -> Strides {
        let Extents { seq, batch, input, hidden, dirs } = *self;
        if batch_major {
            Strides {
                xt: input,
                xb: seq * input,
                yt: dirs * hidden,
                yd: hidden,
                yb: seq * dirs * hidden,
                sd: hidden,
                sb: dirs * hidden,
            }
        } else {
            Strides {
                xt: batch * input,
                xb: input,
                yt: dirs * batch * hidden,
                yd: batch * hidden,
                yb: hidden,
                sd: batch * hidden,
                sb: hidden,
            }
        }
    }
}

/// `dims` against `want` (an extent, or `None` where any is fine): the same rank and equal extents
/// where both are known.
fn expect(op: &str, what: &str, dims: &[Dim], want: &[Option<u64>], meaning: &str) -> Result<(), OpError> {
    let fits = dims.len() == want.len()
        && dims.iter().zip(want).all(|(d, w)| match (d.as_fixed(), w) {
            (Some(a), Some(b)) => a == *b,
            _ => true,
        });
    if fits {
        return Ok(());
    }
    let shown: Vec<String> = want.iter().map(|w| w.map_or("?".to_string(), |v| v.to_string())).collect();
    Err(OpError::infer(format!("{op}: {what} is {}, expected [{}] ({meaning})", fmt_dims(dims), shown.join(", "))))
}

impl Recurrent {
    /// Checks the shapes of the present inputs (by slot) against one another and the attributes;
    /// returns `[seq, batch, input, hidden]`.
    fn check_shapes(&self, dims: &[Option<&[Dim]>]) -> Result<[Dim; 4], OpError> {
        let op = self.cell.name();
        let get = |i: usize| dims.get(i).copied().flatten();
        let required = |i: usize, what: &str| {
            get(i).filter(|d| d.len() == 3).ok_or_else(|| OpError::infer(format!("{op}: input {what} must be 3-D")))
        };
        let (x, w, r) = (required(0, "X")?, required(1, "W")?, required(2, "R")?);
        let (seq, batch) = if self.batch_major { (&x[1], &x[0]) } else { (&x[0], &x[1]) };
        let hidden = self.hidden_size.map_or_else(|| r[2].clone(), |h| Dim::Fixed(h as u64));
        match hidden.as_fixed() {
            Some(0) => return Err(OpError::infer(format!("{op}: hidden_size is 0 (R is {})", fmt_dims(r)))),
            Some(h) if h > (i64::MAX as u64) / 8 => {
                return Err(OpError::infer(format!("{op}: hidden_size {h} is beyond any tensor's size")));
            }
            _ => {}
        }
        let dirs = Some(self.direction.count() as u64);
        let h = hidden.as_fixed();
        let times = |k: u64| h.and_then(|h| h.checked_mul(k));
        let g = self.cell.gates() as u64;
        let context = format!("hidden_size {hidden}, {} direction(s)", self.direction.count());
        let (batch_v, input_v) = (batch.as_fixed(), x[2].as_fixed());
        expect(
            op,
            "W",
            w,
            &[dirs, times(g), input_v],
            &format!("directions, {g} x hidden_size, input size; {context}"),
        )?;
        expect(op, "R", r, &[dirs, times(g), h], &format!("directions, {g} x hidden_size, hidden_size; {context}"))?;
        if let Some(b) = get(3) {
            expect(op, "B", b, &[dirs, times(2 * g)], &format!("directions, {} x hidden_size; {context}", 2 * g))?;
        }
        if let Some(lens) = get(4) {
            expect(op, "sequence_lens", lens, &[batch_v], "batch")?;
        }
        let state = if self.batch_major { [batch_v, dirs, h] } else { [dirs, batch_v, h] };
        for (slot, what) in [(5, "initial_h"), (6, "initial_c")] {
            if let Some(s) = get(slot) {
                expect(op, what, s, &state, &format!("states in layout {}; {context}", u8::from(self.batch_major)))?;
            }
        }
        if let Some(p) = get(7) {
            expect(op, "P", p, &[dirs, times(3)], &format!("directions, 3 x hidden_size; {context}"))?;
        }
        Ok([seq.clone(), batch.clone(), x[2].clone(), hidden])
    }

    /// The extents of concrete input shapes (by slot), checked as [`Recurrent::check_shapes`] does.
    fn extents(&self, dims: &[Option<&[usize]>]) -> Result<Extents, OpError> {
        let as_dims: Vec<Option<Vec<Dim>>> =
            dims.iter().map(|d| d.map(|d| d.iter().map(|&v| Dim::Fixed(v as u64)).collect())).collect();
        let refs: Vec<Option<&[Dim]>> = as_dims.iter().map(Option::as_deref).collect();
        let fixed = self.check_shapes(&refs)?.map(|d| d.as_fixed().and_then(|v| usize::try_from(v).ok()));
        match fixed {
            [Some(seq), Some(batch), Some(input), Some(hidden)] => {
                Ok(Extents { seq, batch, input, hidden, dirs: self.direction.count() })
            }
            _ => Err(OpError::eval(format!("{}: input extents out of range", self.cell.name()))),
        }
    }

    /// Checks `sequence_lens` values against the sequence length `seq` (when known).
    fn check_lens(&self, lens: &[i64], seq: Option<u64>) -> Result<(), OpError> {
        for (b, &len) in lens.iter().enumerate() {
            if len < 0 || seq.is_some_and(|s| len as u64 > s) {
                let bound = seq.map_or(String::new(), |s| format!(" and at most the sequence length {s}"));
                return Err(OpError::eval(format!(
                    "{}: sequence_lens[{b}] is {len}; a length must be at least 0{bound}",
                    self.cell.name()
                )));
            }
        }
        Ok(())
    }
}

impl Op for Recurrent {
    fn gpu(&self, ctx: &crate::ops::gpu::GpuCtx<'_>) -> Option<Result<crate::ops::gpu::GpuNode, OpError>> {
        Some(gpu::lower(self, ctx))
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let op = self.cell.name();
        for i in (0..inputs.len()).filter(|&i| i != 4) {
            if let Some(v) = inputs.get(i).filter(|v| v.ty.dtype != DType::F32) {
                return Err(OpError::infer(format!("{op} takes f32 inputs; input {i} is {}", v.ty)));
            }
        }
        if let Some(v) = inputs.get(4).filter(|v| v.ty.dtype != DType::I32) {
            return Err(OpError::infer(format!("{op}: sequence_lens must be int32, found {}", v.ty)));
        }
        let dims: Vec<Option<&[Dim]>> =
            (0..inputs.len()).map(|i| inputs.get(i).map(|v| v.ty.dims.as_slice())).collect();
        let [seq, batch, _, hidden] = self.check_shapes(&dims)?;
        if let Some(lens) = inputs.get(4).and_then(|v| v.const_i64s()) {
            self.check_lens(&lens, seq.as_fixed()).map_err(|e| OpError::infer(e.to_string()))?;
        }
        let dirs = Dim::Fixed(self.direction.count() as u64);
        let (y, state) = if self.batch_major {
            (vec![batch.clone(), seq, dirs.clone(), hidden.clone()], vec![batch, dirs, hidden])
        } else {
            (vec![seq, dirs.clone(), batch.clone(), hidden.clone()], vec![dirs, batch, hidden])
        };
        let mut out = vec![ValueType::new(DType::F32, y)];
        out.extend((1..self.outputs).map(|_| ValueType::new(DType::F32, state.clone())));
        out.truncate(self.outputs);
        Ok(out)
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        host::eval(self, inputs, outputs)
    }
}
