// The tensor-core attention kernel: a block of @WARPS@ warps per (batch position, tile of 16 query
// rows a warp). Q, K and V are read in f32 or half (@LOADERS@) and rounded to @HALF@ (pairs of halves a 32-bit
// word) into shared memory, each row-major along the head (eight bytes a store), padded to a
// multiple of 16 with zeros; rows are 16 bytes longer than the head so that the eight rows an
// 8x8 fragment load reads fall in different banks. Operands whose head is not contiguous (or not
// 16-byte aligned) take a scalar load path, left rolled: unrolled, it cost NVRTC a fifth of the
// kernel's compile time for a path exported transformers do not take. Per tile of @BK@ keys a warp forms its 16 x BK
// scores with m16n8k16 products accumulating f32 (Q and K fragments by `ldmatrix` on CUDA), scales
// them and adds the mask in f32, runs the online softmax in f32 (each row's maximum across the
// four lanes holding it), rounds the probabilities to @HALF@ in registers (the scores' accumulator
// layout is the next product's operand layout) and accumulates P·V in f32, its V fragments loaded
// transposed (`ldmatrix.trans` on CUDA). Each lane sums its part of a row's probabilities (before
// rounding); the four meet at the end. Two adjacent output columns are stored together where the
// output rows are contiguous. Heads up to 128 (DP, DVP: D and DV rounded up to 16).
// Split keys (@SPLIT@ > 1, heads up to 64): the block's @SPLIT@ warps share one tile of 16 query
// rows, each warp visiting its own key tiles (warp w the tiles w, w + SPLIT, ...) in a shared
// memory tile of its own; at the end each warp leaves its maximum, sum and unnormalised output rows
// in shared memory and the block merges them in f32. A batch too small to fill the GPU with blocks
// of query tiles (one sequence: 12 heads of 128 rows are 96 tiles of 16) then has each block read
// a quarter of the keys, not all of them with one warp.
// meta: as the row kernel's (attention.cu)
(const onnx_i64* meta, const @QT@* __restrict__ q, const @KT@* __restrict__ k, const @VT@* __restrict__ v@MASK_PARAM@, @OUT_T@* __restrict__ out) {
  constexpr int D = @D@, DV = @DV@, DP = (D + 15) / 16 * 16, DVP = (DV + 15) / 16 * 16, BK = @BK@;
  constexpr int QW = (DP + 8) / 2, VW = (DVP + 8) / 2, THREADS = 32 * @WARPS@, SPLIT = @SPLIT@;
  constexpr int BQ = 16 * @WARPS@ / SPLIT, LOADERS = THREADS / SPLIT;
  static_assert(SPLIT == 1 || (BQ * DVP <= BK * VW && 2 * BQ <= BK * QW), "the merge fits the tiles");
  alignas(16) __shared__ unsigned qs[BQ][QW];
  alignas(16) __shared__ unsigned key_tiles[SPLIT][BK][QW];
  alignas(16) __shared__ unsigned value_tiles[SPLIT][BK][VW];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, t = lane % 4;
  // This warp's key tiles, and its place among the threads loading them.
  const int kt = warp % SPLIT, lid = warp / SPLIT * 32 + lane;
  unsigned (*ks)[QW] = key_tiles[kt];
  unsigned (*vs)[VW] = value_tiles[kt];
@META_TILES@
@LOADERS@
  const float4 zero4 = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  // Four floats as four halves: two words, one eight-byte store.
  auto put4 = [](unsigned* to, float4 x) { *(uint2*)to = make_uint2(@PACK@(x.x, x.y), @PACK@(x.z, x.w)); };
  // A row-major operand of shared words read as `mma` fragments: rows `r`..`r` + 15 (A) or keys
  // `r`..`r` + 15 of two column tiles (B, as two pairs of registers), from word column `c`.
  auto frag_a = [&](unsigned* f, const unsigned (*s)[QW], int r, int c) {
#if defined(ONNX_MMA_PTX)
    onnx_ldsm_x4(f, &s[r + (lane & 7) + (lane & 8)][c + (lane >> 4) * 4]);
#else
    f[0] = s[r + g][c + t]; f[1] = s[r + g + 8][c + t]; f[2] = s[r + g][c + 4 + t]; f[3] = s[r + g + 8][c + 4 + t];
#endif
  };
  // Keys `n`..`n` + 15 (two tiles of 8) along head columns c..c + 15 (words c / 2): b[0], b[1] for
  // the first tile, b[2], b[3] for the second.
  auto frag_k = [&](unsigned* b, int n, int c) {
#if defined(ONNX_MMA_PTX)
    onnx_ldsm_x4(b, &ks[n + (lane & 7) + (lane >> 4) * 8][c + (lane & 8) / 2]);
#else
    b[0] = ks[n + g][c + t]; b[1] = ks[n + g][c + 4 + t]; b[2] = ks[n + 8 + g][c + t]; b[3] = ks[n + 8 + g][c + 4 + t];
#endif
  };
  // Values of keys `j`..`j` + 15 at output columns `n`..`n` + 15 (two tiles of 8), transposed.
  auto frag_v = [&](unsigned* b, int j, int n) {
#if defined(ONNX_MMA_PTX)
    onnx_ldsm_x4_trans(b, &vs[j + (lane & 7) + (lane & 8)][n / 2 + (lane >> 4) * 4]);
#else
    auto half = [&](int row, int col) { return (vs[row][col / 2] >> (16 * (col & 1))) & 0xffffu; };
    for (int p = 0; p < 4; ++p) {
      const int row = j + 2 * t + (p & 1) * 8, col = n + (p >> 1) * 8 + g;
      b[p] = half(row, col) | (half(row + 1, col) << 16);
    }
#endif
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
        put4(&qs[r][d / 2], (i0 + r < Sq && d < D ? ldq4(qo + (i0 + r) * q_rs + d) : zero4));
      }
    } else {
#pragma unroll 1
      for (int e = tid; e < BQ * (DP / 2); e += THREADS) {
        const int r = e / (DP / 2), d = e % (DP / 2) * 2;
        const int off = qo + (i0 + r) * q_rs + d * q_cs;
        qs[r][d / 2] = @PACK@((i0 + r < Sq && d < D ? ldq(off) : 0.0f), (i0 + r < Sq && d + 1 < D ? ldq(off + q_cs) : 0.0f));
      }
    }
    const int r0 = warp / SPLIT * 16;
    float o[DVP / 8][4], row_m[2] = {ONNX_NEG_INF, ONNX_NEG_INF}, row_l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < DVP / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    for (int jr = 0; jr < Sk; jr += BK * SPLIT) {
      const int j0 = jr + kt * BK;
      __syncthreads();
      // Keys and values as rows along the head.
      if (vec4) {
#pragma unroll
        for (int e = lid; e < BK * (DP / 4); e += LOADERS) {
          const int j = e / (DP / 4), d = e % (DP / 4) * 4;
          put4(&ks[j][d / 2], (j0 + j < Sk && d < D ? ldk4(ko + (j0 + j) * k_cs + d) : zero4));
        }
#pragma unroll
        for (int e = lid; e < BK * (DVP / 4); e += LOADERS) {
          const int j = e / (DVP / 4), d = e % (DVP / 4) * 4;
          put4(&vs[j][d / 2], (j0 + j < Sk && d < DV ? ldv4(vo + (j0 + j) * v_rs + d) : zero4));
        }
      } else {
#pragma unroll 1
        for (int e = lid; e < BK * (DP / 2); e += LOADERS) {
          const int j = k_rs == 1 ? e / (DP / 2) : e % BK, d = (k_rs == 1 ? e % (DP / 2) : e / BK) * 2;
          const int off = ko + d * k_rs + (j0 + j) * k_cs;
          ks[j][d / 2] = @PACK@((j0 + j < Sk && d < D ? ldk(off) : 0.0f), (j0 + j < Sk && d + 1 < D ? ldk(off + k_rs) : 0.0f));
        }
#pragma unroll 1
        for (int e = lid; e < BK * (DVP / 2); e += LOADERS) {
          const int j = v_cs == 1 ? e / (DVP / 2) : e % BK, d = (v_cs == 1 ? e % (DVP / 2) : e / BK) * 2;
          const int off = vo + (j0 + j) * v_rs + d * v_cs;
          vs[j][d / 2] = @PACK@((j0 + j < Sk && d < DV ? ldv(off) : 0.0f), (j0 + j < Sk && d + 1 < DV ? ldv(off + v_cs) : 0.0f));
        }
      }
      __syncthreads();
      float s[BK / 8][4];
#pragma unroll
      for (int n = 0; n < BK / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < DP / 16; ++kk) {
        unsigned qf[4];
        frag_a(qf, qs, r0, kk * 8);
#pragma unroll
        for (int n = 0; n < BK / 8; n += 2) {
          unsigned b[4];
          frag_k(b, n * 8, kk * 8);
          @MMA@(s[n], qf, b[0], b[1]);
          @MMA@(s[n + 1], qf, b[2], b[3]);
        }
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
        for (int n = 0; n < DVP / 8; n += 2) {
          unsigned b[4];
          frag_v(b, kk * 16, n * 8);
          @MMA@(o[n], pf, b[0], b[1]);
          @MMA@(o[n + 1], pf, b[2], b[3]);
        }
      }
    }
    auto reduced = [&](int h) {
      float l = row_l[h];
      l += ONNX_SHFL_XOR_W(l, 1, 4);
      return l + ONNX_SHFL_XOR_W(l, 2, 4);
    };
    if (SPLIT > 1) {
      // Each warp's rows (maximum, sum, unnormalised outputs) in shared memory, merged in f32.
      __syncthreads();
      float* po = (float*)&value_tiles[0][0][0];
      float* pm = (float*)&key_tiles[0][0][0];
      float* pl = pm + SPLIT * BQ;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = kt * BQ + r0 + g + 8 * h;
        const float l = reduced(h);
        if (t == 0) { pm[r] = row_m[h]; pl[r] = l; }
#pragma unroll
        for (int n = 0; n < DVP / 8; ++n) {
          po[r * DVP + n * 8 + 2 * t] = o[n][2 * h];
          po[r * DVP + n * 8 + 2 * t + 1] = o[n][2 * h + 1];
        }
      }
      __syncthreads();
      for (int e = tid; e < BQ * DV; e += THREADS) {
        const int r = e / DV, col = e % DV, i = i0 + r;
        if (i >= Sq) continue;
        float m = ONNX_NEG_INF;
        for (int w = 0; w < SPLIT; ++w) m = fmaxf(m, pm[w * BQ + r]);
        float l = 0.0f, a = 0.0f;
        for (int w = 0; w < SPLIT; ++w) {
          const float f = m == ONNX_NEG_INF ? 0.0f : expf(pm[w * BQ + r] - m);
          l += pl[w * BQ + r] * f;
          a += po[(w * BQ + r) * DVP + col] * f;
        }
        out[oo + i * o_rs + col * o_cs] = @RESULT@;
      }
      __syncthreads();
      continue;
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float l = reduced(h);
      const int i = i0 + r0 + g + 8 * h;
      if (i >= Sq) continue;
      auto result = [&](float a) { return @RESULT@; };
#pragma unroll
      for (int n = 0; n < DVP / 8; ++n) {
        const int col = n * 8 + 2 * t, to = oo + i * o_rs + col * o_cs;
        const @OUT_T@ x = result(o[n][2 * h]), y = result(o[n][2 * h + 1]);
        if (o_cs == 1 && col + 1 < DV && to % 2 == 0) {
          *(@OUT_PAIR@*)&out[to] = @MAKE_PAIR@(x, y);
        } else {
          if (col < DV) out[to] = x;
          if (col + 1 < DV) out[to + o_cs] = y;
        }
      }
    }
    __syncthreads();
  }
}
