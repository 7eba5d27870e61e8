// Einsum's generic contraction of @N@ operands, a thread per output element: the sum over the
// summed labels of the operands' product, each operand read at its strides along the output's
// labels and the summed ones (a repeated label's strides added: its diagonal). Sums in @ACC@
// (integers wrap).
// meta: n_out, n_sum, out_total, sum_total, extents[n_out + n_sum],
// strides[N][n_out + n_sum] (operand by operand)
(const onnx_i64* meta, @PARAMS@, @T@* __restrict__ y) {
  const int no = (int)meta[0], ns = (int)meta[1], nl = no + ns;
  const onnx_i64 sum_total = meta[3];
  const onnx_i64* ext = meta + 4;
  const onnx_i64* st = ext + nl;
  ONNX_LOOP(i, meta[2]) {
    onnx_i64 base[@N@];
    for (int k = 0; k < @N@; ++k) base[k] = 0;
    onnx_i64 rem = i;
    for (int d = no - 1; d >= 0; --d) {
      const onnx_i64 c = rem % ext[d];
      rem /= ext[d];
      for (int k = 0; k < @N@; ++k) base[k] += c * st[k * nl + d];
    }
    @ACC@ acc = 0;
    for (onnx_i64 s = 0; s < sum_total; ++s) {
      onnx_i64 off[@N@];
      for (int k = 0; k < @N@; ++k) off[k] = base[k];
      onnx_i64 r = s;
      for (int d = ns - 1; d >= 0; --d) {
        const onnx_i64 c = r % ext[no + d];
        r /= ext[no + d];
        for (int k = 0; k < @N@; ++k) off[k] += c * st[k * nl + no + d];
      }
      acc += @PRODUCT@;
    }
    y[i] = (@T@)acc;
  }
}
