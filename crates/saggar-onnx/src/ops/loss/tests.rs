//! Tests of the loss family: every reduction with and without weights and ignore_index, spatial
//! targets, SoftmaxCrossEntropyLoss's log-softmax and log_prob output, the errors, and the kernels.

use saggar_shape::DType;

use super::gpu::LossKernel;
use crate::ops::gpu::GpuKernel;
use crate::ops::testing::{assert_kernels_render, f32s, run_op, run_op_outputs, values};
use crate::ops::{Attribute, Attributes, OpError};
use crate::tensor::Tensor;

fn attrs(list: &[(&str, Attribute)]) -> Attributes {
    Attributes(list.iter().map(|(n, a)| (n.to_string(), a.clone())).collect())
}

fn reduction(r: &str) -> (&'static str, Attribute) {
    ("reduction", Attribute::String(r.as_bytes().to_vec()))
}

fn nll(a: &[(&str, Attribute)], x: &Tensor, t: &[i64], w: Option<&Tensor>) -> Result<Vec<f32>, OpError> {
    let dims: Vec<usize> = [x.dims()[0]].into_iter().chain(x.dims()[2..].iter().copied()).collect();
    let t = Tensor::from_i64s(t.to_vec()).reshaped(dims).unwrap();
    Ok(values(&run_op("NegativeLogLikelihoodLoss", 13, &attrs(a), &[Some(x), Some(&t), w])?[0]).to_vec())
}

fn logp() -> Tensor {
    f32s(&[2, 3], &[-1.0, -2.0, -3.0, -0.5, -1.5, -2.5])
}

#[test]
fn nll_reduces_weighted_terms() {
    let x = logp();
    assert_eq!(nll(&[reduction("none")], &x, &[0, 2], None).unwrap(), [1.0, 2.5]);
    assert_eq!(nll(&[reduction("sum")], &x, &[0, 2], None).unwrap(), [3.5]);
    assert_eq!(nll(&[], &x, &[0, 2], None).unwrap(), [1.75], "mean by default");
    let w = f32s(&[3], &[1.0, 2.0, 3.0]);
    assert_eq!(nll(&[reduction("none")], &x, &[0, 2], Some(&w)).unwrap(), [1.0, 7.5]);
    assert_eq!(nll(&[reduction("sum")], &x, &[0, 2], Some(&w)).unwrap(), [8.5]);
    assert_eq!(nll(&[], &x, &[0, 2], Some(&w)).unwrap(), [8.5 / 4.0], "the mean divides by the weights");
    let ii = ("ignore_index", Attribute::Int(2));
    assert_eq!(nll(&[ii.clone(), reduction("none")], &x, &[0, 2], None).unwrap(), [1.0, 0.0]);
    assert_eq!(nll(std::slice::from_ref(&ii), &x, &[0, 2], Some(&w)).unwrap(), [1.0]);
    assert!(nll(&[ii], &x, &[2, 2], None).unwrap()[0].is_nan(), "every target ignored: 0 / 0");
    let neg = ("ignore_index", Attribute::Int(-1));
    assert_eq!(nll(&[neg, reduction("sum")], &x, &[-1, 1], None).unwrap(), [1.5]);
    // Spatial targets: (N, C, d) against (N, d).
    let xs = f32s(&[1, 2, 2], &[-1.0, -2.0, -3.0, -4.0]);
    assert_eq!(nll(&[reduction("none")], &xs, &[1, 0], None).unwrap(), [3.0, 2.0]);
}

#[test]
fn nll_refuses_targets_outside_the_classes_and_bad_shapes() {
    let x = logp();
    assert!(matches!(nll(&[], &x, &[0, 3], None), Err(OpError::Eval(m)) if m.contains("target 3")));
    assert!(nll(&[], &x, &[-1, 0], None).is_err(), "-1 without ignore_index");
    assert!(nll(&[], &x, &[0, 1], Some(&f32s(&[2], &[1.0; 2]))).is_err(), "two weights for three classes");
    assert!(matches!(nll(&[reduction("max")], &x, &[0, 1], None), Err(OpError::Unsupported { .. })));
    let t = Tensor::from_i64s(vec![0, 1, 2]);
    assert!(run_op("NegativeLogLikelihoodLoss", 13, &attrs(&[]), &[Some(&x), Some(&t)]).is_err(), "3 targets for 2");
    let tf = f32s(&[2], &[0.0, 1.0]);
    assert!(run_op("NegativeLogLikelihoodLoss", 13, &attrs(&[]), &[Some(&x), Some(&tf)]).is_err(), "f32 targets");
    let two = run_op_outputs(
        "NegativeLogLikelihoodLoss",
        13,
        &attrs(&[]),
        &[Some(&x), Some(&Tensor::from_i64s(vec![0, 1]))],
        2,
    );
    assert!(two.is_err(), "one output only");
}

#[test]
fn softmax_cross_entropy_takes_the_log_softmax_of_scores() {
    let x = f32s(&[2, 3], &[0.0, 0.0, 0.0, 1.0, 2.0, 3.0]);
    let t = Tensor::from_i64s(vec![0, 2]);
    let out =
        run_op_outputs("SoftmaxCrossEntropyLoss", 13, &attrs(&[reduction("none")]), &[Some(&x), Some(&t)], 2).unwrap();
    let lse = (1f32.exp() + 2f32.exp() + 3f32.exp()).ln();
    let (a, b) = (values(&out[0]), [3f32.ln(), lse - 3.0]);
    assert!(a.iter().zip(b).all(|(g, w)| (g - w).abs() < 1e-6), "{a:?}");
    let lp = values(&out[1]);
    assert!((lp[0] + 3f32.ln()).abs() < 1e-6 && (lp[5] - (3.0 - lse)).abs() < 1e-6, "{lp:?}");
    let mean = run_op("SoftmaxCrossEntropyLoss", 13, &attrs(&[]), &[Some(&x), Some(&t)]).unwrap();
    assert!((values(&mean[0])[0] - (b[0] + b[1]) / 2.0).abs() < 1e-6);
    assert_eq!(mean[0].dims(), [] as [usize; 0]);
}

#[test]
fn kernel_variants_render() {
    let mut kinds: Vec<Box<dyn GpuKernel>> = Vec::new();
    for softmax in [false, true] {
        for weight in [false, true] {
            for reduce in [false, true] {
                kinds.push(Box::new(LossKernel { softmax, weight, index: DType::I64, reduce }));
            }
        }
    }
    kinds.push(Box::new(LossKernel { softmax: false, weight: false, index: DType::I32, reduce: false }));
    assert_kernels_render(&kinds);
}
