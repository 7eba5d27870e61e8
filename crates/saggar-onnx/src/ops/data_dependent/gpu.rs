//! The GPU kernels of the bounded forms: NonZero (`nonzero.cu`, a run of 16 elements a thread, in one
//! block; above one chunk, `nonzero_chunks.cu`: counts per chunk, their prefix sums, then the writes,
//! over the whole GPU) and Compress (`compress.cu`) in one block numbering the selected elements by
//! chunked prefix sums, Unique (`unique.cu`) in one block
//! sorting slice numbers by a bitonic network, NonMaxSuppression's selection (`nms_mask.cu`: the
//! candidates sorted, an IoU bit matrix over the whole GPU, then a walk a block per batch and class;
//! where the matrix does not fit, `nms_select.cu`: a block per batch and class taking the sorted
//! candidates a tile at a time, or, under a constant cap, round by round) then one block packing the
//! rows (`nms_compact.cu`). Single-block kernels
//! give the host's order exactly (no atomics); they suit the sizes these ops see in models (up to a
//! few million elements), not bulk data.

use saggar_shape::DType;

use super::{float_exponent, nonzero_mask};
use crate::ops::gpu::{BLOCK, GpuKernel, bits_type, render};

/// A lambda `block_scan(v)` of the single-block kernels: the inclusive prefix sum of `v` over the
/// block's threads in the shared `int scan[BLOCK]` (every thread calls it; `scan[blockDim.x - 1]` is
/// then the total), by Hillis-Steele steps, so the numbering is deterministic.
pub(crate) const BLOCK_SCAN: &str = "auto block_scan = [&](int v) -> int {
    scan[threadIdx.x] = v;
    __syncthreads();
    for (unsigned s = 1; s < blockDim.x; s <<= 1) {
      const int a = threadIdx.x >= s ? scan[threadIdx.x - s] : 0;
      __syncthreads();
      scan[threadIdx.x] += a;
      __syncthreads();
    }
    return scan[threadIdx.x];
  };";

/// The C++ statements returning the order key (`order_key` on the host) of `b`, the bits of an
/// element of `dtype` widened to `unsigned long long`.
pub(crate) fn key_code(dtype: DType) -> String {
    let width = dtype.size_bytes() * 8;
    let all = u64::MAX >> (64 - width);
    let sign = 1u64 << (width - 1);
    match (float_exponent(dtype), dtype) {
        (Some(exponent), _) => format!(
            "const unsigned long long a = b & {m:#x}ull; if (a > {exponent:#x}ull) return ~0ull; if (a == 0) return \
             {sign:#x}ull; return (b & {sign:#x}ull) ? (~b & {all:#x}ull) : (b | {sign:#x}ull);",
            m = all & !sign
        ),
        (None, DType::I8 | DType::I16 | DType::I32 | DType::I64) => {
            let signed = match width {
                8 => "signed char",
                16 => "short",
                32 => "int",
                _ => "long long",
            };
            format!("return (unsigned long long)(long long)({signed})b ^ 0x8000000000000000ull;")
        }
        _ => "return b;".to_string(),
    }
}

/// NonZero's bounded form over elements of `dtype`, read as bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NonZeroKernel {
    pub(crate) dtype: DType,
}

impl GpuKernel for NonZeroKernel {
    fn prefix(&self) -> &'static str {
        "nonzero"
    }

    fn source(&self) -> String {
        render_nonzero(include_str!("nonzero.cu"), self.dtype, &[])
    }
}

/// Elements a thread of NonZero's kernels takes in a row.
const NONZERO_RUN: usize = 16;

/// Elements a chunk of NonZero's chunked kernels covers (a block's threads, a run each); above it,
/// the bounded form runs as chunks over the whole GPU.
pub(crate) const NONZERO_CHUNK: usize = BLOCK as usize * NONZERO_RUN;

/// One phase (0 count, 1 prefix sums, 2 write) of NonZero's bounded form in chunks, over elements of
/// `dtype` read as bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NonZeroChunksKernel {
    pub(crate) dtype: DType,
    pub(crate) phase: u8,
}

impl GpuKernel for NonZeroChunksKernel {
    fn prefix(&self) -> &'static str {
        "nonzero_chunks"
    }

    fn source(&self) -> String {
        let (chunk, phase) = (NONZERO_CHUNK.to_string(), self.phase.to_string());
        render_nonzero(include_str!("nonzero_chunks.cu"), self.dtype, &[("CHUNK", &chunk), ("PHASE", &phase)])
    }
}

/// A NonZero kernel's text over elements of `dtype`: the values every NonZero kernel takes, the
/// lambdas `count_run(first)` (the nonzero elements among `x[first, first + RUN)`) and
/// `write_run(first, k)` (their coordinates into columns `k`, `k + 1`, ... below `cols`), and `extra`.
fn render_nonzero(template: &str, dtype: DType, extra: &[(&str, &str)]) -> String {
    let mask = format!("{:#x}ull", nonzero_mask(dtype));
    let run_code = format!(
        "auto nonzero_at = [&](onnx_i64 i) {{ return i < n && (x[i] & {mask}) != 0; }};
  auto count_run = [&](onnx_i64 first) {{
    int c = 0;
    for (int e = 0; e < {NONZERO_RUN}; ++e) c += nonzero_at(first + e);
    return c;
  }};
  auto write_run = [&](onnx_i64 first, onnx_i64 k) {{
    for (int e = 0; e < {NONZERO_RUN} && k < cols; ++e) {{
      if (!nonzero_at(first + e)) continue;
      onnx_i64 rem = first + e;
      for (onnx_i64 d = rank - 1; d >= 0; --d) {{ y[d * cols + k] = rem % dims[d]; rem /= dims[d]; }}
      ++k;
    }}
  }};"
    );
    let (block, run) = (BLOCK.to_string(), NONZERO_RUN.to_string());
    let mut values = vec![
        ("BITS", bits_type(dtype.size_bytes() as u8)),
        ("BLOCK", block.as_str()),
        ("BLOCK_SCAN", BLOCK_SCAN),
        ("RUN", run.as_str()),
        ("RUN_CODE", run_code.as_str()),
    ];
    values.extend_from_slice(extra);
    render(template, &values)
}

/// Compress of `elem_bytes`-byte elements (moved as bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CompressKernel {
    pub(crate) elem_bytes: u8,
}

impl GpuKernel for CompressKernel {
    fn prefix(&self) -> &'static str {
        "compress"
    }

    fn source(&self) -> String {
        let values = [("T", bits_type(self.elem_bytes)), ("BLOCK", &BLOCK.to_string()), ("BLOCK_SCAN", BLOCK_SCAN)];
        render(include_str!("compress.cu"), &values)
    }
}

/// Unique's bounded form over elements of `dtype`, sorted or in first-occurrence order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct UniqueKernel {
    pub(crate) dtype: DType,
    pub(crate) sorted: bool,
}

impl GpuKernel for UniqueKernel {
    fn prefix(&self) -> &'static str {
        "unique"
    }

    fn source(&self) -> String {
        let bits = bits_type(self.dtype.size_bytes() as u8);
        let key = key_code(self.dtype);
        let sorted = if self.sorted { "1" } else { "0" };
        let block = BLOCK.to_string();
        let values = [
            ("BITS", bits),
            ("KEY_BODY", key.as_str()),
            ("SORTED", sorted),
            ("BLOCK", &block),
            ("BLOCK_SCAN", BLOCK_SCAN),
        ];
        render(include_str!("unique.cu"), &values)
    }
}

/// Keys a block of NonMaxSuppression's kernels sorts in shared memory at a time (16 KiB).
const NMS_STAGE: usize = 2048;

/// The most words of 64 candidates NonMaxSuppression's IoU bit matrix takes (its suppressed set
/// lives in shared memory: 8 KiB).
pub(crate) const NMS_MASK_WORDS: usize = 1024;

/// `nms_common.cu` rendered: what both ways of selecting paste into their kernels.
fn nms_common() -> String {
    let (block, stage) = (BLOCK.to_string(), NMS_STAGE.to_string());
    render(include_str!("nms_common.cu"), &[("BLOCK", &block), ("BLOCK_SCAN", BLOCK_SCAN), ("STAGE", &stage)])
}

/// NonMaxSuppression's selection a block per batch and class, where the IoU bit matrix does not fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NmsSelectKernel;

impl GpuKernel for NmsSelectKernel {
    fn prefix(&self) -> &'static str {
        "nms_select"
    }

    fn source(&self) -> String {
        render(include_str!("nms_select.cu"), &[("BLOCK", &BLOCK.to_string()), ("NMS_COMMON", &nms_common())])
    }
}

/// One phase (0 sorted keys, 1 the IoU bit matrix, 2 the walk) of NonMaxSuppression's selection
/// through the matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NmsMaskKernel {
    pub(crate) phase: u8,
}

impl GpuKernel for NmsMaskKernel {
    fn prefix(&self) -> &'static str {
        "nms_mask"
    }

    fn source(&self) -> String {
        let (phase, words) = (self.phase.to_string(), NMS_MASK_WORDS.to_string());
        render(include_str!("nms_mask.cu"), &[("NMS_COMMON", &nms_common()), ("PHASE", &phase), ("MAX_WORDS", &words)])
    }
}

/// NonMaxSuppression's packing of the selected rows and their count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NmsCompactKernel;

impl GpuKernel for NmsCompactKernel {
    fn prefix(&self) -> &'static str {
        "nms_compact"
    }

    fn source(&self) -> String {
        render(include_str!("nms_compact.cu"), &[("BLOCK", &BLOCK.to_string()), ("BLOCK_SCAN", BLOCK_SCAN)])
    }
}
