__device__ __forceinline__ float gelu2_v(float a0, float a1, float a2, float a3, float a4) {
    const float v0 = (a0 / a1);
    const float v1 = erff(v0);
    const float v2 = (v1 + a2);
    const float v3 = (a3 * v2);
    const float v4 = (a4 * v3);
    return v4;
}
SAGGAR_GLOBAL void gelu2(const onnx_i64* meta, const float* __restrict__ in0, const float* __restrict__ in1, const float* __restrict__ in2, const float* __restrict__ in3, const float* __restrict__ in4, float* __restrict__ out) {
  const int rank = (int)meta[0];
  const onnx_i64* dims = meta + 2;
  const onnx_i64* fm = meta + 2 + 6 * rank;
  bool vec = (meta[1] & 3) == 0 && ((saggar_u64)(const void*)out & 15) == 0;
  vec = vec && (fm[0] == 3 || (fm[0] == 1 && ((saggar_u64)(const void*)in0 & 15) == 0));
  vec = vec && (fm[2] == 3 || (fm[2] == 1 && ((saggar_u64)(const void*)in1 & 15) == 0));
  vec = vec && (fm[4] == 3 || (fm[4] == 1 && ((saggar_u64)(const void*)in2 & 15) == 0));
  vec = vec && (fm[6] == 3 || (fm[6] == 1 && ((saggar_u64)(const void*)in3 & 15) == 0));
  vec = vec && (fm[8] == 3 || (fm[8] == 1 && ((saggar_u64)(const void*)in4 & 15) == 0));
  if (vec) {
    ONNX_LOOP(q, meta[1] >> 2) {
      const float4 x0 = fm[0] == 1 ? ((const float4*)in0)[q] : make_float4(in0[0], in0[0], in0[0], in0[0]);
      const float4 x1 = fm[2] == 1 ? ((const float4*)in1)[q] : make_float4(in1[0], in1[0], in1[0], in1[0]);
      const float4 x2 = fm[4] == 1 ? ((const float4*)in2)[q] : make_float4(in2[0], in2[0], in2[0], in2[0]);
      const float4 x3 = fm[6] == 1 ? ((const float4*)in3)[q] : make_float4(in3[0], in3[0], in3[0], in3[0]);
      const float4 x4 = fm[8] == 1 ? ((const float4*)in4)[q] : make_float4(in4[0], in4[0], in4[0], in4[0]);
      float4 r;
      r.x = gelu2_v(x0.x, x1.x, x2.x, x3.x, x4.x);
      r.y = gelu2_v(x0.y, x1.y, x2.y, x3.y, x4.y);
      r.z = gelu2_v(x0.z, x1.z, x2.z, x3.z, x4.z);
      r.w = gelu2_v(x0.w, x1.w, x2.w, x3.w, x4.w);
      ((float4*)out)[q] = r;
    }
    return;
  }
  ONNX_LOOP(i, meta[1]) {
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
    onnx_i64 o3 = 0;
    switch ((int)fm[6]) {
      case 1: o3 = i; break;
      case 2: o3 = n32 ? (onnx_i64)((unsigned)i % (unsigned)fm[7]) : i % fm[7]; break;
      case 3: break;
      case 4: o3 = n32 ? (onnx_i64)((unsigned)i / (unsigned)fm[7]) : i / fm[7]; break;
      default: walk = true;
    }
    onnx_i64 o4 = 0;
    switch ((int)fm[8]) {
      case 1: o4 = i; break;
      case 2: o4 = n32 ? (onnx_i64)((unsigned)i % (unsigned)fm[9]) : i % fm[9]; break;
      case 3: break;
      case 4: o4 = n32 ? (onnx_i64)((unsigned)i / (unsigned)fm[9]) : i / fm[9]; break;
      default: walk = true;
    }
    if (walk) {
      onnx_i64 rem = i;
      o0 = 0;
      o1 = 0;
      o2 = 0;
      o3 = 0;
      o4 = 0;
      for (int d = rank - 1; d >= 0; --d) {
        const onnx_i64 c = rem % dims[d]; rem /= dims[d];
        o0 += c * meta[2 + 1 * rank + d];
        o1 += c * meta[2 + 2 * rank + d];
        o2 += c * meta[2 + 3 * rank + d];
        o3 += c * meta[2 + 4 * rank + d];
        o4 += c * meta[2 + 5 * rank + d];
      }
    }
    const float a0 = in0[o0];
    const float a1 = in1[o1];
    const float a2 = in2[o2];
    const float a3 = in3[o3];
    const float a4 = in4[o4];
    out[i] = gelu2_v(a0, a1, a2, a3, a4);
  }
}

