//! AffineGrid (opset 20): the sampling grid `[N, H, W, 2]` (or `[N, D, H, W, 3]`) of affine matrices
//! `theta` `[N, 2, 3]` (`[N, 3, 4]`) for the output size `size` `(N, C, H, W)` (`(N, C, D, H, W)`),
//! a constant: every position's base coordinates `(x, y[, z], 1)` in `[-1, 1]` (x along the last
//! axis) times `theta[n]` transposed, as GridSample reads them.

use saggar_shape::{DType, Dim};

use super::flag;
use super::gpu::AffineGridKernel;
use crate::ops::conv::{check_len, check_out_dims, fixed};
use crate::ops::data_movement::index_values;
use crate::ops::gpu::{GpuCtx, GpuLaunch, GpuNode, Slot, Work, ext, numel};
use crate::ops::{EvalInputs, InferInputs, NodeCtx, Op, OpError, ValueType, unknown_dim};
use crate::tensor::{TensorMut, checked_numel};

/// `AffineGrid`.
#[derive(Debug)]
struct AffineGrid {
    align_corners: bool,
}

pub(super) fn build_affine_grid(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(AffineGrid { align_corners: flag(ctx, "align_corners", 0)? }))
}

/// The base coordinate of index `i` along an axis of `len`: `2i / (len - 1) - 1` with
/// align_corners (-1 when `len` is 1), else `(2i + 1) / len - 1`.
pub(super) fn base(align_corners: bool, i: usize, len: usize) -> f32 {
    if !align_corners {
        (2 * i + 1) as f32 / len as f32 - 1.0
    } else if len > 1 {
        (2 * i) as f32 / (len - 1) as f32 - 1.0
    } else {
        -1.0
    }
}

/// The output dims `[N, spatial..., r]` of `theta` `[N, r, r + 1]` and the `size` values.
fn output_dims(theta: &[usize], size: &[i64]) -> Result<Vec<usize>, OpError> {
    let r = size.len().saturating_sub(2);
    if !(r == 2 || r == 3) || theta.len() != 3 || theta[1..] != [r, r + 1] {
        return Err(OpError::infer(format!(
            "AffineGrid takes theta [N, 2, 3] with a size of 4 values or [N, 3, 4] with 5, found theta {theta:?} and \
             size {size:?}"
        )));
    }
    let dims: Vec<usize> = size
        .iter()
        .map(|&v| usize::try_from(v))
        .collect::<Result<_, _>>()
        .map_err(|_| OpError::infer(format!("AffineGrid size {size:?} holds a negative extent")))?;
    if dims[0] != theta[0] {
        return Err(OpError::infer(format!("AffineGrid size {size:?} names another batch than theta {theta:?}")));
    }
    let mut out = vec![dims[0]];
    out.extend(&dims[2..]);
    out.push(r);
    if checked_numel(&out).is_none() {
        return Err(OpError::infer(format!("AffineGrid size {size:?} makes a grid too large to count")));
    }
    Ok(out)
}

impl Op for AffineGrid {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let (theta, size) = (inputs.req(0)?, inputs.req(1)?);
        if theta.ty.dtype != DType::F32 || theta.ty.rank() != 3 {
            return Err(OpError::infer(format!(
                "AffineGrid theta must be f32 [N, 2, 3] or [N, 3, 4], found {}",
                theta.ty
            )));
        }
        if size.ty.dtype != DType::I64 || size.ty.rank() != 1 {
            return Err(OpError::infer(format!("AffineGrid size must be a 1-D int64 tensor, found {}", size.ty)));
        }
        if let (Some(values), Some(t)) = (size.const_i64s(), theta.ty.fixed_dims()) {
            let dims = output_dims(&t, &values)?;
            return Ok(vec![ValueType::fixed(DType::F32, &dims)]);
        }
        let r = fixed(&theta.ty.dims[1]).or_else(|| fixed(&size.ty.dims[0]).map(|n| n.saturating_sub(2)));
        let r = r.filter(|r| *r == 2 || *r == 3).ok_or_else(|| {
            OpError::infer(format!("AffineGrid theta {} and size {} make no 2-D or 3-D grid", theta.ty, size.ty))
        })?;
        let mut dims = vec![theta.ty.dims[0].clone()];
        dims.extend((0..r).map(|_| unknown_dim()));
        dims.push(Dim::Fixed(r as u64));
        Ok(vec![ValueType::new(DType::F32, dims)])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let tv = inputs.req(0)?;
        check_len("AffineGrid", tv)?;
        let dims = output_dims(tv.dims, &index_values(inputs.req(1)?)?)?;
        check_out_dims("AffineGrid", outputs[0].dims, dims.iter().copied())?;
        let (theta, y) = (tv.f32s()?, outputs[0].f32s()?);
        let r = dims.len() - 2;
        let spatial = &dims[1..=r];
        let plane = numel(spatial) as usize;
        let mut index = vec![0usize; r];
        for p in 0..plane {
            let mut rest = p;
            for d in (0..r).rev() {
                index[d] = rest % spatial[d];
                rest /= spatial[d];
            }
            for n in 0..dims[0] {
                for j in 0..r {
                    let th = &theta[(n * r + j) * (r + 1)..(n * r + j + 1) * (r + 1)];
                    let mut acc = 0.0f32;
                    for (k, &t) in th[..r].iter().enumerate() {
                        let d = r - 1 - k;
                        acc += t * base(self.align_corners, index[d], spatial[d]);
                    }
                    y[(n * plane + p) * r + j] = acc + th[r];
                }
            }
        }
        Ok(())
    }

    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        Some((|| {
            let out = ctx.output(0)?;
            let r = out.dims.len().saturating_sub(2);
            if !(r == 2 || r == 3) || ctx.input(0)?.dims != [out.dims[0], r, r + 1] {
                return Err(OpError::eval(format!("AffineGrid output {:?} does not fit theta", out.dims)));
            }
            let mut meta = vec![ext(r), numel(&out.dims) as i64, i64::from(self.align_corners)];
            meta.extend(out.dims[1..=r].iter().map(|&d| ext(d)));
            Ok(GpuNode::Launches(vec![GpuLaunch::new(
                AffineGridKernel,
                meta,
                Work::Elements(numel(&out.dims)),
                vec![Slot::In(0), Slot::Out(0)],
            )]))
        })())
    }
}
