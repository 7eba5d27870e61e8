// ScatterND, after the data's copy into `out`: index row `j` (`k` coordinates) picks the slice of
// `slice` elements at Σ wrap(idx[j][c]) * strides[c], combined as @COMBINE@ of the element `a` and
// the update `u`. With @PARALLEL@ = 1 a thread per update element (rows race when they repeat);
// with 0 a thread per position within a slice, applying the `m` rows in order. A row with a
// coordinate out of range after wrapping is skipped.
// meta: m, k, slice, dims[k], strides[k]
(const onnx_i64* meta, const @IX@* __restrict__ idx, const @T@* __restrict__ upd, @T@* __restrict__ out) {
  const onnx_i64 m = meta[0], k = meta[1], slice = meta[2];
  const onnx_i64* dims = meta + 3; const onnx_i64* st = dims + k;
  ONNX_LOOP(t, @PARALLEL@ ? m * slice : slice) {
    const onnx_i64 s = t % slice, j0 = @PARALLEL@ ? t / slice : 0, j1 = @PARALLEL@ ? j0 + 1 : m;
    for (onnx_i64 j = j0; j < j1; ++j) {
      const @IX@* x = idx + j * k;
      onnx_i64 off = 0;
      bool ok = true;
      for (onnx_i64 c = 0; c < k; ++c) {
        onnx_i64 v = (onnx_i64)x[c];
        if (v < 0) v += dims[c];
        ok = ok && v >= 0 && v < dims[c];
        off += v * st[c];
      }
      if (!ok) continue;
      @T@* const o = out + off + s;
      const @T@ a = *o, u = upd[j * slice + s];
      (void)a;
      *o = @COMBINE@;
    }
  }
}
