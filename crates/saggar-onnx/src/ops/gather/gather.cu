// Gather: `out[o, j, i] = data[o, idx[j], i]`, a negative index counting from the end; an index
// out of range reads 0.
// meta: outer, axis_len, inner, n_idx
(const onnx_i64* meta, const @T@* __restrict__ data, const @IX@* __restrict__ idx, @T@* __restrict__ out) {
  const onnx_i64 outer = meta[0], len = meta[1], inner = meta[2], nidx = meta[3];
  ONNX_LOOP(i, outer * nidx * inner) {
    const onnx_i64 k = i % inner, r = i / inner, j = r % nidx, o = r / nidx;
    onnx_i64 x = (onnx_i64)idx[j];
    if (x < 0) x += len;
    out[i] = (x >= 0 && x < len) ? data[(o * len + x) * inner + k] : (@T@)0;
  }
}
