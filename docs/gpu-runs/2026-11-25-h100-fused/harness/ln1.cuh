// Fast path: every used input is the row (mode 1), the row-broadcast vector (mode 2, divisor cols) or a scalar (3).
__device__ inline float ln1_v(float a0, float a1, float a2) {
    const float v0 = (a0 + a1);
    const float v1 = (v0 + a2);
    return v1;
}
__device__ inline float4 ln1_ld(const float* __restrict__ p, onnx_i64 mode, onnx_i64 row4, int q) {
  return mode == 1 ? ((const float4*)p)[row4 + q] : mode == 2 ? ((const float4*)p)[q] : make_float4(p[0], p[0], p[0], p[0]);
}
SAGGAR_GLOBAL void ln1(const onnx_i64* meta, const float* __restrict__ in0, const float* __restrict__ in1, const float* __restrict__ in2, const float* __restrict__ in3, const float* __restrict__ in4, float* __restrict__ y) {
  __shared__ float sh[256 / ONNX_ROW_LANES];
  ONNX_DYNAMIC_SHARED(onnx_row_cache);
  const onnx_i64 rows = meta[0], cols = meta[1];
  const onnx_i64* em = meta + 3;
  const int rank = (int)em[0];
  const onnx_i64* fm = em + 2 + 6 * rank;
  const int lane = (int)threadIdx.x, lanes = (int)blockDim.x;
  const onnx_i64 groups = blockDim.y;
  const bool cached = cols * groups * 4 <= ONNX_ROW_CACHE_BYTES;
  const onnx_i64 m0 = fm[0], m1 = fm[2], m2 = fm[4];
  bool fast = cached && (cols & 3) == 0 && ((saggar_u64)(const void*)y & 15) == 0
    && ((saggar_u64)(const void*)in3 & 15) == 0 && ((saggar_u64)(const void*)in4 & 15) == 0;
  fast = fast && (m0 == 1 || m0 == 3 || (m0 == 2 && fm[1] == cols)) && (m0 == 3 || ((saggar_u64)(const void*)in0 & 15) == 0);
  fast = fast && (m1 == 1 || m1 == 3 || (m1 == 2 && fm[3] == cols)) && (m1 == 3 || ((saggar_u64)(const void*)in1 & 15) == 0);
  fast = fast && (m2 == 1 || m2 == 3 || (m2 == 2 && fm[5] == cols)) && (m2 == 3 || ((saggar_u64)(const void*)in2 & 15) == 0);
  if (!fast) return; // harness: the general path is ln0
  const int cols4 = (int)(cols >> 2);
  float4* cache = (float4*)onnx_row_cache + (onnx_i64)threadIdx.y * cols4;
  for (onnx_i64 first = (onnx_i64)blockIdx.x * groups; first < rows; first += (onnx_i64)gridDim.x * groups) {
    const onnx_i64 row = first + threadIdx.y;
    const bool live = row < rows;
    const onnx_i64 row4 = (live ? row : 0) * cols4;
    float s = 0.0f;
    if (live) {
#pragma unroll 4
      for (int q = lane; q < cols4; q += lanes) {
        const float4 x0 = ln1_ld(in0, m0, row4, q), x1 = ln1_ld(in1, m1, row4, q), x2 = ln1_ld(in2, m2, row4, q);
        float4 e;
        e.x = ln1_v(x0.x, x1.x, x2.x); e.y = ln1_v(x0.y, x1.y, x2.y); e.z = ln1_v(x0.z, x1.z, x2.z); e.w = ln1_v(x0.w, x1.w, x2.w);
        cache[q] = e;
        s += (e.x + e.y) + (e.z + e.w);
      }
    }
    const float mean = onnx_row_sum(s, sh) / (float)cols;
    float v = 0.0f;
    if (live) for (int q = lane; q < cols4; q += lanes) {
      const float4 e = cache[q];
      const float dx = e.x - mean, dy = e.y - mean, dz = e.z - mean, dw = e.w - mean;
      v += (dx * dx + dy * dy) + (dz * dz + dw * dw);
    }
    const float inv = 1.0f / sqrtf(onnx_row_sum(v, sh) / (float)cols + __int_as_float(730643660));
    if (live) for (int q = lane; q < cols4; q += lanes) {
      const float4 e = cache[q], g = ((const float4*)in3)[q], b = ((const float4*)in4)[q];
      float4 r;
      r.x = (e.x - mean) * inv * g.x + b.x; r.y = (e.y - mean) * inv * g.y + b.y;
      r.z = (e.z - mean) * inv * g.z + b.z; r.w = (e.w - mean) * inv * g.w + b.w;
      ((float4*)y)[row4 + q] = r;
    }
  }
}
