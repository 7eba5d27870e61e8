// Pad, one thread per output element: @OUTSIDE@ maps a coordinate outside the input (constant
// mode: the fill value @FILL@; reflect; edge; wrap).
// meta: rank, n, out_dims[rank], in_dims[rank], before[rank], in_strides[rank]
(const onnx_i64* meta, const @T@* __restrict__ x@VALUE_PARAM@, @T@* __restrict__ y) {
  const int rank = (int)meta[0];
  const onnx_i64* od = meta + 2; const onnx_i64* id = od + rank; const onnx_i64* before = id + rank; const onnx_i64* is = before + rank;
  ONNX_LOOP(i, meta[1]) {
    onnx_i64 rem = i, off = 0;
    bool inside = true;
    for (int d = rank - 1; d >= 0; --d) {
      const onnx_i64 n = id[d];
      onnx_i64 s = rem % od[d] - before[d]; rem /= od[d];
      if (s < 0 || s >= n) { @OUTSIDE@ }
      off += s * is[d];
    }
    y[i] = inside ? x[off] : @FILL@;
  }
}
