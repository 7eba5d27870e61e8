// Attention, one block per query row `(b, h, i)`: the row's scores against the keys (past keys
// first), scaled, soft-capped, plus the bias (the mask, -inf past its last key, the causal frontier
// `j <= i + offset`, the non-padded keys), and an online softmax (f32) over chunks of a block's
// width of keys, accumulating the values' weighted sum in registers, four output elements a thread
// per pass (several passes when the value head is longer). A row whose every bias is -inf is zeros.
// With `qk`, the scores of `mode` (0 raw, 1 soft-capped, 2 with the bias) are stored as they are
// computed, or (3) the probabilities after the row is done.
// meta: B, Hq, Sq, Hkv, Skv, P, Dk, Dv, causal, mode, scale bits, softcap bits, mask_len,
// strides (batch, head, position, element) of q[4], k[4], v[4], past_k[4], past_v[4], y[4], mask[4]
(const onnx_i64* meta, const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v@PARAMS@, float* __restrict__ y@QK_PARAM@) {
  __shared__ float sh[@BLOCK@];
  __shared__ float pr[@BLOCK@];
  __shared__ float qc[@QCACHE@];
  const onnx_i64 B = meta[0], Hq = meta[1], Sq = meta[2], Hkv = meta[3], Skv = meta[4], P = meta[5];
  const onnx_i64 Dk = meta[6], Dv = meta[7], T = P + Skv, mask_len = meta[12];
  const bool causal = meta[8] != 0;
  const int mode = (int)meta[9];
  const float scale = __int_as_float((int)meta[10]), softcap = __int_as_float((int)meta[11]);
  const onnx_i64* qs = meta + 13; const onnx_i64* ks = qs + 4; const onnx_i64* vs = ks + 4;
  const onnx_i64* pks = vs + 4; const onnx_i64* pvs = pks + 4; const onnx_i64* ys = pvs + 4; const onnx_i64* ms = ys + 4;
  (void)pks; (void)pvs; (void)ms; (void)mask_len; (void)mode;
  const int t = (int)threadIdx.x, threads = (int)blockDim.x;
  const bool q_cached = Dk <= @QCACHE@;
  ONNX_ROWS(row, B * Hq * Sq) {
    const onnx_i64 i = row % Sq, h = (row / Sq) % Hq, b = row / (Sq * Hq), kh = h / (Hq / Hkv);
    const float* qrow = q + b * qs[0] + h * qs[1] + i * qs[2];
    float* const qv = qc;
    if (q_cached) for (onnx_i64 d = t; d < Dk; d += threads) qv[d] = qrow[d * qs[3]];
    __syncthreads();
    const onnx_i64 offset = @OFFSET@, limit = @LIMIT@;
    // The bias and score of key j (the scores before the mask in `raw` and `capped`).
    auto score = [&](onnx_i64 j, float& raw, float& capped, float& bias) {
      const float* kr = j < P ? @PAST_K_ROW@ : k + b * ks[0] + kh * ks[1] + (j - P) * ks[2];
      const onnx_i64 kd = j < P ? @PAST_K_STRIDE@ : ks[3];
      float dot = 0.0f;
      for (onnx_i64 d = 0; d < Dk; ++d) dot += (q_cached ? qv[d] : qrow[d * qs[3]]) * kr[d * kd];
      raw = dot * scale;
      capped = softcap > 0.0f ? softcap * tanhf(raw / softcap) : raw;
      bias = @MASK_BIAS@;
      if ((causal && j > i + offset) || j >= limit) bias = ONNX_NEG_INF;
      return capped + bias;
    };
    for (onnx_i64 d0 = 0; d0 == 0 || d0 < Dv; d0 += (onnx_i64)@VEC@ * threads) {
      float acc[@VEC@];
      for (int r = 0; r < @VEC@; ++r) acc[r] = 0.0f;
      float m = ONNX_NEG_INF, l = 0.0f, any = 0.0f;
      for (onnx_i64 j0 = 0; j0 < T; j0 += threads) {
        const onnx_i64 j = j0 + t;
        float s = ONNX_NEG_INF, allowed = 0.0f;
        if (j < T) {
          float raw, capped, bias;
          s = score(j, raw, capped, bias);
          allowed = bias == ONNX_NEG_INF ? 0.0f : 1.0f;
          @QK_STORE@
        }
        float cm = s;
        ONNX_BLOCK_REDUCE(cm, sh, x1, x2, fmaxf(x1, x2));
        ONNX_BLOCK_REDUCE(allowed, sh, x1, x2, fmaxf(x1, x2));
        any = fmaxf(any, allowed);
        const float nm = fmaxf(m, cm);
        const float corr = m == ONNX_NEG_INF ? 0.0f : expf(m - nm);
        const float p = (s == ONNX_NEG_INF || nm == ONNX_NEG_INF) ? 0.0f : expf(s - nm);
        pr[t] = p;
        float cs = p;
        ONNX_BLOCK_REDUCE(cs, sh, x1, x2, x1 + x2);
        l = l * corr + cs;
        m = nm;
        const onnx_i64 n = T - j0 < threads ? T - j0 : threads;
        for (int r = 0; r < @VEC@; ++r) {
          const onnx_i64 d = d0 + t + (onnx_i64)r * threads;
          if (d >= Dv) break;
          float a = acc[r] * corr;
          for (onnx_i64 u = 0; u < n; ++u) {
            const onnx_i64 jj = j0 + u;
            const float vv = jj < P ? @PAST_V_AT@ : v[b * vs[0] + kh * vs[1] + (jj - P) * vs[2] + d * vs[3]];
            a += pr[u] * vv;
          }
          acc[r] = a;
        }
        __syncthreads();
      }
      const bool live = any > 0.0f;
      const float inv = live && l > 0.0f ? 1.0f / l : 0.0f;
      for (int r = 0; r < @VEC@; ++r) {
        const onnx_i64 d = d0 + t + (onnx_i64)r * threads;
        if (d < Dv) y[b * ys[0] + h * ys[1] + i * ys[2] + d * ys[3]] = live ? acc[r] * inv : 0.0f;
      }
      @QK_SOFTMAX@
    }
    __syncthreads();
  }
}
