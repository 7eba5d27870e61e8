//! `MaxPool` and `AveragePool` over a channels-last input: the form the layout pass
//! ([`crate::graph::passes::layout`]) gives a pool whose input a channels-last convolution computes
//! (ResNet's stem), so the transposes around it cancel with the convolutions' instead of moving the
//! stem's whole output twice. Input `[N, spatial..., C]`, output `[N, out..., C]`; the window is the
//! model's. On the host it runs the model's pool between two transposes; on GPU the planar pooling
//! body for channels-last (`pool_nhwc.cuh`), consecutive threads on consecutive channels.

use std::sync::Arc;

use super::gpu::{PoolMode, pool_launch};
use super::{Pool, Reduce};
use crate::ops::data_movement::{permute, to_channels_first, to_channels_last, transpose_by};
use crate::ops::evaluate::evaluate;
use crate::ops::gpu::{GpuCtx, GpuNode};
use crate::ops::{Attributes, EvalInputs, InferInput, InferInputs, NodeCtx, Op, OpError, ValueType};
use crate::tensor::{TensorMut, cast_into};

/// A pool of the model's window over a channels-last input (see the module docs).
#[derive(Debug)]
pub(crate) struct ChannelsLastPool {
    pool: Pool,
}

/// The channels-last form of a `MaxPool` (without Indices) or `AveragePool` node of one or two
/// spatial axes with `attrs` at `opset`, or `None` for other pools.
pub(crate) fn channels_last_pool(op_type: &str, attrs: &Attributes, opset: u32, outputs: usize) -> Option<Arc<dyn Op>> {
    let mut ctx = NodeCtx::new(attrs, opset, 1, outputs);
    let pool = match op_type {
        "MaxPool" if outputs == 1 => super::build_pool(&mut ctx, true).ok()?,
        "AveragePool" => super::build_pool(&mut ctx, false).ok()?,
        _ => return None,
    };
    (1..=2).contains(&pool.window.kernel.len()).then(|| Arc::new(ChannelsLastPool { pool }) as Arc<dyn Op>)
}

impl Op for ChannelsLastPool {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let ty = inputs.req(0)?.ty;
        let first = ValueType::new(ty.dtype, permute(&ty.dims, &to_channels_first(ty.rank())));
        let input = [Some(InferInput { ty: &first, value: None, dims_value: None })];
        let out = self.pool.infer(&InferInputs::new(&input))?;
        Ok(out.into_iter().map(|t| ValueType::new(t.dtype, permute(&t.dims, &to_channels_last(t.rank())))).collect())
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let x = inputs.req(0)?.to_tensor();
        let limit = x.len();
        let rank = x.dims().len();
        let first = evaluate(transpose_by(&to_channels_first(rank)).0.as_ref(), &[Some(&x)], limit)?.remove(0);
        let pooled = evaluate(&self.pool, &[Some(&first)], limit)?.remove(0);
        let to_last = transpose_by(&to_channels_last(rank)).0;
        let last = evaluate(to_last.as_ref(), &[Some(&pooled)], pooled.len())?.remove(0);
        let out = outputs.first_mut().ok_or_else(|| OpError::eval("pooling needs an output"))?;
        if out.dims != last.dims() {
            return Err(OpError::eval(format!("pooling: output {:?}, expected {:?}", out.dims, last.dims())));
        }
        cast_into(last.view().data, &mut out.data)
    }

    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        Some((|| {
            let x = ctx.input(0)?;
            let (n, c) = (x.dims[0], *x.dims.last().ok_or_else(|| OpError::eval("pooling: a scalar input"))?);
            if x.dims.len() < 3 || self.pool.window.kernel.len() != x.dims.len() - 2 {
                return Err(OpError::eval("pooling takes an (N, spatial..., C) input"));
            }
            let axes = self.pool.window.resolve(&x.dims[1..x.dims.len() - 1], &self.pool.window.kernel)?;
            let (mode, param) = match self.pool.reduce {
                Reduce::Max { indices: false } => (PoolMode::Max, 0),
                Reduce::Average { count_pad } => (PoolMode::Average, i64::from(count_pad)),
                _ => return Err(OpError::eval("channels-last pooling takes max (without Indices) and average")),
            };
            pool_launch(&axes, n * c, mode, param, x.dtype, Some(c))
        })())
    }
}
