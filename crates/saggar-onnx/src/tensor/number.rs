//! [`Number`]: the ten numeric element types (f32, f64 and the integers of 8 to 64 bits) behind one
//! trait, so a host kernel is written once, generic over its element, and [`each_number!`] runs it
//! on whichever type a tensor has.

use saggar_shape::DType;

/// A value of any numeric element type, wide enough to hold it exactly: what a conversion passes
/// through. Converting it to a type acts as Rust's `as` from the original type would (integers wrap,
/// floats to integers saturate with NaN as 0, floats round to nearest even).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Wide {
    /// An integer of any width.
    Int(i128),
    /// A float (f32 widened exactly).
    Float(f64),
}

/// A numeric element type. `as`-style conversions go through [`Wide`]; arithmetic is the type's own.
pub trait Number: Copy + Default + PartialOrd + std::fmt::Debug + Send + Sync + 'static {
    /// The element type.
    const DTYPE: DType;
    /// Whether the type is floating point.
    const FLOAT: bool;
    /// The smallest value (negative infinity for floats).
    const LOWEST: Self;
    /// The largest value (infinity for floats).
    const HIGHEST: Self;
    /// The value, exactly.
    fn widen(self) -> Wide;
    /// `v` converted as Rust's `as` would convert the value it came from.
    fn narrow(v: Wide) -> Self;
    /// The value as f64 (integers above 2^53 rounded).
    fn to_f64(self) -> f64;
    /// `v` converted as `v as Self` (floats saturate into integers, NaN as 0).
    fn from_f64(v: f64) -> Self;
    /// Zero.
    const ZERO: Self;
    /// One.
    const ONE: Self;
    /// `self + v`, wrapping for integers.
    fn add(self, v: Self) -> Self;
    /// `self * v`, wrapping for integers.
    fn mul(self, v: Self) -> Self;
    /// `|self|`, wrapping for signed integers (`MIN` stays `MIN`), unchanged for unsigned ones.
    fn abs(self) -> Self;
    /// `self / n` for a count `n`: floats divide, integers divide toward zero (0 when `n` does not
    /// fit the type).
    fn div_count(self, n: usize) -> Self;
}

/// The float element types (f32, f64): the math of the float-only ops.
pub trait Float: Number {
    /// `e^self`.
    fn exp(self) -> Self;
    /// The natural logarithm.
    fn ln(self) -> Self;
    /// The square root.
    fn sqrt(self) -> Self;
}

/// The `as` conversions every numeric type shares (inside an `impl Number`).
macro_rules! conversions {
    ($ty:ty) => {
        fn narrow(v: Wide) -> Self {
            match v {
                Wide::Int(i) => i as $ty,
                Wide::Float(f) => f as $ty,
            }
        }
        fn to_f64(self) -> f64 {
            self as f64
        }
        fn from_f64(v: f64) -> Self {
            v as $ty
        }
    };
}

macro_rules! int_number {
    ($($ty:ty = $dtype:ident),*) => {$(
        impl Number for $ty {
            const DTYPE: DType = DType::$dtype;
            const FLOAT: bool = false;
            const LOWEST: Self = <$ty>::MIN;
            const HIGHEST: Self = <$ty>::MAX;
            fn widen(self) -> Wide {
                Wide::Int(self as i128)
            }
            conversions!($ty);
            const ZERO: Self = 0;
            const ONE: Self = 1;
            fn add(self, v: Self) -> Self {
                self.wrapping_add(v)
            }
            fn mul(self, v: Self) -> Self {
                self.wrapping_mul(v)
            }
            #[allow(unused_comparisons)] // unsigned types are never negative
            fn abs(self) -> Self {
                if self < 0 { (0 as $ty).wrapping_sub(self) } else { self }
            }
            fn div_count(self, n: usize) -> Self {
                <$ty>::try_from(n).ok().and_then(|n| self.checked_div(n)).unwrap_or(0)
            }
        }
    )*};
}

macro_rules! float_number {
    ($($ty:ty = $dtype:ident),*) => {$(
        impl Number for $ty {
            const DTYPE: DType = DType::$dtype;
            const FLOAT: bool = true;
            const LOWEST: Self = <$ty>::NEG_INFINITY;
            const HIGHEST: Self = <$ty>::INFINITY;
            fn widen(self) -> Wide {
                Wide::Float(self as f64)
            }
            conversions!($ty);
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            fn add(self, v: Self) -> Self {
                self + v
            }
            fn mul(self, v: Self) -> Self {
                self * v
            }
            fn abs(self) -> Self {
                <$ty>::abs(self)
            }
            fn div_count(self, n: usize) -> Self {
                self / n as $ty
            }
        }

        impl Float for $ty {
            fn exp(self) -> Self {
                <$ty>::exp(self)
            }
            fn ln(self) -> Self {
                <$ty>::ln(self)
            }
            fn sqrt(self) -> Self {
                <$ty>::sqrt(self)
            }
        }
    )*};
}

int_number!(i8 = I8, u8 = U8, i16 = I16, u16 = U16, i32 = I32, u32 = U32, i64 = I64, u64 = U64);
float_number!(f32 = F32, f64 = F64);

/// Runs `$body` with `$v` bound to the elements' slice when they are numeric (f32, f64 or an
/// integer type; the slice's element implements [`Number`]); evaluates `$other` for bool, f16 and
/// bf16.
#[allow(unused_macros)] // for the op families as they take every numeric type
macro_rules! each_number {
    ($data:expr, |$v:ident| $body:expr, $other:pat => $fallback:expr) => {
        $crate::tensor::match_each!(DataRef, $data, [F32, F64, I8, U8, I16, U16, I32, U32, I64, U64], |$v| $body, $other => $fallback)
    };
}
pub(crate) use each_number;

/// Runs `$body` with `$v` bound to the mutable elements' slice when they are numeric; evaluates
/// `$other` for bool, f16 and bf16.
macro_rules! each_number_mut {
    ($data:expr, |$v:ident| $body:expr, $other:pat => $fallback:expr) => {
        $crate::tensor::match_each!(DataMut, $data, [F32, F64, I8, U8, I16, U16, I32, U32, I64, U64], |$v| $body, $other => $fallback)
    };
}
pub(crate) use each_number_mut;

/// Runs `$body` with `$s` and `$d` bound to source and destination slices of one numeric type
/// (the same type on both sides); evaluates `$other` otherwise.
macro_rules! same_number {
    ($src:expr, $dst:expr, |$s:ident, $d:ident| $body:expr, $other:pat => $fallback:expr) => {
        $crate::tensor::match_pairs!($src, $dst, [F32, F64, I8, U8, I16, U16, I32, U32, I64, U64], |$s, $d| $body, $other => $fallback)
    };
}
pub(crate) use same_number;

impl Wide {
    /// The value as f64 (integers above 2^53 rounded).
    pub fn to_f64(self) -> f64 {
        match self {
            Wide::Int(i) => i as f64,
            Wide::Float(f) => f,
        }
    }

    /// Whether the value is zero (either sign); NaN is not.
    pub fn is_zero(self) -> bool {
        match self {
            Wide::Int(i) => i == 0,
            Wide::Float(f) => f == 0.0,
        }
    }
}

/// Calls `f(i, x)` for every element of numeric, bool or half data as a [`Wide`] (bools as 0 or 1,
/// half precisions widened exactly).
pub fn for_each_wide(data: crate::tensor::DataRef<'_>, mut f: impl FnMut(usize, Wide)) {
    use crate::tensor::DataRef;
    fn all<T: Number>(v: &[T], f: &mut impl FnMut(usize, Wide)) {
        v.iter().enumerate().for_each(|(i, x)| f(i, x.widen()));
    }
    let widen = |x: f32| Wide::Float(f64::from(x));
    match data {
        DataRef::F32(v) => all(v, &mut f),
        DataRef::F64(v) => all(v, &mut f),
        DataRef::I8(v) => all(v, &mut f),
        DataRef::U8(v) => all(v, &mut f),
        DataRef::I16(v) => all(v, &mut f),
        DataRef::U16(v) => all(v, &mut f),
        DataRef::I32(v) => all(v, &mut f),
        DataRef::U32(v) => all(v, &mut f),
        DataRef::I64(v) => all(v, &mut f),
        DataRef::U64(v) => all(v, &mut f),
        DataRef::Bool(v) => v.iter().enumerate().for_each(|(i, &b)| f(i, Wide::Int(i128::from(b)))),
        DataRef::F16(v) => v.iter().enumerate().for_each(|(i, &b)| f(i, widen(half::f16::from_bits(b).to_f32()))),
        DataRef::BF16(v) => v.iter().enumerate().for_each(|(i, &b)| f(i, widen(half::bf16::from_bits(b).to_f32()))),
    }
}

/// The first element of numeric, bool or half data as a [`Wide`]; `None` when there is none.
pub fn first_wide(data: crate::tensor::DataRef<'_>) -> Option<Wide> {
    let mut first = None;
    for_each_wide(data.slice(0..data.len().min(1)), |_, w| first = Some(w));
    first
}

/// Writes `src` converted into `dst` (the same element count): numbers as Rust's `as` converts
/// them (integers wrap, floats saturate into integers with NaN as 0, where C leaves both undefined),
/// bools as 0 or 1 and to `x != 0`, half precisions widened exactly and narrowed to nearest even.
pub fn cast_into(
    src: crate::tensor::DataRef<'_>,
    dst: &mut crate::tensor::DataMut<'_>,
) -> Result<(), crate::error::OpError> {
    if src.len() != dst.len() {
        return Err(crate::error::OpError::eval(format!("cannot cast {} elements into {}", src.len(), dst.len())));
    }
    fn numbers<T: Number>(src: crate::tensor::DataRef<'_>, o: &mut [T]) {
        for_each_wide(src, |i, w| o[i] = T::narrow(w));
    }
    each_number_mut!(dst, |o| numbers(src, o), other => match other {
        crate::tensor::DataMut::Bool(o) => for_each_wide(src, |i, w| o[i] = u8::from(!w.is_zero())),
        crate::tensor::DataMut::F16(o) => for_each_wide(src, |i, w| o[i] = half::f16::from_f64(w.to_f64()).to_bits()),
        crate::tensor::DataMut::BF16(o) => for_each_wide(src, |i, w| o[i] = half::bf16::from_f64(w.to_f64()).to_bits()),
        _ => return Err(crate::error::OpError::eval(format!("Cast to {} is not supported", other.dtype()))),
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_wraps_for_integers() {
        assert_eq!(200u8.add(100), 44);
        assert_eq!(Number::abs(i8::MIN), i8::MIN);
        assert_eq!(Number::abs(7u16), 7);
        assert_eq!(Number::abs(-2.5f64), 2.5);
        assert_eq!((-7i32).div_count(2), -3);
        assert_eq!(5i8.div_count(300), 0);
        assert_eq!(3f64.div_count(2), 1.5);
    }

    #[test]
    fn conversions_act_as_rust_as() {
        assert_eq!(u8::narrow((-1i64).widen()), 255);
        assert_eq!(i8::narrow(200u64.widen()), -56);
        assert_eq!(i32::narrow(f64::NAN.widen()), 0);
        assert_eq!(u16::narrow(1e9f32.widen()), u16::MAX);
        assert_eq!(f32::narrow(u64::MAX.widen()), u64::MAX as f32);
        assert_eq!(f32::narrow(0.1f64.widen()), 0.1f32);
        assert_eq!(i64::narrow((-2.7f32).widen()), -2);
    }
}
