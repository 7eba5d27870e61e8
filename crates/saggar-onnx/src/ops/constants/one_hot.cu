// OneHot: output `[outer, depth, inner]` from indices `[outer, inner]`: `values[1]` where the
// index's class is the position along depth, `values[0]` elsewhere. @CLASS@ reads the index `raw`
// into `c` (f32 truncated toward zero) and whether it lies in `lo..depth`; with @NEGATIVE@ `lo` is
// `-depth` and a negative index counts from the depth, else `lo` is 0.
// meta: outer, depth, inner
(const onnx_i64* meta, const @IX@* __restrict__ idx, const @T@* __restrict__ values, @T@* __restrict__ y) {
  const onnx_i64 depth = meta[1], inner = meta[2], lo = @NEGATIVE@ ? -depth : 0;
  ONNX_LOOP(i, meta[0] * depth * inner) {
    const onnx_i64 at = i % inner, r = i / inner, d = r % depth, o = r / depth;
    const @IX@ raw = idx[o * inner + at];
    @CLASS@
    y[i] = (ok && (c < 0 ? c + depth : c) == d) ? values[1] : values[0];
  }
}
