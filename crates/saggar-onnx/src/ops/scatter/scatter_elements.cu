// ScatterElements, after the data's copy into `out`: one thread per line of the updates along
// `axis` (each coordinate but the axis'), applying the line's updates in order as @COMBINE@ of the
// element `a` and the update `u`. Lines never share an output element. An index out of range after
// wrapping is skipped.
// meta: rank, lines, axis, len (updates along axis), n (data along axis), dims[rank] (of the updates), data_strides[rank]
(const onnx_i64* meta, const @IX@* __restrict__ idx, const @T@* __restrict__ upd, @T@* __restrict__ out) {
  const int rank = (int)meta[0], axis = (int)meta[2];
  const onnx_i64 len = meta[3], n = meta[4];
  const onnx_i64* dims = meta + 5; const onnx_i64* ds = dims + rank;
  ONNX_LOOP(line, meta[1]) {
    // The line's first update element, its output offset without the axis, and the updates' stride along the axis.
    onnx_i64 rem = line, first = 0, base = 0, step = 1, astep = 1;
    for (int d = rank - 1; d >= 0; --d) {
      if (d == axis) { astep = step; } else { const onnx_i64 c = rem % dims[d]; rem /= dims[d]; first += c * step; base += c * ds[d]; }
      step *= dims[d];
    }
    for (onnx_i64 j = 0; j < len; ++j) {
      const onnx_i64 e = first + j * astep;
      onnx_i64 x = (onnx_i64)idx[e];
      if (x < 0) x += n;
      if (x < 0 || x >= n) continue;
      @T@* const o = out + base + x * ds[axis];
      const @T@ a = *o, u = upd[e];
      (void)a;
      *o = @COMBINE@;
    }
  }
}
