// GatherElements: the index tensor replaces the coordinate along `axis`; out of range reads 0.
// meta: rank, n, axis, axis_len, dims[rank], data_strides[rank]
(const onnx_i64* meta, const @T@* __restrict__ data, const @IX@* __restrict__ idx, @T@* __restrict__ out) {
  const int rank = (int)meta[0], axis = (int)meta[2];
  const onnx_i64 len = meta[3];
  const onnx_i64* dims = meta + 4; const onnx_i64* ds = dims + rank;
  ONNX_LOOP(i, meta[1]) {
    onnx_i64 rem = i, off = 0;
    bool ok = true;
    for (int d = rank - 1; d >= 0; --d) {
      onnx_i64 c = rem % dims[d]; rem /= dims[d];
      if (d == axis) { c = (onnx_i64)idx[i]; if (c < 0) c += len; ok = c >= 0 && c < len; }
      off += c * ds[d];
    }
    out[i] = ok ? data[off] : (@T@)0;
  }
}
