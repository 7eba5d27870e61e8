//! The elements of a tensor, owned ([`TensorData`]) or borrowed ([`DataRef`], [`DataMut`]): one
//! variant per element type, and the macros that run one generic body over whichever variant a
//! tensor has ([`each_ref!`](crate::tensor::each_ref), [`same_type!`](crate::tensor::same_type)).

use saggar_shape::DType;

/// Declares the three element containers with one variant per element type, and their `dtype` and
/// `len`. Bools are one byte each (0 or 1); f16 and bf16 are held as their bits.
macro_rules! containers {
    ($($variant:ident($ty:ty) = $dtype:ident, $doc:literal;)*) => {
        /// The elements of an owned tensor.
        #[derive(Clone, Debug, PartialEq)]
        pub enum TensorData {
            $(#[doc = $doc] $variant(Vec<$ty>),)*
        }

        /// Borrowed elements.
        #[derive(Clone, Copy, Debug)]
        pub enum DataRef<'a> {
            $(#[doc = $doc] $variant(&'a [$ty]),)*
        }

        /// Mutably borrowed elements (bools: write only 0 or 1).
        #[derive(Debug)]
        pub enum DataMut<'a> {
            $(#[doc = $doc] $variant(&'a mut [$ty]),)*
        }

        impl TensorData {
            /// The element type.
            pub fn dtype(&self) -> DType {
                match self { $(TensorData::$variant(_) => DType::$dtype,)* }
            }

            /// Number of elements.
            pub fn len(&self) -> usize {
                match self { $(TensorData::$variant(v) => v.len(),)* }
            }

            /// A borrowed view of the elements.
            pub fn as_ref(&self) -> DataRef<'_> {
                match self { $(TensorData::$variant(v) => DataRef::$variant(v),)* }
            }

            /// A mutable borrowed view of the elements.
            pub fn as_mut(&mut self) -> DataMut<'_> {
                match self { $(TensorData::$variant(v) => DataMut::$variant(v),)* }
            }

            /// `n` zeros (false, +0.0) of `dtype`.
            pub fn zeros(dtype: DType, n: usize) -> Option<TensorData> {
                match dtype {
                    $(DType::$dtype => Some(TensorData::$variant(vec![<$ty>::default(); n])),)*
                    _ => None,
                }
            }

            /// The elements of `dtype` from their little-endian bytes (a whole number of elements;
            /// any non-zero byte is a true bool).
            pub(crate) fn from_le_bytes(dtype: DType, bytes: &[u8]) -> Option<TensorData> {
                const fn size<T>() -> usize { std::mem::size_of::<T>() }
                let mut data = match dtype {
                    $(DType::$dtype => Some(TensorData::$variant(
                        bytes.chunks_exact(size::<$ty>()).map(|c| <$ty>::from_le_bytes(c.try_into().unwrap_or_default())).collect(),
                    )),)*
                    _ => None,
                }?;
                if let TensorData::Bool(v) = &mut data {
                    v.iter_mut().for_each(|b| *b = u8::from(*b != 0));
                }
                Some(data)
            }
        }

        impl<'a> DataRef<'a> {
            /// The elements of `dtype` stored in `bytes` (aligned for the type, a whole number of
            /// elements): device memory read in place. `None` otherwise.
            pub(crate) fn from_bytes(dtype: DType, bytes: &'a [u8]) -> Option<DataRef<'a>> {
                match dtype {
                    $(DType::$dtype => Some(DataRef::$variant(bytemuck::try_cast_slice(bytes).ok()?)),)*
                    _ => None,
                }
            }
        }

        impl<'a> DataMut<'a> {
            /// The first `n` elements of `dtype` in `words` (a per-thread output buffer). `None` when
            /// they do not fit.
            pub(crate) fn from_words(dtype: DType, words: &'a mut [u64], n: usize) -> Option<DataMut<'a>> {
                match dtype {
                    $(DType::$dtype => Some(DataMut::$variant(bytemuck::cast_slice_mut(words).get_mut(..n)?)),)*
                    _ => None,
                }
            }
        }

        impl DataRef<'_> {
            /// The element type.
            pub fn dtype(&self) -> DType {
                match self { $(DataRef::$variant(_) => DType::$dtype,)* }
            }

            /// Number of elements.
            pub fn len(&self) -> usize {
                match self { $(DataRef::$variant(v) => v.len(),)* }
            }

            /// The little-endian bytes of the elements.
            pub fn to_le_bytes(&self) -> Vec<u8> {
                match self { $(DataRef::$variant(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),)* }
            }

            /// The elements in `range` (clamped to the length).
            pub fn slice(self, range: std::ops::Range<usize>) -> Self {
                match self {
                    $(DataRef::$variant(v) => {
                        let end = range.end.min(v.len());
                        DataRef::$variant(&v[range.start.min(end)..end])
                    })*
                }
            }

            /// An owned copy.
            pub fn to_owned(&self) -> TensorData {
                match self { $(DataRef::$variant(v) => TensorData::$variant(v.to_vec()),)* }
            }
        }

        impl DataMut<'_> {
            /// The element type.
            pub fn dtype(&self) -> DType {
                match self { $(DataMut::$variant(_) => DType::$dtype,)* }
            }

            /// Number of elements.
            pub fn len(&self) -> usize {
                match self { $(DataMut::$variant(v) => v.len(),)* }
            }

            /// Copies `src` when it has this type and length; `false` otherwise.
            pub(crate) fn copy_from(&mut self, src: DataRef<'_>) -> bool {
                match (self, src) {
                    $((DataMut::$variant(d), DataRef::$variant(s)) if d.len() == s.len() => {
                        d.copy_from_slice(s);
                        true
                    })*
                    _ => false,
                }
            }
        }
    };
}

containers! {
    F32(f32) = F32, "32-bit floats.";
    F64(f64) = F64, "64-bit floats.";
    I8(i8) = I8, "8-bit signed integers.";
    U8(u8) = U8, "8-bit unsigned integers.";
    I16(i16) = I16, "16-bit signed integers.";
    U16(u16) = U16, "16-bit unsigned integers.";
    I32(i32) = I32, "32-bit signed integers.";
    U32(u32) = U32, "32-bit unsigned integers.";
    I64(i64) = I64, "64-bit signed integers.";
    U64(u64) = U64, "64-bit unsigned integers.";
    Bool(u8) = Bool, "Booleans, one byte each, 0 or 1.";
    F16(u16) = F16, "IEEE half precision, as bits.";
    BF16(u16) = BF16, "bfloat16, as bits.";
}

impl TensorData {
    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl DataMut<'_> {
    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl DataRef<'_> {
    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The elements as f32 when they are floating point (f32; f16 and bf16 widened exactly).
    pub fn to_f32s(&self) -> Option<Vec<f32>> {
        match self {
            DataRef::F32(v) => Some(v.to_vec()),
            DataRef::F16(v) => Some(v.iter().map(|&b| half::f16::from_bits(b).to_f32()).collect()),
            DataRef::BF16(v) => Some(v.iter().map(|&b| half::bf16::from_bits(b).to_f32()).collect()),
            _ => None,
        }
    }
}

/// A Rust type elements are stored as: each numeric type, `u8` for bool too, `u16` for f16 and bf16
/// too. Finds the slice of the same storage in other data, for generic code that reads several
/// tensors of one element type.
pub trait Storage: Copy + Default + Send + Sync + 'static {
    /// The elements when `data` is stored as `Self`.
    fn of(data: DataRef<'_>) -> Option<&[Self]>;
    /// The mutable elements when `data` is stored as `Self`.
    fn of_mut<'a>(data: &'a mut DataMut<'_>) -> Option<&'a mut [Self]>;
}

macro_rules! storage {
    ($($ty:ty: $($variant:ident)|+;)*) => {$(
        impl Storage for $ty {
            fn of(data: DataRef<'_>) -> Option<&[Self]> {
                match data {
                    $(DataRef::$variant(v))|+ => Some(v),
                    _ => None,
                }
            }
            fn of_mut<'a>(data: &'a mut DataMut<'_>) -> Option<&'a mut [Self]> {
                match data {
                    $(DataMut::$variant(v))|+ => Some(v),
                    _ => None,
                }
            }
        }
    )*};
}

storage! {
    f32: F32;
    f64: F64;
    i8: I8;
    u8: U8 | Bool;
    i16: I16;
    u16: U16 | F16 | BF16;
    i32: I32;
    u32: U32;
    i64: I64;
    u64: U64;
}

/// `data`'s elements as the storage type of `like` (another tensor's slice): an evaluation error
/// when they are stored otherwise.
pub fn typed_like<'a, T: Storage>(_like: &[T], data: DataRef<'a>) -> Result<&'a [T], crate::error::OpError> {
    let dtype = data.dtype();
    T::of(data)
        .ok_or_else(|| crate::error::OpError::eval(format!("element type {dtype} differs from the other input's")))
}

/// `data`'s mutable elements as the storage type of `like`: an evaluation error when they are
/// stored otherwise.
pub fn typed_like_mut<'a, T: Storage>(
    _like: &[T],
    data: &'a mut DataMut<'_>,
) -> Result<&'a mut [T], crate::error::OpError> {
    let dtype = data.dtype();
    T::of_mut(data)
        .ok_or_else(|| crate::error::OpError::eval(format!("output element type {dtype} differs from the input's")))
}

/// A `match` on a `DataRef` or `DataMut` (`$enum`) with one arm per listed variant, each running
/// `$body` with `$v` bound to that variant's slice, and the fallback arm if given: the dispatch
/// macros are lists of variants over it.
macro_rules! match_each {
    ($enum:ident, $data:expr, [$($variant:ident),*], |$v:ident| $body:expr $(, $other:pat => $fallback:expr)?) => {
        match $data {
            $($crate::tensor::$enum::$variant($v) => $body,)*
            $($other => $fallback,)?
        }
    };
}
pub(crate) use match_each;

/// A `match` on a (`DataRef`, `DataMut`) pair with one arm per listed variant on both sides, each
/// running `$body` with the two slices bound, and the fallback arm.
macro_rules! match_pairs {
    ($src:expr, $dst:expr, [$($variant:ident),*], |$s:ident, $d:ident| $body:expr, $other:pat => $fallback:expr) => {
        match ($src, $dst) {
            $(($crate::tensor::DataRef::$variant($s), $crate::tensor::DataMut::$variant($d)) => $body,)*
            $other => $fallback,
        }
    };
}
pub(crate) use match_pairs;

/// Runs `$body` with `$v` bound to the elements' slice, whatever their type (bool, f16 and bf16 as
/// their `u8`/`u16` storage): for code generic over the element (copies, gathers, orderings of bits).
macro_rules! each_ref {
    ($data:expr, |$v:ident| $body:expr) => {
        $crate::tensor::match_each!(
            DataRef,
            $data,
            [F32, F64, I8, U8, I16, U16, I32, U32, I64, U64, Bool, F16, BF16],
            |$v| $body
        )
    };
}
pub(crate) use each_ref;

/// Runs `$body` with `$s` and `$d` bound to the typed source and destination slices when both
/// have the same element type (any type); otherwise evaluates to an [`OpError::Eval`](crate::error::OpError).
macro_rules! same_type {
    ($src:expr, $dst:expr, |$s:ident, $d:ident| $body:expr) => {
        $crate::tensor::match_pairs!($src, $dst, [F32, F64, I8, U8, I16, U16, I32, U32, I64, U64, Bool, F16, BF16], |$s, $d| $body, _ => {
            Err($crate::error::OpError::eval("output element type differs from the input's"))
        })
    };
}
pub(crate) use same_type;
