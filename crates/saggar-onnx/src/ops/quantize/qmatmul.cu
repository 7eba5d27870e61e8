// MatMulInteger and QLinearMatMul, one thread per output element: the 32-bit (wrapping) sum over k
// of `(a - a_zero_point) * (b - b_zero_point)`, zero points per tensor or per row of a and per
// column of b (steps 0 or 1), then RESULT (the sum, or requantised through the scales).
// meta: m, n, k, batch_rank, azp_step, bzp_step, as_step, bs_step, batch[r], a_batch_strides[r],
// b_batch_strides[r] (in elements)
(const onnx_i64* meta, const @TA@* __restrict__ a, const @TB@* __restrict__ b@PARAMS@, @TY@* __restrict__ y) {
  const onnx_i64 M = meta[0], N = meta[1], K = meta[2];
  const int r = (int)meta[3];
  const onnx_i64 azs = meta[4], bzs = meta[5], ass = meta[6], bss = meta[7];
  const onnx_i64* bd = meta + 8; const onnx_i64* sa = bd + r; const onnx_i64* sb = sa + r;
  onnx_i64 batches = 1;
  for (int d = 0; d < r; ++d) batches *= bd[d];
  ONNX_LOOP(i, batches * M * N) {
    const onnx_i64 col = i % N, row = (i / N) % M;
    onnx_i64 rem = i / N / M, ao = 0, bo = 0;
    for (int d = r - 1; d >= 0; --d) { const onnx_i64 c = rem % bd[d]; rem /= bd[d]; ao += c * sa[d]; bo += c * sb[d]; }
    const int za = @AZP@, zb = @BZP@;
    unsigned acc = 0u;
    for (onnx_i64 t = 0; t < K; ++t) acc += (unsigned)(((int)a[ao + row * K + t] - za) * ((int)b[bo + t * N + col] - zb));
    y[i] = @RESULT@;
  }
}
