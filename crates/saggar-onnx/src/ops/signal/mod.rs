//! Signal processing (opset 17): the window functions HannWindow, HammingWindow and BlackmanWindow
//! and MelWeightMatrix (`window.rs`), which make constants from constant sizes (folded at import;
//! GPU programs get them as constants), and the discrete Fourier transforms DFT and STFT (`dft.rs`),
//! computed directly, `O(n)` per output bin, on the host in f64 and on the GPU (`dft.cu`,
//! `stft.cu`) in double precision too, angles reduced exactly (`k * n mod length`) before the sine.
//!
//! Complex values are pairs in a last axis of 2; a real signal has a last axis of 1.

mod dft;
pub(crate) mod gpu;
#[cfg(test)]
mod tests;
mod window;

use saggar_shape::DType;

use crate::import::proto::dtype_from_onnx;
use crate::ops::{InferInput, NodeCtx, OpEntry, OpError};
use crate::tensor::{DataRef, TensorMut, TensorView};

/// The ops of this family.
pub(crate) static OPS: &[OpEntry] = &[
    OpEntry { op_type: "HannWindow", since: 17, until: 24, build: |c| window::build_window(c, window::Kind::Hann) },
    OpEntry {
        op_type: "HammingWindow",
        since: 17,
        until: 24,
        build: |c| window::build_window(c, window::Kind::Hamming),
    },
    OpEntry {
        op_type: "BlackmanWindow",
        since: 17,
        until: 24,
        build: |c| window::build_window(c, window::Kind::Blackman),
    },
    OpEntry { op_type: "MelWeightMatrix", since: 17, until: 24, build: window::build_mel_weight_matrix },
    OpEntry { op_type: "DFT", since: 17, until: 19, build: dft::build_dft },
    OpEntry { op_type: "DFT", since: 20, until: 24, build: dft::build_dft },
    OpEntry { op_type: "STFT", since: 17, until: 24, build: dft::build_stft },
];

/// The `output_datatype` attribute (default FLOAT): f32, f16, bf16, i32 or i64.
fn output_datatype(ctx: &NodeCtx<'_>) -> Result<DType, OpError> {
    let code = ctx.int_or("output_datatype", 1)?;
    dtype_from_onnx(code)
        .filter(|d| matches!(d, DType::F32 | DType::F16 | DType::BF16 | DType::I32 | DType::I64))
        .ok_or_else(|| {
            ctx.unsupported("output_datatype", code, "1 (FLOAT), 10 (FLOAT16), 16 (BFLOAT16), 6 (INT32), 7 (INT64)")
        })
}

/// Stores f64 values, converted to the output's element type (integers truncate toward zero).
fn store(out: &mut TensorMut<'_>, values: impl ExactSizeIterator<Item = f64>) -> Result<(), OpError> {
    let len = values.len();
    let check = |n: usize| {
        if n == len { Ok(()) } else { Err(OpError::eval(format!("{n} output elements for {len} values"))) }
    };
    check(out.data.len())?;
    if out.dtype() == DType::Bool {
        return Err(OpError::eval("a signal op cannot make bool elements"));
    }
    let values: Vec<f64> = values.collect();
    crate::tensor::cast_into(DataRef::F64(&values), &mut out.data)
}

/// The one integer of a scalar (or one-element) int64/int32 input named `name`, when constant.
fn const_scalar(input: &InferInput<'_>, name: &str) -> Result<Option<i64>, OpError> {
    let ty = input.ty;
    let one = ty.fixed_dims().is_some_and(|d| d.iter().product::<usize>() == 1);
    if !matches!(ty.dtype, DType::I64 | DType::I32) || ty.rank() > 1 || !one {
        return Err(OpError::infer(format!("{name} must be an int64 or int32 scalar, found {ty}")));
    }
    Ok(input.const_i64s().map(|v| v[0]))
}

/// The one integer of a scalar input at evaluation.
fn eval_scalar(input: &TensorView<'_>, name: &str) -> Result<i64, OpError> {
    match input.to_i64s().as_deref() {
        Some(&[v]) => Ok(v),
        _ => Err(OpError::eval(format!("{name} must be one int64 or int32 value, found {:?}", input.dims))),
    }
}

/// The one number of a scalar input of any numeric type, as f64.
fn eval_number(input: &TensorView<'_>, name: &str) -> Result<f64, OpError> {
    let v: Vec<f64> = match input.data {
        crate::tensor::DataRef::F32(v) => v.iter().map(|&x| f64::from(x)).collect(),
        _ => input.to_i64s().map(|v| v.into_iter().map(|x| x as f64).collect()).unwrap_or_default(),
    };
    match v[..] {
        [x] => Ok(x),
        _ => Err(OpError::eval(format!("{name} must be one number, found {} {:?}", input.dtype(), input.dims))),
    }
}
