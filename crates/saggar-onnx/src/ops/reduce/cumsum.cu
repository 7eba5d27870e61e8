// CumSum of @T@ along the axis the `axis` input gives (read here, so it need not be a constant):
// one thread per line along it (the other coordinates), adding in order, from the end when
// @REVERSE@, each sum without its own element when @EXCLUSIVE@. An axis out of range copies the
// input (the host refuses it).
// meta: rank, n, dims[rank]
(const onnx_i64* meta, const @T@* __restrict__ x, const @IX@* __restrict__ axis, @T@* __restrict__ y) {
  const int rank = (int)meta[0];
  const onnx_i64 n = meta[1];
  const onnx_i64* dims = meta + 2;
  onnx_i64 a = (onnx_i64)axis[0];
  if (a < 0) a += rank;
  if (a < 0 || a >= rank) { ONNX_LOOP(i, n) y[i] = x[i]; return; }
  const onnx_i64 len = dims[a];
  onnx_i64 inner = 1;
  for (int d = rank - 1; d > a; --d) inner *= dims[d];
  if (len == 0) return;
  ONNX_LOOP(line, n / len) {
    const onnx_i64 base = (line / inner) * len * inner + line % inner;
    @T@ acc = (@T@)0;
    for (onnx_i64 j = 0; j < len; ++j) {
      const onnx_i64 at = base + (@REVERSE@ ? len - 1 - j : j) * inner;
      const @T@ v = x[at];
      if (@EXCLUSIVE@) { y[at] = acc; acc = acc + v; } else { acc = acc + v; y[at] = acc; }
    }
  }
}
