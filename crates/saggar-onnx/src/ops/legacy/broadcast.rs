//! Opset 1-6 broadcasting: the binary ops' `broadcast`/`axis` attributes ([`build_binary`]) and
//! PRelu's per-channel slope ([`build_prelu`]), the view aligning `B` with `A` at `axis`
//! ([`AlignAt`]) and the shape checks legacy forms add to today's ops ([`Checked`]).

use saggar_shape::Dim;

use crate::ops::gpu::{GpuCtx, GpuNode};
use crate::ops::shape_util::fmt_dims;
use crate::ops::{EvalInputs, InferInputs, InputView, NodeCtx, Op, OpError, SymInt, ValueType};
use crate::tensor::TensorMut;

use super::rebuild;

/// The op type of the inserted view, as errors and listings name it.
pub(super) const ALIGN: &str = "LegacyBroadcast";

/// Whether two extents may be equal (a symbolic one is checked once shapes are concrete).
fn agree(a: &Dim, b: &Dim) -> bool {
    match (a.as_fixed(), b.as_fixed()) {
        (Some(x), Some(y)) => x == y,
        _ => true,
    }
}

/// Whether `b` broadcasts onto `a` by trailing alignment without enlarging it: each extent of `b`
/// equals `a`'s or is 1 (the "1-dim expansion" the pytorch exporter of opset 6 relied on).
fn onto(a: &[Dim], b: &[Dim]) -> bool {
    b.len() <= a.len() && a[a.len() - b.len()..].iter().zip(b).all(|(x, y)| y.as_fixed() == Some(1) || agree(x, y))
}

/// A shape rule an opset 1-6 form adds to today's op.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Check {
    /// Every present input has the same dimensions (`broadcast=0`, Sum/Max/Min/Mean before 8).
    SameShapes,
    /// Input 1 broadcasts onto input 0 without enlarging it (`broadcast=1`: the result has `A`'s
    /// shape).
    OntoFirst,
    /// Input 2 has output 0's dimensions (Gemm's `C` without `broadcast`).
    ThirdIsOutput,
    /// Inputs 1 to 4 are vectors (BatchNormalization's `spatial=0` with `[C]` parameters, which
    /// computes what `spatial=1` does in inference).
    VectorParams,
}

/// Today's op behind a legacy form's shape rule; everything else is the op's own.
#[derive(Debug)]
pub(super) struct Checked {
    pub(super) inner: Box<dyn Op>,
    pub(super) check: Check,
}

impl Checked {
    fn check(&self, inputs: &InferInputs<'_>, out: &[ValueType]) -> Result<(), OpError> {
        let dims = |i: usize| inputs.req(i).map(|x| x.ty.dims.as_slice());
        let ok = match self.check {
            Check::SameShapes => {
                let first = dims(0)?;
                inputs
                    .present()
                    .all(|x| x.ty.rank() == first.len() && x.ty.dims.iter().zip(first).all(|(a, b)| agree(a, b)))
            }
            Check::OntoFirst => onto(dims(0)?, dims(1)?),
            Check::ThirdIsOutput => {
                let (c, y) = (dims(2)?, out.first().map_or(&[][..], |t| t.dims.as_slice()));
                c.len() == y.len() && c.iter().zip(y).all(|(a, b)| agree(a, b))
            }
            Check::VectorParams => (1..5).all(|i| inputs.get(i).is_none_or(|p| p.ty.rank() == 1)),
        };
        if ok {
            return Ok(());
        }
        let shapes: Vec<String> = inputs.present().map(|x| fmt_dims(&x.ty.dims)).collect();
        Err(OpError::infer(match self.check {
            Check::SameShapes => {
                format!("without broadcast=1 the inputs must have equal shapes, found {}", shapes.join(" and "))
            }
            Check::OntoFirst => format!(
                "broadcast=1 needs B's extents to match A's or be 1, without enlarging A: found {}",
                shapes.join(" and ")
            ),
            Check::ThirdIsOutput => format!(
                "without broadcast=1, C must have the output's shape {}, found {}",
                out.first().map_or_else(String::new, |t| fmt_dims(&t.dims)),
                shapes.get(2).cloned().unwrap_or_default()
            ),
            Check::VectorParams => format!(
                "spatial=0 is supported with [C] parameters only (per-element (C, D1, ...) parameters are \
                 not implemented), found {}",
                shapes.join(", ")
            ),
        }))
    }
}

impl Op for Checked {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        // Checked ahead of the op's own inference (whose messages know nothing of the legacy form),
        // except where the rule needs the output.
        let after = self.check == Check::ThirdIsOutput;
        if !after {
            self.check(inputs, &[])?;
        }
        let out = self.inner.infer(inputs)?;
        if after {
            self.check(inputs, &out)?;
        }
        Ok(out)
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        self.inner.eval(inputs, outputs)
    }

    fn dims_value(&self, inputs: &InferInputs<'_>) -> Option<Vec<SymInt>> {
        self.inner.dims_value(inputs)
    }

    fn is_view(&self) -> bool {
        self.inner.is_view()
    }

    fn foldable(&self) -> bool {
        self.inner.foldable()
    }

    fn extents_from_shapes(&self) -> bool {
        self.inner.extents_from_shapes()
    }

    fn key(&self) -> String {
        format!("{:?}:{}", self.check, self.inner.key())
    }

    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        self.inner.gpu(ctx)
    }
}

/// `B` (input 0) viewed with trailing 1s so that numpy broadcasting aligns it with `A` (input 1,
/// read for its rank) starting at `axis`: `A = (2, 3, 4, 5)`, `B = (3, 4)`, `axis = 1` gives
/// `(3, 4, 1)`. A one-element `B` stays as it is.
#[derive(Debug)]
pub(super) struct AlignAt {
    pub(super) axis: usize,
}

impl Op for AlignAt {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let (b, a) = (inputs.req(0)?.ty, inputs.req(1)?.ty);
        if b.rank() <= a.rank() && b.dims.iter().all(|d| d.as_fixed() == Some(1)) {
            return Ok(vec![b.clone()]);
        }
        let end = self.axis + b.rank();
        if end > a.rank() || !onto(&a.dims[..end], &b.dims) {
            return Err(OpError::infer(format!(
                "broadcast=1 with axis={}: B {} does not fit A {} from that axis (extents must match or be 1)",
                self.axis,
                fmt_dims(&b.dims),
                fmt_dims(&a.dims)
            )));
        }
        let mut dims = b.dims.clone();
        dims.resize(a.rank() - self.axis, Dim::Fixed(1));
        Ok(vec![ValueType::new(b.dtype, dims)])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        outputs[0].copy_from(inputs.req(0)?)
    }

    fn is_view(&self) -> bool {
        true
    }
}

/// Add, Sub, Mul, Div, Pow, And, Or, Xor, Equal, Greater and Less of opsets 1-6: today's op (of
/// opset 7) where `broadcast=1` lets `B` broadcast onto `A` (trailing alignment, or from `axis`
/// through an inserted [`AlignAt`] view) and `broadcast=0` requires equal shapes. `consumed` says
/// whether the form has the `consumed_inputs` attribute (ignored: an in-place hint).
pub(super) fn build_binary(ctx: &mut NodeCtx<'_>, op_type: &str, consumed: bool) -> Result<Box<dyn Op>, OpError> {
    if consumed {
        ctx.ignore("consumed_inputs");
    }
    let broadcast = ctx.int_or("broadcast", 0)?;
    let axis = ctx.int("axis")?;
    let inner = rebuild(ctx, op_type, 7, Default::default())?;
    let check = match broadcast {
        0 => Check::SameShapes,
        1 => Check::OntoFirst,
        other => return Err(ctx.unsupported("broadcast", other, "0 or 1")),
    };
    if let (1, Some(axis)) = (broadcast, axis) {
        let axis = usize::try_from(axis).map_err(|_| ctx.unsupported("axis", axis, "0 or more"))?;
        ctx.view_input(InputView { input: 1, op_type: ALIGN, op: Box::new(AlignAt { axis }), with: vec![0] });
    }
    Ok(Box::new(Checked { inner, check }))
}

/// PRelu 1-6: the slope is one value, or one per channel of axis 1 (Caffe2's NCHW PRelu), viewed
/// as `(C, 1, ...)` ahead of opset 7's PRelu.
pub(super) fn build_prelu(ctx: &mut NodeCtx<'_>, consumed: bool) -> Result<Box<dyn Op>, OpError> {
    if consumed {
        ctx.ignore("consumed_inputs");
    }
    let op = rebuild(ctx, "PRelu", 7, Default::default())?;
    ctx.view_input(InputView { input: 1, op_type: ALIGN, op: Box::new(AlignAt { axis: 1 }), with: vec![0] });
    Ok(op)
}
