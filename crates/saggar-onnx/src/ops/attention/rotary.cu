// RotaryEmbedding, a thread per element of X (`[B, H, S, D]`, or `[B, S, H * D]` with `heads_last`):
// the first `rot` elements of each head's vector rotate by the angles of their token's cache row
// (`position_ids[b, s]`, negative counting from the end, or row `b * S + s` of a `[B, S, rot / 2]`
// cache), in halves or interleaved pairs; the rest are copied. A position outside the cache reads
// cos and sin 0.
// meta: B, S, H, D, rot, heads_last, interleaved, cache_rows
(const onnx_i64* meta, const float* __restrict__ x, const float* __restrict__ cos_cache, const float* __restrict__ sin_cache@POS_PARAM@, float* __restrict__ y) {
  const onnx_i64 S = meta[1], H = meta[2], D = meta[3], rot = meta[4], rows = meta[7];
  const bool heads_last = meta[5] != 0, interleaved = meta[6] != 0;
  const onnx_i64 half = rot / 2;
  ONNX_LOOP(i, meta[0] * S * H * D) {
    const onnx_i64 d = i % D, r = i / D;
    const onnx_i64 s = heads_last ? (r / H) % S : r % S;
    const onnx_i64 b = heads_last ? r / (H * S) : r / (S * H);
    if (d >= rot) { y[i] = x[i]; continue; }
    const onnx_i64 k = interleaved ? d / 2 : (d < half ? d : d - half);
    const bool first = interleaved ? d % 2 == 0 : d < half;
    const onnx_i64 partner = interleaved ? (first ? i + 1 : i - 1) : (first ? i + half : i - half);
    onnx_i64 row = @ROW@;
    if (row < 0) row += rows;
    const bool inside = row >= 0 && row < rows;
    const float c = inside ? cos_cache[row * half + k] : 0.0f, sn = inside ? sin_cache[row * half + k] : 0.0f;
    y[i] = first ? c * x[i] - sn * x[partner] : sn * x[partner] + c * x[i];
  }
}
