//! Which GEMMs of a plan run through the backend's BLAS-Lt handle, and as what.
//!
//! A MatMul or Gemm node's GPU form is one [`GpuKind::Gemm`] launch whose `meta` table holds every
//! extent and stride ([`crate::ops::gpu`]). [`matmul_desc`] reads that table back as a
//! [`MatmulDesc`] when the vendor libraries can express it: each operand stored row-major or
//! transposed with its natural leading dimension, batches that are either one contiguous run of
//! matrices or one matrix broadcast to all (stride 0), and Gemm's `C` only as a bias vector over the
//! columns added with `beta` 1 (the BLAS bias epilogue). A batched A times one shared B (the
//! transformer case) becomes one tall GEMM. Anything else keeps the generated GEMM kernel.

use saggar_device::{MatmulDesc, MatmulPrecision};

use crate::lowering::ArgSource;
use crate::ops::gpu::{GpuKind, GpuLaunch, Slot, contiguous};

/// How GEMMs are lowered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum GemmEngine {
    /// Through the backend's BLAS-Lt library (cuBLASLt, hipBLASLt; the host backend's own GEMM),
    /// where the operands allow; the generated kernel otherwise.
    #[default]
    BlasLt,
    /// Always the generated GEMM kernel (the baseline the BLAS path is measured against).
    Generated,
}

impl GemmEngine {
    /// The name used in options and cache keys.
    pub const fn name(self) -> &'static str {
        match self {
            GemmEngine::BlasLt => "blaslt",
            GemmEngine::Generated => "generated",
        }
    }
}

/// What the lowering needs to emit BLAS steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BlasLowering {
    /// Whether TF32 is allowed.
    pub(crate) precision: MatmulPrecision,
    /// Scratch reserved for the library's workspace (0 on the host backend, which needs none).
    pub(crate) workspace_bytes: usize,
}

/// One matmul of a plan: the description and where its operands are.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct MatmulStep {
    pub(crate) desc: MatmulDesc,
    pub(crate) a: ArgSource,
    pub(crate) b: ArgSource,
    pub(crate) c: ArgSource,
    pub(crate) bias: Option<ArgSource>,
    /// Offset of the workspace in scratch (set once the memory plan is complete).
    pub(crate) workspace: usize,
}

/// The slots of a GEMM launch: A, B, the optional bias, then the output.
pub(crate) fn gemm_slots(launch: &GpuLaunch) -> Option<(Slot, Slot, Option<Slot>, Slot)> {
    match launch.slots.as_slice() {
        [a, b, out] => Some((*a, *b, None, *out)),
        [a, b, bias, out] => Some((*a, *b, Some(*bias), *out)),
        _ => None,
    }
}

/// The BLAS description of a GEMM launch, or `None` when the generated kernel must run it. See the
/// module docs.
pub(crate) fn matmul_desc(launch: &GpuLaunch, precision: MatmulPrecision) -> Option<MatmulDesc> {
    let GpuKind::Gemm { alpha_bits, beta_bits, bias } = launch.kind else { return None };
    let meta = &launch.meta;
    let head: &[i64; 10] = meta.get(..10)?.try_into().ok()?;
    let [m, n, k, brank, a_rs, a_cs, b_rs, b_cs, bias_rs, bias_cs] = *head;
    let brank = usize::try_from(brank).ok()?;
    let bdims = meta.get(10..10 + brank)?;
    let a_bstride = meta.get(10 + brank..10 + 2 * brank)?;
    let b_bstride = meta.get(10 + 2 * brank..10 + 3 * brank)?;
    if meta.len() != 10 + 3 * brank || [m, n, k].iter().any(|&d| d <= 0) {
        return None;
    }
    let trans_a = match (a_rs, a_cs) {
        (r, 1) if r == k => false,
        (1, c) if c == m => true,
        _ => return None,
    };
    let trans_b = match (b_rs, b_cs) {
        (r, 1) if r == n => false,
        (1, c) if c == k => true,
        _ => return None,
    };
    if bias && ((bias_rs, bias_cs) != (0, 1) || f32::from_bits(beta_bits) != 1.0) {
        return None;
    }
    let dims: Vec<usize> = bdims.iter().map(|&d| usize::try_from(d).ok()).collect::<Option<_>>()?;
    let batch: i64 = bdims.iter().product();
    let rows = contiguous(&dims);
    // A batch stride table is one contiguous run of `matrix`-sized matrices, or all zeros.
    let flat = |strides: &[i64], matrix: i64| -> Option<i64> {
        if strides.iter().all(|&s| s == 0) {
            Some(0)
        } else if strides.iter().zip(&rows).zip(&dims).all(|((&s, &r), &d)| d == 1 || s == r * matrix) {
            Some(matrix)
        } else {
            None
        }
    };
    let (stride_a, stride_b) = (flat(a_bstride, m * k)?, flat(b_bstride, k * n)?);
    let mut desc = MatmulDesc::gemm(m as u64, n as u64, k as u64);
    desc.trans_a = trans_a;
    desc.trans_b = trans_b;
    desc.bias = bias;
    desc.precision = precision;
    desc.alpha_bits = alpha_bits;
    desc.beta_bits = 0;
    if batch > 1 {
        if stride_b == 0 && stride_a != 0 && !trans_a {
            // Every batch of A against one B: one GEMM over the stacked rows.
            desc.m = (m * batch) as u64;
            desc.stride_a = desc.m * desc.k;
            desc.stride_c = desc.m * desc.n;
        } else {
            desc.batch = batch as u64;
            desc.stride_a = stride_a as u64;
            desc.stride_b = stride_b as u64;
            desc.stride_c = (m * n) as u64;
        }
    }
    Some(desc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::gpu::Work;

    fn gemm(meta: Vec<i64>, bias: bool, beta: f32) -> GpuLaunch {
        GpuLaunch {
            kind: GpuKind::Gemm { alpha_bits: 2f32.to_bits(), beta_bits: beta.to_bits(), bias },
            meta,
            work: Work::Tiles { m: 1, n: 1, batch: 1 },
            slots: vec![Slot::In(0), Slot::In(1), Slot::Out(0)],
        }
    }

    #[test]
    fn plain_transposed_and_biased_gemms_map_onto_blas() {
        let strict = MatmulPrecision::StrictF32;
        let d = matmul_desc(&gemm(vec![4, 5, 6, 0, 6, 1, 5, 1, 0, 0], false, 0.0), strict).unwrap();
        assert_eq!((d.m, d.n, d.k, d.batch, d.trans_a, d.trans_b, d.alpha()), (4, 5, 6, 1, false, false, 2.0));
        let t = matmul_desc(&gemm(vec![4, 5, 6, 0, 1, 4, 1, 6, 0, 0], false, 0.0), strict).unwrap();
        assert!(t.trans_a && t.trans_b);
        let biased = matmul_desc(&gemm(vec![4, 5, 6, 0, 6, 1, 5, 1, 0, 1], true, 1.0), strict).unwrap();
        assert!(biased.bias);
        assert_eq!(matmul_desc(&gemm(vec![4, 5, 6, 0, 6, 1, 5, 1, 0, 1], true, 0.5), strict), None, "beta != 1");
        assert_eq!(matmul_desc(&gemm(vec![4, 5, 6, 0, 6, 1, 5, 1, 1, 0], true, 1.0), strict), None, "C per row");
        assert_eq!(matmul_desc(&gemm(vec![4, 5, 6, 0, 7, 1, 5, 1, 0, 0], false, 0.0), strict), None, "odd stride");
    }

    #[test]
    fn batches_flatten_broadcast_or_fall_back() {
        let strict = MatmulPrecision::StrictF32;
        // [2, 3] batches of 4x6 times one shared 6x5: one tall 24x5x6 GEMM.
        let tall = vec![4, 5, 6, 2, 6, 1, 5, 1, 0, 0, 2, 3, 72, 24, 0, 0];
        let d = matmul_desc(&gemm(tall, false, 0.0), strict).unwrap();
        assert_eq!((d.m, d.batch), (24, 1));
        // Both batched: a strided batch of 6.
        let both = vec![4, 5, 6, 2, 6, 1, 5, 1, 0, 0, 2, 3, 72, 24, 90, 30];
        let d = matmul_desc(&gemm(both, false, 0.0), strict).unwrap();
        assert_eq!((d.batch, d.stride_a, d.stride_b, d.stride_c), (6, 24, 30, 20));
        // A broadcast over one batch axis only: not expressible as one stride.
        let partial = vec![4, 5, 6, 2, 6, 1, 5, 1, 0, 0, 2, 3, 24, 0, 90, 30];
        assert_eq!(matmul_desc(&gemm(partial, false, 0.0), strict), None);
    }
}
