//! GroupNormalization: the channels of each image split into `num_groups` groups, each group's
//! elements (its channels and their spatial extent) normalised to zero mean and unit variance, then
//! scaled and shifted per channel (opset 21) or per group (opset 18, whose scale and bias are
//! `[num_groups]`).

use saggar_shape::{DType, Dim};

use super::gpu::GroupNormKernel;
use super::{check_len, require_f32};
use crate::ops::gpu::{GpuCtx, GpuLaunch, GpuNode, Slot, Work, ext, numel};
use crate::ops::{EvalInputs, InferInputs, NodeCtx, Op, OpError, ValueType};
use crate::tensor::TensorMut;

/// `GroupNormalization`.
#[derive(Debug)]
struct GroupNorm {
    groups: usize,
    epsilon: f32,
    /// Scale and bias hold one value per channel (opset 21) rather than per group (opset 18).
    per_channel: bool,
}

/// Builds GroupNormalization; `per_channel` from opset 21.
pub(super) fn build_group_norm(ctx: &mut NodeCtx<'_>, per_channel: bool) -> Result<Box<dyn Op>, OpError> {
    let groups = ctx.int("num_groups")?.ok_or_else(|| OpError::attribute("num_groups", "is required"))?;
    let groups = usize::try_from(groups)
        .ok()
        .filter(|&g| g >= 1)
        .ok_or_else(|| OpError::attribute("num_groups", format!("must be at least 1, found {groups}")))?;
    if per_channel {
        let stash = ctx.int_or("stash_type", 1)?;
        if stash != 1 {
            return Err(ctx.unsupported("stash_type", stash, "1 (f32)"));
        }
    }
    Ok(Box::new(GroupNorm { groups, epsilon: ctx.float_or("epsilon", 1e-5)?, per_channel }))
}

impl GroupNorm {
    /// What scale and bias are indexed by.
    fn param_name(&self) -> &'static str {
        if self.per_channel { "C (channels)" } else { "num_groups" }
    }

    /// `(rows, cols, channels per group, plane)` of an input of dims `x`, with the parameters'
    /// extent checked.
    fn layout(&self, x: &[usize], param_len: [usize; 2]) -> Result<(usize, usize, usize, usize), OpError> {
        let (n, c) = match x {
            [n, c, ..] => (*n, *c),
            _ => return Err(OpError::eval("GroupNormalization takes an (N, C, ...) input")),
        };
        let g = self.groups;
        if c % g != 0 {
            return Err(OpError::eval(format!("GroupNormalization: {c} channels do not split into {g} groups")));
        }
        let want = if self.per_channel { c } else { g };
        if param_len != [want; 2] {
            return Err(OpError::eval(format!(
                "GroupNormalization scale and bias must hold {want} values ({}), found {param_len:?}",
                self.param_name()
            )));
        }
        let plane: usize = x[2..].iter().product();
        Ok((n * g, c / g * plane, c / g, plane))
    }
}

impl Op for GroupNorm {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let x = inputs.req(0)?.ty;
        require_f32("GroupNormalization", x)?;
        if x.rank() < 2 {
            return Err(OpError::infer(format!("GroupNormalization takes an (N, C, ...) input, found {x}")));
        }
        let g = self.groups as u64;
        let c = x.dims[1].as_fixed();
        if let Some(c) = c
            && c % g != 0
        {
            return Err(OpError::infer(format!("GroupNormalization: {c} channels do not split into {g} groups")));
        }
        let want = if self.per_channel { c } else { Some(g) };
        for i in 1..3 {
            let p = inputs.req(i)?.ty;
            require_f32("GroupNormalization", p)?;
            if p.rank() != 1 || matches!((p.dims[0].as_fixed(), want), (Some(a), Some(b)) if a != b) {
                return Err(OpError::infer(format!(
                    "GroupNormalization input {i} must be [{}], found {p}",
                    want.map_or_else(|| self.param_name().to_string(), |w| w.to_string())
                )));
            }
        }
        Ok(vec![ValueType::new(DType::F32, x.dims.iter().map(Dim::clone).collect())])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let xv = inputs.req(0)?;
        check_len("GroupNormalization", xv)?;
        let (scale, bias) = (inputs.req(1)?.f32s()?, inputs.req(2)?.f32s()?);
        let (rows, cols, per_group, plane) = self.layout(xv.dims, [scale.len(), bias.len()])?;
        let x = xv.f32s()?;
        let y = outputs[0].f32s()?;
        if y.len() != x.len() {
            return Err(OpError::eval("GroupNormalization: output does not match the input"));
        }
        if cols == 0 {
            return Ok(());
        }
        for (row, (xr, yr)) in x.chunks_exact(cols).zip(y.chunks_exact_mut(cols)).enumerate().take(rows) {
            let mean = xr.iter().sum::<f32>() / cols as f32;
            let var = xr.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / cols as f32;
            let inv = 1.0 / (var + self.epsilon).sqrt();
            let group = row % self.groups;
            for (k, (xs, ys)) in xr.chunks_exact(plane).zip(yr.chunks_exact_mut(plane)).enumerate() {
                let at = if self.per_channel { group * per_group + k } else { group };
                let (s, b) = (scale[at] * inv, bias[at]);
                ys.iter_mut().zip(xs).for_each(|(y, &x)| *y = (x - mean) * s + b);
            }
        }
        Ok(())
    }

    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        Some((|| {
            let x = ctx.input(0)?;
            let param_len = [1, 2].map(|i| ctx.input(i).map_or(0, |p| numel(&p.dims) as usize));
            let (rows, cols, per_group, plane) = self.layout(&x.dims, param_len)?;
            let (per_group, run) = if self.per_channel { (per_group, plane) } else { (1, cols) };
            Ok(GpuNode::Launches(vec![GpuLaunch::new(
                GroupNormKernel { epsilon_bits: self.epsilon.to_bits() },
                vec![ext(rows), ext(cols), ext(self.groups), ext(per_group), ext(run)],
                Work::Rows(rows as u64),
                vec![Slot::In(0), Slot::In(1), Slot::In(2), Slot::Out(0)],
            )]))
        })())
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::norm::tests::close;
    use crate::ops::testing::{f32s, run_op, values};
    use crate::ops::{Attribute, Attributes, OpError};

    fn groups(g: i64) -> Attributes {
        Attributes(vec![("num_groups".into(), Attribute::Int(g)), ("epsilon".into(), Attribute::Float(0.0))])
    }

    #[test]
    fn groups_normalise_together_then_scale_per_channel_from_21_and_per_group_at_18() {
        // One image, 4 channels of 2 elements, 2 groups: group 0 holds 1 3 | 5 7 (mean 4, variance
        // 5), group 1 holds 2 2 | 4 4 (mean 3, variance 1).
        let x = f32s(&[1, 4, 2], &[1.0, 3.0, 5.0, 7.0, 2.0, 2.0, 4.0, 4.0]);
        let s5 = 5f32.sqrt();
        let norm = [-3.0 / s5, -1.0 / s5, 1.0 / s5, 3.0 / s5, -1.0, -1.0, 1.0, 1.0];
        let scale = f32s(&[4], &[1.0, 2.0, 3.0, 4.0]);
        let bias = f32s(&[4], &[0.0, 10.0, 20.0, 30.0]);
        let out = run_op("GroupNormalization", 21, &groups(2), &[Some(&x), Some(&scale), Some(&bias)]).unwrap();
        let per_channel: Vec<f32> =
            norm.iter().enumerate().map(|(i, v)| v * (i / 2 + 1) as f32 + (i / 2 * 10) as f32).collect();
        close(values(&out[0]), &per_channel);
        // Opset 18: one scale and bias per group.
        let (gs, gb) = (f32s(&[2], &[2.0, -1.0]), f32s(&[2], &[0.5, 0.0]));
        let out = run_op("GroupNormalization", 18, &groups(2), &[Some(&x), Some(&gs), Some(&gb)]).unwrap();
        let per_group: Vec<f32> =
            norm.iter().enumerate().map(|(i, v)| if i < 4 { v * 2.0 + 0.5 } else { -v }).collect();
        close(values(&out[0]), &per_group);
        // The shapes of the other opset are refused.
        assert!(matches!(
            run_op("GroupNormalization", 18, &groups(2), &[Some(&x), Some(&scale), Some(&bias)]),
            Err(OpError::Infer(_))
        ));
        assert!(matches!(
            run_op("GroupNormalization", 21, &groups(2), &[Some(&x), Some(&gs), Some(&gb)]),
            Err(OpError::Infer(_))
        ));
    }

    #[test]
    fn one_group_is_a_layer_norm_and_c_groups_an_instance_norm() {
        let x = f32s(&[1, 2, 2], &[1.0, 3.0, 5.0, 5.0]);
        let (ones, zeros) = (f32s(&[2], &[1.0, 1.0]), f32s(&[2], &[0.0, 0.0]));
        let eps = |g: i64| {
            let mut a = groups(g);
            a.set("epsilon", Attribute::Float(1.0));
            a
        };
        let one = run_op("GroupNormalization", 21, &eps(1), &[Some(&x), Some(&ones), Some(&zeros)]).unwrap();
        // Mean 3.5, variance 2.75.
        let inv = 1.0 / 3.75f32.sqrt();
        close(values(&one[0]), &[-2.5 * inv, -0.5 * inv, 1.5 * inv, 1.5 * inv]);
        let each = run_op("GroupNormalization", 21, &eps(2), &[Some(&x), Some(&ones), Some(&zeros)]).unwrap();
        let inst = run_op(
            "InstanceNormalization",
            6,
            &Attributes(vec![("epsilon".into(), Attribute::Float(1.0))]),
            &[Some(&x), Some(&ones), Some(&zeros)],
        )
        .unwrap();
        close(values(&each[0]), values(&inst[0]));
    }

    #[test]
    fn bad_groups_and_stash_types_are_typed_errors() {
        let x = f32s(&[1, 4, 2], &[0.0; 8]);
        let p = f32s(&[4], &[1.0; 4]);
        let ins = [Some(&x), Some(&p), Some(&p)];
        assert!(matches!(run_op("GroupNormalization", 21, &groups(3), &ins), Err(OpError::Infer(_))));
        assert!(matches!(run_op("GroupNormalization", 21, &groups(0), &ins), Err(OpError::Attribute { .. })));
        assert!(matches!(
            run_op("GroupNormalization", 21, &Attributes::default(), &ins),
            Err(OpError::Attribute { .. })
        ));
        let mut stash = groups(2);
        stash.set("stash_type", Attribute::Int(10));
        assert!(matches!(run_op("GroupNormalization", 21, &stash, &ins), Err(OpError::Unsupported { .. })));
        assert!(matches!(run_op("GroupNormalization", 18, &stash, &ins), Err(OpError::Unsupported { .. })));
    }
}
