//! Element types as the three worlds name them: saggar's [`DType`], ONNX Runtime's type strings
//! (`"tensor(float)"`), numpy's type numbers and DLPack's type codes.

use numpy::npyffi::NPY_TYPES;
use saggar_shape::DType;

/// ONNX Runtime's name of an element type, as `NodeArg.type` shows it.
pub(crate) fn onnx_type(dtype: DType) -> &'static str {
    match dtype {
        DType::Bool => "tensor(bool)",
        DType::U8 => "tensor(uint8)",
        DType::I8 => "tensor(int8)",
        DType::U16 => "tensor(uint16)",
        DType::I16 => "tensor(int16)",
        DType::U32 => "tensor(uint32)",
        DType::I32 => "tensor(int32)",
        DType::U64 => "tensor(uint64)",
        DType::I64 => "tensor(int64)",
        DType::F16 => "tensor(float16)",
        DType::BF16 => "tensor(bfloat16)",
        DType::F32 => "tensor(float)",
        DType::F64 => "tensor(double)",
        DType::F8E4M3 => "tensor(float8e4m3fn)",
        DType::F8E5M2 => "tensor(float8e5m2)",
        _ => "tensor(undefined)",
    }
}

/// numpy's type number for arrays of `dtype`; `None` for types numpy has none for (bfloat16 and
/// the 8-bit floats).
pub(crate) fn numpy_type(dtype: DType) -> Option<NPY_TYPES> {
    Some(match dtype {
        DType::Bool => NPY_TYPES::NPY_BOOL,
        DType::U8 => NPY_TYPES::NPY_UBYTE,
        DType::I8 => NPY_TYPES::NPY_BYTE,
        DType::U16 => NPY_TYPES::NPY_USHORT,
        DType::I16 => NPY_TYPES::NPY_SHORT,
        DType::U32 => NPY_TYPES::NPY_UINT,
        DType::I32 => NPY_TYPES::NPY_INT,
        DType::U64 => NPY_TYPES::NPY_ULONGLONG,
        DType::I64 => NPY_TYPES::NPY_LONGLONG,
        DType::F16 => NPY_TYPES::NPY_HALF,
        DType::F32 => NPY_TYPES::NPY_FLOAT,
        DType::F64 => NPY_TYPES::NPY_DOUBLE,
        _ => return None,
    })
}

/// The element type of a numpy dtype given by its kind character (`b'f'`), item size and byte
/// order character; `None` for any other dtype (complex, strings, objects, big-endian data).
pub(crate) fn from_numpy(kind: u8, itemsize: usize, byteorder: u8) -> Option<DType> {
    if byteorder == b'>' {
        return None;
    }
    Some(match (kind, itemsize) {
        (b'b', 1) => DType::Bool,
        (b'u', 1) => DType::U8,
        (b'i', 1) => DType::I8,
        (b'u', 2) => DType::U16,
        (b'i', 2) => DType::I16,
        (b'u', 4) => DType::U32,
        (b'i', 4) => DType::I32,
        (b'u', 8) => DType::U64,
        (b'i', 8) => DType::I64,
        (b'f', 2) => DType::F16,
        (b'f', 4) => DType::F32,
        (b'f', 8) => DType::F64,
        _ => return None,
    })
}

/// DLPack's type codes (`DLDataTypeCode`).
const DL_INT: u8 = 0;
const DL_UINT: u8 = 1;
const DL_FLOAT: u8 = 2;
const DL_BFLOAT: u8 = 4;
const DL_BOOL: u8 = 6;
const DL_FLOAT8_E4M3FN: u8 = 10;
const DL_FLOAT8_E5M2: u8 = 12;

/// The element type of a DLPack `(code, bits, lanes)`; `None` for vector lanes and types saggar
/// has no element type for.
pub(crate) fn from_dlpack(code: u8, bits: u8, lanes: u16) -> Option<DType> {
    if lanes != 1 {
        return None;
    }
    Some(match (code, bits) {
        (DL_BOOL, 8) => DType::Bool,
        (DL_UINT, 8) => DType::U8,
        (DL_INT, 8) => DType::I8,
        (DL_UINT, 16) => DType::U16,
        (DL_INT, 16) => DType::I16,
        (DL_UINT, 32) => DType::U32,
        (DL_INT, 32) => DType::I32,
        (DL_UINT, 64) => DType::U64,
        (DL_INT, 64) => DType::I64,
        (DL_FLOAT, 16) => DType::F16,
        (DL_BFLOAT, 16) => DType::BF16,
        (DL_FLOAT, 32) => DType::F32,
        (DL_FLOAT, 64) => DType::F64,
        (DL_FLOAT8_E4M3FN, 8) => DType::F8E4M3,
        (DL_FLOAT8_E5M2, 8) => DType::F8E5M2,
        _ => return None,
    })
}

/// DLPack's `(code, bits)` of `dtype`.
pub(crate) fn to_dlpack(dtype: DType) -> (u8, u8) {
    let bits = (dtype.size_bytes() * 8) as u8;
    let code = match dtype {
        DType::Bool => DL_BOOL,
        DType::U8 | DType::U16 | DType::U32 | DType::U64 => DL_UINT,
        DType::I8 | DType::I16 | DType::I32 | DType::I64 => DL_INT,
        DType::F16 | DType::F32 | DType::F64 => DL_FLOAT,
        DType::BF16 => DL_BFLOAT,
        DType::F8E4M3 => DL_FLOAT8_E4M3FN,
        DType::F8E5M2 => DL_FLOAT8_E5M2,
        _ => DL_UINT,
    };
    (code, bits)
}

/// The element type ONNX Runtime's `bind_input(..., element_type=...)` names: a numpy type such as
/// `np.float32` (or its name, `"float32"`), given as the name of the numpy dtype it makes.
pub(crate) fn from_numpy_name(name: &str) -> Option<DType> {
    Some(match name {
        "bool" => DType::Bool,
        "uint8" => DType::U8,
        "int8" => DType::I8,
        "uint16" => DType::U16,
        "int16" => DType::I16,
        "uint32" => DType::U32,
        "int32" => DType::I32,
        "uint64" => DType::U64,
        "int64" => DType::I64,
        "float16" => DType::F16,
        "float32" => DType::F32,
        "float64" => DType::F64,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dlpack_codes_round_trip() {
        for dtype in DType::ALL {
            let (code, bits) = to_dlpack(dtype);
            assert_eq!(from_dlpack(code, bits, 1), Some(dtype), "{dtype}");
            assert_eq!(from_dlpack(code, bits, 4), None, "vector lanes are refused");
        }
    }

    #[test]
    fn numpy_kinds_map_to_their_types() {
        assert_eq!(from_numpy(b'f', 4, b'<'), Some(DType::F32));
        assert_eq!(from_numpy(b'f', 4, b'='), Some(DType::F32));
        assert_eq!(from_numpy(b'i', 8, b'='), Some(DType::I64));
        assert_eq!(from_numpy(b'b', 1, b'|'), Some(DType::Bool));
        assert_eq!(from_numpy(b'f', 4, b'>'), None, "big-endian data is refused");
        assert_eq!(from_numpy(b'c', 8, b'='), None, "complex has no saggar type");
        for dtype in DType::ALL {
            assert_eq!(numpy_type(dtype).is_some(), !matches!(dtype, DType::BF16 | DType::F8E4M3 | DType::F8E5M2));
        }
    }

    #[test]
    fn onnx_type_strings_are_onnxruntimes() {
        assert_eq!(onnx_type(DType::F32), "tensor(float)");
        assert_eq!(onnx_type(DType::I64), "tensor(int64)");
        assert_eq!(onnx_type(DType::F64), "tensor(double)");
        assert_eq!(from_numpy_name("float32"), Some(DType::F32));
    }
}
