//! The GPU kernel of the selection family: TopK (`top_k.cu`), a block per row sorting it in shared
//! memory, selecting `k` times, or finding the `k`-th element's order key by a radix select.

use saggar_shape::DType;

use crate::ops::data_dependent::gpu::{BLOCK_SCAN, key_code};
use crate::ops::gpu::{BLOCK, GpuKernel, bits_type, ctype, render};

/// TopK of `dtype` elements (f32, i64 or i32), the largest first with `largest`, else the smallest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TopKKernel {
    pub(crate) dtype: DType,
    pub(crate) largest: bool,
}

impl GpuKernel for TopKKernel {
    fn prefix(&self) -> &'static str {
        "top_k"
    }

    fn source(&self) -> String {
        let (cmp, nan_first) = if self.largest { (">", "true") } else { ("<", "false") };
        let key_bits = key_bits(self.dtype);
        let key_mask = format!("{:#x}ull", u64::MAX >> (64 - key_bits));
        render(
            include_str!("top_k.cu"),
            &[
                ("T", ctype(self.dtype).unwrap_or("float")),
                ("BITS", bits_type(self.dtype.size_bytes() as u8)),
                ("CMP", cmp),
                ("NAN_FIRST", nan_first),
                ("LARGEST", if self.largest { "true" } else { "false" }),
                ("KEY_BODY", &key_code(self.dtype)),
                ("KEY_BITS", &key_bits.to_string()),
                ("KEY_MASK", &key_mask),
                ("BLOCK", &BLOCK.to_string()),
                ("BLOCK_SCAN", BLOCK_SCAN),
                ("SORT", "2048"),
                ("COPIES", "16"),
                ("RUN", "16"),
            ],
        )
    }
}

/// The width of `dtype`'s order key (`key_code`): signed integers are keyed sign-extended to 64
/// bits, every other type at its own width.
fn key_bits(dtype: DType) -> u32 {
    match dtype {
        DType::I8 | DType::I16 | DType::I32 | DType::I64 => 64,
        _ => dtype.size_bytes() as u32 * 8,
    }
}
