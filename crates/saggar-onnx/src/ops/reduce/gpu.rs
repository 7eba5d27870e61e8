//! The GPU kernels of the reduction family: every Reduce* op (`reduce.cu`, one block per output
//! element), ArgMax / ArgMin (`arg.cu`) and CumSum (`cumsum.cu`).

use saggar_shape::DType;

use super::ReduceOp;
use crate::ops::gpu::{BLOCK, GpuKernel, GpuLaunch, GpuNode, Slot, Work, contiguous, ctype, ext, index_type, render};

/// A reduction of `dtype` (any numeric type) over the axes the `meta` table names, computed in the
/// element type as the host computes it (integers wrap, Mean divides them toward zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReduceKernel {
    pub(crate) op: ReduceOp,
    pub(crate) dtype: DType,
}

/// The smallest and largest values of an integer type as C++ expressions of that type.
fn int_bounds(dtype: DType, t: &str) -> (String, String) {
    let (lo, hi): (i128, i128) = match dtype {
        DType::I8 => (i8::MIN.into(), i8::MAX.into()),
        DType::U8 => (0, u8::MAX.into()),
        DType::I16 => (i16::MIN.into(), i16::MAX.into()),
        DType::U16 => (0, u16::MAX.into()),
        DType::I32 => (i32::MIN.into(), i32::MAX.into()),
        DType::U32 => (0, u32::MAX.into()),
        DType::U64 => (0, u64::MAX.into()),
        _ => (i64::MIN.into(), i64::MAX.into()),
    };
    // `-2^63` has no literal: write it as `-(2^63 - 1) - 1`.
    let lit = |v: i128| if v < 0 { format!("(({t})({}LL - 1))", v + 1) } else { format!("(({t}){v}ULL)") };
    (lit(lo), lit(hi))
}

impl GpuKernel for ReduceKernel {
    fn prefix(&self) -> &'static str {
        "reduce"
    }

    fn source(&self) -> String {
        let t = ctype(self.dtype).unwrap_or("float");
        let f32 = self.dtype == DType::F32;
        let float = f32 || self.dtype == DType::F64;
        // The float math of this type: `fabsf` for f32, `fabs` for f64.
        let math = |name: &str| if f32 { format!("{name}f") } else { name.to_string() };
        let (lo, hi) =
            if float { ("ONNX_NEG_INF".to_string(), "ONNX_POS_INF".to_string()) } else { int_bounds(self.dtype, t) };
        let abs = if float { format!("{}(v)", math("fabs")) } else { "(v < 0 ? -v : v)".to_string() };
        // Integers divide toward zero, by 0 where the count does not fit the type (as the host).
        let mean = if float {
            format!("acc / ({t})n")
        } else if self.dtype.size_bytes() < 8 {
            format!("(n <= (onnx_i64){hi} ? ({t})(acc / ({t})n) : ({t})0)")
        } else {
            format!("({t})(acc / ({t})n)")
        };
        let (sqrt, log, exp) = (math("sqrt"), math("log"), math("exp"));
        // (initial value, value of one element `v`, combine `a` and `b`, result from `acc` and `n`)
        let (init, map, combine, finish): (String, String, &str, String) = match self.op {
            ReduceOp::Sum => ("0".into(), "v".into(), "a + b", "acc".into()),
            ReduceOp::Mean => ("0".into(), "v".into(), "a + b", mean),
            ReduceOp::Max => (lo, "v".into(), "gpu_max(a, b)", "acc".into()),
            ReduceOp::Min => (hi, "v".into(), "gpu_min(a, b)", "acc".into()),
            ReduceOp::Prod => ("1".into(), "v".into(), "a * b", "acc".into()),
            ReduceOp::L1 => ("0".into(), abs, "a + b", "acc".into()),
            ReduceOp::L2 => ("0".into(), "v * v".into(), "a + b", format!("{sqrt}(acc)")),
            ReduceOp::SumSquare => ("0".into(), "v * v".into(), "a + b", "acc".into()),
            ReduceOp::LogSum => ("0".into(), "v".into(), "a + b", format!("{log}(acc)")),
            ReduceOp::LogSumExp => ("0".into(), format!("{exp}(v - top)"), "a + b", format!("top + {log}(acc)")),
        };
        let top = if self.op == ReduceOp::LogSumExp {
            render(include_str!("log_sum_exp_top.cuh"), &[("T", t)])
        } else {
            String::new()
        };
        render(
            include_str!("reduce.cu"),
            &[
                ("T", t),
                ("INIT", &format!("({t}){init}")),
                ("MAP", &format!("({t})({map})")),
                ("COMBINE", &format!("({t})({combine})")),
                ("FINISH", &finish),
                ("TOP", &top),
                ("BLOCK", &BLOCK.to_string()),
            ],
        )
    }
}

/// A [`ReduceKernel`] launch of input 0 (of `dims`) over the axes `reduced` into output 0.
pub(crate) fn reduce_launch(op: ReduceOp, dtype: DType, dims: &[usize], reduced: &[usize]) -> GpuNode {
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
        ReduceKernel { op, dtype },
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
