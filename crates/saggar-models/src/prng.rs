//! The deterministic generator behind seeded weights and generated inputs: SplitMix64.
//!
//! Every tensor (and every generated input) draws from its own stream, seeded with
//! `seed ^ fnv1a64(name)`, so the values of one tensor do not depend on how many other tensors
//! the model has or in which order they are generated. `docs/models.md` states the same recipe so
//! that other tools (the PyTorch peers in `benches/peers`) can reproduce it, although they normally load
//! the exported safetensors file instead.

/// SplitMix64 (Steele, Lea and Flood, 2014), the generator `java.util.SplittableRandom` uses.
#[derive(Debug, Clone)]
pub(crate) struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A stream for the tensor or input called `name` under `seed`.
    pub(crate) fn for_name(seed: u64, name: &str) -> SplitMix64 {
        SplitMix64 { state: seed ^ fnv1a64(name.as_bytes()) }
    }

    /// The next 64 random bits.
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform `f32` in `[-1, 1)`: the top 24 bits as a fraction `u` in `[0, 1)`, then `2u - 1`.
    /// Every step is exact in `f32`, so any language reproduces the same values.
    pub(crate) fn next_signed_unit(&mut self) -> f32 {
        let u = (self.next_u64() >> 40) as f32 * (1.0 / 16_777_216.0);
        2.0 * u - 1.0
    }

    /// A uniform integer in `[0, bound)` by multiply-shift: `((next >> 32) * bound) >> 32`.
    pub(crate) fn next_below(&mut self, bound: u32) -> u32 {
        (((self.next_u64() >> 32) * u64::from(bound)) >> 32) as u32
    }
}

/// 64-bit FNV-1a.
pub(crate) fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01B3);
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_matches_the_published_sequence() {
        // The reference sequence for seed 0 (from the SplitMix64 reference implementation).
        let mut g = SplitMix64 { state: 0 };
        assert_eq!(g.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(g.next_u64(), 0x6E78_9E6A_A1B9_65F4);
        assert_eq!(g.next_u64(), 0x06C4_5D18_8009_454F);
    }

    #[test]
    fn fnv1a64_matches_known_values() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn ranges_hold() {
        let mut g = SplitMix64::for_name(7, "t");
        for _ in 0..10_000 {
            let v = g.next_signed_unit();
            assert!((-1.0..1.0).contains(&v));
            assert!(g.next_below(1000) < 1000);
        }
        assert_eq!(g.next_below(1), 0);
    }
}
