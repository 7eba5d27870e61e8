//! `Tile`: the input repeated `repeats[d]` times along each axis `d` (a [`StridedView`] with a
//! stride-0 axis before each of the input's).

use saggar_shape::{DType, Dim};

use super::view::StridedView;
use crate::error::OpError;
use crate::ops::shape_util::strides;
use crate::ops::{EvalInputs, InferInputs, Op, ValueType, unknown_dim};
use crate::tensor::TensorMut;

/// `Tile` (the `repeats` input: opset 6 on).
#[derive(Debug)]
pub(super) struct Tile;

/// `repeats` checked against the rank: one non-negative count per axis.
fn counts(repeats: &[i64], rank: usize) -> Result<Vec<u64>, OpError> {
    if repeats.len() != rank {
        return Err(OpError::infer(format!("Tile repeats {repeats:?} must have one count per axis of rank {rank}")));
    }
    repeats
        .iter()
        .map(|&r| {
            u64::try_from(r).map_err(|_| OpError::infer(format!("Tile repeats {repeats:?} has a negative count")))
        })
        .collect()
}

/// The output extent of an axis of `d` repeated `r` times.
fn tiled(d: u64, r: u64) -> Result<u64, OpError> {
    d.checked_mul(r)
        .filter(|&n| i64::try_from(n).is_ok())
        .ok_or_else(|| OpError::infer(format!("Tile of an axis of {d} by {r} overflows")))
}

/// The output as a view of the input of `dims`: `[r0, d0, r1, d1, ...]` with strides `[0, s0, 0, s1, ...]`.
fn view(dims: &[usize], repeats: &[usize]) -> StridedView {
    let own = strides(dims);
    StridedView {
        dims: dims.iter().zip(repeats).flat_map(|(&d, &r)| [r, d]).collect(),
        strides: own.iter().flat_map(|&s| [0, s]).collect(),
    }
}

impl Op for Tile {
    fn gpu(&self, ctx: &crate::ops::gpu::GpuCtx<'_>) -> Option<Result<crate::ops::gpu::GpuNode, OpError>> {
        Some((|| {
            let (x, out) = (ctx.input(0)?, ctx.output(0)?);
            // The repeats are the output's extents over the input's (any count of an empty axis).
            let repeats: Vec<usize> =
                x.dims.iter().zip(&out.dims).map(|(&d, &o)| o.checked_div(d).unwrap_or(0)).collect();
            Ok(view(&x.dims, &repeats).gpu(x.dtype))
        })())
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let (x, repeats) = (inputs.req(0)?.ty, inputs.req(1)?);
        if repeats.ty.dtype != DType::I64 || repeats.ty.rank() != 1 {
            return Err(OpError::infer(format!("Tile repeats must be a 1-D int64 tensor, not {}", repeats.ty)));
        }
        let Some(r) = repeats.const_i64s() else {
            return Ok(vec![ValueType::new(x.dtype, vec![unknown_dim(); x.rank()])]);
        };
        let counts = counts(&r, x.rank())?;
        let dims: Vec<Dim> = x
            .dims
            .iter()
            .zip(&counts)
            .map(|(d, &r)| match d.as_fixed() {
                Some(n) => tiled(n, r).map(Dim::Fixed),
                None if r == 1 => Ok(d.clone()),
                None => Ok(unknown_dim()),
            })
            .collect::<Result<_, _>>()?;
        let total = dims.iter().filter_map(Dim::as_fixed).try_fold(1u64, |n, d| n.checked_mul(d));
        if total.is_none_or(|n| i64::try_from(n).is_err()) {
            return Err(OpError::infer(format!("Tile of {x} by {r:?} has more elements than an i64 counts")));
        }
        Ok(vec![ValueType::new(x.dtype, dims)])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let x = inputs.req(0)?;
        let repeats = inputs.req(1)?.to_i64s().ok_or_else(|| OpError::eval("Tile repeats must be int64"))?;
        let counts = counts(&repeats, x.dims.len()).map_err(|e| OpError::eval(e.to_string()))?;
        let counts: Vec<usize> = counts.iter().map(|&r| usize::try_from(r).unwrap_or(usize::MAX)).collect();
        let out = &mut outputs[0];
        if x.dims.iter().zip(&counts).zip(out.dims).any(|((&d, &r), &o)| d.checked_mul(r) != Some(o)) {
            return Err(OpError::eval(format!("Tile output {:?} is not {:?} tiled by {repeats:?}", out.dims, x.dims)));
        }
        view(x.dims, &counts).eval(x, out)
    }
}

#[cfg(test)]
mod tests {
    use saggar_shape::{DType, Dim};

    use crate::error::OpError;
    use crate::ops::testing::{iota, run_op, values};
    use crate::ops::{Attributes, InferInput, InferInputs, Op, ValueType};
    use crate::tensor::{Tensor, TensorData};

    fn tile(x: &Tensor, repeats: &[i64]) -> Result<Vec<Tensor>, OpError> {
        run_op("Tile", 13, &Attributes::default(), &[Some(x), Some(&Tensor::from_i64s(repeats.to_vec()))])
    }

    #[test]
    fn tile_repeats_each_axis() {
        let x = iota(&[2, 2]);
        let out = tile(&x, &[1, 2]).unwrap();
        assert_eq!(out[0].dims(), &[2, 4]);
        assert_eq!(values(&out[0]), [0.0, 1.0, 0.0, 1.0, 2.0, 3.0, 2.0, 3.0]);
        let out = tile(&x, &[2, 1]).unwrap();
        assert_eq!(values(&out[0]), [0.0, 1.0, 2.0, 3.0, 0.0, 1.0, 2.0, 3.0]);
        let out = tile(&x, &[0, 3]).unwrap();
        assert_eq!(out[0].dims(), &[0, 6]);
        let b = Tensor::new(vec![2], TensorData::Bool(vec![1, 0])).unwrap();
        let out = run_op("Tile", 6, &Attributes::default(), &[Some(&b), Some(&Tensor::from_i64s(vec![2]))]).unwrap();
        assert_eq!(out[0].data(), &TensorData::Bool(vec![1, 0, 1, 0]));
    }

    #[test]
    fn bad_or_huge_repeats_are_typed_errors_before_any_allocation() {
        let x = iota(&[2, 2]);
        assert!(matches!(tile(&x, &[1, -1]), Err(OpError::Infer(m)) if m.contains("negative")));
        assert!(matches!(tile(&x, &[2]), Err(OpError::Infer(_))));
        // More elements than an i64 counts: refused at inference.
        assert!(matches!(tile(&x, &[1 << 40, 1 << 40]), Err(OpError::Infer(m)) if m.contains("elements")));
        assert!(matches!(tile(&x, &[i64::MAX, 1]), Err(OpError::Infer(m)) if m.contains("overflows")));
        // Countable but above the evaluation's limit: refused before the output is allocated.
        assert!(matches!(tile(&x, &[1 << 30, 1 << 20]), Err(OpError::Eval(m)) if m.contains("limit")));
    }

    #[test]
    fn repeats_known_only_at_run_time_give_unknown_extents() {
        let x = ValueType::new(DType::F32, vec![Dim::symbolic("n"), Dim::Fixed(3)]);
        let r = ValueType::fixed(DType::I64, &[2]);
        let slots = [
            Some(InferInput { ty: &x, value: None, dims_value: None }),
            Some(InferInput { ty: &r, value: None, dims_value: None }),
        ];
        let out = super::Tile.infer(&InferInputs::new(&slots)).unwrap();
        assert!(out[0].dims.iter().all(|d| d.symbol() == Some(crate::ops::UNKNOWN_DIM)));
        // Known repeats keep a symbolic extent repeated once.
        let ones = Tensor::from_i64s(vec![1, 2]);
        let slots = [slots[0], Some(InferInput { ty: &r, value: Some(&ones), dims_value: None })];
        let out = super::Tile.infer(&InferInputs::new(&slots)).unwrap();
        assert_eq!(out[0].dims, vec![Dim::symbolic("n"), Dim::Fixed(6)]);
    }
}
