//! The GPU kernel of the loss family (`loss.cu`): each position's term, written per position
//! (`reduction` none) or summed by one block (sum, mean). SoftmaxCrossEntropyLoss's `log_prob`
//! output is the normalisation family's LogSoftmax kernel over the class axis.

use saggar_shape::DType;

use crate::ops::gpu::{BLOCK, GpuKernel, index_type, render};

/// A loss over log-probabilities (or scores, with `softmax`), with a weight input when `weight`,
/// `index` typed targets, one block summing every term when `reduce`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LossKernel {
    pub(crate) softmax: bool,
    pub(crate) weight: bool,
    pub(crate) index: DType,
    pub(crate) reduce: bool,
}

impl GpuKernel for LossKernel {
    fn prefix(&self) -> &'static str {
        if self.reduce { "loss_reduce" } else { "loss" }
    }

    fn source(&self) -> String {
        let (weight_param, weight) =
            if self.weight { (", const float* __restrict__ weight", "(double)weight[t]") } else { ("", "1.0") };
        let body = if self.reduce {
            "__shared__ double sl[@BLOCK@], sw[@BLOCK@];
  double l = 0.0, ws = 0.0;
  for (onnx_i64 p = threadIdx.x; p < meta[0]; p += blockDim.x) { double w; l += term(p, &w); ws += w; }
  sl[threadIdx.x] = l; sw[threadIdx.x] = ws;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) { sl[threadIdx.x] += sl[threadIdx.x + s]; sw[threadIdx.x] += sw[threadIdx.x + s]; }
    __syncthreads();
  }
  if (threadIdx.x == 0 && blockIdx.x == 0) y[0] = (float)(meta[5] == 2 ? sl[0] / sw[0] : sl[0]);"
        } else {
            "ONNX_LOOP(p, meta[0]) { double w; y[p] = (float)term(p, &w); }"
        };
        let body = body.replace("@BLOCK@", &BLOCK.to_string());
        render(
            include_str!("loss.cu"),
            &[
                ("IX", index_type(self.index)),
                ("WEIGHT_PARAM", weight_param),
                ("WEIGHT", weight),
                ("SOFTMAX", if self.softmax { "true" } else { "false" }),
                ("BODY", &body),
            ],
        )
    }
}
