//! `Det` (opset 11): the determinant of each square matrix of the trailing two axes, by LU
//! factorisation with partial pivoting in f32 (the pivot of a column is the first row of the
//! largest magnitude; a zero pivot makes the determinant 0; a 0 x 0 matrix has determinant 1).

use saggar_shape::DType;

use super::gpu::{DET_MAX, DetKernel};
use super::require_f32;
use crate::ops::gpu::{GpuCtx, GpuLaunch, GpuNode, Slot, Work, ext};
use crate::ops::{EvalInputs, InferInputs, NodeCtx, Op, OpError, ValueType};
use crate::tensor::TensorMut;

/// `Det`.
#[derive(Debug)]
struct Det;

pub(super) fn build_det(_: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(Det))
}

/// `(batch, n)` of a stack of square matrices.
fn square(dims: &[usize]) -> Result<(usize, usize), OpError> {
    match dims {
        [batch @ .., r, c] if r == c => Ok((batch.iter().product(), *r)),
        _ => Err(OpError::eval(format!("Det takes square matrices [..., n, n], found {dims:?}"))),
    }
}

/// The determinant of the row-major `n x n` matrix `a`, which it overwrites with its LU factors.
fn det_in_place(a: &mut [f32], n: usize) -> f32 {
    let mut det = 1.0f32;
    for c in 0..n {
        let (mut p, mut best) = (c, a[c * n + c].abs());
        for r in c + 1..n {
            if a[r * n + c].abs() > best {
                (p, best) = (r, a[r * n + c].abs());
            }
        }
        if best == 0.0 {
            return 0.0;
        }
        if p != c {
            for j in 0..n {
                a.swap(p * n + j, c * n + j);
            }
            det = -det;
        }
        let piv = a[c * n + c];
        det *= piv;
        for r in c + 1..n {
            let f = a[r * n + c] / piv;
            for j in c + 1..n {
                a[r * n + j] -= f * a[c * n + j];
            }
        }
    }
    det
}

impl Op for Det {
    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        Some((|| {
            let (batch, n) = square(&ctx.input(0)?.dims)?;
            if n > DET_MAX {
                return Err(OpError::eval(format!(
                    "Det takes matrices up to {DET_MAX}x{DET_MAX} on GPU, found {n}x{n}; run the model on the host \
                     backend"
                )));
            }
            Ok(GpuNode::Launches(vec![GpuLaunch::new(
                DetKernel,
                vec![ext(batch), ext(n)],
                Work::Rows(batch as u64),
                vec![Slot::In(0), Slot::Out(0)],
            )]))
        })())
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let x = inputs.req(0)?.ty;
        require_f32("Det", x.dtype)?;
        let r = x.rank();
        let square =
            r >= 2 && !matches!((x.dims[r - 2].as_fixed(), x.dims[r - 1].as_fixed()), (Some(a), Some(b)) if a != b);
        if !square {
            return Err(OpError::infer(format!("Det takes square matrices [..., n, n], found {x}")));
        }
        Ok(vec![ValueType::new(DType::F32, x.dims[..r - 2].to_vec())])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let xv = inputs.req(0)?;
        let (batch, n) = square(xv.dims)?;
        let (x, y) = (xv.f32s()?, outputs[0].f32s()?);
        if y.len() != batch || n.checked_mul(n).and_then(|m| m.checked_mul(batch)) != Some(x.len()) {
            return Err(OpError::eval("Det: the output does not match the input"));
        }
        let mut scratch = vec![0.0f32; n * n];
        for (b, out) in y.iter_mut().enumerate() {
            scratch.copy_from_slice(&x[b * n * n..(b + 1) * n * n]);
            *out = det_in_place(&mut scratch, n);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::gpu::GpuKernel;
    use crate::ops::testing::{f32s, run_op, values};
    use crate::ops::{Attributes, OpError};

    fn det(dims: &[usize], v: &[f32]) -> Result<Vec<f32>, OpError> {
        run_op("Det", 11, &Attributes::default(), &[Some(&f32s(dims, v))]).map(|o| values(&o[0]).to_vec())
    }

    #[test]
    fn determinants_of_a_batch_with_pivoting_and_singular_matrices() {
        // [[1, 2], [3, 4]] = -2; [[0, 1], [1, 0]] needs a pivot: -1; a singular matrix: 0.
        let got = det(&[3, 2, 2], &[1.0, 2.0, 3.0, 4.0, 0.0, 1.0, 1.0, 0.0, 1.0, 2.0, 2.0, 4.0]).unwrap();
        assert!((got[0] - -2.0).abs() < 1e-6 && got[1..] == [-1.0, 0.0], "{got:?}");
        // 6 (-14 - 40) - (28 - 10) + (32 + 4).
        let m = [6.0, 1.0, 1.0, 4.0, -2.0, 5.0, 2.0, 8.0, 7.0];
        let got = det(&[3, 3], &m).unwrap();
        assert!((got[0] - -306.0).abs() < 1e-3, "{got:?}");
        assert_eq!(det(&[1, 1], &[5.0]).unwrap(), vec![5.0]);
        assert_eq!(det(&[2, 0, 0], &[]).unwrap(), vec![1.0, 1.0], "an empty matrix has determinant 1");
    }

    #[test]
    fn non_square_inputs_are_typed_errors() {
        assert!(matches!(det(&[2, 3], &[0.0; 6]), Err(OpError::Infer(_))));
        assert!(matches!(det(&[4], &[0.0; 4]), Err(OpError::Infer(_))));
        let ints = crate::tensor::Tensor::from_i64s(vec![1]).reshaped(vec![1, 1]).unwrap();
        assert!(run_op("Det", 11, &Attributes::default(), &[Some(&ints)]).is_err());
        assert!(run_op("Det", 10, &Attributes::default(), &[Some(&f32s(&[1, 1], &[1.0]))]).is_err());
        let body = super::DetKernel.source();
        assert!(!body.contains('@') && body.starts_with("(const onnx_i64* meta"));
    }
}
