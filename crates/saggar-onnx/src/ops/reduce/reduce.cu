// A reduction of @T@ elements, one block per output element: @INIT@, @MAP@ of one element `v`, @COMBINE@ of `a` and
// `b`, @FINISH@ from `acc` and `n`; @TOP@ is LogSumExp's first pass (empty otherwise).
// meta: nk, nr, n_out, n_red, kdims[nk], kstrides[nk], rdims[nr], rstrides[nr]
(const onnx_i64* meta, const @T@* __restrict__ x, @T@* __restrict__ y) {
  __shared__ @T@ sh[@BLOCK@];
  const int nk = (int)meta[0], nr = (int)meta[1];
  const onnx_i64 n = meta[3];
  const onnx_i64* kd = meta + 4; const onnx_i64* ks = kd + nk; const onnx_i64* rd = ks + nk; const onnx_i64* rs = rd + nr;
#define ONNX_RED_OFF(j) red_offset(j, nr, rd, rs)
  ONNX_ROWS(o, meta[2]) {
    onnx_i64 rem = o, base = 0;
    for (int d = nk - 1; d >= 0; --d) { base += (rem % kd[d]) * ks[d]; rem /= kd[d]; }
    @TOP@
    @T@ acc = @INIT@;
    for (onnx_i64 j = threadIdx.x; j < n; j += blockDim.x) { const @T@ v = x[base + ONNX_RED_OFF(j)]; const @T@ a = acc, b = @MAP@; acc = @COMBINE@; }
    ONNX_BLOCK_REDUCE(acc, sh, a, b, @COMBINE@);
    if (threadIdx.x == 0) y[o] = @FINISH@;
  }
#undef ONNX_RED_OFF
}
