//! The GPU kernels of the reduction family: every Reduce* op (`reduce.cu`, one block per output
//! element), ArgMax / ArgMin (`arg.cu`) and CumSum (`cumsum.cu`).

use saggar_shape::DType;

use super::ReduceOp;
use crate::ops::gpu::{BLOCK, GpuKernel, GpuLaunch, GpuNode, Slot, Work, contiguous, ctype, ext, index_type, render};

/// A reduction of f32 over the axes the `meta` table names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReduceKernel {
    pub(crate) op: ReduceOp,
}

impl GpuKernel for ReduceKernel {
    fn prefix(&self) -> &'static str {
        "reduce"
    }

    fn source(&self) -> String {
        // (initial value, value of one element `v`, combine `a` and `b`, result from `acc` and `n`)
        let (init, map, combine, finish) = match self.op {
            ReduceOp::Sum => ("0.0f", "v", "a + b", "acc"),
            ReduceOp::Mean => ("0.0f", "v", "a + b", "acc / (float)n"),
            ReduceOp::Max => ("ONNX_NEG_INF", "v", "gpu_max(a, b)", "acc"),
            ReduceOp::Min => ("ONNX_POS_INF", "v", "gpu_min(a, b)", "acc"),
            ReduceOp::Prod => ("1.0f", "v", "a * b", "acc"),
            ReduceOp::L1 => ("0.0f", "fabsf(v)", "a + b", "acc"),
            ReduceOp::L2 => ("0.0f", "v * v", "a + b", "sqrtf(acc)"),
            ReduceOp::SumSquare => ("0.0f", "v * v", "a + b", "acc"),
            ReduceOp::LogSum => ("0.0f", "v", "a + b", "logf(acc)"),
            ReduceOp::LogSumExp => ("0.0f", "expf(v - top)", "a + b", "top + logf(acc)"),
        };
        let top = if self.op == ReduceOp::LogSumExp {
            render(include_str!("log_sum_exp_top.cuh"), &[])
        } else {
            String::new()
        };
        render(
            include_str!("reduce.cu"),
            &[
                ("INIT", init),
                ("MAP", map),
                ("COMBINE", combine),
                ("FINISH", finish),
                ("TOP", &top),
                ("BLOCK", &BLOCK.to_string()),
            ],
        )
    }
}

/// A [`ReduceKernel`] launch of input 0 (of `dims`) over the axes `reduced` into output 0.
pub(crate) fn reduce_launch(op: ReduceOp, dims: &[usize], reduced: &[usize]) -> GpuNode {
    let own = contiguous(dims);
    let (kept, red): (Vec<usize>, Vec<usize>) = (0..dims.len()).partition(|a| !reduced.contains(a));
    let n_out: u64 = kept.iter().map(|&a| dims[a] as u64).product();
    let n_red: u64 = red.iter().map(|&a| dims[a] as u64).product();
    let mut meta = vec![ext(kept.len()), ext(red.len()), n_out as i64, n_red as i64];
    for axes in [&kept, &red] {
        meta.extend(axes.iter().map(|&a| ext(dims[a])));
        meta.extend(axes.iter().map(|&a| own[a]));
    }
    GpuNode::Launches(vec![GpuLaunch::new(
        ReduceKernel { op },
        meta,
        Work::Rows(n_out),
        vec![Slot::In(0), Slot::Out(0)],
    )])
}

/// ArgMax (`max`) or ArgMin over the middle axis of `[outer, len, inner]` of `dtype` elements,
/// keeping the last extreme with `last`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ArgKernel {
    pub(crate) max: bool,
    pub(crate) last: bool,
    pub(crate) dtype: DType,
}

impl GpuKernel for ArgKernel {
    fn prefix(&self) -> &'static str {
        "arg"
    }

    fn source(&self) -> String {
        let op = match (self.max, self.last) {
            (true, false) => ">",
            (true, true) => ">=",
            (false, false) => "<",
            (false, true) => "<=",
        };
        render(include_str!("arg.cu"), &[("T", ctype(self.dtype).unwrap_or("float")), ("OP", op)])
    }
}

/// CumSum of `dtype` (f32, i64 or i32) along the axis an `axis_index` (i64 or i32) input gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CumSumKernel {
    pub(crate) dtype: DType,
    pub(crate) axis_index: DType,
    pub(crate) exclusive: bool,
    pub(crate) reverse: bool,
}

impl GpuKernel for CumSumKernel {
    fn prefix(&self) -> &'static str {
        "cumsum"
    }

    fn source(&self) -> String {
        let flag = |b: bool| if b { "1" } else { "0" };
        render(
            include_str!("cumsum.cu"),
            &[
                ("T", ctype(self.dtype).unwrap_or("float")),
                ("IX", index_type(self.axis_index)),
                ("EXCLUSIVE", flag(self.exclusive)),
                ("REVERSE", flag(self.reverse)),
            ],
        )
    }
}
