// The row attention kernel: one block per (batch position, query row), keys visited in chunks of
// one key per thread with an online softmax in f32. @MASK_PARAM@ and @MASK_ADD@ add the mask input,
// @RESULT@ stores one output element. Q, K and V are f32 or half (@LOADERS@: `ldq` and the others
// read one element as f32).
// meta: nb, Sq, Sk, D, Dv, scale bits, batch dims[nb], then for each of q, k, v, mask, out: the
// batch strides[nb], the row stride and the column stride
(const onnx_i64* meta, const @QT@* __restrict__ q, const @KT@* __restrict__ k, const @VT@* __restrict__ v@MASK_PARAM@, @OUT_T@* __restrict__ out) {
@LOADERS@
  __shared__ float qs[@MAX_HEAD@];
  __shared__ float acc[@MAX_HEAD@];
  __shared__ float ps[@BLOCK@];
  __shared__ float sh[@BLOCK@];
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
  ONNX_ROWS(row, rows) {
    const onnx_i64 i = row % Sq;
    onnx_i64 rem = row / Sq, qo = i * qm[nb], ko = 0, vo = 0, mo = i * mm[nb], oo = i * om[nb];
    for (int a = nb - 1; a >= 0; --a) {
      const onnx_i64 c = rem % bd[a]; rem /= bd[a];
      qo += c * qm[a]; ko += c * km[a]; vo += c * vm[a]; mo += c * mm[a]; oo += c * om[a];
    }
    for (onnx_i64 t = threadIdx.x; t < D; t += blockDim.x) qs[t] = ldq(qo + t * q_cs);
    for (onnx_i64 t = threadIdx.x; t < Dv; t += blockDim.x) acc[t] = 0.0f;
    __syncthreads();
    float m = ONNX_NEG_INF, l = 0.0f;
    for (onnx_i64 j0 = 0; j0 < Sk; j0 += blockDim.x) {
      const onnx_i64 j = j0 + threadIdx.x;
      float s = ONNX_NEG_INF;
      if (j < Sk) {
        float dot = 0.0f;
        for (onnx_i64 t = 0; t < D; ++t) dot += qs[t] * ldk(ko + t * k_rs + j * k_cs);
        s = dot * scale@MASK_ADD@;
      }
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
      for (onnx_i64 t = threadIdx.x; t < Dv; t += blockDim.x) {
        float av = acc[t] * corr;
        for (onnx_i64 jj = 0; jj < nk; ++jj) av += ps[jj] * ldv(vo + (j0 + jj) * v_rs + t * v_cs);
        acc[t] = av;
      }
      m = mn;
      __syncthreads();
    }
    for (onnx_i64 t = threadIdx.x; t < Dv; t += blockDim.x) out[oo + t * o_cs] = @RESULT@;
    __syncthreads();
  }
}
