// GatherND: each index row of `k` coordinates picks a slice of `slice` elements.
// meta: batch, m, k, slice, data_batch_stride, dims[k], strides[k]
(const onnx_i64* meta, const @T@* __restrict__ data, const @IX@* __restrict__ idx, @T@* __restrict__ out) {
  const onnx_i64 batch = meta[0], m = meta[1], k = meta[2], slice = meta[3], bstride = meta[4];
  const onnx_i64* dims = meta + 5; const onnx_i64* st = dims + k;
  ONNX_LOOP(i, batch * m * slice) {
    const onnx_i64 s = i % slice, r = i / slice, mm = r % m, b = r / m;
    const @IX@* x = idx + (b * m + mm) * k;
    onnx_i64 off = b * bstride;
    bool ok = true;
    for (onnx_i64 j = 0; j < k; ++j) {
      onnx_i64 v = (onnx_i64)x[j];
      if (v < 0) v += dims[j];
      ok = ok && v >= 0 && v < dims[j];
      off += v * st[j];
    }
    out[i] = ok ? data[off + s] : (@T@)0;
  }
}
