// Concat of @INPUTS@ contiguous tensors along the middle axis of `[outer, len_p, inner]` into
// `[outer, Σ len_p, inner]`, one thread per output element: one launch whatever the input count.
// @PARAMS@ is one pointer parameter per input, @CASES@ the switch reading input `p`.
// meta: outer, inner, total_len, offsets[inputs + 1] (where each input starts along the axis)
(const onnx_i64* meta@PARAMS@, @T@* __restrict__ out) {
  const onnx_i64 outer = meta[0], inner = meta[1], total = meta[2];
  const onnx_i64* off = meta + 3;
  ONNX_LOOP(i, outer * total * inner) {
    const onnx_i64 k = i % inner, r = i / inner, j = r % total, o = r / total;
    int p = 0;
    while (p + 1 < @INPUTS@ && off[p + 1] <= j) ++p;
    const onnx_i64 len = off[p + 1] - off[p];
    const onnx_i64 src = (o * len + (j - off[p])) * inner + k;
    @T@ v = 0;
    switch (p) {
@CASES@      default: break;
    }
    out[i] = v;
  }
}
