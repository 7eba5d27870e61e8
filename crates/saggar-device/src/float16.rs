//! The two 16-bit floating-point formats BLAS-Lt matmuls take, as raw bits: IEEE binary16 (`f16`: 5
//! exponent bits, 10 mantissa bits) and bfloat16 (`bf16`: `f32`'s 8 exponent bits, 7 mantissa bits).
//! Widening to `f32` is exact; narrowing rounds to nearest, ties to even, as the GPUs' conversions
//! do: values past the largest finite one become infinities, tiny ones subnormals or zeros, and a
//! NaN stays a NaN (quiet, sign kept). The host backend's GEMM and the conformance suite use these,
//! so both round the way a GPU stores a half result.

/// The `f32` an `f16` holds (exact).
pub fn f16_to_f32(bits: u16) -> f32 {
    let sign = u32::from(bits & 0x8000) << 16;
    let exponent = u32::from(bits >> 10) & 0x1f;
    let mantissa = u32::from(bits & 0x3ff);
    match exponent {
        // Infinity, or NaN with its payload moved to the top of f32's mantissa.
        0x1f => f32::from_bits(sign | 0x7f80_0000 | (mantissa << 13)),
        0 => {
            // Zero or a subnormal, `mantissa * 2^-24`: exact in f32.
            let magnitude = mantissa as f32 * (1.0 / 16_777_216.0);
            if sign != 0 { -magnitude } else { magnitude }
        }
        // Normal: rebias the exponent from 15 to 127.
        _ => f32::from_bits(sign | ((exponent + 112) << 23) | (mantissa << 13)),
    }
}

/// `x` rounded to the nearest `f16`, ties to even.
pub fn f32_to_f16(x: f32) -> u16 {
    let bits = x.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exponent = ((bits >> 23) & 0xff) as i32;
    let mantissa = bits & 0x7f_ffff;
    if exponent == 0xff {
        // A NaN keeps the top of its payload and the quiet bit, so it never turns into an infinity.
        let nan = if mantissa != 0 { 0x0200 | (mantissa >> 13) as u16 } else { 0 };
        return sign | 0x7c00 | nan;
    }
    let unbiased = exponent - 127;
    if unbiased > 15 {
        return sign | 0x7c00;
    }
    // The f16 result is `significand >> shift`, rounded: a normal f16 keeps 10 of the 23 mantissa bits
    // (the exponent rides above them, so a carry out of the mantissa bumps it, up to infinity); a
    // subnormal one counts units of 2^-24 from the full 24-bit significand.
    let (base, significand, shift) = if unbiased >= -14 {
        (((unbiased + 15) as u32) << 10, mantissa, 13)
    } else if unbiased >= -25 {
        (0, mantissa | 0x80_0000, (-unbiased - 1) as u32)
    } else {
        // Below half the smallest subnormal (f32 subnormals included): zero.
        return sign;
    };
    sign | round_shift(base, significand, shift) as u16
}

/// `base + (value >> shift)`, the shifted-out bits rounded to nearest, ties to even.
fn round_shift(base: u32, value: u32, shift: u32) -> u32 {
    let kept = base + (value >> shift);
    let rest = value & ((1 << shift) - 1);
    let half = 1 << (shift - 1);
    if rest > half || (rest == half && kept & 1 == 1) { kept + 1 } else { kept }
}

/// The `f32` a `bf16` holds (exact): the top half of the `f32`'s bits.
pub fn bf16_to_f32(bits: u16) -> f32 {
    f32::from_bits(u32::from(bits) << 16)
}

/// `x` rounded to the nearest `bf16`, ties to even.
pub fn f32_to_bf16(x: f32) -> u16 {
    let bits = x.to_bits();
    if x.is_nan() {
        // Truncating could clear every payload bit left and make an infinity: set the quiet bit.
        return ((bits >> 16) | 0x0040) as u16;
    }
    // Same exponent range as f32, so rounding the low half covers subnormals, and a carry into the
    // exponent gives the next binade or infinity.
    round_shift(0, bits, 16) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_special_values() {
        assert_eq!(f32_to_f16(0.0), 0x0000);
        assert_eq!(f32_to_f16(-0.0), 0x8000);
        assert_eq!(f32_to_f16(1.0), 0x3c00);
        assert_eq!(f32_to_f16(-2.0), 0xc000);
        assert_eq!(f32_to_f16(f32::INFINITY), 0x7c00);
        assert_eq!(f32_to_f16(f32::NEG_INFINITY), 0xfc00);
        assert_eq!(f16_to_f32(0x7c00), f32::INFINITY);
        assert_eq!(f16_to_f32(0xfc00), f32::NEG_INFINITY);
        // NaN stays NaN both ways, signalling payloads too.
        assert!(f16_to_f32(f32_to_f16(f32::NAN)).is_nan());
        assert!(f16_to_f32(0x7c01).is_nan() && f16_to_f32(0xfe00).is_nan());
        assert!(f16_to_f32(f32_to_f16(f32::from_bits(0x7f80_0001))).is_nan(), "a low payload is not lost");
        assert_eq!(f32_to_f16(f32::from_bits(0xff80_0001)) & 0x8000, 0x8000, "the sign is kept");
        // Largest finite, 65504; 65519.99 rounds down to it, 65520 (the tie) up to infinity.
        assert_eq!(f32_to_f16(65504.0), 0x7bff);
        assert_eq!(f16_to_f32(0x7bff), 65504.0);
        assert_eq!(f32_to_f16(65519.99), 0x7bff);
        assert_eq!(f32_to_f16(65520.0), 0x7c00);
        assert_eq!(f32_to_f16(1e6), 0x7c00);
        assert_eq!(f32_to_f16(f32::MAX), 0x7c00);
    }

    #[test]
    fn f16_subnormals_and_ties() {
        let tiny = 2f32.powi(-24);
        assert_eq!(f32_to_f16(tiny), 0x0001);
        assert_eq!(f16_to_f32(0x0001), tiny);
        assert_eq!(f16_to_f32(0x03ff), 1023.0 * tiny, "the largest subnormal");
        assert_eq!(f16_to_f32(0x0400), 2f32.powi(-14), "the smallest normal");
        assert_eq!(f32_to_f16(tiny / 2.0), 0x0000, "half the smallest subnormal ties to even zero");
        assert_eq!(f32_to_f16(tiny * 0.500_001), 0x0001, "just above the tie rounds up");
        assert_eq!(f32_to_f16(tiny * 1.5), 0x0002, "1.5 units ties to even 2");
        assert_eq!(f32_to_f16(tiny * 2.5), 0x0002, "2.5 units ties to even 2");
        assert_eq!(f32_to_f16(-tiny * 3.5), 0x8004);
        assert_eq!(f32_to_f16(1023.5 * tiny), 0x0400, "rounding up out of the subnormals gives the smallest normal");
        assert_eq!(f32_to_f16(f32::from_bits(1)), 0x0000, "f32 subnormals are zero");
        // Normal ties: 1 + 2^-11 is halfway between 1 and 1 + 2^-10.
        assert_eq!(f32_to_f16(1.0 + 2f32.powi(-11)), 0x3c00);
        assert_eq!(f32_to_f16(1.0 + 3.0 * 2f32.powi(-11)), 0x3c02);
        assert_eq!(f32_to_f16(2.0 - 2f32.powi(-12)), 0x4000, "a carry out of the mantissa bumps the exponent");
    }

    #[test]
    fn every_f16_round_trips() {
        for bits in 0..=u16::MAX {
            let wide = f16_to_f32(bits);
            if wide.is_nan() {
                assert!(bits & 0x7c00 == 0x7c00 && bits & 0x3ff != 0, "{bits:#06x}");
                assert_eq!(f32_to_f16(wide), bits | 0x0200, "NaNs come back quiet, payload kept");
            } else {
                assert_eq!(f32_to_f16(wide), bits, "{bits:#06x} -> {wide}");
            }
        }
    }

    /// Narrowing picks the nearer neighbour, ties to the even one, for f32s between every pair of
    /// consecutive finite f16s (both signs).
    #[test]
    fn f16_rounding_picks_the_nearest() {
        for low in (0u16..0x7bff).chain(0x8000..0xfbff) {
            let (a, b) = (f16_to_f32(low), f16_to_f32(low + 1));
            let mid = ((f64::from(a) + f64::from(b)) / 2.0) as f32;
            let even = if low & 1 == 0 { low } else { low + 1 };
            assert_eq!(f32_to_f16(mid), even, "tie between {low:#06x} and the next");
            // Magnitudes grow with the bits in both ranges, so `low` is the one nearer zero.
            let nearer_zero = f32::from_bits(mid.to_bits() - 1);
            let farther = f32::from_bits(mid.to_bits() + 1);
            assert_eq!(f32_to_f16(nearer_zero), low, "{nearer_zero} rounds to {a}");
            assert_eq!(f32_to_f16(farther), low + 1, "{farther} rounds to {b}");
        }
    }

    #[test]
    fn bf16_values() {
        assert_eq!(f32_to_bf16(1.0), 0x3f80);
        assert_eq!(bf16_to_f32(0x3f80), 1.0);
        assert_eq!(f32_to_bf16(-0.0), 0x8000);
        assert_eq!(f32_to_bf16(f32::INFINITY), 0x7f80);
        assert_eq!(f32_to_bf16(f32::NEG_INFINITY), 0xff80);
        assert!(bf16_to_f32(f32_to_bf16(f32::NAN)).is_nan());
        assert!(bf16_to_f32(f32_to_bf16(f32::from_bits(0x7f80_0001))).is_nan(), "a low payload is not lost");
        assert!(bf16_to_f32(f32_to_bf16(f32::from_bits(0xff80_0001))).is_sign_negative());
        // Largest finite bf16 is 0x7f7f; f32::MAX is past its halfway point and becomes infinity.
        assert_eq!(bf16_to_f32(0x7f7f), f32::from_bits(0x7f7f_0000));
        assert_eq!(f32_to_bf16(f32::from_bits(0x7f7f_7fff)), 0x7f7f);
        assert_eq!(f32_to_bf16(f32::from_bits(0x7f7f_8000)), 0x7f80, "the tie rounds to even: infinity");
        assert_eq!(f32_to_bf16(f32::MAX), 0x7f80);
        // Ties to even: 1 + 2^-8 is halfway between 1 and 1 + 2^-7.
        assert_eq!(f32_to_bf16(1.0 + 2f32.powi(-8)), 0x3f80);
        assert_eq!(f32_to_bf16(1.0 + 3.0 * 2f32.powi(-8)), 0x3f82);
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f80_8001)), 0x3f81, "above the tie rounds up");
        // Subnormals: bf16 has f32's exponent range.
        assert_eq!(f32_to_bf16(f32::from_bits(0x0001_0000)), 0x0001);
        assert_eq!(f32_to_bf16(f32::from_bits(0x0000_8000)), 0x0000, "half the smallest ties to zero");
        assert_eq!(f32_to_bf16(f32::from_bits(0x0001_8000)), 0x0002, "1.5 units ties to 2");
        assert_eq!(bf16_to_f32(0x0001), f32::from_bits(0x0001_0000));
    }

    #[test]
    fn every_bf16_round_trips() {
        for bits in 0..=u16::MAX {
            let wide = bf16_to_f32(bits);
            let back = f32_to_bf16(wide);
            if wide.is_nan() {
                assert_eq!(back, bits | 0x0040, "NaNs come back quiet");
            } else {
                assert_eq!(back, bits, "{bits:#06x}");
            }
        }
    }
}
