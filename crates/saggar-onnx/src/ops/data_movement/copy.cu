// A strided copy: `out[out_base + Σ c_d out_stride_d] = in[in_base + Σ c_d in_stride_d]` for every
// coordinate `c` of `dims`, elements of @T@ (an unsigned type of the element's size: copies move bits).
// meta: rank, n, in_base, out_base, dims[rank], in_strides[rank], out_strides[rank]
(const onnx_i64* meta, const @T@* __restrict__ in, @T@* __restrict__ out) {
  const int rank = (int)meta[0];
  const onnx_i64* dims = meta + 4; const onnx_i64* is = dims + rank; const onnx_i64* os = is + rank;
  ONNX_LOOP(i, meta[1]) {
    onnx_i64 rem = i, a = meta[2], b = meta[3];
    for (int d = rank - 1; d >= 0; --d) { onnx_i64 c = rem % dims[d]; rem /= dims[d]; a += c * is[d]; b += c * os[d]; }
    out[b] = in[a];
  }
}
