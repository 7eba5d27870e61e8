// The tiled attention kernel: one block of TILED_THREADS threads per (batch position, tile of @BQ@
// query rows), keys and values streamed through shared memory @BK@ at a time, an online softmax in
// f32. Head sizes @D@ (Q, K) and @DV@ (V); @MASK_PARAM@ and @MASK_ADD@ add the mask input, @RESULT@
// stores one output element (guarding rows whose sum is not positive where the pattern had it).
// meta: as the row kernel's (attention.cu)
(const onnx_i64* meta, const @QT@* __restrict__ q, const @KT@* __restrict__ k, const @VT@* __restrict__ v@MASK_PARAM@, @OUT_T@* __restrict__ out) {
  constexpr int BQ = @BQ@, BK = @BK@, D = @D@, DV = @DV@, RQ = BQ / 16, RK = BK / 8, CV = (DV + 7) / 8;
  __shared__ float qs[D][BQ + 1];
  __shared__ float ks[D][BK + 1];
  __shared__ __attribute__((aligned(16))) float vs[BK][DV];
  __shared__ float ss[BQ][BK + 1];
  const int tid = threadIdx.x, tx = tid % 8, ty = tid / 8;
@META_TILES@
@LOADERS@
  ONNX_ROWS(unit, positions * tiles) {
    const int i0 = (unit % tiles) * BQ;
    int rem = unit / tiles, qo = 0, ko = 0, vo = 0, mo = 0, oo = 0;
    for (int a = nb - 1; a >= 0; --a) {
      const int c = rem % bd[a]; rem /= bd[a];
      qo += c * qm[a]; ko += c * km[a]; vo += c * vm[a]; mo += c * mm[a]; oo += c * om[a];
    }
    if (vec4) {
#pragma unroll
      for (int e = tid; e < BQ * D / 4; e += @TILED_THREADS@) {
        const int r = e / (D / 4), t = e % (D / 4) * 4;
        const float4 x = i0 + r < Sq ? ldq4(qo + (i0 + r) * q_rs + t) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        qs[t][r] = x.x; qs[t + 1][r] = x.y; qs[t + 2][r] = x.z; qs[t + 3][r] = x.w;
      }
    } else {
#pragma unroll
      for (int e = tid; e < BQ * D; e += @TILED_THREADS@) {
        const int r = q_cs == 1 ? e / D : e % BQ, t = q_cs == 1 ? e % D : e / BQ;
        qs[t][r] = i0 + r < Sq ? ldq(qo + (i0 + r) * q_rs + t * q_cs) : 0.0f;
      }
    }
    float acc[RQ][CV], row_m[RQ], row_l[RQ];
    for (int i = 0; i < RQ; ++i) {
      row_m[i] = ONNX_NEG_INF; row_l[i] = 0.0f;
      for (int cc = 0; cc < CV; ++cc) acc[i][cc] = 0.0f;
    }
    for (int j0 = 0; j0 < Sk; j0 += BK) {
      __syncthreads();
      if (vec4) {
#pragma unroll
        for (int e = tid; e < BK * D / 4; e += @TILED_THREADS@) {
          const int c = e / (D / 4), t = e % (D / 4) * 4;
          const float4 x = j0 + c < Sk ? ldk4(ko + (j0 + c) * k_cs + t) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
          ks[t][c] = x.x; ks[t + 1][c] = x.y; ks[t + 2][c] = x.z; ks[t + 3][c] = x.w;
        }
#pragma unroll
        for (int e = tid; e < BK * DV / 4; e += @TILED_THREADS@) {
          const int j = e / (DV / 4), c = e % (DV / 4) * 4;
          *(float4*)&vs[j][c] = j0 + j < Sk ? ldv4(vo + (j0 + j) * v_rs + c) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
      } else {
#pragma unroll
        for (int e = tid; e < BK * D; e += @TILED_THREADS@) {
          const int c = k_rs == 1 ? e / D : e % BK, t = k_rs == 1 ? e % D : e / BK;
          ks[t][c] = j0 + c < Sk ? ldk(ko + t * k_rs + (j0 + c) * k_cs) : 0.0f;
        }
#pragma unroll
        for (int e = tid; e < BK * DV; e += @TILED_THREADS@) {
          const int j = v_cs == 1 ? e / DV : e % BK, c = v_cs == 1 ? e % DV : e / BK;
          vs[j][c] = j0 + j < Sk ? ldv(vo + (j0 + j) * v_rs + c * v_cs) : 0.0f;
        }
      }
      __syncthreads();
      float s[RQ][RK];
      for (int i = 0; i < RQ; ++i) for (int jj = 0; jj < RK; ++jj) s[i][jj] = 0.0f;
#pragma unroll 4
      for (int t = 0; t < D; ++t) {
        float a[RQ], b[RK];
        for (int i = 0; i < RQ; ++i) a[i] = qs[t][ty * RQ + i];
        for (int jj = 0; jj < RK; ++jj) b[jj] = ks[t][tx + 8 * jj];
        for (int i = 0; i < RQ; ++i) for (int jj = 0; jj < RK; ++jj) s[i][jj] += a[i] * b[jj];
      }
      // The online softmax of each row in registers: a row's scores are spread over the 8 lanes
      // of its row group (adjacent lanes of one warp), which meet at xor shuffles.
      for (int i = 0; i < RQ; ++i) {
        const int r = ty * RQ + i;
        float cm = ONNX_NEG_INF;
        for (int jj = 0; jj < RK; ++jj) {
          const int c = tx + 8 * jj;
          const int j = j0 + c;
          s[i][jj] = i0 + r < Sq && j < Sk ? s[i][jj] * scale@MASK_ADD@ : ONNX_NEG_INF;
          cm = fmaxf(cm, s[i][jj]);
        }
        for (int o = 4; o > 0; o >>= 1) cm = fmaxf(cm, ONNX_SHFL_XOR_W(cm, o, 8));
        const float m = row_m[i], mn = fmaxf(m, cm);
        float cs = 0.0f;
        for (int jj = 0; jj < RK; ++jj) {
          const int c = tx + 8 * jj;
          const float p = (j0 + c < Sk && mn != ONNX_NEG_INF) ? expf(s[i][jj] - mn) : 0.0f;
          ss[r][c] = p;
          cs += p;
        }
        for (int o = 4; o > 0; o >>= 1) cs += ONNX_SHFL_XOR_W(cs, o, 8);
        const float corr = m == ONNX_NEG_INF ? 0.0f : expf(m - mn);
        row_l[i] = row_l[i] * corr + cs;
        row_m[i] = mn;
        for (int cc = 0; cc < CV; ++cc) acc[i][cc] *= corr;
      }
      __syncthreads();
      for (int j = 0; j < BK; ++j) {
        float p[RQ];
        for (int i = 0; i < RQ; ++i) p[i] = ss[ty * RQ + i][j];
        for (int cc = 0; cc < CV; ++cc) {
          const int c = tx + 8 * cc;
          if (c < DV) { const float vv = vs[j][c]; for (int i = 0; i < RQ; ++i) acc[i][cc] += p[i] * vv; }
        }
      }
    }
    __syncthreads();
    for (int i = 0; i < RQ; ++i) {
      const int r = ty * RQ + i;
      if (i0 + r >= Sq) continue;
      const float l = row_l[i];
      for (int cc = 0; cc < CV; ++cc) {
        const int c = tx + 8 * cc;
        if (c < DV) out[oo + (i0 + r) * o_rs + c * o_cs] = @RESULT@;
      }
    }
    __syncthreads();
  }
}
