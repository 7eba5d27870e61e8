//! The fused attention kernels: CUDA/HIP C++ text and the host kernel running the same algorithm.
//!
//! Two GPU kernels compute the same online softmax:
//! - [`gpu_tiled_kernel`]: one block of [`TILED_THREADS`] threads per (batch position, tile of query
//!   rows); the tile's queries stay in shared memory while key and value tiles stream through it, so
//!   every key is read once per tile of queries instead of once per query row. Each thread computes
//!   a small register tile of scores and of the output. Tiles of 16, 32 or 64 query rows: the
//!   largest that still gives [`TILED_FILL_TILES`] blocks.
//! - [`gpu_kernel`], the row kernel, below.
//!
//! The row kernel: one block per (batch position, query row), grid-stride over rows, of a power of two threads (the
//! key count rounded up, 32 to 256): the query row is staged in shared memory, the keys are visited
//! in chunks of one key per thread (score = scale · q·k + mask),
//! and an online softmax (running maximum `m`, running sum `l`, the output row `acc` rescaled by
//! `exp(m_old - m_new)` per chunk) accumulates `P·V` in f32, so any key count works with
//! [`super::MAX_HEAD`] floats of shared memory per head vector. Rows whose sum is not positive (every
//! key masked with `-inf`, or a NaN score) give NaN, or zeros when the pattern had the
//! `Where(IsNaN(P), 0, P)` guard, exactly like the unfused ops.

use std::cell::RefCell;

use saggar_device::host::KernelContext;
use saggar_device::{KernelArg, KernelSignature, LaunchConfig, ParamKind};
use saggar_shape::DType;

use super::MAX_HEAD;
use crate::ops::gpu::{BLOCK, ctype, kernel_name, load_f32, render, strip_header};
use crate::tensor::DataRef;

/// Keys per chunk of the host kernel (the GPU kernel's chunk is its block size).
const HOST_CHUNK: usize = BLOCK as usize;

/// Threads of a block of the tiled kernel (16 row groups by 8 key or column lanes). The kernel's
/// tile loads step by this constant, so they unroll and each thread has all its loads of a tile in
/// flight at once; where rows are contiguous they read four floats a load; and the kernel is
/// compiled for [`TILED_BLOCKS_PER_SM`] blocks an SM. BERT-base at batch 64 on an H100, a layer:
/// 306 us with the loads one at a time, 222 us unrolled, 169 us four floats a load, 150 us with
/// registers for four blocks an SM (168 registers a thread without the bound, 128 with it).
pub(crate) const TILED_THREADS: u32 = 128;

/// Blocks of the tiled kernel an SM is compiled to hold (its launch bounds on CUDA).
const TILED_BLOCKS_PER_SM: u32 = 4;

/// Fewest blocks (batch positions × tiles of 16 query rows) for which the automatic choice
/// launches the tiled kernel; below it the row kernel's one block per query row keeps more of the
/// GPU busy.
pub(crate) const TILED_MIN_TILES: u64 = 64;

/// Blocks the tiled kernel aims for: it takes the largest tile that still gives this many.
pub(crate) const TILED_FILL_TILES: u64 = 256;

/// What a fused attention kernel's text depends on besides its tiles: the mask input, the guard of
/// rows with no valid key, the half type the result is stored in (a Cast the group absorbed), and
/// the element types of Q, K and V (f32, or a half product's result read through the Cast that
/// widened it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Form {
    pub(crate) mask: bool,
    pub(crate) nan_to_zero: bool,
    pub(crate) store: Option<DType>,
    pub(crate) inputs: [DType; 3],
}

impl Form {
    /// `QT`, `KT`, `VT` (each operand's C type) and `LOADERS`: lambdas reading one element of an
    /// operand as f32 (`ldq`, `ldk`, `ldv`) and, with `vec4`, four consecutive ones (`ldq4`, ...).
    fn operand_placeholders(self, vec4: bool) -> [(&'static str, String); 4] {
        let mut loaders = String::new();
        for (name, dtype) in ["q", "k", "v"].into_iter().zip(self.inputs) {
            let one = load_f32(dtype, &format!("{name}[i]"));
            loaders += &format!("  auto ld{name} = [&](onnx_i64 i) -> float {{ return {one}; }};\n");
            if vec4 {
                let four = match dtype {
                    DType::F16 => "onnx_ld4_half<false>",
                    DType::BF16 => "onnx_ld4_half<true>",
                    _ => "onnx_ld4_f32",
                };
                loaders += &format!("  auto ld{name}4 = [&](onnx_i64 i) -> float4 {{ return {four}(&{name}[i]); }};\n");
            }
        }
        let [q, k, v] = self.inputs.map(|d| ctype(d).unwrap_or("float").to_string());
        [("QT", q), ("KT", k), ("VT", v), ("LOADERS", loaders.trim_end().to_string())]
    }

    /// The placeholders every kernel shares: `MASK_PARAM`, `OUT_T` and `RESULT` (one output element
    /// from the accumulator `acc` and the row sum `l`, rounded to the stored type).
    fn placeholders(self, acc: &str) -> [(&'static str, String); 3] {
        let value = if self.nan_to_zero { format!("l > 0.0f ? {acc} / l : 0.0f") } else { format!("{acc} / l") };
        let (out_t, result) = match self.store {
            Some(DType::BF16) => ("unsigned short", format!("onnx_f32_to_bf16({value})")),
            Some(_) => ("unsigned short", format!("onnx_f32_to_f16({value})")),
            None => ("float", value),
        };
        let mask = if self.mask { ", const float* __restrict__ mask" } else { "" };
        [("MASK_PARAM", mask.to_string()), ("OUT_T", out_t.to_string()), ("RESULT", result)]
    }
}

/// The query-row counts a tile may have for head sizes up to `head` (the larger of `D` and `Dv`),
/// smallest first, and the keys per tile: the largest tiles' shared memory (queries, keys, values
/// and scores of one tile) stays under 48 KiB.
pub(crate) fn tile_shapes(head: usize) -> (&'static [usize], usize) {
    match head {
        0..=64 => (&[16, 32, 64], 32),
        65..=128 => (&[16, 32], 16),
        _ => (&[16], 8),
    }
}

/// `(name, C++ definition)` of the tiled attention kernel for head sizes `d` (Q, K) and `dv` (V),
/// both at most [`MAX_HEAD`], with tiles of `bq` query rows (one of [`tile_shapes`]). Same
/// parameters and `meta` table as [`gpu_kernel`]; launched with [`TILED_THREADS`] threads and
/// grid-stride over `batch positions × ceil(Sq / bq)`.
pub(crate) fn gpu_tiled_kernel(form: Form, d: usize, dv: usize, bq: usize) -> (String, String) {
    let bk = tile_shapes(d.max(dv)).1;
    let mask_add = if form.mask { " + mask[mo + (i0 + r) * m_rs + j * m_cs]" } else { "" };
    let [mask_param, out_t, result] = form.placeholders("acc[i][cc]");
    let [qt, kt, vt, loaders] = form.operand_placeholders(true);
    let text = render_owned(
        include_str!("attention_tiled.cu"),
        &[
            qt,
            kt,
            vt,
            loaders,
            mask_param,
            out_t,
            result,
            ("MASK_ADD", mask_add.to_string()),
            ("BQ", bq.to_string()),
            ("BK", bk.to_string()),
            ("D", d.to_string()),
            ("DV", dv.to_string()),
            ("TILED_THREADS", TILED_THREADS.to_string()),
            ("META_TILES", meta_tiles()),
        ],
    );
    let name = kernel_name("attention_tiled", &text);
    (name.clone(), format!("SAGGAR_GLOBAL void ONNX_BOUNDS({TILED_THREADS}, {TILED_BLOCKS_PER_SM}) {name}{text}"))
}

/// Largest head size (`D` and `Dv`) the tensor-core kernel takes.
pub(crate) const MMA_MAX_HEAD: usize = 128;

/// Warps a block of the tensor-core kernel has at most (16 query rows each).
pub(crate) const MMA_MAX_WARPS: u32 = 4;

/// The warps a block of query rows of its own may have: one kernel each, defined in every model
/// using the kernel. Not three: 48-row tiles pad a 128-row sequence by a ninth, and each block size
/// defined costs NVRTC half a second of a cold start's compile.
pub(crate) const MMA_ROW_WARPS: [u32; 3] = [1, 2, MMA_MAX_WARPS];

/// Keys per tile of the tensor-core kernel for heads up to `head` (padded to 16): its shared memory
/// (64 query rows, a tile of keys and of values, halves) stays under 48 KiB.
pub(crate) fn mma_keys(head: usize) -> usize {
    if head.next_multiple_of(16) <= 64 { 64 } else { 32 }
}

/// Largest head (`D` and `Dv`) the split-keys block of the tensor-core kernel takes: its four key
/// and value tiles of [`MMA_SPLIT_KEYS`] keys stay under 48 KiB of shared memory.
pub(crate) const MMA_SPLIT_MAX_HEAD: usize = 64;

/// Keys per tile of a warp of a split-keys block.
const MMA_SPLIT_KEYS: usize = 32;

/// A block of the tensor-core kernel: `warps` warps (1 to [`MMA_MAX_WARPS`]), `split` of which share
/// each tile of 16 query rows, dividing its keys between them (1: a warp has 16 rows of its own and
/// every key; [`MMA_MAX_WARPS`]: the split-keys block, heads up to [`MMA_SPLIT_MAX_HEAD`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MmaBlock {
    pub(crate) warps: u32,
    pub(crate) split: u32,
}

impl MmaBlock {
    /// `warps` warps, each with query rows of its own.
    pub(crate) const fn rows(warps: u32) -> Self {
        MmaBlock { warps, split: 1 }
    }

    /// The split-keys block.
    pub(crate) const SPLIT: Self = MmaBlock { warps: MMA_MAX_WARPS, split: MMA_MAX_WARPS };

    /// Query rows a block computes.
    pub(crate) fn query_rows(self) -> usize {
        16 * (self.warps / self.split) as usize
    }
}

/// `(name, C++ definition)` of the tensor-core attention kernel (`attention_mma.cu`) computing in
/// `half` (f16 or bf16) for head sizes `d` and `dv` up to [`MMA_MAX_HEAD`], with blocks of `block`
/// (its warps a constant, so its tile loads unroll and are all in flight at once). Same parameters
/// and `meta` table as [`gpu_kernel`]; launched with `32 × warps` threads and grid-stride over
/// `batch positions × ceil(Sq / block.query_rows())`.
pub(crate) fn gpu_mma_kernel(form: Form, (d, dv): (usize, usize), half: DType, block: MmaBlock) -> (String, String) {
    let head = d.max(dv);
    let keys = if block.split > 1 { MMA_SPLIT_KEYS } else { mma_keys(head) };
    let (pack, mma) =
        if half == DType::BF16 { ("onnx_pack_bf16", "onnx_mma_bf16") } else { ("onnx_pack_f16", "onnx_mma_f16") };
    let mask_add = if form.mask { " + mask[mo + i * m_rs + j * m_cs]" } else { "" };
    let [mask_param, out_t, result] = form.placeholders("a");
    let (pair, make_pair) = if form.store.is_some() { ("ushort2", "make_ushort2") } else { ("float2", "make_float2") };
    let [qt, kt, vt, loaders] = form.operand_placeholders(true);
    let text = render_owned(
        include_str!("attention_mma.cu"),
        &[
            qt,
            kt,
            vt,
            loaders,
            mask_param,
            out_t,
            result,
            ("OUT_PAIR", pair.to_string()),
            ("MAKE_PAIR", make_pair.to_string()),
            ("MASK_ADD", mask_add.to_string()),
            ("HALF", half.name().to_string()),
            ("PACK", pack.to_string()),
            ("MMA", mma.to_string()),
            ("BK", keys.to_string()),
            ("WARPS", block.warps.to_string()),
            ("SPLIT", block.split.to_string()),
            ("META_TILES", meta_tiles()),
            ("D", d.to_string()),
            ("DV", dv.to_string()),
        ],
    );
    let name = kernel_name("attention_mma", &text);
    let threads = 32 * block.warps;
    let blocks = if head.next_multiple_of(16) <= 64 { 4 } else { 2 };
    (name.clone(), format!("SAGGAR_GLOBAL void ONNX_BOUNDS({threads}, {blocks}) {name}{text}"))
}

/// `(name, C++ definition)` of the row attention kernel. Parameters: `meta, q, k, v, [mask,] out`
/// (meta: [`super::Attention::meta`]; `out` f32, or half bits where `form` stores half).
pub(crate) fn gpu_kernel(form: Form) -> (String, String) {
    let mask_add = if form.mask { " + mask[mo + j * m_cs]" } else { "" };
    let [mask_param, out_t, result] = form.placeholders("acc[t]");
    let [qt, kt, vt, loaders] = form.operand_placeholders(false);
    let text = render_owned(
        include_str!("attention.cu"),
        &[
            qt,
            kt,
            vt,
            loaders,
            mask_param,
            out_t,
            result,
            ("MASK_ADD", mask_add.to_string()),
            ("MAX_HEAD", MAX_HEAD.to_string()),
            ("BLOCK", BLOCK.to_string()),
        ],
    );
    let name = kernel_name("attention", &text);
    (name.clone(), format!("SAGGAR_GLOBAL void {name}{text}"))
}

/// `attention_meta.cuh`: the tile kernels' reading of the `meta` table.
fn meta_tiles() -> String {
    strip_header(include_str!("attention_meta.cuh")).trim_end().to_string()
}

/// [`render`] with owned values.
fn render_owned(template: &str, values: &[(&str, String)]) -> String {
    render(template, &values.iter().map(|(k, v)| (*k, v.as_str())).collect::<Vec<_>>())
}

/// The fused attention group on the host backend.
#[derive(Debug, Clone)]
pub(crate) struct HostAttention {
    pub(crate) meta: Vec<i64>,
    pub(crate) mask: bool,
    pub(crate) nan_to_zero: bool,
    /// The half type Q, K, V and the probabilities are rounded to, as the tensor-core kernel does.
    pub(crate) half: Option<DType>,
    /// The half type the result is stored in (bits), or `None` for f32.
    pub(crate) store: Option<DType>,
    /// Elements of each input (Q, Kᵀ, V, mask) and of the output value.
    pub(crate) lens: Vec<usize>,
    /// Element type of each input (f32, or half bits widened as they are read).
    pub(crate) dtypes: Vec<DType>,
    pub(crate) out_len: usize,
}

impl HostAttention {
    /// `saggar_onnx_attention_<hash>` over everything the kernel computes with.
    pub(crate) fn signature(&self) -> KernelSignature {
        let text = format!(
            "{:?}|{}|{}|{:?}|{:?}|{:?}|{:?}|{}",
            self.meta, self.mask, self.nan_to_zero, self.half, self.store, self.lens, self.dtypes, self.out_len
        );
        let hex = blake3::hash(text.as_bytes()).to_hex();
        KernelSignature {
            name: format!("saggar_onnx_attention_{}", &hex[..16]),
            params: vec![ParamKind::Ptr; self.lens.len() + 1],
        }
    }

    /// Registers the kernel unless this process already did.
    pub(crate) fn ensure_registered(&self) -> Result<(), saggar_device::Error> {
        let body = self.clone();
        crate::plan::host::register_once(
            self.signature(),
            move |ctx: &mut KernelContext<'_>, _: &LaunchConfig, args: &[KernelArg]| body.launch(ctx, args),
        )
    }

    fn launch(&self, ctx: &mut KernelContext<'_>, args: &[KernelArg]) -> saggar_device::Result<()> {
        thread_local! {
            static OUT: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
        }
        let mut out = OUT.with(RefCell::take);
        out.clear();
        out.resize(self.out_len, 0.0);
        let result = (|| {
            // Half operands widened (exactly) into buffers of their own.
            let mut widened: [Vec<f32>; 4] = Default::default();
            let mut inputs: [&[f32]; 4] = [&[]; 4];
            for (k, (&len, &dtype)) in self.lens.iter().zip(&self.dtypes).enumerate() {
                let ptr =
                    args.get(k).and_then(KernelArg::as_ptr).ok_or_else(|| ctx.fault("argument is not a pointer"))?;
                let bytes = ctx.bytes(ptr, len * dtype.size_bytes())?;
                let data = DataRef::from_bytes(dtype, bytes).ok_or_else(|| ctx.fault("an input is misaligned"))?;
                match data {
                    DataRef::F32(x) => inputs[k] = x,
                    half => widened[k] = half.to_f32s().ok_or_else(|| ctx.fault("an input is not floating-point"))?,
                }
            }
            for (slot, w) in inputs.iter_mut().zip(&widened) {
                if !w.is_empty() {
                    *slot = w;
                }
            }
            let [q, k, v, mask] = inputs;
            let rounding = Rounding { half: self.half, nan_to_zero: self.nan_to_zero };
            run_host(&self.meta, q, k, v, self.mask.then_some(mask), rounding, &mut out).map_err(|e| ctx.fault(e))?;
            let ptr = args
                .get(self.lens.len())
                .and_then(KernelArg::as_ptr)
                .ok_or_else(|| ctx.fault("argument is not a pointer"))?;
            match self.store {
                None => ctx.bytes_mut(ptr, self.out_len * 4)?.copy_from_slice(bytemuck::cast_slice(&out)),
                Some(half) => {
                    let bits = ctx.bytes_mut(ptr, self.out_len * 2)?;
                    for (b, &v) in bits.chunks_exact_mut(2).zip(&out) {
                        let h = if half == DType::BF16 {
                            half::bf16::from_f32(v).to_bits()
                        } else {
                            half::f16::from_f32(v).to_bits()
                        };
                        b.copy_from_slice(&h.to_le_bytes());
                    }
                }
            }
            Ok(())
        })();
        OUT.with(|c| c.replace(out));
        result
    }
}

/// Reads `slice[at]` for a signed offset, or explains why not.
fn at(slice: &[f32], at: i64, what: &str) -> Result<f32, String> {
    usize::try_from(at).ok().and_then(|i| slice.get(i).copied()).ok_or_else(|| format!("{what} offset {at} is outside"))
}

/// How the host kernel rounds: `half` rounds Q, K and V as they are read and each probability before
/// it weighs V (its row sum stays f32), as the tensor-core kernel does; `nan_to_zero` gives zeros
/// for rows with no valid key.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Rounding {
    pub(crate) half: Option<DType>,
    pub(crate) nan_to_zero: bool,
}

impl Rounding {
    /// `x` rounded to the half type (to nearest even), or `x`.
    fn round(self, x: f32) -> f32 {
        match self.half {
            Some(DType::F16) => half::f16::from_f32(x).to_f32(),
            Some(DType::BF16) => half::bf16::from_f32(x).to_f32(),
            _ => x,
        }
    }
}

/// The GPU kernels' algorithm on the host, over the same `meta` table (chunks of [`HOST_CHUNK`]
/// keys, f32 accumulation, the same online rescaling).
pub(crate) fn run_host(
    meta: &[i64],
    q: &[f32],
    k: &[f32],
    v: &[f32],
    mask: Option<&[f32]>,
    rounding: Rounding,
    out: &mut [f32],
) -> Result<(), String> {
    let get = |i: usize| meta.get(i).copied().ok_or_else(|| "meta table is short".to_string());
    let nb = usize::try_from(get(0)?).map_err(|_| "bad batch rank")?;
    let ext = |i: usize| get(i).and_then(|v| usize::try_from(v).map_err(|_| "negative extent".to_string()));
    let (sq, sk, d, dv) = (ext(1)?, ext(2)?, ext(3)?, ext(4)?);
    if d > MAX_HEAD || dv > MAX_HEAD {
        return Err("head size above the kernel's limit".into());
    }
    let scale = f32::from_bits(get(5)? as u32);
    let batch: Vec<i64> = (0..nb).map(|a| get(6 + a)).collect::<Result<_, _>>()?;
    let strides = |op: usize| -> Result<Vec<i64>, String> {
        let base = 6 + nb + op * (nb + 2);
        (base..base + nb + 2).map(get).collect()
    };
    let (qm, km, vm, mm, om) = (strides(0)?, strides(1)?, strides(2)?, strides(3)?, strides(4)?);
    let rows = batch.iter().try_fold(sq as i64, |acc, &b| acc.checked_mul(b)).ok_or("row count overflows")?;
    // Rounded probabilities depend on the running maximum, so the half form visits keys in the
    // tensor-core kernel's tiles.
    let chunk = if rounding.half.is_some() { mma_keys(d.max(dv)) } else { HOST_CHUNK };
    let (mut qs, mut acc, mut ps) = ([0f32; MAX_HEAD], [0f32; MAX_HEAD], [0f32; HOST_CHUNK]);
    for row in 0..rows {
        let i = row % sq as i64;
        let mut rem = row / sq as i64;
        let (mut qo, mut ko, mut vo, mut mo, mut oo) = (i * qm[nb], 0, 0, i * mm[nb], i * om[nb]);
        for a in (0..nb).rev() {
            let c = rem % batch[a];
            rem /= batch[a];
            qo += c * qm[a];
            ko += c * km[a];
            vo += c * vm[a];
            mo += c * mm[a];
            oo += c * om[a];
        }
        for (t, slot) in qs[..d].iter_mut().enumerate() {
            *slot = rounding.round(at(q, qo + t as i64 * qm[nb + 1], "Q")?);
        }
        acc[..dv].fill(0.0);
        let (mut m, mut l) = (f32::NEG_INFINITY, 0.0f32);
        for j0 in (0..sk).step_by(chunk) {
            let nk = (sk - j0).min(chunk);
            let mut cm = f32::NEG_INFINITY;
            for (jj, p) in ps[..nk].iter_mut().enumerate() {
                let j = (j0 + jj) as i64;
                let mut dot = 0.0f32;
                for (t, &qv) in qs[..d].iter().enumerate() {
                    dot += qv * rounding.round(at(k, ko + t as i64 * km[nb] + j * km[nb + 1], "K")?);
                }
                let mut s = dot * scale;
                if let Some(mask) = mask {
                    s += at(mask, mo + j * mm[nb + 1], "mask")?;
                }
                *p = s;
                cm = cm.max(s);
            }
            let mn = m.max(cm);
            let mut cs = 0.0f32;
            for p in &mut ps[..nk] {
                *p = if mn == f32::NEG_INFINITY { 0.0 } else { (*p - mn).exp() };
                cs += *p;
                *p = rounding.round(*p);
            }
            let corr = if m == f32::NEG_INFINITY { 0.0 } else { (m - mn).exp() };
            l = l * corr + cs;
            for (t, a) in acc[..dv].iter_mut().enumerate() {
                let mut av = *a * corr;
                for (jj, &p) in ps[..nk].iter().enumerate() {
                    av += p * rounding.round(at(v, vo + (j0 + jj) as i64 * vm[nb] + t as i64 * vm[nb + 1], "V")?);
                }
                *a = av;
            }
            m = mn;
        }
        for (t, &a) in acc[..dv].iter().enumerate() {
            // `l` is NaN or 0 for a row with no valid key.
            let dead = l.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater);
            let value = if rounding.nan_to_zero && dead { 0.0 } else { a / l };
            let o = usize::try_from(oo + t as i64 * om[nb + 1]).ok().filter(|&o| o < out.len());
            *out.get_mut(o.ok_or("output offset is outside")?).ok_or("output offset is outside")? = value;
        }
    }
    Ok(())
}
