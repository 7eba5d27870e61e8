#!/usr/bin/env python3
"""Writes the harness's kernel variants (gelu2.cuh, att1.cuh .. att8.cuh) from gelu0.cuh and att0.cuh."""

def write(name, text):
    with open(name, "w") as f:
        f.write(text)

def edit(text, old, new):
    assert old in text, old[:60]
    return text.replace(old, new)

gelu0 = open("gelu0.cuh").read()
write("gelu2.cuh", gelu0.replace("gelu0", "gelu2").replace("ONNX_NOINLINE", "__forceinline__"))

att0 = open("att0.cuh").read()

# att1: contiguous columns per thread and float4 shared-memory reads (slower: kept for the record).
att1 = att0.replace("att0", "att1")
for old, new in [
    ("""  __shared__ float qs[D][BQ + 1];
  __shared__ float ks[D][BK + 1];
  __shared__ float vs[BK][DV];
  __shared__ float ss[BQ][BK + 1];""",
     """  __shared__ __align__(16) float qs[D][BQ + 4];
  __shared__ __align__(16) float ks[D][BK + 4];
  __shared__ __align__(16) float vs[BK][DV];
  __shared__ __align__(16) float ss[BQ][BK + 4];"""),
    ("""#pragma unroll 4
      for (int t = 0; t < D; ++t) {
        float a[RQ], b[RK];
        for (int i = 0; i < RQ; ++i) a[i] = qs[t][ty * RQ + i];
        for (int jj = 0; jj < RK; ++jj) b[jj] = ks[t][tx + 8 * jj];
        for (int i = 0; i < RQ; ++i) for (int jj = 0; jj < RK; ++jj) s[i][jj] += a[i] * b[jj];
      }""",
     """#pragma unroll 4
      for (int t = 0; t < D; ++t) {
        const float4 a4 = *(const float4*)&qs[t][ty * RQ], b4 = *(const float4*)&ks[t][tx * RK];
        const float a[4] = {a4.x, a4.y, a4.z, a4.w}, b[4] = {b4.x, b4.y, b4.z, b4.w};
        for (int i = 0; i < RQ; ++i) for (int jj = 0; jj < RK; ++jj) s[i][jj] += a[i] * b[jj];
      }"""),
    ("""        for (int jj = 0; jj < RK; ++jj) {
          const int c = tx + 8 * jj;
          const int j = j0 + c;""",
     """        for (int jj = 0; jj < RK; ++jj) {
          const int c = tx * RK + jj;
          const int j = j0 + c;"""),
    ("""        float cs = 0.0f;
        for (int jj = 0; jj < RK; ++jj) {
          const int c = tx + 8 * jj;
          const float p = (j0 + c < Sk && mn != ONNX_NEG_INF) ? expf(s[i][jj] - mn) : 0.0f;
          ss[r][c] = p;
          cs += p;
        }""",
     """        float cs = 0.0f;
        float pr[RK];
        for (int jj = 0; jj < RK; ++jj) {
          const int c = tx * RK + jj;
          pr[jj] = (j0 + c < Sk && mn != ONNX_NEG_INF) ? expf(s[i][jj] - mn) : 0.0f;
          cs += pr[jj];
        }
        *(float4*)&ss[r][tx * RK] = make_float4(pr[0], pr[1], pr[2], pr[3]);"""),
    ("""      for (int j = 0; j < BK; ++j) {
        float p[RQ];
        for (int i = 0; i < RQ; ++i) p[i] = ss[ty * RQ + i][j];
        for (int cc = 0; cc < CV; ++cc) {
          const int c = tx + 8 * cc;
          if (c < DV) { const float vv = vs[j][c]; for (int i = 0; i < RQ; ++i) acc[i][cc] += p[i] * vv; }
        }
      }""",
     """      for (int j = 0; j < BK; j += 4) {
        float p[RQ][4];
        for (int i = 0; i < RQ; ++i) { const float4 p4 = *(const float4*)&ss[ty * RQ + i][j]; p[i][0] = p4.x; p[i][1] = p4.y; p[i][2] = p4.z; p[i][3] = p4.w; }
#pragma unroll
        for (int jj = 0; jj < 4; ++jj) {
          const float4 v0 = *(const float4*)&vs[j + jj][tx * CV], v1 = *(const float4*)&vs[j + jj][tx * CV + 4];
          const float vv[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
          for (int cc = 0; cc < CV; ++cc) for (int i = 0; i < RQ; ++i) acc[i][cc] += p[i][jj] * vv[cc];
        }
      }"""),
    ("""      for (int cc = 0; cc < CV; ++cc) {
        const int c = tx + 8 * cc;
        if (c < DV) out[oo + (i0 + r) * o_rs + c * o_cs] = l > 0.0f ? acc[i][cc] / l : 0.0f;
      }""",
     """      for (int cc = 0; cc < CV; ++cc) {
        const int c = tx * CV + cc;
        if (c < DV) out[oo + (i0 + r) * o_rs + c * o_cs] = l > 0.0f ? acc[i][cc] / l : 0.0f;
      }"""),
]:
    att1 = edit(att1, old, new)
write("att1.cuh", att1)
# att2: tile loads stepping by the block size (128), unrolled.
att2 = att0.replace("att0", "att2")
for bound in ("BQ * D", "BK * D", "BK * DV"):
    att2 = edit(att2, f"for (int e = tid; e < {bound}; e += blockDim.x) {{",
                f"for (int e = tid; e < {bound}; e += 128) {{")
att2 = att2.replace("    for (int e = tid; e < BQ * D; e += 128)", "#pragma unroll\n    for (int e = tid; e < BQ * D; e += 128)")
att2 = att2.replace("      for (int e = tid; e < BK", "#pragma unroll\n      for (int e = tid; e < BK")
write("att2.cuh", att2)

K_LOADS = """#pragma unroll
      for (int e = tid; e < BK * D; e += 128) {
        const int c = k_rs == 1 ? e / D : e % BK, t = k_rs == 1 ? e % D : e / BK;
        ks[t][c] = j0 + c < Sk ? k[ko + t * k_rs + (j0 + c) * k_cs] : 0.0f;
      }
#pragma unroll
      for (int e = tid; e < BK * DV; e += 128) {
        const int j = v_cs == 1 ? e / DV : e % BK, c = v_cs == 1 ? e % DV : e / BK;
        vs[j][c] = j0 + j < Sk ? v[vo + (j0 + j) * v_rs + c * v_cs] : 0.0f;
      }"""

# att3: a tile's K and V values loaded into registers before any is stored.
att3 = edit(att2.replace("att2", "att3"), K_LOADS, """      float kr[BK * D / 128], vr[BK * DV / 128];
#pragma unroll
      for (int u = 0; u < BK * D / 128; ++u) {
        const int e = tid + 128 * u;
        const int c = k_rs == 1 ? e / D : e % BK, t = k_rs == 1 ? e % D : e / BK;
        kr[u] = j0 + c < Sk ? k[ko + t * k_rs + (j0 + c) * k_cs] : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < BK * DV / 128; ++u) {
        const int e = tid + 128 * u;
        const int j = v_cs == 1 ? e / DV : e % BK, c = v_cs == 1 ? e % DV : e / BK;
        vr[u] = j0 + j < Sk ? v[vo + (j0 + j) * v_rs + c * v_cs] : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < BK * D / 128; ++u) {
        const int e = tid + 128 * u;
        const int c = k_rs == 1 ? e / D : e % BK, t = k_rs == 1 ? e % D : e / BK;
        ks[t][c] = kr[u];
      }
#pragma unroll
      for (int u = 0; u < BK * DV / 128; ++u) {
        const int e = tid + 128 * u;
        const int j = v_cs == 1 ? e / DV : e % BK, c = v_cs == 1 ? e % DV : e / BK;
        vs[j][c] = vr[u];
      }""")
write("att3.cuh", att3)

BOUNDS = "SAGGAR_GLOBAL void __launch_bounds__(128, 4) "
write("att4.cuh", att2.replace("SAGGAR_GLOBAL void att2(", BOUNDS + "att4("))

# att5: float4 tile loads where Q, K and V rows are contiguous.
att5 = att2.replace("att2", "att5")
att5 = edit(att5, """#pragma unroll
    for (int e = tid; e < BQ * D; e += 128) {
      const int r = q_cs == 1 ? e / D : e % BQ, t = q_cs == 1 ? e % D : e / BQ;
      qs[t][r] = i0 + r < Sq ? q[qo + (i0 + r) * q_rs + t * q_cs] : 0.0f;
    }""", """    if (vec4) {
#pragma unroll
      for (int e = tid; e < BQ * D / 4; e += 128) {
        const int r = e / (D / 4), t = (e % (D / 4)) * 4;
        const float4 x = i0 + r < Sq ? *(const float4*)&q[qo + (i0 + r) * q_rs + t] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        qs[t][r] = x.x; qs[t + 1][r] = x.y; qs[t + 2][r] = x.z; qs[t + 3][r] = x.w;
      }
    } else {
#pragma unroll
    for (int e = tid; e < BQ * D; e += 128) {
      const int r = q_cs == 1 ? e / D : e % BQ, t = q_cs == 1 ? e % D : e / BQ;
      qs[t][r] = i0 + r < Sq ? q[qo + (i0 + r) * q_rs + t * q_cs] : 0.0f;
    }
    }""")
att5 = edit(att5, K_LOADS, """      if (vec4) {
#pragma unroll
        for (int e = tid; e < BK * D / 4; e += 128) {
          const int c = e / (D / 4), t = (e % (D / 4)) * 4;
          const float4 x = j0 + c < Sk ? *(const float4*)&k[ko + (j0 + c) * k_cs + t] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
          ks[t][c] = x.x; ks[t + 1][c] = x.y; ks[t + 2][c] = x.z; ks[t + 3][c] = x.w;
        }
#pragma unroll
        for (int e = tid; e < BK * DV / 4; e += 128) {
          const int j = e / (DV / 4), c = (e % (DV / 4)) * 4;
          *(float4*)&vs[j][c] = j0 + j < Sk ? *(const float4*)&v[vo + (j0 + j) * v_rs + c] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
      } else {
""" + K_LOADS + "\n      }")
att5 = edit(att5, "  const int tiles = (Sq + BQ - 1) / BQ;", """  const int tiles = (Sq + BQ - 1) / BQ;
  const bool vec4 = q_cs == 1 && k_rs == 1 && v_cs == 1 && D % 4 == 0 && DV % 4 == 0 && q_rs % 4 == 0 && k_cs % 4 == 0 && v_rs % 4 == 0
    && (((saggar_u64)q | (saggar_u64)k | (saggar_u64)v) & 15) == 0;""")
att5 = edit(att5, "__shared__ float vs[BK][DV];", "__shared__ __align__(16) float vs[BK][DV];")
write("att5.cuh", att5)
write("att6.cuh", att5.replace("att5", "att6").replace("SAGGAR_GLOBAL void att6(", BOUNDS + "att6("))

# att7, att8: 32-row tiles.
write("att7.cuh", att2.replace("att2", "att7").replace("constexpr int BQ = 64", "constexpr int BQ = 32"))
write("att8.cuh", att5.replace("att5", "att8").replace("constexpr int BQ = 64", "constexpr int BQ = 32"))
