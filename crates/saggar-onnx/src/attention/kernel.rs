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

use super::MAX_HEAD;
use crate::gpu_codegen::{BLOCK, kernel_name};

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
pub(crate) fn gpu_tiled_kernel(mask: bool, nan_to_zero: bool, d: usize, dv: usize, bq: usize) -> (String, String) {
    let bk = tile_shapes(d.max(dv)).1;
    let mask_param = if mask { ", const float* __restrict__ mask" } else { "" };
    let mask_add = if mask { " + mask[mo + (i0 + r) * m_rs + j * m_cs]" } else { "" };
    let result = if nan_to_zero { "l > 0.0f ? acc[i][cc] / l : 0.0f" } else { "acc[i][cc] / l" };
    let text = format!(
        r#"(const onnx_i64* meta, const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v{mask_param}, float* __restrict__ out) {{
  constexpr int BQ = {bq}, BK = {bk}, D = {d}, DV = {dv}, RQ = BQ / 16, RK = BK / 8, CV = (DV + 7) / 8;
  __shared__ float qs[D][BQ + 1];
  __shared__ float ks[D][BK + 1];
  __shared__ __attribute__((aligned(16))) float vs[BK][DV];
  __shared__ float ss[BQ][BK + 1];
  const int nb = (int)meta[0];
  const int Sq = meta[1], Sk = meta[2];
  const float scale = __int_as_float((int)meta[5]);
  const onnx_i64* bd = meta + 6;
  const onnx_i64* qm = bd + nb; const onnx_i64* km = qm + nb + 2; const onnx_i64* vm = km + nb + 2;
  const onnx_i64* mm = vm + nb + 2; const onnx_i64* om = mm + nb + 2;
  const int q_rs = qm[nb], q_cs = qm[nb + 1], k_rs = km[nb], k_cs = km[nb + 1], v_rs = vm[nb], v_cs = vm[nb + 1];
  const int m_rs = mm[nb], m_cs = mm[nb + 1], o_rs = om[nb], o_cs = om[nb + 1];
  (void)m_rs; (void)m_cs;
  const int tid = threadIdx.x, tx = tid % 8, ty = tid / 8;
  int positions = 1;
  for (int a = 0; a < nb; ++a) positions *= bd[a];
  const int tiles = (Sq + BQ - 1) / BQ;
  // Rows of Q, K and V contiguous and every offset a multiple of four floats: tiles are read
  // four floats a load.
  bool vec4 = D % 4 == 0 && DV % 4 == 0 && q_cs == 1 && k_rs == 1 && v_cs == 1 && q_rs % 4 == 0 && k_cs % 4 == 0 && v_rs % 4 == 0
    && onnx_aligned16(q) && onnx_aligned16(k) && onnx_aligned16(v);
  for (int a = 0; a < nb; ++a) vec4 = vec4 && qm[a] % 4 == 0 && km[a] % 4 == 0 && vm[a] % 4 == 0;
  ONNX_ROWS(unit, positions * tiles) {{
    const int i0 = (unit % tiles) * BQ;
    int rem = unit / tiles, qo = 0, ko = 0, vo = 0, mo = 0, oo = 0;
    for (int a = nb - 1; a >= 0; --a) {{
      const int c = rem % bd[a]; rem /= bd[a];
      qo += c * qm[a]; ko += c * km[a]; vo += c * vm[a]; mo += c * mm[a]; oo += c * om[a];
    }}
    if (vec4) {{
#pragma unroll
      for (int e = tid; e < BQ * D / 4; e += {TILED_THREADS}) {{
        const int r = e / (D / 4), t = e % (D / 4) * 4;
        const float4 x = i0 + r < Sq ? *(const float4*)&q[qo + (i0 + r) * q_rs + t] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        qs[t][r] = x.x; qs[t + 1][r] = x.y; qs[t + 2][r] = x.z; qs[t + 3][r] = x.w;
      }}
    }} else {{
#pragma unroll
      for (int e = tid; e < BQ * D; e += {TILED_THREADS}) {{
        const int r = q_cs == 1 ? e / D : e % BQ, t = q_cs == 1 ? e % D : e / BQ;
        qs[t][r] = i0 + r < Sq ? q[qo + (i0 + r) * q_rs + t * q_cs] : 0.0f;
      }}
    }}
    float acc[RQ][CV], row_m[RQ], row_l[RQ];
    for (int i = 0; i < RQ; ++i) {{
      row_m[i] = ONNX_NEG_INF; row_l[i] = 0.0f;
      for (int cc = 0; cc < CV; ++cc) acc[i][cc] = 0.0f;
    }}
    for (int j0 = 0; j0 < Sk; j0 += BK) {{
      __syncthreads();
      if (vec4) {{
#pragma unroll
        for (int e = tid; e < BK * D / 4; e += {TILED_THREADS}) {{
          const int c = e / (D / 4), t = e % (D / 4) * 4;
          const float4 x = j0 + c < Sk ? *(const float4*)&k[ko + (j0 + c) * k_cs + t] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
          ks[t][c] = x.x; ks[t + 1][c] = x.y; ks[t + 2][c] = x.z; ks[t + 3][c] = x.w;
        }}
#pragma unroll
        for (int e = tid; e < BK * DV / 4; e += {TILED_THREADS}) {{
          const int j = e / (DV / 4), c = e % (DV / 4) * 4;
          *(float4*)&vs[j][c] = j0 + j < Sk ? *(const float4*)&v[vo + (j0 + j) * v_rs + c] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }}
      }} else {{
#pragma unroll
        for (int e = tid; e < BK * D; e += {TILED_THREADS}) {{
          const int c = k_rs == 1 ? e / D : e % BK, t = k_rs == 1 ? e % D : e / BK;
          ks[t][c] = j0 + c < Sk ? k[ko + t * k_rs + (j0 + c) * k_cs] : 0.0f;
        }}
#pragma unroll
        for (int e = tid; e < BK * DV; e += {TILED_THREADS}) {{
          const int j = v_cs == 1 ? e / DV : e % BK, c = v_cs == 1 ? e % DV : e / BK;
          vs[j][c] = j0 + j < Sk ? v[vo + (j0 + j) * v_rs + c * v_cs] : 0.0f;
        }}
      }}
      __syncthreads();
      float s[RQ][RK];
      for (int i = 0; i < RQ; ++i) for (int jj = 0; jj < RK; ++jj) s[i][jj] = 0.0f;
#pragma unroll 4
      for (int t = 0; t < D; ++t) {{
        float a[RQ], b[RK];
        for (int i = 0; i < RQ; ++i) a[i] = qs[t][ty * RQ + i];
        for (int jj = 0; jj < RK; ++jj) b[jj] = ks[t][tx + 8 * jj];
        for (int i = 0; i < RQ; ++i) for (int jj = 0; jj < RK; ++jj) s[i][jj] += a[i] * b[jj];
      }}
      // The online softmax of each row in registers: a row's scores are spread over the 8 lanes
      // of its row group (adjacent lanes of one warp), which meet at xor shuffles.
      for (int i = 0; i < RQ; ++i) {{
        const int r = ty * RQ + i;
        float cm = ONNX_NEG_INF;
        for (int jj = 0; jj < RK; ++jj) {{
          const int c = tx + 8 * jj;
          const int j = j0 + c;
          s[i][jj] = i0 + r < Sq && j < Sk ? s[i][jj] * scale{mask_add} : ONNX_NEG_INF;
          cm = fmaxf(cm, s[i][jj]);
        }}
        for (int o = 4; o > 0; o >>= 1) cm = fmaxf(cm, ONNX_SHFL_XOR_W(cm, o, 8));
        const float m = row_m[i], mn = fmaxf(m, cm);
        float cs = 0.0f;
        for (int jj = 0; jj < RK; ++jj) {{
          const int c = tx + 8 * jj;
          const float p = (j0 + c < Sk && mn != ONNX_NEG_INF) ? expf(s[i][jj] - mn) : 0.0f;
          ss[r][c] = p;
          cs += p;
        }}
        for (int o = 4; o > 0; o >>= 1) cs += ONNX_SHFL_XOR_W(cs, o, 8);
        const float corr = m == ONNX_NEG_INF ? 0.0f : expf(m - mn);
        row_l[i] = row_l[i] * corr + cs;
        row_m[i] = mn;
        for (int cc = 0; cc < CV; ++cc) acc[i][cc] *= corr;
      }}
      __syncthreads();
      for (int j = 0; j < BK; ++j) {{
        float p[RQ];
        for (int i = 0; i < RQ; ++i) p[i] = ss[ty * RQ + i][j];
        for (int cc = 0; cc < CV; ++cc) {{
          const int c = tx + 8 * cc;
          if (c < DV) {{ const float vv = vs[j][c]; for (int i = 0; i < RQ; ++i) acc[i][cc] += p[i] * vv; }}
        }}
      }}
    }}
    __syncthreads();
    for (int i = 0; i < RQ; ++i) {{
      const int r = ty * RQ + i;
      if (i0 + r >= Sq) continue;
      const float l = row_l[i];
      for (int cc = 0; cc < CV; ++cc) {{
        const int c = tx + 8 * cc;
        if (c < DV) out[oo + (i0 + r) * o_rs + c * o_cs] = {result};
      }}
    }}
    __syncthreads();
  }}
}}
"#
    );
    let name = kernel_name("attention_tiled", &text);
    (name.clone(), format!("SAGGAR_GLOBAL void ONNX_BOUNDS({TILED_THREADS}, {TILED_BLOCKS_PER_SM}) {name}{text}"))
}

/// `(name, C++ definition)` of the row attention kernel. Parameters: `meta, q, k, v, [mask,] out`
/// (meta: [`super::Attention::meta`]).
pub(crate) fn gpu_kernel(mask: bool, nan_to_zero: bool) -> (String, String) {
    let (mask_param, mask_add) =
        if mask { (", const float* __restrict__ mask", " + mask[mo + j * m_cs]") } else { ("", "") };
    let result = if nan_to_zero { "l > 0.0f ? acc[t] / l : 0.0f" } else { "acc[t] / l" };
    let text = format!(
        r#"(const onnx_i64* meta, const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v{mask_param}, float* __restrict__ out) {{
  __shared__ float qs[{MAX_HEAD}];
  __shared__ float acc[{MAX_HEAD}];
  __shared__ float ps[{BLOCK}];
  __shared__ float sh[{BLOCK}];
  const int nb = (int)meta[0];
  const onnx_i64 Sq = meta[1], Sk = meta[2], D = meta[3], Dv = meta[4];
  const float scale = __int_as_float((int)meta[5]);
  const onnx_i64* bd = meta + 6;
  const onnx_i64* qm = bd + nb; const onnx_i64* km = qm + nb + 2; const onnx_i64* vm = km + nb + 2;
  const onnx_i64* mm = vm + nb + 2; const onnx_i64* om = mm + nb + 2;
  const onnx_i64 q_cs = qm[nb + 1], k_rs = km[nb], k_cs = km[nb + 1], v_rs = vm[nb], v_cs = vm[nb + 1];
  const onnx_i64 m_cs = mm[nb + 1], o_cs = om[nb + 1];
  (void)m_cs;
  onnx_i64 rows = Sq;
  for (int a = 0; a < nb; ++a) rows *= bd[a];
  ONNX_ROWS(row, rows) {{
    const onnx_i64 i = row % Sq;
    onnx_i64 rem = row / Sq, qo = i * qm[nb], ko = 0, vo = 0, mo = i * mm[nb], oo = i * om[nb];
    for (int a = nb - 1; a >= 0; --a) {{
      const onnx_i64 c = rem % bd[a]; rem /= bd[a];
      qo += c * qm[a]; ko += c * km[a]; vo += c * vm[a]; mo += c * mm[a]; oo += c * om[a];
    }}
    for (onnx_i64 t = threadIdx.x; t < D; t += blockDim.x) qs[t] = q[qo + t * q_cs];
    for (onnx_i64 t = threadIdx.x; t < Dv; t += blockDim.x) acc[t] = 0.0f;
    __syncthreads();
    float m = ONNX_NEG_INF, l = 0.0f;
    for (onnx_i64 j0 = 0; j0 < Sk; j0 += blockDim.x) {{
      const onnx_i64 j = j0 + threadIdx.x;
      float s = ONNX_NEG_INF;
      if (j < Sk) {{
        float dot = 0.0f;
        for (onnx_i64 t = 0; t < D; ++t) dot += qs[t] * k[ko + t * k_rs + j * k_cs];
        s = dot * scale{mask_add};
      }}
      float cm = s;
      ONNX_BLOCK_REDUCE(cm, sh, a, b, fmaxf(a, b));
      const float mn = fmaxf(m, cm);
      const float p = (j < Sk && mn != ONNX_NEG_INF) ? expf(s - mn) : 0.0f;
      ps[threadIdx.x] = p;
      float cs = p;
      ONNX_BLOCK_REDUCE(cs, sh, a, b, a + b);
      const float corr = m == ONNX_NEG_INF ? 0.0f : expf(m - mn);
      l = l * corr + cs;
      const onnx_i64 nk = Sk - j0 < (onnx_i64)blockDim.x ? Sk - j0 : (onnx_i64)blockDim.x;
      for (onnx_i64 t = threadIdx.x; t < Dv; t += blockDim.x) {{
        float av = acc[t] * corr;
        for (onnx_i64 jj = 0; jj < nk; ++jj) av += ps[jj] * v[vo + (j0 + jj) * v_rs + t * v_cs];
        acc[t] = av;
      }}
      m = mn;
      __syncthreads();
    }}
    for (onnx_i64 t = threadIdx.x; t < Dv; t += blockDim.x) out[oo + t * o_cs] = {result};
    __syncthreads();
  }}
}}
"#
    );
    let name = kernel_name("attention", &text);
    (name.clone(), format!("SAGGAR_GLOBAL void {name}{text}"))
}

/// The fused attention group on the host backend.
#[derive(Debug, Clone)]
pub(crate) struct HostAttention {
    pub(crate) meta: Vec<i64>,
    pub(crate) mask: bool,
    pub(crate) nan_to_zero: bool,
    /// Elements of each input (Q, Kᵀ, V, mask) and of the output value.
    pub(crate) lens: Vec<usize>,
    pub(crate) out_len: usize,
}

impl HostAttention {
    /// `saggar_onnx_attention_<hash>` over everything the kernel computes with.
    pub(crate) fn signature(&self) -> KernelSignature {
        let text = format!("{:?}|{}|{}|{:?}|{}", self.meta, self.mask, self.nan_to_zero, self.lens, self.out_len);
        let hex = blake3::hash(text.as_bytes()).to_hex();
        KernelSignature {
            name: format!("saggar_onnx_attention_{}", &hex[..16]),
            params: vec![ParamKind::Ptr; self.lens.len() + 1],
        }
    }

    /// Registers the kernel unless this process already did.
    pub(crate) fn ensure_registered(&self) -> Result<(), saggar_device::Error> {
        let body = self.clone();
        crate::host_kernels::register_once(
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
            let mut inputs: [&[f32]; 4] = [&[]; 4];
            for (k, &len) in self.lens.iter().enumerate() {
                let ptr =
                    args.get(k).and_then(KernelArg::as_ptr).ok_or_else(|| ctx.fault("argument is not a pointer"))?;
                let bytes = ctx.bytes(ptr, len * 4)?;
                inputs[k] = bytemuck::try_cast_slice(bytes).map_err(|_| ctx.fault("an input is misaligned"))?;
            }
            let [q, k, v, mask] = inputs;
            run_host(&self.meta, q, k, v, self.mask.then_some(mask), self.nan_to_zero, &mut out)
                .map_err(|e| ctx.fault(e))?;
            let ptr = args
                .get(self.lens.len())
                .and_then(KernelArg::as_ptr)
                .ok_or_else(|| ctx.fault("argument is not a pointer"))?;
            ctx.bytes_mut(ptr, self.out_len * 4)?.copy_from_slice(bytemuck::cast_slice(&out));
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

/// The GPU kernel's algorithm on the host, over the same `meta` table (chunks of [`HOST_CHUNK`]
/// keys, f32 accumulation, the same online rescaling).
pub(crate) fn run_host(
    meta: &[i64],
    q: &[f32],
    k: &[f32],
    v: &[f32],
    mask: Option<&[f32]>,
    nan_to_zero: bool,
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
            *slot = at(q, qo + t as i64 * qm[nb + 1], "Q")?;
        }
        acc[..dv].fill(0.0);
        let (mut m, mut l) = (f32::NEG_INFINITY, 0.0f32);
        for j0 in (0..sk).step_by(HOST_CHUNK) {
            let nk = (sk - j0).min(HOST_CHUNK);
            let mut cm = f32::NEG_INFINITY;
            for (jj, p) in ps[..nk].iter_mut().enumerate() {
                let j = (j0 + jj) as i64;
                let mut dot = 0.0f32;
                for (t, &qv) in qs[..d].iter().enumerate() {
                    dot += qv * at(k, ko + t as i64 * km[nb] + j * km[nb + 1], "K")?;
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
            }
            let corr = if m == f32::NEG_INFINITY { 0.0 } else { (m - mn).exp() };
            l = l * corr + cs;
            for (t, a) in acc[..dv].iter_mut().enumerate() {
                let mut av = *a * corr;
                for (jj, &p) in ps[..nk].iter().enumerate() {
                    av += p * at(v, vo + (j0 + jj) as i64 * vm[nb] + t as i64 * vm[nb + 1], "V")?;
                }
                *a = av;
            }
            m = mn;
        }
        for (t, &a) in acc[..dv].iter().enumerate() {
            // `l` is NaN or 0 for a row with no valid key.
            let dead = l.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater);
            let value = if nan_to_zero && dead { 0.0 } else { a / l };
            let o = usize::try_from(oo + t as i64 * om[nb + 1]).ok().filter(|&o| o < out.len());
            *out.get_mut(o.ok_or("output offset is outside")?).ok_or("output offset is outside")? = value;
        }
    }
    Ok(())
}
