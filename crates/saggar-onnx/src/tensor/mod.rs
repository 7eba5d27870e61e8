//! Host tensors: owned [`Tensor`]s (initializers, folded constants, test data) and the borrowed
//! [`TensorView`] / [`TensorMut`] that op evaluation reads and writes.
//!
//! The element types are ONNX's numeric ones: f32, f64, the signed and unsigned integers of 8, 16,
//! 32 and 64 bits, bool, and f16 and bf16 (stored as their bits; the import computes half-precision
//! models in f32 between casts at the inputs and outputs, weights widened). Bools are stored as one
//! byte each (0 or 1), as ONNX raw data and device memory hold them; reading any other byte value as
//! `bool` would be undefined behaviour, so they stay `u8`.

mod data;
mod number;

use saggar_shape::DType;

pub use data::{DataMut, DataRef, Storage, TensorData, typed_like, typed_like_mut};
pub(crate) use data::{each_ref, match_each, match_pairs, same_type};
pub use number::{Float, Number, Wide, cast_into, first_wide, for_each_wide};
#[allow(unused_imports)]
pub(crate) use number::{each_number, each_number_mut, same_number};

use crate::error::OpError;

/// The numeric element types ops compute with: floats and integers, not bool.
pub const NUMERIC_DTYPES: [DType; 10] = [
    DType::F32,
    DType::F64,
    DType::I8,
    DType::U8,
    DType::I16,
    DType::U16,
    DType::I32,
    DType::U32,
    DType::I64,
    DType::U64,
];

/// The element types ops compute with: the numeric ones and bool (half-precision values are widened
/// to f32 at import).
pub const COMPUTE_DTYPES: [DType; 11] = joined(NUMERIC_DTYPES, [DType::Bool]);

/// The element types a tensor may have: every numeric type of ONNX but the 8-bit and sub-byte
/// floats, bool, and f16 and bf16.
pub const SUPPORTED_DTYPES: [DType; 13] = joined(COMPUTE_DTYPES, [DType::F16, DType::BF16]);

/// `a` followed by `b` (`C` is their total length).
const fn joined<const A: usize, const B: usize, const C: usize>(a: [DType; A], b: [DType; B]) -> [DType; C] {
    assert!(A + B == C, "the joined list's length is the sum of the two");
    let mut out = [DType::F32; C];
    let mut i = 0;
    while i < C {
        out[i] = if i < A { a[i] } else { b[i - A] };
        i += 1;
    }
    out
}

/// Whether `dtype` is one the declared op set computes with.
pub fn is_supported_dtype(dtype: DType) -> bool {
    SUPPORTED_DTYPES.contains(&dtype)
}

/// Bytes of one element of a supported type (bool is one byte).
pub fn element_bytes(dtype: DType) -> usize {
    dtype.size_bytes()
}

/// An owned host tensor in row-major order.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    dims: Vec<usize>,
    data: TensorData,
}

/// Elements of `dims`, or `None` if the product overflows.
pub fn checked_numel(dims: &[usize]) -> Option<usize> {
    dims.iter().try_fold(1usize, |n, &d| n.checked_mul(d))
}

impl Tensor {
    /// A tensor of `dims` holding `data`; fails if the element count differs.
    pub fn new(dims: Vec<usize>, data: TensorData) -> Result<Tensor, OpError> {
        let expected = checked_numel(&dims).ok_or_else(|| OpError::eval(format!("shape {dims:?} overflows")))?;
        if expected != data.len() {
            return Err(OpError::eval(format!(
                "shape {dims:?} needs {expected} elements, the data has {}",
                data.len()
            )));
        }
        Ok(Tensor { dims, data })
    }

    /// A tensor of `dims` and `dtype` filled with zeros (false for bool).
    pub fn zeros(dtype: DType, dims: Vec<usize>) -> Result<Tensor, OpError> {
        let n = checked_numel(&dims).ok_or_else(|| OpError::eval(format!("shape {dims:?} overflows")))?;
        let data = TensorData::zeros(dtype, n)
            .ok_or_else(|| OpError::eval(format!("element type {dtype} is not supported")))?;
        Ok(Tensor { dims, data })
    }

    /// The tensor with half-precision elements widened to f32 (exactly); other tensors unchanged.
    pub fn widened(self) -> Tensor {
        let data = match self.data.as_ref() {
            DataRef::F16(_) | DataRef::BF16(_) => TensorData::F32(self.data.as_ref().to_f32s().unwrap_or_default()),
            _ => self.data,
        };
        Tensor { dims: self.dims, data }
    }

    /// The f32 tensor rounded (to nearest even) to `dtype` when that is f16 or bf16; other tensors
    /// and targets fail.
    pub fn narrowed(self, dtype: DType) -> Result<Tensor, OpError> {
        let TensorData::F32(v) = self.data else {
            return Err(OpError::eval(format!("only f32 tensors narrow, not {}", self.data.dtype())));
        };
        let data = match dtype {
            DType::F16 => TensorData::F16(v.into_iter().map(|x| half::f16::from_f32(x).to_bits()).collect()),
            DType::BF16 => TensorData::BF16(v.into_iter().map(|x| half::bf16::from_f32(x).to_bits()).collect()),
            other => return Err(OpError::eval(format!("{other} is not a half precision"))),
        };
        Ok(Tensor { dims: self.dims, data })
    }

    /// The elements as f32 when the tensor is floating point (f32, f16 or bf16): for comparisons.
    pub fn to_f32s(&self) -> Option<Vec<f32>> {
        self.data.as_ref().to_f32s()
    }

    /// A 1-D i64 tensor.
    pub fn from_i64s(values: Vec<i64>) -> Tensor {
        Tensor { dims: vec![values.len()], data: TensorData::I64(values) }
    }

    /// A 0-D (scalar) tensor.
    pub fn scalar(data: TensorData) -> Result<Tensor, OpError> {
        Tensor::new(Vec::new(), data)
    }

    /// The dimensions.
    pub fn dims(&self) -> &[usize] {
        &self.dims
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.data.dtype()
    }

    /// The elements.
    pub fn data(&self) -> &TensorData {
        &self.data
    }

    /// The elements, mutably.
    pub fn data_mut(&mut self) -> &mut TensorData {
        &mut self.data
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// Whether the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.data.len() == 0
    }

    /// The same elements with other dimensions of the same element count.
    pub fn reshaped(mut self, dims: Vec<usize>) -> Result<Tensor, OpError> {
        if checked_numel(&dims) != Some(self.len()) {
            return Err(OpError::eval(format!("cannot view {:?} as {dims:?}", self.dims)));
        }
        self.dims = dims;
        Ok(self)
    }

    /// A borrowed view.
    pub fn view(&self) -> TensorView<'_> {
        TensorView { dims: &self.dims, data: self.data.as_ref() }
    }

    /// A mutable borrowed view.
    pub fn view_mut(&mut self) -> TensorMut<'_> {
        TensorMut { dims: &self.dims, data: self.data.as_mut() }
    }

    /// The elements as i64 when the tensor is integer (i64 or i32): shapes, axes, indices.
    pub fn to_i64s(&self) -> Option<Vec<i64>> {
        self.view().to_i64s()
    }

    /// The little-endian bytes of the elements.
    pub fn to_le_bytes(&self) -> Vec<u8> {
        self.view().data.to_le_bytes()
    }

    /// A tensor of `dtype` and `dims` from little-endian bytes (ONNX `raw_data`, device memory).
    pub fn from_le_bytes(dtype: DType, dims: Vec<usize>, bytes: &[u8]) -> Result<Tensor, OpError> {
        let n = checked_numel(&dims).ok_or_else(|| OpError::eval(format!("shape {dims:?} overflows")))?;
        let need = n.checked_mul(element_bytes(dtype)).ok_or_else(|| OpError::eval("byte size overflows"))?;
        if bytes.len() != need {
            return Err(OpError::eval(format!(
                "{dtype} tensor of shape {dims:?} needs {need} bytes, {} given",
                bytes.len()
            )));
        }
        let data = TensorData::from_le_bytes(dtype, bytes)
            .ok_or_else(|| OpError::eval(format!("element type {dtype} is not supported")))?;
        Ok(Tensor { dims, data })
    }
}

/// A borrowed tensor: what an op's evaluation reads.
#[derive(Clone, Copy, Debug)]
pub struct TensorView<'a> {
    /// Dimensions (row-major).
    pub dims: &'a [usize],
    /// Elements.
    pub data: DataRef<'a>,
}

macro_rules! typed_access {
    ($name:ident, $variant:ident, $ty:ty) => {
        /// The elements, or an evaluation error naming the actual type.
        pub fn $name(&self) -> Result<&'a [$ty], OpError> {
            match self.data {
                DataRef::$variant(v) => Ok(v),
                other => {
                    Err(OpError::eval(format!("expected {} elements, found {}", stringify!($variant), other.dtype())))
                }
            }
        }
    };
}

macro_rules! typed_access_mut {
    ($name:ident, $variant:ident, $ty:ty) => {
        /// The elements, or an evaluation error naming the actual type.
        pub fn $name(&mut self) -> Result<&mut [$ty], OpError> {
            match &mut self.data {
                DataMut::$variant(v) => Ok(v),
                other => Err(OpError::eval(format!(
                    "expected {} output elements, found {}",
                    stringify!($variant),
                    other.dtype()
                ))),
            }
        }
    };
}

impl<'a> TensorView<'a> {
    /// The elements as f32 when the tensor is floating point: f32 borrowed, half precisions widened
    /// (exactly); an evaluation error naming the type otherwise.
    pub fn floats(&self) -> Result<std::borrow::Cow<'a, [f32]>, OpError> {
        match self.data {
            DataRef::F32(x) => Ok(std::borrow::Cow::Borrowed(x)),
            other => other
                .to_f32s()
                .map(std::borrow::Cow::Owned)
                .ok_or_else(|| OpError::eval(format!("expected floating-point elements, found {}", other.dtype()))),
        }
    }

    typed_access!(f32s, F32, f32);
    typed_access!(i64s, I64, i64);
    typed_access!(i32s, I32, i32);
    typed_access!(bools, Bool, u8);
    typed_access!(f64s, F64, f64);

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.data.dtype()
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The elements as i64 when the tensor is integer (i64 or i32).
    pub fn to_i64s(&self) -> Option<Vec<i64>> {
        match self.data {
            DataRef::I64(v) => Some(v.to_vec()),
            DataRef::I32(v) => Some(v.iter().map(|&x| i64::from(x)).collect()),
            _ => None,
        }
    }

    /// An owned copy.
    pub fn to_tensor(&self) -> Tensor {
        Tensor { dims: self.dims.to_vec(), data: self.data.to_owned() }
    }
}

/// A mutably borrowed tensor: where an op's evaluation writes one output. Its dimensions are the
/// ones shape inference gave; the elements arrive with unspecified contents (a reused buffer).
#[derive(Debug)]
pub struct TensorMut<'a> {
    /// Dimensions (row-major).
    pub dims: &'a [usize],
    /// Elements.
    pub data: DataMut<'a>,
}

impl TensorMut<'_> {
    typed_access_mut!(f32s, F32, f32);
    typed_access_mut!(i64s, I64, i64);
    typed_access_mut!(i32s, I32, i32);
    typed_access_mut!(bools, Bool, u8);
    typed_access_mut!(f64s, F64, f64);

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.data.dtype()
    }

    /// Copies `src` (same type and element count) into this output.
    pub fn copy_from(&mut self, src: &TensorView<'_>) -> Result<(), OpError> {
        if !self.data.copy_from(src.data) {
            let (s, d) = (src.data, &self.data);
            return Err(OpError::eval(format!("cannot copy {} x{} into {} output", s.dtype(), s.len(), d.dtype())));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_round_trip_every_type() {
        for t in [
            Tensor::new(vec![2], TensorData::F32(vec![1.5, -2.0])).unwrap(),
            Tensor::new(vec![1, 2], TensorData::I64(vec![i64::MIN, 7])).unwrap(),
            Tensor::new(vec![2], TensorData::I32(vec![-1, 3])).unwrap(),
            Tensor::new(vec![3], TensorData::Bool(vec![1, 0, 1])).unwrap(),
            Tensor::new(vec![2], TensorData::F64(vec![1e300, -0.5])).unwrap(),
            Tensor::new(vec![2], TensorData::I8(vec![-128, 127])).unwrap(),
            Tensor::new(vec![2], TensorData::U8(vec![0, 255])).unwrap(),
            Tensor::new(vec![2], TensorData::I16(vec![i16::MIN, 1])).unwrap(),
            Tensor::new(vec![2], TensorData::U16(vec![u16::MAX, 1])).unwrap(),
            Tensor::new(vec![2], TensorData::U32(vec![u32::MAX, 1])).unwrap(),
            Tensor::new(vec![2], TensorData::U64(vec![u64::MAX, 1])).unwrap(),
            Tensor::new(vec![1], TensorData::F16(vec![0x3c00])).unwrap(),
            Tensor::new(vec![1], TensorData::BF16(vec![0x3f80])).unwrap(),
        ] {
            let back = Tensor::from_le_bytes(t.dtype(), t.dims().to_vec(), &t.to_le_bytes()).unwrap();
            assert_eq!(back, t);
        }
    }

    #[test]
    fn wrong_element_count_is_an_error() {
        assert!(Tensor::new(vec![2, 2], TensorData::F32(vec![1.0])).is_err());
        assert!(Tensor::from_le_bytes(DType::F32, vec![2], &[0; 7]).is_err());
        assert!(Tensor::zeros(DType::F32, vec![usize::MAX, 2]).is_err());
    }

    #[test]
    fn bool_bytes_are_normalised() {
        let t = Tensor::from_le_bytes(DType::Bool, vec![3], &[0, 2, 255]).unwrap();
        assert_eq!(t.data(), &TensorData::Bool(vec![0, 1, 1]));
    }
}
