//! Unique: the distinct elements of the flattened input, or the distinct slices along `axis`
//! (compared lexicographically, element by element in row-major order of the slice), with
//! `indices` (each one's first occurrence), `inverse_indices` (each input element's or slice's
//! position in Y) and `counts`. `sorted` = 1 orders them ascending, 0 by first occurrence. Values
//! compare by [`order_key`](super::order_key): -0 equals +0 (the first occurrence's bits are kept),
//! every NaN equals every other and sorts last.

use std::cmp::Ordering;

use saggar_shape::{DType, Dim};

use super::gpu::UniqueKernel;
use super::{bounded, bounded_type, copy_slices, count_type, cut_of, fixed, fixed_numel, for_each_bits, order_key};
use crate::ops::elementwise::require_dtype;
use crate::ops::gpu::{GpuCtx, GpuLaunch, GpuNode, Slot, Work, ext};
use crate::ops::shape_util::normalize_axis;
use crate::ops::{Bounded, EvalInputs, InferInputs, NodeCtx, Op, OpError, ValueType, unknown_dim};
use crate::tensor::{SUPPORTED_DTYPES, TensorMut, TensorView};

/// `Unique`.
#[derive(Debug, Clone)]
struct Unique {
    axis: Option<i64>,
    sorted: bool,
    /// Y, then indices, inverse_indices and counts where the node has them.
    outputs: usize,
}

/// `Unique.bounded`: Y with the axis (or the flattened input) at its full extent, indices and
/// counts as long, the distinct ones first and zeros after; inverse_indices exact; the count; then
/// those of indices, inverse_indices and counts the node lacks (the GPU kernel's working memory,
/// holding the same values as they would as outputs).
#[derive(Debug)]
struct UniqueBounded(Unique);

pub(super) fn build(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    let sorted = super::flag(ctx, "sorted", true)?;
    Ok(Box::new(Unique { axis: ctx.int("axis")?, sorted, outputs: ctx.num_outputs().clamp(1, 4) }))
}

/// The distinct slices: in output order, each one's first occurrence and count, and per input
/// slice its position in the output.
struct Groups {
    firsts: Vec<usize>,
    counts: Vec<usize>,
    inverse: Vec<usize>,
}

impl Unique {
    /// `(outer, slices, inner)` of `dims` around the axis (the flattened input: `(1, numel, 1)`).
    fn split(&self, dims: &[usize]) -> Result<(usize, usize, usize), OpError> {
        super::around_axis(self.axis, dims)
    }

    /// The groups of equal slices of `x`.
    fn groups(&self, x: &TensorView<'_>) -> Result<Groups, OpError> {
        let (outer, d, inner) = self.split(x.dims)?;
        let dtype = x.dtype();
        let mut keys = Vec::with_capacity(x.len());
        for_each_bits(x.data, |_, bits| keys.push(order_key(dtype, bits)));
        let len = outer * inner;
        let at = |s: usize, e: usize| keys[(e / inner * d + s) * inner + e % inner];
        let cmp = |a: usize, b: usize| (0..len).map(|e| at(a, e).cmp(&at(b, e))).find(|o| o.is_ne());
        let mut perm: Vec<usize> = (0..d).collect();
        perm.sort_by(|&a, &b| cmp(a, b).unwrap_or(Ordering::Equal).then(a.cmp(&b)));
        let (mut firsts, mut counts, mut inverse) = (Vec::new(), Vec::new(), vec![0; d]);
        for (k, &p) in perm.iter().enumerate() {
            if k == 0 || cmp(perm[k - 1], p).is_some() {
                firsts.push(p);
                counts.push(0);
            }
            counts[firsts.len() - 1] += 1;
            inverse[p] = firsts.len() - 1;
        }
        if !self.sorted {
            let mut order: Vec<usize> = (0..firsts.len()).collect();
            order.sort_by_key(|&g| firsts[g]);
            let mut rank = vec![0; order.len()];
            for (j, &g) in order.iter().enumerate() {
                rank[g] = j;
            }
            firsts = order.iter().map(|&g| firsts[g]).collect();
            counts = order.iter().map(|&g| counts[g]).collect();
            inverse.iter_mut().for_each(|v| *v = rank[*v]);
        }
        Ok(Groups { firsts, counts, inverse })
    }

    /// Output types with `u` distinct slices (Y, indices, counts cut to it) and `slices` input
    /// slices.
    fn types(&self, inputs: &InferInputs<'_>, u: Dim, bounded: bool) -> Result<Vec<ValueType>, OpError> {
        let x = inputs.req(0)?.ty;
        require_dtype("Unique", x.dtype, &SUPPORTED_DTYPES)?;
        let (y, slices) = match self.axis {
            None => (vec![u.clone()], fixed_numel(&x.dims).map_or_else(unknown_dim, fixed)),
            Some(a) => {
                let axis = normalize_axis(a, x.rank())?;
                let mut dims = x.dims.clone();
                dims[axis] = u.clone();
                (dims, x.dims[axis].clone())
            }
        };
        let mut out =
            vec![(x.dtype, y), (DType::I64, vec![u.clone()]), (DType::I64, vec![slices]), (DType::I64, vec![u])];
        out.truncate(if bounded { 4 } else { self.outputs });
        out.into_iter()
            .map(
                |(dtype, dims)| {
                    if bounded { bounded_type("Unique", dtype, dims) } else { Ok(ValueType::new(dtype, dims)) }
                },
            )
            .collect()
    }

    /// Writes the groups of `x` into `outputs` (Y and as many of indices, inverse_indices and
    /// counts as given), `m` slices along the cut axis; returns the number of groups.
    fn write(&self, x: &TensorView<'_>, outputs: &mut [TensorMut<'_>], m: Option<usize>) -> Result<usize, OpError> {
        let g = self.groups(x)?;
        let (outer, d, inner) = self.split(x.dims).map_err(|e| OpError::eval(e.to_string()))?;
        let u = g.firsts.len();
        let m = m.unwrap_or(u);
        let Some((y, rest)) = outputs.split_first_mut() else { return Err(OpError::eval("Unique has no outputs")) };
        copy_slices(x.data, &mut y.data, (outer, d, inner), m, &g.firsts)?;
        for (k, out) in rest.iter_mut().enumerate().take(3) {
            let (values, len) = match k {
                0 => (&g.firsts, m),
                1 => (&g.inverse, d),
                _ => (&g.counts, m),
            };
            let o = out.i64s()?;
            if o.len() != len || values.len() > len {
                return Err(OpError::eval(format!("Unique's output {} holds {} elements, not {len}", k + 1, o.len())));
            }
            o.iter_mut().zip(values.iter().map(|&v| v as i64).chain(std::iter::repeat(0))).for_each(|(o, v)| *o = v);
        }
        Ok(u)
    }
}

impl Op for Unique {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let x = inputs.req(0)?;
        let slices = match self.axis {
            None => fixed_numel(&x.ty.dims),
            Some(a) => x.ty.dims[normalize_axis(a, x.ty.rank())?].as_fixed().map(|d| d as usize),
        };
        let u = match x.value {
            Some(v) => fixed(self.groups(&v.view())?.firsts.len()),
            None if slices == Some(0) => fixed(0),
            None => unknown_dim(),
        };
        self.types(inputs, u, false)
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        self.write(inputs.req(0)?, outputs, None).map(|_| ())
    }

    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        Some(super::gpu_of_standard("Unique", ctx))
    }

    fn bounded(&self) -> Option<Bounded> {
        let ((axis, from_end), rank1) = cut_of(self.axis);
        let cuts = [Some(axis), Some(rank1), None, Some(rank1)];
        bounded(UniqueBounded(self.clone()), "Unique.bounded", cuts[..self.outputs].to_vec(), from_end)
    }
}

impl UniqueBounded {
    /// The output index of output `which` of the standard op (0 Y, 1 indices, 2 inverse_indices,
    /// 3 counts): its own, or past the count where the node lacks it.
    fn output_of(&self, which: usize) -> usize {
        if which < self.0.outputs { which } else { which + 1 }
    }
}

impl Op for UniqueBounded {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let x = inputs.req(0)?.ty;
        let full = match self.0.axis {
            None => fixed_numel(&x.dims).map_or_else(unknown_dim, fixed),
            Some(a) => x.dims[normalize_axis(a, x.rank())?].clone(),
        };
        let mut all = self.0.types(inputs, full, true)?;
        let extra = all.split_off(self.0.outputs);
        all.push(count_type());
        all.extend(extra);
        Ok(all)
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let x = inputs.req(0)?;
        let (_, d, _) = self.0.split(x.dims).map_err(|e| OpError::eval(e.to_string()))?;
        if outputs.len() != 5 {
            return Err(OpError::eval(format!("Unique.bounded has 5 outputs, not {}", outputs.len())));
        }
        // Every output in the standard op's order, the count last, for the time of the writes.
        outputs[self.0.outputs..].rotate_left(1);
        let u = self.0.write(x, &mut outputs[..4], Some(d));
        outputs[self.0.outputs..].rotate_right(1);
        let count = &mut outputs[self.0.outputs];
        super::write_count(count, u?)
    }

    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        Some((|| {
            let x = ctx.input(0)?;
            let (outer, d, inner) = self.0.split(&x.dims)?;
            let kernel = UniqueKernel { dtype: x.dtype, sorted: self.0.sorted };
            let slots = vec![
                Slot::In(0),
                Slot::Out(0),
                Slot::Out(self.output_of(1)),
                Slot::Out(self.output_of(2)),
                Slot::Out(self.output_of(3)),
                Slot::Out(self.0.outputs),
            ];
            let meta = vec![ext(outer), ext(d), ext(inner)];
            Ok(GpuNode::Launches(vec![GpuLaunch::new(kernel, meta, Work::Rows(1), slots)]))
        })())
    }
}
