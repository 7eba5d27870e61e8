//! The element arithmetic of this family beyond [`Number`]'s, so that each host kernel is one
//! generic function: [`Arith`] for every numeric type (integer arithmetic wraps, and what C leaves
//! undefined is defined), [`Int`] for the integer types' bits, [`FloatMath`] for f32 and f64; the
//! macros that dispatch integer or float data ([`each_int!`], [`each_float!`]); and the C++ pieces
//! the GPU expressions of every type share ([`c_suffix`], [`c_lit`], [`c_wrapping`], ...).

use saggar_shape::DType;

use crate::ops::OpError;
use crate::ops::gpu::ctype;
use crate::tensor::{Float, Number, Wide};

/// Arithmetic of every numeric type, as the host kernels and the GPU expressions compute it.
pub(super) trait Arith: Number {
    /// `self - v`, wrapping for integers.
    fn sub(self, v: Self) -> Self;
    /// `self / v`: integers divide toward zero, wrap (`MIN / -1` is `MIN`) and give 0 for a zero
    /// divisor.
    fn div(self, v: Self) -> Self;
    /// The remainder of truncating division, of the dividend's sign (C's `%` and `fmod`);
    /// integers give 0 for a zero divisor.
    fn rem(self, v: Self) -> Self;
    /// `-self`, wrapping for integers.
    fn neg(self) -> Self;
    /// -1, 0 or 1; for floats NaN stays NaN and a zero keeps its sign.
    fn sign(self) -> Self;
    /// `self` to the power `e`: a float raised to `e` converted to its type (`powf`); an integer
    /// to an integer exponent by repeated wrapping products (0 for a negative exponent), to a
    /// float exponent through f64 `pow` converted as Rust's `as` converts.
    fn power(self, e: Wide) -> Self;
}

/// The integer types: bitwise logic and shifts.
pub(super) trait Int:
    Arith
    + std::ops::Not<Output = Self>
    + std::ops::BitAnd<Output = Self>
    + std::ops::BitOr<Output = Self>
    + std::ops::BitXor<Output = Self>
{
    /// `self` shifted left (`left`) or right by `by` places: 0 from the type's width on (and for
    /// a negative amount). Right shifts of unsigned types fill with zeros.
    fn shift(self, by: Self, left: bool) -> Self;
}

macro_rules! int_arith {
    ($($ty:ty),*) => {$(
        impl Arith for $ty {
            fn sub(self, v: Self) -> Self {
                self.wrapping_sub(v)
            }
            fn div(self, v: Self) -> Self {
                if v == 0 { 0 } else { self.wrapping_div(v) }
            }
            fn rem(self, v: Self) -> Self {
                if v == 0 { 0 } else { self.wrapping_rem(v) }
            }
            fn neg(self) -> Self {
                self.wrapping_neg()
            }
            #[allow(unused_comparisons)] // unsigned types are never negative
            fn sign(self) -> Self {
                if self > 0 { 1 } else if self < 0 { (0 as $ty).wrapping_sub(1) } else { 0 }
            }
            fn power(self, e: Wide) -> Self {
                match e {
                    Wide::Int(n) if n < 0 => 0,
                    Wide::Int(n) => {
                        let (mut n, mut base, mut r) = (n, self, 1 as $ty);
                        while n > 0 {
                            if n & 1 == 1 {
                                r = r.wrapping_mul(base);
                            }
                            base = base.wrapping_mul(base);
                            n >>= 1;
                        }
                        r
                    }
                    Wide::Float(f) => (self as f64).powf(f) as $ty,
                }
            }
        }

        impl Int for $ty {
            fn shift(self, by: Self, left: bool) -> Self {
                let by = u32::try_from(by).ok();
                let shifted = if left { by.and_then(|s| self.checked_shl(s)) } else { by.and_then(|s| self.checked_shr(s)) };
                shifted.unwrap_or(0)
            }
        }
    )*};
}

int_arith!(i8, u8, i16, u16, i32, u32, i64, u64);

/// Declares [`FloatMath`] with the one-argument functions f32 and f64 both have, and implements it.
macro_rules! float_math {
    ($($f:ident),*) => {
        /// The float types (f32, f64): the math of the float-only ops, each computed in the type.
        pub(super) trait FloatMath:
            Float
            + Arith
            + std::ops::Add<Output = Self>
            + std::ops::Sub<Output = Self>
            + std::ops::Mul<Output = Self>
            + std::ops::Div<Output = Self>
            + std::ops::Neg<Output = Self>
        {
            $(
                #[doc = concat!("`", stringify!($f), "` of the value.")]
                fn $f(self) -> Self;
            )*
            /// The error function.
            fn erf(self) -> Self;
            /// The larger of the two; a NaN gives the other.
            fn max(self, v: Self) -> Self;
            /// An f32 attribute's value (exact).
            fn of(v: f32) -> Self;
        }

        impl Arith for f32 {
            float_arith!();
        }

        impl Arith for f64 {
            float_arith!();
        }

        float_math_impl!(f32, libm::erff; $($f),*);
        float_math_impl!(f64, libm::erf; $($f),*);
    };
}

/// Implements [`FloatMath`] for a type with its error function.
macro_rules! float_math_impl {
    ($ty:ty, $erf:path; $($f:ident),*) => {
        impl FloatMath for $ty {
            $(fn $f(self) -> Self { <$ty>::$f(self) })*
            fn erf(self) -> Self {
                $erf(self)
            }
            fn max(self, v: Self) -> Self {
                <$ty>::max(self, v)
            }
            fn of(v: f32) -> Self {
                Self::from(v)
            }
        }
    };
}

macro_rules! float_arith {
    () => {
        fn sub(self, v: Self) -> Self {
            self - v
        }
        fn div(self, v: Self) -> Self {
            self / v
        }
        fn rem(self, v: Self) -> Self {
            self % v
        }
        fn neg(self) -> Self {
            -self
        }
        fn sign(self) -> Self {
            if self > 0.0 {
                1.0
            } else if self < 0.0 {
                -1.0
            } else {
                self
            }
        }
        fn power(self, e: Wide) -> Self {
            self.powf(Self::narrow(e))
        }
    };
}

float_math!(
    sin,
    cos,
    tan,
    asin,
    acos,
    atan,
    sinh,
    cosh,
    asinh,
    acosh,
    atanh,
    tanh,
    floor,
    ceil,
    round_ties_even,
    exp_m1,
    ln_1p
);

/// Runs `$body` with `$v` bound to the elements' slice when they are integers (the slice's
/// element implements [`Int`]); evaluates `$other` otherwise.
macro_rules! each_int {
    ($data:expr, |$v:ident| $body:expr, $other:pat => $fallback:expr) => {
        $crate::tensor::match_each!(DataRef, $data, [I8, U8, I16, U16, I32, U32, I64, U64], |$v| $body, $other => $fallback)
    };
}
pub(super) use each_int;

/// Runs `$body` with `$v` bound to the elements' slice when they are f32 or f64 (the slice's
/// element implements [`FloatMath`]); evaluates `$other` otherwise.
macro_rules! each_float {
    ($data:expr, |$v:ident| $body:expr, $other:pat => $fallback:expr) => {
        $crate::tensor::match_each!(DataRef, $data, [F32, F64], |$v| $body, $other => $fallback)
    };
}
pub(super) use each_float;

/// The float types of the float-only ops (f16 and bf16 reach them as f32).
pub(super) const FLOATS: &[DType] = &[DType::F32, DType::F64];
/// The signed integer types.
pub(super) const SIGNED: &[DType] = &[DType::I8, DType::I16, DType::I32, DType::I64];
/// The unsigned integer types.
pub(super) const UNSIGNED: &[DType] = &[DType::U8, DType::U16, DType::U32, DType::U64];
/// The integer types.
pub(super) const INTS: &[DType] =
    &[DType::I8, DType::U8, DType::I16, DType::U16, DType::I32, DType::U32, DType::I64, DType::U64];

/// The C++ type of `d`, or an error naming it.
pub(super) fn c_type(d: DType) -> Result<&'static str, OpError> {
    ctype(d).ok_or_else(|| OpError::eval(format!("{d} is not supported on GPU")))
}

/// The suffix of `d`'s math functions and literals: `f` for f32 (`expf`, `1.0f`), none for f64.
pub(super) fn c_suffix(d: DType) -> &'static str {
    if d == DType::F64 { "" } else { "f" }
}

/// A constant of float type `d` as a C++ expression that reads back as exactly `v` (an f32 for
/// f32): the shortest decimal that round-trips, parenthesised when negative; an infinity or NaN
/// through the bits of its f32.
pub(super) fn c_lit(d: DType, v: f64) -> String {
    if d != DType::F64 {
        super::c_float(v as f32)
    } else if !v.is_finite() {
        format!("(double){}", super::c_float(v as f32))
    } else if v.is_sign_negative() {
        format!("({v:?})")
    } else {
        format!("{v:?}")
    }
}

/// The unsigned C++ type integer arithmetic of `d` wraps in: C's promotions turn 8- and 16-bit
/// operands into `int`, whose overflow (a `u16` product) is undefined, and so is a signed one's.
fn c_unsigned(d: DType) -> &'static str {
    if d.size_bytes() == 8 { "unsigned long long" } else { "unsigned" }
}

/// `$0 op $1` for `+`, `-` or `*`, wrapping for integers as [`Arith`] does.
pub(super) fn c_wrapping(d: DType, op: &str) -> Result<String, OpError> {
    if FLOATS.contains(&d) {
        return Ok(format!("($0 {op} $1)"));
    }
    let (t, u) = (c_type(d)?, c_unsigned(d));
    Ok(format!("({t})(({u})$0 {op} ({u})$1)"))
}

/// `-$0`, wrapping for integers.
pub(super) fn c_negate(d: DType) -> Result<String, OpError> {
    if FLOATS.contains(&d) {
        return Ok("(-$0)".into());
    }
    Ok(format!("({})(0u - ({})$0)", c_type(d)?, c_unsigned(d)))
}

/// The integer `$0 ** $1` (exponent of integer type `e`) as [`Arith::pow`] computes it: repeated
/// wrapping products in an immediately called lambda.
pub(super) fn c_int_pow(d: DType, e: DType) -> Result<String, OpError> {
    let (t, te, u) = (c_type(d)?, c_type(e)?, c_unsigned(d));
    Ok(format!(
        "[]({t} b, {te} e) -> {t} {{ if (e < 0) return ({t})0; unsigned long long n = (unsigned long long)e; {u} r = 1u, m = ({u})b; \
         while (n != 0) {{ if (n & 1u) r *= m; m *= m; n >>= 1; }} return ({t})r; }}($0, $1)"
    ))
}

/// `expr` (of C++ type `from`, `float` or `double`) converted to integer type `to` as Rust's `as`
/// converts: toward zero, saturated at the type's bounds, NaN as 0 (the prelude's
/// `onnx_float_to_int`; C leaves out-of-range conversions undefined).
pub(crate) fn c_float_to_int(to: DType, from: &str, expr: &str) -> Result<String, OpError> {
    let t = c_type(to)?;
    let bits = 8 * to.size_bytes() as i32;
    let (lo, hi) =
        if SIGNED.contains(&to) { (-(2f64.powi(bits - 1)), 2f64.powi(bits - 1)) } else { (0.0, 2f64.powi(bits)) };
    Ok(format!("onnx_float_to_int<{t}, {from}>(({from})({expr}), ({from}){lo:?}, ({from}){hi:?})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_arithmetic_wraps_and_defines_what_c_leaves_undefined() {
        assert_eq!((-128i8).div(-1), -128);
        assert_eq!(7u16.div(0), 0);
        assert_eq!(i32::MIN.rem(-1), 0);
        assert_eq!(5u8.rem(0), 0);
        assert_eq!(Arith::neg(5u32), u32::MAX - 4);
        assert_eq!((-9i64).sign(), -1);
        assert_eq!(9u8.sign(), 1);
        assert_eq!(3u8.power(Wide::Int(5)), 243);
        assert_eq!(3u8.power(Wide::Int(6)), (729 % 256) as u8);
        assert_eq!((-2i32).power(Wide::Int(-1)), 0);
        assert_eq!(2i64.power(Wide::Float(0.5)), 1, "f64 pow, truncated");
        assert_eq!(200u8.power(Wide::Float(2.0)), 255, "saturated");
        assert_eq!(1u64.shift(63, true), 1 << 63);
        assert_eq!(1u64.shift(64, true), 0);
        assert_eq!(0x80u8.shift(7, false), 1);
        assert_eq!(0x80u8.shift(8, false), 0);
    }

    #[test]
    fn float_arithmetic_is_the_types_own() {
        assert_eq!((-0.0f64).sign().to_bits(), (-0.0f64).to_bits());
        assert!(f32::NAN.sign().is_nan());
        assert_eq!((-7.5f64).rem(2.0), -1.5);
        assert_eq!(2f32.power(Wide::Int(-1)), 0.5);
        assert_eq!(FloatMath::max(f64::NAN, 1.0), 1.0);
        assert_eq!(f64::of(0.1), f64::from(0.1f32));
    }

    #[test]
    fn c_pieces_spell_each_type() {
        assert_eq!(c_lit(DType::F32, -0.5), "(-0.5f)");
        assert_eq!(c_lit(DType::F64, 0.1), "0.1");
        assert_eq!(c_lit(DType::F64, f64::INFINITY), "(double)__int_as_float(2139095040)");
        assert_eq!(c_wrapping(DType::U16, "*").unwrap(), "(unsigned short)((unsigned)$0 * (unsigned)$1)");
        assert_eq!(c_wrapping(DType::F64, "+").unwrap(), "($0 + $1)");
        assert_eq!(c_negate(DType::I64).unwrap(), "(long long)(0u - (unsigned long long)$0)");
        assert_eq!(
            c_float_to_int(DType::I8, "double", "x").unwrap(),
            "onnx_float_to_int<signed char, double>((double)(x), (double)-128.0, (double)128.0)"
        );
        assert!(c_int_pow(DType::I32, DType::U8).unwrap().starts_with("[](int b, unsigned char e) -> int {"));
    }
}
