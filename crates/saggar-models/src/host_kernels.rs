//! Host kernels of the reference models, registered with [`saggar_device::host::register_kernel`].
//!
//! Two kernels play the parts the generated CUDA/HIP kernels play on a GPU:
//!
//! | kernel | parameters | effect |
//! |---|---|---|
//! | `saggar_models_features_f32_d{D}_s{S}` | `ptr out, ptr tables, D x ptr dense, S x ptr sparse, u32 batch, u32 dense_width, u32 bag_size, u32 table_rows, u32 embedding_dim` | the recommender's feature row: dense inputs copied, embedding bags summed (out-of-range indices skipped) |
//! | `saggar_models_gemm_panels_f32` | `ptr out, ptr a, ptr b, ptr bias, u32 m, u32 n, u32 k, u32 act` | `out[m,n] = act(a[m,k] @ b[k,n] + bias[n])` with `b` packed in panels of 16 columns ([`pack_panels`]) |
//!
//! A host kernel's signature is fixed at registration, so the feature kernel is registered once per
//! arity `(D, S)` the process meets, and the GEMM once; [`ensure_registered`] does it under a lock and
//! remembers what it did, so registering costs nothing after the first program.
//!
//! Kernels read device memory in place (no copy of the weights per launch) and build their result in
//! a per-thread buffer that is reused from launch to launch, so a run allocates nothing once warm.
//! The GEMM keeps a 4 x 16 tile of the output in registers over all of K; its weights are packed in
//! 16-column panels at upload, so each tile streams one contiguous panel (the row-major `[in, out]`
//! layout would make it read one 64-byte piece per 2 KiB row, which defeats the prefetcher).

use std::cell::RefCell;
use std::collections::HashSet;
use std::sync::OnceLock;

use parking_lot::Mutex;
use saggar_device::host::{KernelContext, register_kernel};
use saggar_device::{DevicePtr, KernelArg, KernelSignature, LaunchConfig, ParamKind};

use crate::reference::relu;

/// Name of the host GEMM.
pub(crate) const GEMM: &str = "saggar_models_gemm_panels_f32";

/// Columns of one weight panel of the host GEMM (and of one register tile).
pub(crate) const PANEL: usize = 16;

/// `b` (`[k, n]` row-major) packed in panels: panel `p` is the contiguous `[k, PANEL]` block of
/// columns `PANEL * p ..`, with zeros past column `n`.
pub(crate) fn pack_panels(b: &[f32], k: usize, n: usize) -> Vec<f32> {
    let panels = n.div_ceil(PANEL);
    let mut out = vec![0.0f32; panels * k * PANEL];
    for (p, panel) in out.chunks_exact_mut(k * PANEL).enumerate() {
        let cols = (n - p * PANEL).min(PANEL);
        for (t, dst) in panel.chunks_exact_mut(PANEL).enumerate() {
            dst[..cols].copy_from_slice(&b[t * n + p * PANEL..t * n + p * PANEL + cols]);
        }
    }
    out
}

/// The host GEMM's signature (the parameter kinds of the built-in `saggar_gemm_bias_act_f32`).
pub(crate) fn gemm_signature() -> KernelSignature {
    use ParamKind::*;
    KernelSignature::new(GEMM, &[Ptr, Ptr, Ptr, Ptr, U32, U32, U32, U32])
}

/// Name of the host feature kernel for `dense` dense and `sparse` sparse inputs.
pub(crate) fn features_name(dense: usize, sparse: usize) -> String {
    format!("saggar_models_features_f32_d{dense}_s{sparse}")
}

/// Number of `u32` parameters after the pointers of the feature kernel.
const FEATURE_SCALARS: usize = 5;

/// The host feature kernel's signature.
pub(crate) fn features_signature(dense: usize, sparse: usize) -> KernelSignature {
    let mut params = vec![ParamKind::Ptr; 2 + dense + sparse];
    params.extend([ParamKind::U32; FEATURE_SCALARS]);
    KernelSignature { name: features_name(dense, sparse), params }
}

/// Registers the host GEMM and, when `features` is `Some((D, S))`, the feature kernel of that arity,
/// unless this process already did.
pub(crate) fn ensure_registered(features: Option<(usize, usize)>) -> Result<(), saggar_device::Error> {
    static REGISTERED: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    let mut done = REGISTERED.get_or_init(|| Mutex::new(HashSet::new())).lock();
    if !done.contains(GEMM) {
        register_kernel(gemm_signature(), gemm_kernel)?;
        done.insert(GEMM.to_string());
    }
    if let Some((dense, sparse)) = features {
        let name = features_name(dense, sparse);
        if !done.contains(&name) {
            register_kernel(
                features_signature(dense, sparse),
                move |ctx: &mut KernelContext<'_>, _: &LaunchConfig, args: &[KernelArg]| {
                    features_kernel(ctx, args, dense, sparse)
                },
            )?;
            done.insert(name);
        }
    }
    Ok(())
}

thread_local! {
    /// The result buffer of the kernel running on this (stream worker) thread, reused across launches.
    static RESULT: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

fn ptr_arg(ctx: &KernelContext<'_>, args: &[KernelArg], i: usize) -> saggar_device::Result<DevicePtr> {
    args.get(i).and_then(KernelArg::as_ptr).ok_or_else(|| ctx.fault(format!("argument {i} is not a pointer")))
}

fn u32_arg(ctx: &KernelContext<'_>, args: &[KernelArg], i: usize) -> saggar_device::Result<usize> {
    match args.get(i) {
        Some(KernelArg::U32(v)) => Ok(*v as usize),
        _ => Err(ctx.fault(format!("argument {i} is not a u32"))),
    }
}

fn f32_bytes(ctx: &KernelContext<'_>, elements: usize) -> saggar_device::Result<usize> {
    elements.checked_mul(4).ok_or_else(|| ctx.fault("size overflows"))
}

/// `bytes` as f32s: in place when aligned on a little-endian host (always, in practice: device
/// allocations are 256-byte aligned), else decoded into `fallback`.
fn f32_view<'a>(bytes: &'a [u8], fallback: &'a mut Vec<f32>) -> &'a [f32] {
    #[cfg(target_endian = "little")]
    if let Ok(values) = bytemuck::try_cast_slice::<u8, f32>(bytes) {
        return values;
    }
    fallback.clear();
    fallback.extend(bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])));
    fallback
}

fn write_f32s(dst: &mut [u8], values: &[f32]) {
    #[cfg(target_endian = "little")]
    dst.copy_from_slice(bytemuck::cast_slice(values));
    #[cfg(not(target_endian = "little"))]
    for (d, v) in dst.chunks_exact_mut(4).zip(values) {
        d.copy_from_slice(&v.to_le_bytes());
    }
}

fn features_kernel(
    ctx: &mut KernelContext<'_>,
    args: &[KernelArg],
    dense: usize,
    sparse: usize,
) -> saggar_device::Result<()> {
    let scalar = |i: usize| u32_arg(ctx, args, 2 + dense + sparse + i);
    let (batch, width, bag, rows, dim) = (scalar(0)?, scalar(1)?, scalar(2)?, scalar(3)?, scalar(4)?);
    let overflow = || ctx.fault("sizes overflow");
    let features = dense
        .checked_mul(width)
        .and_then(|d| sparse.checked_mul(dim).and_then(|s| d.checked_add(s)))
        .ok_or_else(overflow)?;
    let total = batch.checked_mul(features).ok_or_else(overflow)?;
    let table_elements = sparse.checked_mul(rows).and_then(|n| n.checked_mul(dim)).ok_or_else(overflow)?;
    RESULT.with_borrow_mut(|out| {
        out.clear();
        out.resize(total, 0.0);
        for i in 0..dense {
            let src = ctx.bytes(ptr_arg(ctx, args, 2 + i)?, f32_bytes(ctx, batch * width)?)?;
            for (b, row) in src.chunks_exact(width * 4).enumerate() {
                let dst = &mut out[b * features + i * width..][..width];
                for (d, c) in dst.iter_mut().zip(row.chunks_exact(4)) {
                    *d = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                }
            }
        }
        if sparse > 0 {
            let mut fallback = Vec::new();
            let tables = f32_view(ctx.bytes(ptr_arg(ctx, args, 1)?, f32_bytes(ctx, table_elements)?)?, &mut fallback);
            for j in 0..sparse {
                let table = &tables[j * rows * dim..(j + 1) * rows * dim];
                let indices = ctx.bytes(ptr_arg(ctx, args, 2 + dense + j)?, f32_bytes(ctx, batch * bag)?)?;
                for (b, bag_indices) in indices.chunks_exact(bag * 4).enumerate() {
                    let dst = &mut out[b * features + dense * width + j * dim..][..dim];
                    for c in bag_indices.chunks_exact(4) {
                        let index = i32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                        // Out-of-range indices contribute nothing (documented in docs/models.md).
                        if index < 0 || index as usize >= rows {
                            continue;
                        }
                        let row = &table[index as usize * dim..][..dim];
                        for (d, v) in dst.iter_mut().zip(row) {
                            *d += v;
                        }
                    }
                }
            }
        }
        let dst = ctx.bytes_mut(ptr_arg(ctx, args, 0)?, f32_bytes(ctx, total)?)?;
        write_f32s(dst, out);
        Ok(())
    })
}

fn gemm_kernel(ctx: &mut KernelContext<'_>, _: &LaunchConfig, args: &[KernelArg]) -> saggar_device::Result<()> {
    let (m, n, k, act) =
        (u32_arg(ctx, args, 4)?, u32_arg(ctx, args, 5)?, u32_arg(ctx, args, 6)?, u32_arg(ctx, args, 7)?);
    let overflow = || ctx.fault("sizes overflow");
    let a_len = m.checked_mul(k).ok_or_else(overflow)?;
    let b_len = k.checked_mul(n.div_ceil(PANEL) * PANEL).ok_or_else(overflow)?;
    let out_len = m.checked_mul(n).ok_or_else(overflow)?;
    RESULT.with_borrow_mut(|out| {
        out.clear();
        out.resize(out_len, 0.0);
        let (mut fa, mut fb, mut fbias) = (Vec::new(), Vec::new(), Vec::new());
        let a = f32_view(ctx.bytes(ptr_arg(ctx, args, 1)?, f32_bytes(ctx, a_len)?)?, &mut fa);
        let b = f32_view(ctx.bytes(ptr_arg(ctx, args, 2)?, f32_bytes(ctx, b_len)?)?, &mut fb);
        let bias_ptr = ptr_arg(ctx, args, 3)?;
        let bias = if bias_ptr == DevicePtr::NULL {
            None
        } else {
            Some(f32_view(ctx.bytes(bias_ptr, f32_bytes(ctx, n)?)?, &mut fbias))
        };
        gemm(out, a, b, bias, m, n, k, act == saggar_device::builtin::ACT_RELU as usize);
        let dst = ctx.bytes_mut(ptr_arg(ctx, args, 0)?, f32_bytes(ctx, out_len)?)?;
        write_f32s(dst, out);
        Ok(())
    })
}

/// `out[m,n] = act(a[m,k] @ b[k,n] + bias[n])` with `b` in panels ([`pack_panels`]). The same code is
/// compiled three times and picked at run time: with AVX-512F + FMA, with AVX2 + FMA, or portable (with
/// FMA the products are fused multiply-adds, so the last bits can differ from the portable path).
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm(
    out: &mut [f32],
    a: &[f32],
    b: &[f32],
    bias: Option<&[f32]>,
    m: usize,
    n: usize,
    k: usize,
    relu_after: bool,
) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: `gemm_avx512_fma` only needs AVX-512F and FMA, which the CPU was just found to support.
        unsafe { gemm_avx512_fma(out, a, b, bias, m, n, k, relu_after) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: `gemm_avx2_fma` only needs AVX2 and FMA, which the CPU was just found to support.
        unsafe { gemm_avx2_fma(out, a, b, bias, m, n, k, relu_after) };
        return;
    }
    gemm_body::<false>(out, a, b, bias, m, n, k, relu_after);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
fn gemm_avx2_fma(
    out: &mut [f32],
    a: &[f32],
    b: &[f32],
    bias: Option<&[f32]>,
    m: usize,
    n: usize,
    k: usize,
    relu_after: bool,
) {
    gemm_body::<true>(out, a, b, bias, m, n, k, relu_after);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
#[allow(clippy::too_many_arguments)]
fn gemm_avx512_fma(
    out: &mut [f32],
    a: &[f32],
    b: &[f32],
    bias: Option<&[f32]>,
    m: usize,
    n: usize,
    k: usize,
    relu_after: bool,
) {
    gemm_body::<true>(out, a, b, bias, m, n, k, relu_after);
}

/// `acc + x * y`, fused when `FMA` (only instantiated where the CPU has FMA).
#[inline(always)]
fn madd<const FMA: bool>(x: f32, y: f32, acc: f32) -> f32 {
    if FMA { x.mul_add(y, acc) } else { acc + x * y }
}

/// Register-tiled GEMM: a tile of up to 4 rows x 16 columns accumulates over all of K in registers
/// (no loads or stores of the output inside the K loop), streaming one contiguous weight panel.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn gemm_body<const FMA: bool>(
    out: &mut [f32],
    a: &[f32],
    b: &[f32],
    bias: Option<&[f32]>,
    m: usize,
    n: usize,
    k: usize,
    relu_after: bool,
) {
    if n == 0 {
        return;
    }
    let mut r0 = 0;
    while r0 < m {
        let rows = (m - r0).min(TILE_ROWS);
        for (p, panel) in b.chunks_exact(k * PANEL).take(n.div_ceil(PANEL)).enumerate() {
            let t = Tile { out: &mut *out, a, panel, bias, n, k, r0, j0: p * PANEL };
            match rows {
                4 => tile::<4, FMA>(t),
                3 => tile::<3, FMA>(t),
                2 => tile::<2, FMA>(t),
                _ => tile::<1, FMA>(t),
            }
        }
        r0 += rows;
    }
    if relu_after {
        out.iter_mut().for_each(|v| *v = relu(*v));
    }
}

/// Output rows of one register tile.
const TILE_ROWS: usize = 4;

/// One register tile's inputs: rows `r0..r0 + R` of `a`, the panel of columns `j0..j0 + 16`.
struct Tile<'a> {
    out: &'a mut [f32],
    a: &'a [f32],
    panel: &'a [f32],
    bias: Option<&'a [f32]>,
    n: usize,
    k: usize,
    r0: usize,
    j0: usize,
}

#[inline(always)]
fn tile<const R: usize, const FMA: bool>(t: Tile<'_>) {
    let Tile { out, a, panel, bias, n, k, r0, j0 } = t;
    let rows: [&[f32]; R] = std::array::from_fn(|r| &a[(r0 + r) * k..(r0 + r + 1) * k]);
    let mut acc = [[0.0f32; PANEL]; R];
    for (step, bt) in panel.chunks_exact(PANEL).enumerate() {
        let bt: &[f32; PANEL] = bt.try_into().expect("a whole panel row");
        for r in 0..R {
            let x = rows[r][step];
            for c in 0..PANEL {
                acc[r][c] = madd::<FMA>(x, bt[c], acc[r][c]);
            }
        }
    }
    let cols = (n - j0).min(PANEL);
    for (r, acc_row) in acc.iter().enumerate() {
        let o = &mut out[(r0 + r) * n + j0..(r0 + r) * n + j0 + cols];
        for (c, (dst, v)) in o.iter_mut().zip(acc_row).enumerate() {
            *dst = bias.map_or(0.0, |b| b[j0 + c]) + v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemm_matches_a_naive_loop() {
        for (m, n, k) in [(1, 1, 1), (3, 5, 7), (4, 8, 3), (9, 17, 33), (8, 48, 70), (5, 512, 20)] {
            let a: Vec<f32> = (0..m * k).map(|i| (i as f32 * 0.37).sin()).collect();
            let b: Vec<f32> = (0..k * n).map(|i| (i as f32 * 0.11).cos()).collect();
            let bias: Vec<f32> = (0..n).map(|i| i as f32 * 0.01 - 0.05).collect();
            for relu_after in [false, true] {
                let packed = pack_panels(&b, k, n);
                let mut out = vec![f32::NAN; m * n];
                gemm(&mut out, &a, &packed, Some(&bias), m, n, k, relu_after);
                let mut portable = vec![f32::NAN; m * n];
                gemm_body::<false>(&mut portable, &a, &packed, Some(&bias), m, n, k, relu_after);
                for r in 0..m {
                    for c in 0..n {
                        let mut want = f64::from(bias[c]);
                        for t in 0..k {
                            want += f64::from(a[r * k + t]) * f64::from(b[t * n + c]);
                        }
                        let want = if relu_after { want.max(0.0) } else { want };
                        assert!((f64::from(out[r * n + c]) - want).abs() < 1e-4, "{m}x{n}x{k} at {r},{c}");
                        assert!(
                            (f64::from(portable[r * n + c]) - want).abs() < 1e-4,
                            "portable {m}x{n}x{k} at {r},{c}"
                        );
                    }
                }
            }
            let packed = pack_panels(&b, k, n);
            let mut out = vec![9.0; m * n];
            gemm(&mut out, &a, &packed, None, m, n, k, false);
            let mut with_zero_bias = vec![0.0; m * n];
            gemm(&mut with_zero_bias, &a, &packed, Some(&vec![0.0; n]), m, n, k, false);
            assert_eq!(out, with_zero_bias);
        }
    }

    #[test]
    fn panels_hold_columns_contiguously() {
        // b = [[0, 1, ..., 16], [17, ..., 33]]: 2 x 17, two panels, the second one column wide.
        let b: Vec<f32> = (0..34).map(|v| v as f32).collect();
        let p = pack_panels(&b, 2, 17);
        assert_eq!(p.len(), 2 * 2 * PANEL);
        assert_eq!(&p[..PANEL], &b[..16]);
        assert_eq!(&p[PANEL..2 * PANEL], &b[17..33]);
        assert_eq!(p[2 * PANEL], 16.0);
        assert_eq!(p[3 * PANEL], 33.0);
        assert!(p[2 * PANEL + 1..3 * PANEL].iter().all(|v| *v == 0.0));
    }

    #[test]
    fn signatures_have_the_documented_arity() {
        let s = features_signature(150, 40);
        assert_eq!(s.params.len(), 2 + 150 + 40 + 5);
        assert_eq!(s.name, "saggar_models_features_f32_d150_s40");
        let builtin = saggar_device::builtin::signatures();
        let gemm = builtin.iter().find(|s| s.name == saggar_device::builtin::GEMM_BIAS_ACT_F32).expect("built in");
        assert_eq!(gemm_signature().params, gemm.params);
    }
}
