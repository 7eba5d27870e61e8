//! `Scan`: runs its body once per element of the scan inputs along their scan axes, carrying
//! state values from one step to the next and stacking the body's scan outputs. Opset 8 scans a
//! batch: every input has a batch axis 0 (scanned independently), scan inputs their sequence on
//! axis 1, with an optional `sequence_lens` input first.

use std::sync::Arc;

use saggar_shape::Dim;

use super::{Body, Scope, carried, graph_attr, infer_body, refuse_eval};
use crate::ops::shape_util::normalize_axis;
use crate::ops::{Attributes, EvalInputs, InferInput, InferInputs, NodeCtx, Op, OpError, ValueType, unknown_dim};
use crate::tensor::TensorMut;

/// What a Scan node's attributes say about its inputs and outputs.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ScanSpec {
    /// Opset 8: a batch axis 0 on every input and output, `sequence_lens` at input 0.
    pub(crate) batched: bool,
    /// State values (`N`).
    pub(crate) states: usize,
    /// Scan inputs (`M`).
    pub(crate) scan_inputs: usize,
    /// Scan outputs (`K`).
    pub(crate) scan_outputs: usize,
    /// Per scan input: its scan axis (may be negative from opset 11).
    pub(crate) input_axes: Vec<i64>,
    /// Per scan input: whether it is read last to first.
    pub(crate) input_reverse: Vec<bool>,
    /// Per scan output: the axis the steps are stacked on (may be negative).
    pub(crate) output_axes: Vec<i64>,
    /// Per scan output: whether the steps are stacked last to first.
    pub(crate) output_reverse: Vec<bool>,
}

impl ScanSpec {
    /// The first scan input's slot.
    pub(crate) fn first_scan_input(&self) -> usize {
        usize::from(self.batched) + self.states
    }
}

/// The spec of a Scan node with `attrs` at `opset` with `inputs` own input slots and `outputs`
/// outputs (for the inlining pass; the builder reads the same through its [`NodeCtx`]).
pub(crate) fn scan_spec(attrs: &Attributes, opset: u32, inputs: usize, outputs: usize) -> Result<ScanSpec, OpError> {
    read_spec(&NodeCtx::new(attrs, opset, inputs, outputs))
}

fn read_spec(ctx: &NodeCtx<'_>) -> Result<ScanSpec, OpError> {
    let batched = ctx.opset() < 9;
    let m = ctx.int("num_scan_inputs")?.ok_or_else(|| OpError::attribute("num_scan_inputs", "is required"))?;
    let own = ctx.num_inputs() - usize::from(batched);
    let m = usize::try_from(m)
        .ok()
        .filter(|&m| (1..=own).contains(&m))
        .ok_or_else(|| OpError::attribute("num_scan_inputs", format!("must be 1 to {own}, found {m}")))?;
    let states = own - m;
    let scan_outputs = ctx.num_outputs().checked_sub(states).ok_or_else(|| {
        OpError::infer(format!("Scan has {states} state values but only {} outputs", ctx.num_outputs()))
    })?;
    let list = |name: &str, len: usize| -> Result<Vec<i64>, OpError> {
        let v = ctx.ints(name)?.unwrap_or_else(|| vec![0; len]);
        if v.len() != len {
            return Err(OpError::attribute(name, format!("has {} entries, expected {len}", v.len())));
        }
        Ok(v)
    };
    let directions = |name: &str, len: usize| -> Result<Vec<bool>, OpError> {
        list(name, len)?
            .into_iter()
            .map(|d| match d {
                0 => Ok(false),
                1 => Ok(true),
                other => Err(OpError::attribute(name, format!("entries must be 0 or 1, found {other}"))),
            })
            .collect()
    };
    let (input_axes, input_reverse, output_axes, output_reverse) = if batched {
        (vec![0; m], directions("directions", m)?, vec![0; scan_outputs], vec![false; scan_outputs])
    } else {
        (
            list("scan_input_axes", m)?,
            directions("scan_input_directions", m)?,
            list("scan_output_axes", scan_outputs)?,
            directions("scan_output_directions", scan_outputs)?,
        )
    };
    let negative = input_axes.iter().chain(&output_axes).any(|&a| a < 0);
    if negative && ctx.opset() < 11 {
        return Err(OpError::attribute("scan_input_axes", "negative axes are allowed from opset 11"));
    }
    Ok(ScanSpec {
        batched,
        states,
        scan_inputs: m,
        scan_outputs,
        input_axes,
        input_reverse,
        output_axes,
        output_reverse,
    })
}

/// `Scan`.
#[derive(Debug)]
struct Scan {
    body: Arc<dyn Body>,
    scope: Scope,
    spec: ScanSpec,
}

pub(super) fn build(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    let body = graph_attr(ctx, "body")?;
    let spec = read_spec(ctx)?;
    let scope = Scope::of(ctx, &[&body]);
    Ok(Box::new(Scan { body, scope, spec }))
}

/// `ty` without axis `axis`.
fn without(ty: &ValueType, axis: usize) -> ValueType {
    let mut dims = ty.dims.clone();
    dims.remove(axis);
    ValueType::new(ty.dtype, dims)
}

/// The sequence extent of the scan inputs, checked to agree where known, and the types the body
/// reads per step.
fn steps(spec: &ScanSpec, scans: &[&InferInput<'_>]) -> Result<(Dim, Vec<ValueType>), OpError> {
    let mut extent: Option<Dim> = None;
    let mut slices = Vec::with_capacity(scans.len());
    for (j, x) in scans.iter().enumerate() {
        let axis = normalize_axis(spec.input_axes[j], x.ty.rank())?;
        let d = x.ty.dims[axis].clone();
        match &extent {
            Some(e) if e.as_fixed().is_some() && d.as_fixed().is_some() && *e != d => {
                return Err(OpError::infer(format!(
                    "scan input {j} has {d} steps on axis {axis}, scan input 0 has {e}"
                )));
            }
            Some(_) => {}
            None => extent = Some(d),
        }
        slices.push(without(x.ty, axis));
    }
    Ok((extent.unwrap_or_else(unknown_dim), slices))
}

impl Op for Scan {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let spec = &self.spec;
        let body = self.body.as_ref();
        if body.outputs() != spec.states + spec.scan_outputs {
            return Err(OpError::infer(format!(
                "the body `{}` makes {} outputs, the node has {} ({} states, {} scan outputs)",
                body.name(),
                body.outputs(),
                spec.states + spec.scan_outputs,
                spec.states,
                spec.scan_outputs
            )));
        }
        let first = spec.first_scan_input();
        let batch_of = |ty: &ValueType| -> Result<ValueType, OpError> {
            match ty.rank() {
                0 => Err(OpError::infer(format!("opset 8 Scan inputs have a batch axis, found {ty}"))),
                _ => Ok(without(ty, 0)),
            }
        };
        let mut states: Vec<ValueType> = (0..spec.states)
            .map(|j| inputs.req(first - spec.states + j).map(|x| x.ty.clone()))
            .collect::<Result<_, _>>()?;
        let scans: Vec<&InferInput<'_>> =
            (0..spec.scan_inputs).map(|j| inputs.req(first + j)).collect::<Result<_, _>>()?;
        let batch = if spec.batched { scans.first().and_then(|x| x.ty.dims.first().cloned()) } else { None };
        let (extent, slices) = if spec.batched {
            let unbatched: Vec<ValueType> = scans.iter().map(|x| batch_of(x.ty)).collect::<Result<_, _>>()?;
            let views: Vec<InferInput<'_>> =
                unbatched.iter().map(|ty| InferInput { ty, value: None, dims_value: None }).collect();
            states = states.iter().map(batch_of).collect::<Result<_, _>>()?;
            steps(spec, &views.iter().collect::<Vec<_>>())?
        } else {
            steps(spec, &scans)?
        };
        let mut formal = states.clone();
        formal.extend(slices);
        let types = infer_body(body, "body", &formal, inputs, &self.scope)?;
        let mut out = Vec::with_capacity(types.len());
        for (j, init) in states.iter().enumerate() {
            out.push(carried(init, &types[j], &format!("state {j}"))?);
        }
        for (k, step) in types[spec.states..].iter().enumerate() {
            let mut dims = step.dims.clone();
            let axis = normalize_axis(spec.output_axes[k], dims.len() + 1)?;
            dims.insert(axis, extent.clone());
            out.push(ValueType::new(step.dtype, dims));
        }
        if let Some(batch) = batch {
            for ty in &mut out {
                ty.dims.insert(0, batch.clone());
            }
        }
        Ok(out)
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        refuse_eval("Scan", inputs, outputs)
    }

    fn foldable(&self) -> bool {
        false
    }
}
