//! Normalizations: Softmax, LogSoftmax and Hardmax ([`hardmax`]; all three flattened to 2-D at
//! `axis` before opset 13, along one axis from 13), LayerNormalization (with its optional Mean and
//! InvStdDev outputs), RMSNormalization (`rms.rs`), InstanceNormalization, GroupNormalization
//! (`group.rs`), LpNormalization and MeanVarianceNormalization (`axes.rs`).

mod axes;
pub(crate) mod gpu;
mod group;
mod hardmax;
mod rms;

use saggar_shape::{DType, Dim};

use self::gpu::{LayerNormKernel, NormStores, SoftmaxKernel};
use crate::ops::shape_util::{
    broadcast_concrete, broadcast_dims, broadcast_strides, for_each_broadcast, normalize_axis,
};
use crate::ops::{EvalInputs, InferInputs, NodeCtx, Op, OpEntry, OpError, ValueType};
use crate::tensor::{TensorMut, TensorView};

/// The ops of this family.
pub(crate) static OPS: &[OpEntry] = &[
    OpEntry { op_type: "Softmax", since: 1, until: 12, build: |c| build_softmax(c, false, true) },
    OpEntry { op_type: "Softmax", since: 13, until: 24, build: |c| build_softmax(c, false, false) },
    OpEntry { op_type: "LogSoftmax", since: 1, until: 12, build: |c| build_softmax(c, true, true) },
    OpEntry { op_type: "LogSoftmax", since: 13, until: 24, build: |c| build_softmax(c, true, false) },
    OpEntry { op_type: "LayerNormalization", since: 17, until: 24, build: build_layer_norm },
    OpEntry { op_type: "RMSNormalization", since: 23, until: 24, build: rms::build_rms_norm },
    OpEntry { op_type: "InstanceNormalization", since: 6, until: 24, build: build_instance_norm },
    OpEntry { op_type: "GroupNormalization", since: 18, until: 20, build: |c| group::build_group_norm(c, false) },
    OpEntry { op_type: "GroupNormalization", since: 21, until: 24, build: |c| group::build_group_norm(c, true) },
    OpEntry { op_type: "LpNormalization", since: 1, until: 24, build: axes::build_lp_norm },
    OpEntry { op_type: "MeanVarianceNormalization", since: 9, until: 24, build: axes::build_mvn },
    OpEntry { op_type: "Hardmax", since: 1, until: 12, build: |c| hardmax::build_hardmax(c, true) },
    OpEntry { op_type: "Hardmax", since: 13, until: 24, build: |c| hardmax::build_hardmax(c, false) },
];

fn require_f32(op: &str, ty: &ValueType) -> Result<(), OpError> {
    if ty.dtype == DType::F32 { Ok(()) } else { Err(OpError::infer(format!("{op} takes f32 inputs, not {ty}"))) }
}

fn check_len(op: &str, v: &TensorView<'_>) -> Result<(), OpError> {
    if v.dims.iter().try_fold(1usize, |n, &d| n.checked_mul(d)) != Some(v.len()) {
        return Err(OpError::eval(format!("{op}: an input's data does not match its shape {:?}", v.dims)));
    }
    Ok(())
}

/// `Softmax` / `LogSoftmax`.
#[derive(Debug)]
struct Softmax {
    axis: i64,
    log: bool,
    /// Opset < 13: the input is seen as 2-D `[prod(dims[..axis]), prod(dims[axis..])]`.
    flatten: bool,
}

fn build_softmax(ctx: &mut NodeCtx<'_>, log: bool, flatten: bool) -> Result<Box<dyn Op>, OpError> {
    let axis = ctx.int_or("axis", if flatten { 1 } else { -1 })?;
    Ok(Box::new(Softmax { axis, log, flatten }))
}

impl Softmax {
    fn name(&self) -> &'static str {
        if self.log { "LogSoftmax" } else { "Softmax" }
    }

    fn layout(&self, dims: &[usize]) -> Result<(usize, usize, usize), OpError> {
        row_layout(self.axis, self.flatten, dims)
    }
}

/// `(outer, len, inner)` of Softmax, LogSoftmax and Hardmax: the input is `outer` blocks of `len`
/// elements `inner` apart, along `axis`, or (`flatten`, before opset 13) along all axes from `axis`.
fn row_layout(axis: i64, flatten: bool, dims: &[usize]) -> Result<(usize, usize, usize), OpError> {
    let axis = normalize_axis(axis, dims.len()).map_err(|e| OpError::eval(e.to_string()))?;
    let outer = dims[..axis].iter().product();
    if flatten {
        Ok((outer, dims[axis..].iter().product(), 1))
    } else {
        Ok((outer, dims[axis], dims[axis + 1..].iter().product()))
    }
}

impl Op for Softmax {
    fn gpu(&self, ctx: &crate::ops::gpu::GpuCtx<'_>) -> Option<Result<crate::ops::gpu::GpuNode, OpError>> {
        use crate::ops::gpu::{GpuLaunch, GpuNode, Slot, Work, ext};
        Some((|| {
            let (outer, len, inner) = self.layout(&ctx.input(0)?.dims)?;
            Ok(GpuNode::Launches(vec![GpuLaunch::new(
                SoftmaxKernel { log: self.log },
                vec![ext(outer), ext(len), ext(inner)],
                Work::Rows((outer * inner) as u64),
                vec![Slot::In(0), Slot::Out(0)],
            )]))
        })())
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let x = inputs.req(0)?.ty;
        require_f32(self.name(), x)?;
        normalize_axis(self.axis, x.rank())?;
        Ok(vec![x.clone()])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let xv = inputs.req(0)?;
        check_len(self.name(), xv)?;
        let (outer, len, inner) = self.layout(xv.dims)?;
        let x = xv.f32s()?;
        let y = outputs[0].f32s()?;
        if y.len() != x.len() {
            return Err(OpError::eval(format!("{}: output does not match the input", self.name())));
        }
        let block = len * inner;
        if block == 0 {
            return Ok(());
        }
        for (xb, yb) in x.chunks_exact(block).zip(y.chunks_exact_mut(block)).take(outer) {
            for i in 0..inner {
                let max = (0..len).map(|j| xb[j * inner + i]).fold(f32::NEG_INFINITY, f32::max);
                let mut sum = 0.0f32;
                for j in 0..len {
                    let e = (xb[j * inner + i] - max).exp();
                    sum += e;
                    yb[j * inner + i] = e;
                }
                if self.log {
                    let shift = max + sum.ln();
                    (0..len).for_each(|j| yb[j * inner + i] = xb[j * inner + i] - shift);
                } else {
                    let r = 1.0 / sum;
                    (0..len).for_each(|j| yb[j * inner + i] *= r);
                }
            }
        }
        Ok(())
    }
}

/// `LayerNormalization`: each row of the trailing axes from `axis` normalized to zero mean and unit
/// variance, then scaled and shifted.
#[derive(Debug)]
struct LayerNorm {
    axis: i64,
    epsilon: f32,
    /// Y, then Mean and InvStdDev when the node has them.
    outputs: usize,
}

fn build_layer_norm(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    let stash = ctx.int_or("stash_type", 1)?;
    if stash != 1 {
        return Err(ctx.unsupported("stash_type", stash, "1 (f32)"));
    }
    let outputs = ctx.num_outputs().clamp(1, 3);
    Ok(Box::new(LayerNorm { axis: ctx.int_or("axis", -1)?, epsilon: ctx.float_or("epsilon", 1e-5)?, outputs }))
}

impl Op for LayerNorm {
    fn gpu(&self, ctx: &crate::ops::gpu::GpuCtx<'_>) -> Option<Result<crate::ops::gpu::GpuNode, OpError>> {
        use crate::ops::gpu::{GpuLaunch, GpuNode, Slot, Work, ext, numel};
        Some((|| {
            let x = ctx.input(0)?;
            let axis = normalize_axis(self.axis, x.dims.len())?;
            let (rows, cols) = (numel(&x.dims[..axis]), numel(&x.dims[axis..]));
            let full = |i: usize| ctx.inputs.get(i).and_then(Option::as_ref).map(|p| numel(&p.dims) == cols);
            if full(1) != Some(true) || full(2) == Some(false) {
                return Err(OpError::eval("scale and bias must cover the normalized axes (no broadcasting)"));
            }
            let bias = full(2).is_some();
            let mut slots = vec![Slot::In(0), Slot::In(1)];
            if bias {
                slots.push(Slot::In(2));
            }
            slots.extend((0..ctx.outputs.len().min(3)).map(Slot::Out));
            Ok(GpuNode::Launches(vec![GpuLaunch::new(
                LayerNormKernel {
                    epsilon_bits: self.epsilon.to_bits(),
                    bias,
                    stats: ctx.outputs.len().clamp(1, 3) as u8 - 1,
                    channels: false,
                    stores: NormStores::F32,
                },
                vec![rows as i64, ext(cols as usize), 1],
                Work::RowGroups { rows, cols },
                slots,
            )]))
        })())
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let x = inputs.req(0)?.ty;
        require_f32("LayerNormalization", x)?;
        let axis = normalize_axis(self.axis, x.rank())?;
        for i in 1..3 {
            if let Some(p) = inputs.get(i) {
                require_f32("LayerNormalization", p.ty)?;
                // Scale and bias broadcast one way to the normalized axes.
                let target = &x.dims[axis..];
                if p.ty.rank() > target.len() || broadcast_dims(&p.ty.dims, target)?.len() != target.len() {
                    return Err(OpError::infer(format!(
                        "LayerNormalization input {i} {} does not broadcast to the normalized axes",
                        p.ty
                    )));
                }
            }
        }
        let mut stats: Vec<Dim> = x.dims[..axis].to_vec();
        stats.resize(x.rank(), Dim::Fixed(1));
        let mut out = vec![x.clone()];
        out.extend((1..self.outputs).map(|_| ValueType::new(DType::F32, stats.clone())));
        Ok(out)
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let xv = inputs.req(0)?;
        check_len("LayerNormalization", xv)?;
        let axis = normalize_axis(self.axis, xv.dims.len()).map_err(|e| OpError::eval(e.to_string()))?;
        let norm_dims = &xv.dims[axis..];
        let row: usize = norm_dims.iter().product();
        let rows: usize = xv.dims[..axis].iter().product();
        let param = |i: usize| -> Result<Option<Affine<'_>>, OpError> {
            let Some(p) = inputs.get(i) else { return Ok(None) };
            check_len("LayerNormalization", p)?;
            if p.dims.len() > norm_dims.len() || broadcast_concrete(p.dims, norm_dims)? != norm_dims {
                return Err(OpError::eval(format!("LayerNormalization input {i} does not broadcast to {norm_dims:?}")));
            }
            Ok(Some((p.f32s()?, broadcast_strides(p.dims, norm_dims.len()))))
        };
        let (scale, bias) = (param(1)?, param(2)?);
        let x = xv.f32s()?;
        let (first, stats) =
            outputs.split_first_mut().ok_or_else(|| OpError::eval("LayerNormalization needs an output"))?;
        let y = first.f32s()?;
        if y.len() != x.len() || stats.iter().any(|s| s.dims.iter().product::<usize>() != rows) {
            return Err(OpError::eval("LayerNormalization: outputs do not match the input"));
        }
        if row == 0 {
            return Ok(());
        }
        for (r, (xr, yr)) in x.chunks_exact(row).zip(y.chunks_exact_mut(row)).enumerate() {
            let mean = xr.iter().sum::<f32>() / row as f32;
            let var = xr.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / row as f32;
            let inv = 1.0 / (var + self.epsilon).sqrt();
            yr.iter_mut().zip(xr).for_each(|(y, &x)| *y = (x - mean) * inv);
            apply_affine(yr, norm_dims, scale.as_ref(), |y, s| *y *= s);
            apply_affine(yr, norm_dims, bias.as_ref(), |y, b| *y += b);
            for (s, v) in stats.iter_mut().zip([mean, inv]) {
                if let Some(slot) = s.f32s()?.get_mut(r) {
                    *slot = v;
                }
            }
        }
        Ok(())
    }
}

/// A scale or bias parameter with its strides broadcast onto the normalized axes.
type Affine<'a> = (&'a [f32], Vec<usize>);

/// Combines `row` (shaped `dims`) elementwise with a broadcast parameter.
fn apply_affine(row: &mut [f32], dims: &[usize], param: Option<&Affine<'_>>, f: impl Fn(&mut f32, f32)) {
    let Some((p, strides)) = param else { return };
    if p.len() == row.len() {
        row.iter_mut().zip(*p).for_each(|(y, &s)| f(y, s));
    } else if let [s] = p {
        row.iter_mut().for_each(|y| f(y, *s));
    } else {
        for_each_broadcast(dims, [strides], |i, [o]| f(&mut row[i], p[o]));
    }
}

/// `InstanceNormalization`: each (image, channel) plane normalized, then scaled and shifted per
/// channel.
#[derive(Debug)]
struct InstanceNorm {
    epsilon: f32,
}

fn build_instance_norm(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(InstanceNorm { epsilon: ctx.float_or("epsilon", 1e-5)? }))
}

impl Op for InstanceNorm {
    fn gpu(&self, ctx: &crate::ops::gpu::GpuCtx<'_>) -> Option<Result<crate::ops::gpu::GpuNode, OpError>> {
        use crate::ops::gpu::{GpuLaunch, GpuNode, Slot, Work, ext, numel};
        Some((|| {
            let x = ctx.input(0)?;
            let c = *x.dims.get(1).ok_or_else(|| OpError::eval("InstanceNormalization takes (N, C, ...)"))?;
            if (1..3).any(|i| ctx.input(i).map(|p| numel(&p.dims)).ok() != Some(c as u64)) {
                return Err(OpError::eval("InstanceNormalization scale and bias must hold C values"));
            }
            let rows = numel(&x.dims[..2]);
            Ok(GpuNode::Launches(vec![GpuLaunch::new(
                LayerNormKernel {
                    epsilon_bits: self.epsilon.to_bits(),
                    bias: true,
                    stats: 0,
                    channels: true,
                    stores: NormStores::F32,
                },
                vec![rows as i64, numel(&x.dims[2..]) as i64, ext(c)],
                Work::Rows(rows),
                vec![Slot::In(0), Slot::In(1), Slot::In(2), Slot::Out(0)],
            )]))
        })())
    }
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let x = inputs.req(0)?.ty;
        require_f32("InstanceNormalization", x)?;
        if x.rank() < 3 {
            return Err(OpError::infer(format!("InstanceNormalization takes an (N, C, spatial...) input, found {x}")));
        }
        for i in 1..3 {
            let p = inputs.req(i)?.ty;
            require_f32("InstanceNormalization", p)?;
            if p.rank() != 1 || matches!((p.dims[0].as_fixed(), x.dims[1].as_fixed()), (Some(a), Some(b)) if a != b) {
                return Err(OpError::infer(format!("InstanceNormalization input {i} must be [C], found {p}")));
            }
        }
        Ok(vec![x.clone()])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let xv = inputs.req(0)?;
        check_len("InstanceNormalization", xv)?;
        if xv.dims.len() < 3 {
            return Err(OpError::eval("InstanceNormalization takes an (N, C, spatial...) input"));
        }
        let c = xv.dims[1];
        let (scale, bias) = (inputs.req(1)?.f32s()?, inputs.req(2)?.f32s()?);
        if scale.len() != c || bias.len() != c {
            return Err(OpError::eval(format!("InstanceNormalization scale and bias must hold {c} values")));
        }
        let plane: usize = xv.dims[2..].iter().product();
        let x = xv.f32s()?;
        let y = outputs[0].f32s()?;
        if y.len() != x.len() {
            return Err(OpError::eval("InstanceNormalization: output does not match the input"));
        }
        if plane == 0 {
            return Ok(());
        }
        for (p, (xp, yp)) in x.chunks_exact(plane).zip(y.chunks_exact_mut(plane)).enumerate() {
            let mean = xp.iter().sum::<f32>() / plane as f32;
            let var = xp.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / plane as f32;
            let s = scale[p % c] / (var + self.epsilon).sqrt();
            let shift = bias[p % c] - mean * s;
            yp.iter_mut().zip(xp).for_each(|(y, &x)| *y = x * s + shift);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::{f32s, run_op, run_op_outputs, values};
    use crate::ops::{Attribute, Attributes, OpError};

    /// Asserts `got` is `want` within 1e-5, relative above 1.
    pub(super) fn close(got: &[f32], want: &[f32]) {
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-5 * w.abs().max(1.0), "{got:?} vs {want:?}");
        }
    }

    #[test]
    fn softmax_axis_means_flatten_before_13_and_one_axis_from_13() {
        // [2, 2] blocks along axis 1 of a [1, 2, 2] input.
        let x = f32s(&[1, 2, 2], &[0.0, 0.0, 0.0, (3.0f32).ln()]);
        let axis1 = Attributes(vec![("axis".into(), Attribute::Int(1))]);
        // Opset 11: one softmax over all four elements (weights 1, 1, 1, 3).
        let v11 = run_op("Softmax", 11, &axis1, &[Some(&x)]).unwrap();
        close(values(&v11[0]), &[1.0 / 6.0, 1.0 / 6.0, 1.0 / 6.0, 0.5]);
        // Opset 13: along axis 1 only, per column: column 0 (1, 1), column 1 (1, 3).
        let v13 = run_op("Softmax", 13, &axis1, &[Some(&x)]).unwrap();
        close(values(&v13[0]), &[0.5, 0.25, 0.5, 0.75]);
        // Default axes: 1 before 13 (same as above), -1 from 13 (per row).
        let d13 = run_op("Softmax", 13, &Attributes::default(), &[Some(&x)]).unwrap();
        close(values(&d13[0]), &[0.5, 0.5, 0.25, 0.75]);
        let log = run_op("LogSoftmax", 13, &Attributes::default(), &[Some(&x)]).unwrap();
        close(values(&log[0]), &[0.5f32.ln(), 0.5f32.ln(), 0.25f32.ln(), 0.75f32.ln()]);
        let bad = Attributes(vec![("axis".into(), Attribute::Int(3))]);
        assert!(matches!(run_op("Softmax", 13, &bad, &[Some(&x)]), Err(OpError::Infer(_))));
        // Large inputs do not overflow.
        let big = run_op("Softmax", 13, &Attributes::default(), &[Some(&f32s(&[2], &[1000.0, 1000.0]))]).unwrap();
        close(values(&big[0]), &[0.5, 0.5]);
    }

    #[test]
    fn layer_norm_with_scale_bias_and_statistics() {
        let x = f32s(&[2, 2], &[1.0, 3.0, 2.0, 2.0]);
        let scale = f32s(&[2], &[2.0, 1.0]);
        let bias = f32s(&[1], &[0.5]);
        let attrs = Attributes(vec![("epsilon".into(), Attribute::Float(0.0))]);
        // Row 0: mean 2, variance 1. (Row 1 has zero variance, so with epsilon 0 its values are NaN.)
        let out = run_op_outputs("LayerNormalization", 17, &attrs, &[Some(&x), Some(&scale), Some(&bias)], 3).unwrap();
        let y = values(&out[0]);
        close(&y[..2], &[-1.5, 1.5]);
        assert_eq!(out[1].dims(), &[2, 1]);
        close(values(&out[1]), &[2.0, 2.0]);
        close(&values(&out[2])[..1], &[1.0]);

        let eps = Attributes(vec![("epsilon".into(), Attribute::Float(1.0)), ("axis".into(), Attribute::Int(0))]);
        let all = run_op("LayerNormalization", 17, &eps, &[Some(&x), Some(&f32s(&[2, 2], &[1.0; 4]))]).unwrap();
        // Mean 2, variance 0.5, inverse std 1 / sqrt(1.5).
        let inv = 1.0 / 1.5f32.sqrt();
        close(values(&all[0]), &[-inv, inv, 0.0, 0.0]);
        let stash = Attributes(vec![("stash_type".into(), Attribute::Int(11))]);
        assert!(matches!(run_op("LayerNormalization", 17, &stash, &[Some(&x)]), Err(OpError::Unsupported { .. })));
        let wrong = f32s(&[3], &[1.0; 3]);
        assert!(run_op("LayerNormalization", 17, &Attributes::default(), &[Some(&x), Some(&wrong)]).is_err());
    }

    #[test]
    fn instance_norm_per_plane() {
        let x = f32s(&[1, 2, 2], &[1.0, 3.0, 5.0, 5.0]);
        let scale = f32s(&[2], &[2.0, 1.0]);
        let bias = f32s(&[2], &[0.0, 7.0]);
        let attrs = Attributes(vec![("epsilon".into(), Attribute::Float(0.0))]);
        // Plane 0: mean 2, variance 1. (Plane 1 has zero variance, so with epsilon 0 it is NaN.)
        let out = run_op("InstanceNormalization", 6, &attrs, &[Some(&x), Some(&scale), Some(&bias)]).unwrap();
        close(&values(&out[0])[..2], &[-2.0, 2.0]);
    }
}
