// NegativeLogLikelihoodLoss / SoftmaxCrossEntropyLoss over `x` `(N, C, D)` and targets `(N, D)`:
// position `p = n * D + d` has the term `-logp[n, t, d] * w` and weight `w` (@WEIGHT@ of class `t`,
// 0 where `t` is ignore_index or outside `0..C`); with @SOFTMAX@ the log-probability is the
// log-softmax of the scores along `C`, in double precision. The body writes each term (reduction
// none, a thread a position) or sums terms and weights in one block (sum; mean divides them).
// meta: positions (N * D), C, D, has_ignore, ignore_index, reduction (0 none, 1 sum, 2 mean)
(const onnx_i64* meta, const float* __restrict__ x, const @IX@* __restrict__ target@WEIGHT_PARAM@, float* __restrict__ y) {
  const onnx_i64 C = meta[1], D = meta[2], ignore = meta[4];
  const bool has_ignore = meta[3] != 0;
  auto term = [&](onnx_i64 p, double* w) -> double {
    const onnx_i64 n = p / D, d = p % D, t = (onnx_i64)target[p];
    if ((has_ignore && t == ignore) || t < 0 || t >= C) { *w = 0.0; return 0.0; }
    const float* xp = x + n * C * D + d;
    double lp = (double)xp[t * D];
    if (@SOFTMAX@) {
      double m = (double)xp[0], s = 0.0;
      for (onnx_i64 c = 1; c < C; ++c) m = fmax(m, (double)xp[c * D]);
      for (onnx_i64 c = 0; c < C; ++c) s += exp((double)xp[c * D] - m);
      lp = lp - m - log(s);
    }
    *w = @WEIGHT@;
    return -lp * *w;
  };
  @BODY@
}
