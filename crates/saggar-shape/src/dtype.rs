//! Element types and their sizes.

use std::fmt;

/// The element type of a tensor.
///
/// Every variant has a fixed, documented [`code`](DType::code) that takes part in the
/// [stable shape key](crate::StableShapeKey); codes are never reused or renumbered, so a new
/// type only ever gets a new code. Sub-byte types (int4, fp4) are not represented: saggar-shape
/// computes sizes in whole bytes per element.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
#[non_exhaustive]
pub enum DType {
    /// One byte per element, 0 or 1.
    Bool = 1,
    /// Unsigned 8-bit integer.
    U8 = 2,
    /// Signed 8-bit integer.
    I8 = 3,
    /// Unsigned 16-bit integer.
    U16 = 4,
    /// Signed 16-bit integer.
    I16 = 5,
    /// Unsigned 32-bit integer.
    U32 = 6,
    /// Signed 32-bit integer.
    I32 = 7,
    /// Unsigned 64-bit integer.
    U64 = 8,
    /// Signed 64-bit integer.
    I64 = 9,
    /// IEEE 754 half precision.
    F16 = 10,
    /// bfloat16: the upper half of an `f32`.
    BF16 = 11,
    /// IEEE 754 single precision.
    F32 = 12,
    /// IEEE 754 double precision.
    F64 = 13,
    /// 8-bit float, 4 exponent and 3 mantissa bits (OCP E4M3).
    F8E4M3 = 14,
    /// 8-bit float, 5 exponent and 2 mantissa bits (OCP E5M2).
    F8E5M2 = 15,
}

impl DType {
    /// Every element type, in code order.
    pub const ALL: [DType; 15] = [
        DType::Bool,
        DType::U8,
        DType::I8,
        DType::U16,
        DType::I16,
        DType::U32,
        DType::I32,
        DType::U64,
        DType::I64,
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::F64,
        DType::F8E4M3,
        DType::F8E5M2,
    ];

    /// Size of one element in bytes.
    pub const fn size_bytes(self) -> usize {
        match self {
            DType::Bool | DType::U8 | DType::I8 | DType::F8E4M3 | DType::F8E5M2 => 1,
            DType::U16 | DType::I16 | DType::F16 | DType::BF16 => 2,
            DType::U32 | DType::I32 | DType::F32 => 4,
            DType::U64 | DType::I64 | DType::F64 => 8,
        }
    }

    /// The stable one-byte code of this type, as written into stable shape keys.
    pub const fn code(self) -> u8 {
        self as u8
    }

    /// The type with the given [`code`](DType::code), if there is one.
    pub const fn from_code(code: u8) -> Option<DType> {
        if code >= 1 && code as usize <= DType::ALL.len() { Some(DType::ALL[code as usize - 1]) } else { None }
    }

    /// The lower-case name used in messages and by ONNX-like tooling (`"f32"`, `"bf16"`).
    pub const fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::U8 => "u8",
            DType::I8 => "i8",
            DType::U16 => "u16",
            DType::I16 => "i16",
            DType::U32 => "u32",
            DType::I32 => "i32",
            DType::U64 => "u64",
            DType::I64 => "i64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::F8E4M3 => "f8e4m3",
            DType::F8E5M2 => "f8e5m2",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_are_dense() {
        for (i, dtype) in DType::ALL.iter().enumerate() {
            assert_eq!(dtype.code() as usize, i + 1);
            assert_eq!(DType::from_code(dtype.code()), Some(*dtype));
        }
        assert_eq!(DType::from_code(0), None);
        assert_eq!(DType::from_code(DType::ALL.len() as u8 + 1), None);
    }

    #[test]
    fn sizes_match_rust_types() {
        assert_eq!(DType::F32.size_bytes(), size_of::<f32>());
        assert_eq!(DType::F64.size_bytes(), size_of::<f64>());
        assert_eq!(DType::I64.size_bytes(), size_of::<i64>());
        assert_eq!(DType::U16.size_bytes(), size_of::<u16>());
        assert_eq!(DType::BF16.size_bytes(), 2);
        assert_eq!(DType::Bool.size_bytes(), 1);
    }
}
