// The tensor-core attention kernel: a block of @WARPS@ warps per (batch position, tile of 16 query
// rows a warp). Q, K and V are read in f32 and rounded to @HALF@ (pairs of halves a 32-bit
// word) into shared memory: Q rows and K rows (the reduction axis D contiguous) and V transposed
// (keys contiguous), each padded to a multiple of 16 with zeros. Per tile of @BK@ keys a warp forms
// its 16 x BK scores with m16n8k16 products accumulating f32, scales them and adds the mask in f32,
// runs the online softmax in f32 (each row's maximum across the four lanes holding it), rounds the
// probabilities to @HALF@ in registers (the scores' accumulator layout is the next product's
// operand layout) and accumulates P·V in f32. Each lane sums its part of a row's probabilities
// (before rounding); the four meet at the end. Heads up to 128 (DP, DVP: D and DV rounded up to 16).
// meta: as the row kernel's (attention.cu)
(const onnx_i64* meta, const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v@MASK_PARAM@, @OUT_T@* __restrict__ out) {
  constexpr int D = @D@, DV = @DV@, DP = (D + 15) / 16 * 16, DVP = (DV + 15) / 16 * 16, BK = @BK@;
  constexpr int QW = (DP + 8) / 2, VW = (BK + 8) / 2, THREADS = 32 * @WARPS@, BQ = 16 * @WARPS@;
  __shared__ unsigned qs[BQ][QW];
  __shared__ unsigned ks[BK][QW];
  __shared__ unsigned vt[DVP][VW];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, t = lane % 4;
@META_TILES@
  // Element `d` of row `r` of an operand (zero outside `rows` x `cols`).
  auto at = [](const float* p, int off, bool inside) { return inside ? p[off] : 0.0f; };
  auto row4 = [](const float* p, int off, bool inside) {
    return inside ? *(const float4*)&p[off] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  };
  ONNX_ROWS(unit, positions * tiles) {
    const int i0 = (int)(unit % tiles) * BQ;
    int rem = (int)(unit / tiles), qo = 0, ko = 0, vo = 0, mo = 0, oo = 0;
    for (int a = nb - 1; a >= 0; --a) {
      const int c = rem % bd[a]; rem /= bd[a];
      qo += c * qm[a]; ko += c * km[a]; vo += c * vm[a]; mo += c * mm[a]; oo += c * om[a];
    }
    // The block's query rows, as pairs of halves along the head.
    if (vec4) {
#pragma unroll
      for (int e = tid; e < BQ * (DP / 4); e += THREADS) {
        const int r = e / (DP / 4), d = e % (DP / 4) * 4;
        const float4 x = row4(q, qo + (i0 + r) * q_rs + d, i0 + r < Sq && d < D);
        qs[r][d / 2] = @PACK@(x.x, x.y); qs[r][d / 2 + 1] = @PACK@(x.z, x.w);
      }
    } else {
#pragma unroll
      for (int e = tid; e < BQ * (DP / 2); e += THREADS) {
        const int r = e / (DP / 2), d = e % (DP / 2) * 2;
        const int off = qo + (i0 + r) * q_rs + d * q_cs;
        qs[r][d / 2] = @PACK@(at(q, off, i0 + r < Sq && d < D), at(q, off + q_cs, i0 + r < Sq && d + 1 < D));
      }
    }
    __syncthreads();
    unsigned qf[DP / 16][4];
    const int r0 = warp * 16;
#pragma unroll
    for (int kk = 0; kk < DP / 16; ++kk) {
      qf[kk][0] = qs[r0 + g][kk * 8 + t]; qf[kk][1] = qs[r0 + g + 8][kk * 8 + t];
      qf[kk][2] = qs[r0 + g][kk * 8 + 4 + t]; qf[kk][3] = qs[r0 + g + 8][kk * 8 + 4 + t];
    }
    float o[DVP / 8][4], row_m[2] = {ONNX_NEG_INF, ONNX_NEG_INF}, row_l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < DVP / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    for (int j0 = 0; j0 < Sk; j0 += BK) {
      __syncthreads();
      // Keys as rows along the head; values transposed, pairs of keys a word.
      if (vec4) {
#pragma unroll
      for (int e = tid; e < BK * (DP / 4); e += THREADS) {
          const int j = e / (DP / 4), d = e % (DP / 4) * 4;
          const float4 x = row4(k, ko + (j0 + j) * k_cs + d, j0 + j < Sk && d < D);
          ks[j][d / 2] = @PACK@(x.x, x.y); ks[j][d / 2 + 1] = @PACK@(x.z, x.w);
        }
#pragma unroll
      for (int e = tid; e < (BK / 2) * (DVP / 4); e += THREADS) {
          const int j = e / (DVP / 4) * 2, d = e % (DVP / 4) * 4;
          const float4 x = row4(v, vo + (j0 + j) * v_rs + d, j0 + j < Sk && d < DV);
          const float4 y = row4(v, vo + (j0 + j + 1) * v_rs + d, j0 + j + 1 < Sk && d < DV);
          vt[d][j / 2] = @PACK@(x.x, y.x); vt[d + 1][j / 2] = @PACK@(x.y, y.y);
          vt[d + 2][j / 2] = @PACK@(x.z, y.z); vt[d + 3][j / 2] = @PACK@(x.w, y.w);
        }
      } else {
#pragma unroll
      for (int e = tid; e < BK * (DP / 2); e += THREADS) {
          const int j = k_rs == 1 ? e / (DP / 2) : e % BK, d = (k_rs == 1 ? e % (DP / 2) : e / BK) * 2;
          const int off = ko + d * k_rs + (j0 + j) * k_cs;
          ks[j][d / 2] = @PACK@(at(k, off, j0 + j < Sk && d < D), at(k, off + k_rs, j0 + j < Sk && d + 1 < D));
        }
#pragma unroll
      for (int e = tid; e < (BK / 2) * DVP; e += THREADS) {
          const int j = (v_cs == 1 ? e / DVP : e % (BK / 2)) * 2, d = v_cs == 1 ? e % DVP : e / (BK / 2);
          const int off = vo + (j0 + j) * v_rs + d * v_cs;
          vt[d][j / 2] = @PACK@(at(v, off, j0 + j < Sk && d < DV), at(v, off + v_rs, j0 + j + 1 < Sk && d < DV));
        }
      }
      __syncthreads();
      float s[BK / 8][4];
#pragma unroll
      for (int n = 0; n < BK / 8; ++n) {
        s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < DP / 16; ++kk) @MMA@(s[n], qf[kk], ks[n * 8 + g][kk * 8 + t], ks[n * 8 + g][kk * 8 + 4 + t]);
      }
      // Scale, mask and the online softmax of rows g (h = 0) and g + 8 (h = 1).
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int i = i0 + r0 + g + 8 * h;
        float cm = ONNX_NEG_INF;
#pragma unroll
        for (int n = 0; n < BK / 8; ++n) {
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const int j = j0 + n * 8 + 2 * t + c;
            float x = s[n][2 * h + c] * scale;
            if (i < Sq && j < Sk) x = x@MASK_ADD@;
            s[n][2 * h + c] = j < Sk ? x : ONNX_NEG_INF;
            cm = fmaxf(cm, s[n][2 * h + c]);
          }
        }
        cm = fmaxf(cm, ONNX_SHFL_XOR_W(cm, 1, 4));
        cm = fmaxf(cm, ONNX_SHFL_XOR_W(cm, 2, 4));
        const float m = row_m[h], mn = fmaxf(m, cm);
        const float corr = m == ONNX_NEG_INF ? 0.0f : expf(m - mn);
        float cs = 0.0f;
#pragma unroll
        for (int n = 0; n < BK / 8; ++n) {
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const float p = mn == ONNX_NEG_INF ? 0.0f : expf(s[n][2 * h + c] - mn);
            s[n][2 * h + c] = p;
            cs += p;
          }
        }
        row_l[h] = row_l[h] * corr + cs;
        row_m[h] = mn;
#pragma unroll
        for (int n = 0; n < DVP / 8; ++n) { o[n][2 * h] *= corr; o[n][2 * h + 1] *= corr; }
      }
#pragma unroll
      for (int kk = 0; kk < BK / 16; ++kk) {
        const unsigned pf[4] = {@PACK@(s[2 * kk][0], s[2 * kk][1]), @PACK@(s[2 * kk][2], s[2 * kk][3]),
                                @PACK@(s[2 * kk + 1][0], s[2 * kk + 1][1]), @PACK@(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
        for (int n = 0; n < DVP / 8; ++n) @MMA@(o[n], pf, vt[n * 8 + g][kk * 8 + t], vt[n * 8 + g][kk * 8 + 4 + t]);
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float l = row_l[h];
      l += ONNX_SHFL_XOR_W(l, 1, 4);
      l += ONNX_SHFL_XOR_W(l, 2, 4);
      const int i = i0 + r0 + g + 8 * h;
      if (i >= Sq) continue;
#pragma unroll
      for (int n = 0; n < DVP / 8; ++n) {
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int col = n * 8 + 2 * t + c;
          const float a = o[n][2 * h + c];
          if (col < DV) out[oo + i * o_rs + col * o_cs] = @RESULT@;
        }
      }
    }
    __syncthreads();
  }
}
