//! NonZero: the indices of the nonzero elements, `[rank, count]` int64 in row-major order of the
//! elements (a scalar counts as a vector of one element, as numpy's `atleast_1d`). Floats are zero
//! at either sign; NaN is nonzero.

use saggar_shape::DType;

use super::gpu::{NONZERO_CHUNK, NonZeroChunksKernel, NonZeroKernel};
use super::{bounded, bounded_type, count_type, fixed, fixed_numel, for_each_bits, gpu_of_standard, nonzero_mask};
use crate::ops::elementwise::require_dtype;
use crate::ops::gpu::{GpuCtx, GpuLaunch, GpuNode, Slot, Work, ext};
use crate::ops::{Bounded, EvalInputs, InferInputs, NodeCtx, Op, OpError, ValueType, unknown_dim};
use crate::tensor::{SUPPORTED_DTYPES, TensorMut, TensorView};

/// `NonZero` (opsets 9 and 13 differ only in types).
#[derive(Debug)]
struct NonZero;

/// `NonZero.bounded`: indices `[rank, numel]` (the nonzero elements' first, zeros after), then
/// the count, then working memory for the GPU (a count per chunk of elements, and their total).
#[derive(Debug)]
struct NonZeroBounded;

pub(super) fn build(_ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(NonZero))
}

/// The input's type checked, and the rank of the output's first axis (a scalar counts as rank 1).
fn input_rank<'a>(inputs: &InferInputs<'a>) -> Result<(&'a ValueType, usize), OpError> {
    let x = inputs.req(0)?.ty;
    require_dtype("NonZero", x.dtype, &SUPPORTED_DTYPES)?;
    Ok((x, x.rank().max(1)))
}

/// Writes the coordinates of the nonzero elements of `x` into `out` (`[rank.max(1), cols]`), the
/// `k`-th nonzero's at column `k`, zeros in the columns after the last; returns the count.
fn nonzero_into(x: &TensorView<'_>, out: &mut [i64], cols: usize) -> Result<usize, OpError> {
    let dims: &[usize] = if x.dims.is_empty() { &[1] } else { x.dims };
    if out.len() != dims.len() * cols {
        return Err(OpError::eval(format!(
            "NonZero's output holds {} indices, not {} x {cols}",
            out.len(),
            dims.len()
        )));
    }
    let mask = nonzero_mask(x.dtype());
    let mut count = 0;
    let mut overflow = false;
    for_each_bits(x.data, |i, bits| {
        if bits & mask == 0 {
            return;
        }
        if count >= cols {
            overflow = true;
            return;
        }
        let mut rem = i;
        for d in (0..dims.len()).rev() {
            out[d * cols + count] = (rem % dims[d]) as i64;
            rem /= dims[d];
        }
        count += 1;
    });
    if overflow {
        return Err(OpError::eval(format!("NonZero found more nonzero elements than the output's {cols}")));
    }
    for row in out.chunks_mut(cols.max(1)) {
        let from = count.min(row.len());
        row[from..].fill(0);
    }
    Ok(count)
}

/// The number of nonzero elements.
fn count_nonzero(x: &TensorView<'_>) -> usize {
    let (mask, mut n) = (nonzero_mask(x.dtype()), 0);
    for_each_bits(x.data, |_, bits| n += usize::from(bits & mask != 0));
    n
}

impl Op for NonZero {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let (x, rank) = input_rank(inputs)?;
        let count = match inputs.req(0)?.value {
            Some(v) => fixed(count_nonzero(&v.view())),
            None if fixed_numel(&x.dims) == Some(0) => fixed(0),
            None => unknown_dim(),
        };
        Ok(vec![ValueType::new(DType::I64, vec![fixed(rank), count])])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let x = inputs.req(0)?;
        let [y] = outputs else { return Err(OpError::eval("NonZero has one output")) };
        let cols = y.dims.get(1).copied().unwrap_or(0);
        let count = nonzero_into(x, y.i64s()?, cols)?;
        if count != cols {
            return Err(OpError::eval(format!("NonZero found {count} nonzero elements, the output has {cols}")));
        }
        Ok(())
    }

    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        Some(gpu_of_standard("NonZero", ctx))
    }

    fn bounded(&self) -> Option<Bounded> {
        bounded(NonZeroBounded, "NonZero.bounded", vec![Some(1)], false)
    }
}

impl Op for NonZeroBounded {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let (x, rank) = input_rank(inputs)?;
        let numel = fixed_numel(&x.dims);
        let cols = numel.map_or_else(unknown_dim, fixed);
        // Working memory of the GPU's chunked kernels: a count per chunk, then the total.
        let partials = numel.map_or_else(unknown_dim, |n| fixed(n.max(1).div_ceil(NONZERO_CHUNK) + 1));
        Ok(vec![
            bounded_type("NonZero", DType::I64, vec![fixed(rank), cols])?,
            count_type(),
            ValueType::new(DType::I64, vec![partials]),
        ])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let x = inputs.req(0)?;
        // The third output is the GPU's working memory, unread.
        let ([y, count] | [y, count, _]) = outputs else {
            return Err(OpError::eval("NonZero.bounded has two outputs and working memory"));
        };
        let n = nonzero_into(x, y.i64s()?, x.len())?;
        super::write_count(count, n)
    }

    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        Some((|| {
            let x = ctx.input(0)?;
            let dims: Vec<usize> = if x.dims.is_empty() { vec![1] } else { x.dims.clone() };
            let n: usize = dims.iter().product();
            let mut meta = vec![ext(n), ext(n), ext(dims.len())];
            meta.extend(dims.iter().map(|&d| ext(d)));
            if n <= NONZERO_CHUNK {
                let kernel = NonZeroKernel { dtype: x.dtype };
                let slots = vec![Slot::In(0), Slot::Out(0), Slot::Out(1)];
                return Ok(GpuNode::Launches(vec![GpuLaunch::new(kernel, meta, Work::Rows(1), slots)]));
            }
            let chunks = n.div_ceil(NONZERO_CHUNK);
            meta.insert(3, ext(chunks));
            let slots = vec![Slot::In(0), Slot::Out(0), Slot::Out(1), Slot::Out(2)];
            let phase = |phase: u8, work| {
                GpuLaunch::new(NonZeroChunksKernel { dtype: x.dtype, phase }, meta.clone(), work, slots.clone())
            };
            Ok(GpuNode::Launches(vec![
                phase(0, Work::Rows(chunks as u64)),
                phase(1, Work::Rows(1)),
                phase(2, Work::Rows(chunks as u64)),
            ]))
        })())
    }
}
