__device__ inline float ln0_x(const onnx_i64* meta, const float* __restrict__ in0, const float* __restrict__ in1, const float* __restrict__ in2, const float* __restrict__ in3, const float* __restrict__ in4, onnx_i64 i) {
  const int rank = (int)meta[0];
  const onnx_i64* dims = meta + 2;
    const onnx_i64* fm = meta + 2 + 6 * rank;
    const bool n32 = fm[10] != 0;
    bool walk = false;
    onnx_i64 o0 = 0;
    switch ((int)fm[0]) {
      case 1: o0 = i; break;
      case 2: o0 = n32 ? (onnx_i64)((unsigned)i % (unsigned)fm[1]) : i % fm[1]; break;
      case 3: break;
      case 4: o0 = n32 ? (onnx_i64)((unsigned)i / (unsigned)fm[1]) : i / fm[1]; break;
      default: walk = true;
    }
    onnx_i64 o1 = 0;
    switch ((int)fm[2]) {
      case 1: o1 = i; break;
      case 2: o1 = n32 ? (onnx_i64)((unsigned)i % (unsigned)fm[3]) : i % fm[3]; break;
      case 3: break;
      case 4: o1 = n32 ? (onnx_i64)((unsigned)i / (unsigned)fm[3]) : i / fm[3]; break;
      default: walk = true;
    }
    onnx_i64 o2 = 0;
    switch ((int)fm[4]) {
      case 1: o2 = i; break;
      case 2: o2 = n32 ? (onnx_i64)((unsigned)i % (unsigned)fm[5]) : i % fm[5]; break;
      case 3: break;
      case 4: o2 = n32 ? (onnx_i64)((unsigned)i / (unsigned)fm[5]) : i / fm[5]; break;
      default: walk = true;
    }
    if (walk) {
      onnx_i64 rem = i;
      o0 = 0;
      o1 = 0;
      o2 = 0;
      for (int d = rank - 1; d >= 0; --d) {
        const onnx_i64 c = rem % dims[d]; rem /= dims[d];
        o0 += c * meta[2 + 1 * rank + d];
        o1 += c * meta[2 + 2 * rank + d];
        o2 += c * meta[2 + 3 * rank + d];
      }
    }
    const float a0 = in0[o0];
    const float a1 = in1[o1];
    const float a2 = in2[o2];
    const float v0 = (a0 + a1);
    const float v1 = (v0 + a2);
  return (float)v1;
}
SAGGAR_GLOBAL void ln0(const onnx_i64* meta, const float* __restrict__ in0, const float* __restrict__ in1, const float* __restrict__ in2, const float* __restrict__ in3, const float* __restrict__ in4, float* __restrict__ y) {
  __shared__ float sh[256 / ONNX_ROW_LANES];
  ONNX_DYNAMIC_SHARED(onnx_row_cache);
  const onnx_i64 rows = meta[0], cols = meta[1];
  const onnx_i64* em = meta + 3;
  const int lane = (int)threadIdx.x, lanes = (int)blockDim.x;
  const onnx_i64 groups = blockDim.y;
  const bool cached = cols * groups * 4 <= ONNX_ROW_CACHE_BYTES;
  float* cache = onnx_row_cache + (cached ? (onnx_i64)threadIdx.y * cols : 0);
  for (onnx_i64 first = (onnx_i64)blockIdx.x * groups; first < rows; first += (onnx_i64)gridDim.x * groups) {
    const onnx_i64 row = first + threadIdx.y;
    const bool live = row < rows;
    const onnx_i64 base = row * cols;
    float s = 0.0f;
    if (live) for (onnx_i64 j = lane; j < cols; j += lanes) {
      const float e = ln0_x(em, in0, in1, in2, in3, in4, base + j);
      if (cached) cache[j] = e;
      s += e;
    }
    const float mean = onnx_row_sum(s, sh) / (float)cols;
    float v = 0.0f;
    if (live) for (onnx_i64 j = lane; j < cols; j += lanes) {
      const float d = (cached ? cache[j] : ln0_x(em, in0, in1, in2, in3, in4, base + j)) - mean;
      v += d * d;
    }
    const float inv = 1.0f / sqrtf(onnx_row_sum(v, sh) / (float)cols + __int_as_float(730643660));
    if (live) for (onnx_i64 j = lane; j < cols; j += lanes)
      y[base + j] = ((cached ? cache[j] : ln0_x(em, in0, in1, in2, in3, in4, base + j)) - mean) * inv * (float)in3[j] + (float)in4[j];
  }
}

