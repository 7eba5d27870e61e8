// DynamicQuantizeLinear in one block: the block finds the range of x widened to hold 0, from it the
// scale `(hi - lo) / 255` (1 when the range is empty) and the zero point `rint(clamp(-lo / scale))`,
// then quantizes every element to uint8, all in f32 as the ONNX reference does.
// meta: n
(const onnx_i64* meta, const float* __restrict__ x, unsigned char* __restrict__ y, float* __restrict__ scale, unsigned char* __restrict__ zero_point) {
  __shared__ float lo_sh[@BLOCK@];
  __shared__ float hi_sh[@BLOCK@];
  const onnx_i64 n = meta[0];
  float lo = 0.0f, hi = 0.0f;
  for (onnx_i64 i = threadIdx.x; i < n; i += blockDim.x) { lo = fminf(lo, x[i]); hi = fmaxf(hi, x[i]); }
  ONNX_BLOCK_REDUCE(lo, lo_sh, p, q, fminf(p, q));
  ONNX_BLOCK_REDUCE(hi, hi_sh, p, q, fmaxf(p, q));
  const float sc = hi == lo ? 1.0f : (hi - lo) / 255.0f;
  const float z = rintf(fminf(fmaxf(0.0f - lo / sc, 0.0f), 255.0f));
  if (threadIdx.x == 0) { scale[0] = sc; zero_point[0] = (unsigned char)z; }
  for (onnx_i64 i = threadIdx.x; i < n; i += blockDim.x) y[i] = (unsigned char)fminf(fmaxf(rintf(x[i] / sc) + z, 0.0f), 255.0f);
}
