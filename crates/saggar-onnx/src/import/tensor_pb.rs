//! ONNX `TensorProto` conversion and `.pb` tensor files, as the ONNX test data sets store inputs and
//! expected outputs (`test_data_set_0/input_0.pb`, `output_0.pb`).
//!
//! Sizes are checked before anything is allocated: a tensor whose dimensions multiply past
//! [`ImportLimits::max_tensor_elements`] is refused, and element data must be exactly as long as the
//! dimensions say.

use saggar_dispatch::FileError;
use std::path::Path;

use prost::Message;
use saggar_shape::DType;

use crate::error::OnnxError;
use crate::import::external;
use crate::import::limits::ImportLimits;
use crate::import::proto::{TensorProto, data_location, dtype_from_onnx, dtype_to_onnx};
use crate::tensor::{Tensor, TensorData, is_supported_dtype};

/// Dimensions of `proto` as `usize`, checked against the element limit.
fn checked_dims(proto: &TensorProto, limits: &ImportLimits) -> Result<(Vec<usize>, usize), OnnxError> {
    let bad = |reason: String| OnnxError::Tensor { name: proto.name.clone(), reason };
    let mut n: u64 = 1;
    let mut dims = Vec::with_capacity(proto.dims.len());
    for &d in &proto.dims {
        let d = u64::try_from(d).map_err(|_| bad(format!("negative dimension {d}")))?;
        n = n.checked_mul(d).ok_or_else(|| bad(format!("dimensions {:?} overflow", proto.dims)))?;
        dims.push(usize::try_from(d).map_err(|_| bad(format!("dimension {d} does not fit in memory")))?);
    }
    if n > limits.max_tensor_elements {
        return Err(OnnxError::TooLarge {
            what: format!("tensor `{}` of shape {:?}", proto.name, proto.dims),
            size: n,
            limit: limits.max_tensor_elements,
            field: "max_tensor_elements",
        });
    }
    Ok((dims, n as usize))
}

/// Converts a `TensorProto` to a tensor. External data is read relative to `model_dir` (refused
/// when `None`: a lone `.pb` file has no folder to trust).
pub fn tensor_from_proto(
    proto: &TensorProto,
    model_dir: Option<&Path>,
    limits: &ImportLimits,
) -> Result<Tensor, OnnxError> {
    let bad = |reason: String| OnnxError::Tensor { name: proto.name.clone(), reason };
    let dtype = dtype_from_onnx(i64::from(proto.data_type))
        .ok_or_else(|| bad(format!("element type code {} is not supported", proto.data_type)))?;
    if !is_supported_dtype(dtype) {
        return Err(bad(format!("element type {dtype} is not supported (f32, i64, i32, bool, f16, bf16 are)")));
    }
    let (dims, n) = checked_dims(proto, limits)?;
    if proto.data_location == data_location::EXTERNAL {
        let dir = model_dir.ok_or_else(|| OnnxError::ExternalData {
            name: proto.name.clone(),
            reason: "external data is only read for tensors of a model file".into(),
        })?;
        let bytes = external::read(proto, dir, n * dtype.size_bytes(), limits)?;
        return Tensor::from_le_bytes(dtype, dims, &bytes).map_err(|e| bad(e.to_string()));
    }
    if !proto.raw_data.is_empty() || n == 0 {
        return Tensor::from_le_bytes(dtype, dims, &proto.raw_data).map_err(|e| bad(e.to_string()));
    }
    let data = match dtype {
        DType::F32 => TensorData::F32(proto.float_data.clone()),
        DType::I64 => TensorData::I64(proto.int64_data.clone()),
        DType::I32 => TensorData::I32(proto.int32_data.clone()),
        DType::Bool => TensorData::Bool(proto.int32_data.iter().map(|&v| u8::from(v != 0)).collect()),
        DType::F64 => TensorData::F64(proto.double_data.clone()),
        DType::U64 => TensorData::U64(proto.uint64_data.clone()),
        // ONNX stores each element of the narrower types in one int32 (uint32 in one uint64).
        DType::U32 => TensorData::U32(narrow_each(&proto.uint64_data, dtype, &bad)?),
        DType::I8 => TensorData::I8(narrow_each(&proto.int32_data, dtype, &bad)?),
        DType::U8 => TensorData::U8(narrow_each(&proto.int32_data, dtype, &bad)?),
        DType::I16 => TensorData::I16(narrow_each(&proto.int32_data, dtype, &bad)?),
        DType::U16 => TensorData::U16(narrow_each(&proto.int32_data, dtype, &bad)?),
        // ONNX stores each half-precision element's bits in one int32.
        DType::F16 | DType::BF16 => {
            let bits = proto
                .int32_data
                .iter()
                .map(|&v| u16::try_from(v).map_err(|_| bad(format!("{dtype} element {v} is not 16 bits"))))
                .collect::<Result<Vec<u16>, _>>()?;
            if dtype == DType::F16 { TensorData::F16(bits) } else { TensorData::BF16(bits) }
        }
        other => return Err(bad(format!("element type {other} is not supported"))),
    };
    Tensor::new(dims, data).map_err(|e| bad(e.to_string()))
}

/// Each of `values` as `T`, an error naming the first that does not fit.
fn narrow_each<S: Copy + std::fmt::Display, T: TryFrom<S>>(
    values: &[S],
    dtype: DType,
    bad: &dyn Fn(String) -> OnnxError,
) -> Result<Vec<T>, OnnxError> {
    values.iter().map(|&v| T::try_from(v).map_err(|_| bad(format!("{dtype} element {v} is out of range")))).collect()
}

/// A `TensorProto` holding `tensor` as raw little-endian data.
pub fn tensor_to_proto(name: &str, tensor: &Tensor) -> TensorProto {
    TensorProto {
        dims: tensor.dims().iter().map(|&d| d as i64).collect(),
        data_type: dtype_to_onnx(tensor.dtype()),
        name: name.to_string(),
        raw_data: tensor.to_le_bytes(),
        ..TensorProto::default()
    }
}

/// A named tensor read from a `.pb` file.
#[derive(Debug, Clone, PartialEq)]
pub struct NamedTensor {
    /// The `TensorProto`'s name (may be empty).
    pub name: String,
    /// The tensor.
    pub tensor: Tensor,
}

/// Decodes a `TensorProto` from bytes.
pub fn decode_tensor(bytes: &[u8], what: &str, limits: &ImportLimits) -> Result<NamedTensor, OnnxError> {
    let proto = TensorProto::decode(bytes).map_err(|e| OnnxError::Decode {
        what: what.to_string(),
        message: "TensorProto",
        reason: e.to_string(),
    })?;
    let tensor = tensor_from_proto(&proto, None, limits)?;
    Ok(NamedTensor { name: proto.name, tensor })
}

/// Reads a `.pb` file holding one `TensorProto` (ONNX test data).
pub fn read_tensor_pb(path: &Path) -> Result<NamedTensor, OnnxError> {
    let limits = ImportLimits::default();
    let bytes = crate::import::limits::read_limited(path, limits.max_file_bytes, "reading tensor file")?;
    decode_tensor(&bytes, &path.display().to_string(), &limits)
}

/// Writes `tensor` named `name` as a `.pb` file.
pub fn write_tensor_pb(path: &Path, name: &str, tensor: &Tensor) -> Result<(), OnnxError> {
    Ok(std::fs::write(path, tensor_to_proto(name, tensor).encode_to_vec())
        .map_err(FileError::at("writing tensor file", path))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_precision_elements_read_from_raw_data_and_int32_data_and_bad_bits_are_refused() {
        let limits = ImportLimits::default();
        let half = Tensor::new(vec![3], TensorData::F16(vec![0x3c00, 0xc000, 0x7c00])).unwrap();
        let raw = tensor_to_proto("h", &half);
        assert_eq!(tensor_from_proto(&raw, None, &limits).unwrap(), half);
        let packed = TensorProto {
            dims: vec![2],
            data_type: crate::import::proto::data_type::BFLOAT16,
            int32_data: vec![0x3f80, 0xbf80],
            ..TensorProto::default()
        };
        let t = tensor_from_proto(&packed, None, &limits).unwrap();
        assert_eq!(t.to_f32s().unwrap(), [1.0, -1.0]);
        let bad = TensorProto { int32_data: vec![0x3f80, 0x1_0000], ..packed.clone() };
        let err = tensor_from_proto(&bad, None, &limits).unwrap_err().to_string();
        assert!(err.contains("not 16 bits"), "{err}");
        let short = TensorProto { int32_data: vec![0x3f80], ..packed };
        assert!(tensor_from_proto(&short, None, &limits).is_err(), "one element for a shape of two");
    }

    #[test]
    fn pb_files_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("input_0.pb");
        let t = Tensor::new(vec![2, 2], TensorData::F32(vec![1.0, 2.0, 3.0, 4.0])).unwrap();
        write_tensor_pb(&path, "x", &t).unwrap();
        let back = read_tensor_pb(&path).unwrap();
        assert_eq!(back, NamedTensor { name: "x".into(), tensor: t });
    }

    #[test]
    fn typed_fields_are_read_and_checked() {
        let limits = ImportLimits::default();
        let proto = TensorProto {
            dims: vec![3],
            data_type: crate::import::proto::data_type::INT64,
            int64_data: vec![1, 2, 3],
            ..TensorProto::default()
        };
        assert_eq!(tensor_from_proto(&proto, None, &limits).unwrap(), Tensor::from_i64s(vec![1, 2, 3]));
        let short = TensorProto { dims: vec![4], ..proto.clone() };
        assert!(matches!(tensor_from_proto(&short, None, &limits), Err(OnnxError::Tensor { .. })));
        let huge = TensorProto { dims: vec![1 << 20, 1 << 20], ..proto };
        assert!(matches!(tensor_from_proto(&huge, None, &limits), Err(OnnxError::TooLarge { .. })));
    }

    #[test]
    fn garbage_is_a_decode_error() {
        let limits = ImportLimits::default();
        assert!(matches!(decode_tensor(&[0xff, 0xff, 0xff], "x", &limits), Err(OnnxError::Decode { .. })));
    }
}
