// A normalisation over the reduced axes of each kept position, one block per kept position: the
// row's sum of @TERM@ of each element `v` gives `acc`, @SCALE@ sets `shift` and `div` from it, and
// each element becomes (v - shift) / div (a zero vector's Lp norm gives 0 / 0, NaN, as the reference).
// meta: nk, nr, n_out, n_red, kdims[nk], kstrides[nk], rdims[nr], rstrides[nr] (as `reduce.cu`)
(const onnx_i64* meta, const float* __restrict__ x, float* __restrict__ y) {
  __shared__ float sh[@BLOCK@];
  const int nk = (int)meta[0], nr = (int)meta[1];
  const onnx_i64 n = meta[3];
  const onnx_i64* kd = meta + 4; const onnx_i64* ks = kd + nk; const onnx_i64* rd = ks + nk; const onnx_i64* rs = rd + nr;
  ONNX_ROWS(o, meta[2]) {
    onnx_i64 rem = o, base = 0;
    for (int d = nk - 1; d >= 0; --d) { base += (rem % kd[d]) * ks[d]; rem /= kd[d]; }
    float acc = 0.0f;
    for (onnx_i64 j = threadIdx.x; j < n; j += blockDim.x) { const float v = x[base + red_offset(j, nr, rd, rs)]; acc += @TERM@; }
    ONNX_BLOCK_REDUCE(acc, sh, p, q, p + q);
    @SCALE@
    for (onnx_i64 j = threadIdx.x; j < n; j += blockDim.x) {
      const onnx_i64 at = base + red_offset(j, nr, rd, rs);
      y[at] = (x[at] - shift) / div;
    }
  }
}
