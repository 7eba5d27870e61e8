// TensorScatter: the cache with the update written along its sequence axis from each batch's write
// index (0 without `write_indices`), a thread per output element: position `p` of the axis holds
// update row `p - w` where that lies in `[0, seq)`, wrapped modulo `max_seq` in circular mode, and
// the past cache elsewhere (rows past the end in linear mode are dropped).
// meta: batch, pre (the axes between the batch and the sequence axis), max_seq, seq, inner, circular
(const onnx_i64* meta, const @T@* __restrict__ past, const @T@* __restrict__ update@WI_PARAM@, @T@* __restrict__ out) {
  const onnx_i64 pre = meta[1], max_seq = meta[2], seq = meta[3], inner = meta[4];
  const bool circular = meta[5] != 0;
  ONNX_LOOP(i, meta[0] * pre * max_seq * inner) {
    const onnx_i64 e = i % inner, line = i / inner, p = line % max_seq, row = line / max_seq;
    const onnx_i64 w = @WRITE_INDEX@;
    onnx_i64 s = p - w;
    if (circular) { s %= max_seq; if (s < 0) s += max_seq; }
    out[i] = (s >= 0 && s < seq) ? update[(row * seq + s) * inner + e] : past[i];
  }
}
