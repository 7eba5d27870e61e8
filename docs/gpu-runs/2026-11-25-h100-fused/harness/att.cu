#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <cuda_runtime.h>
#include "prelude.cuh"
#include "att0.cuh"
#include "att1.cuh"
#include "att2.cuh"
#include "att3.cuh"
#include "att4.cuh"
#include "att5.cuh"
#include "att6.cuh"
#include "att7.cuh"
#include "att8.cuh"
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("CUDA %s at %d\n", cudaGetErrorString(e), __LINE__); exit(1); } } while (0)
template <typename F> float timeit(F f, int reps = 50) {
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  std::vector<float> t;
  for (int r = 0; r < 7; ++r) {
    f(); cudaEventRecord(a); for (int i = 0; i < reps; ++i) f(); cudaEventRecord(b); CK(cudaEventSynchronize(b));
    float ms; cudaEventElapsedTime(&ms, a, b); t.push_back(ms * 1000.0f / reps);
  }
  std::sort(t.begin(), t.end()); return t[3];
}
static float* upf(const std::vector<float>& v) { float* d; CK(cudaMalloc(&d, v.size() * 4)); CK(cudaMemcpy(d, v.data(), v.size() * 4, cudaMemcpyHostToDevice)); return d; }
int main() {
  const long B = 64, H = 12, S = 128, D = 64, W = H * D, n = B * S * W;
  std::vector<float> hq(n), hk(n), hv(n), hm(B * S);
  srand(3);
  for (auto& x : hq) x = rand() / (float)RAND_MAX - 0.5f;
  for (auto& x : hk) x = rand() / (float)RAND_MAX - 0.5f;
  for (auto& x : hv) x = rand() / (float)RAND_MAX - 0.5f;
  for (long b = 0; b < B; ++b) for (long s = 0; s < S; ++s) hm[b * S + s] = s < 100 + b % 28 ? 0.0f : -3.4028235e38f;
  float *q = upf(hq), *k = upf(hk), *v = upf(hv), *m = upf(hm), *o0, *o1;
  CK(cudaMalloc(&o0, n * 4)); CK(cudaMalloc(&o1, n * 4));
  float sc = 0.125f; int scb; memcpy(&scb, &sc, 4);
  std::vector<onnx_i64> meta = {2, S, S, D, D, scb, B, H, S * W, D, W, 1, S * W, D, 1, W, S * W, D, W, 1, S, 0, 0, 1, S * W, D, W, 1};
  onnx_i64* dm; CK(cudaMalloc(&dm, meta.size() * 8)); CK(cudaMemcpy(dm, meta.data(), meta.size() * 8, cudaMemcpyHostToDevice));
  const unsigned units = B * H * 2;
  printf("att0: %.1f us\n", timeit([&] { att0<<<units, 128>>>(dm, q, k, v, m, o0); }));
  printf("att1: %.1f us\n", timeit([&] { att1<<<units, 128>>>(dm, q, k, v, m, o1); }));
  float* o2; CK(cudaMalloc(&o2, n * 4)); float* o3; CK(cudaMalloc(&o3, n * 4));
  printf("att2 (unrolled tile loads): %.1f us\n", timeit([&] { att2<<<units, 128>>>(dm, q, k, v, m, o2); }));
  printf("att3 (loads to registers first): %.1f us\n", timeit([&] { att3<<<units, 128>>>(dm, q, k, v, m, o3); }));
  float *o4, *o5, *o6; CK(cudaMalloc(&o4, n * 4)); CK(cudaMalloc(&o5, n * 4)); CK(cudaMalloc(&o6, n * 4));
  printf("att4 (att2, launch bounds 128x4): %.1f us\n", timeit([&] { att4<<<units, 128>>>(dm, q, k, v, m, o4); }));
  printf("att5 (att2 + float4 global loads): %.1f us\n", timeit([&] { att5<<<units, 128>>>(dm, q, k, v, m, o5); }));
  printf("att6 (att5 + launch bounds 128x4): %.1f us\n", timeit([&] { att6<<<units, 128>>>(dm, q, k, v, m, o6); }));
  float *o7, *o8; CK(cudaMalloc(&o7, n * 4)); CK(cudaMalloc(&o8, n * 4));
  printf("att7 (att2, 32-row tiles): %.1f us\n", timeit([&] { att7<<<units * 2, 128>>>(dm, q, k, v, m, o7); }));
  printf("att8 (att5, 32-row tiles): %.1f us\n", timeit([&] { att8<<<units * 2, 128>>>(dm, q, k, v, m, o8); }));
  CK(cudaDeviceSynchronize());
  auto diff = [&](float* x) { std::vector<float> a(n), b(n); cudaMemcpy(a.data(), o0, n * 4, cudaMemcpyDeviceToHost); cudaMemcpy(b.data(), x, n * 4, cudaMemcpyDeviceToHost);
    float md = 0; for (long i = 0; i < n; ++i) md = std::max(md, std::fabs(a[i] - b[i])); return md; };
  printf("diff att2 %g att3 %g att4 %g att5 %g att6 %g att7 %g att8 %g\n", diff(o2), diff(o3), diff(o4), diff(o5), diff(o6), diff(o7), diff(o8));
  std::vector<float> a(n), b(n); cudaMemcpy(a.data(), o0, n * 4, cudaMemcpyDeviceToHost); cudaMemcpy(b.data(), o1, n * 4, cudaMemcpyDeviceToHost);
  float md = 0, ma = 0; for (long i = 0; i < n; ++i) { md = std::max(md, std::fabs(a[i] - b[i])); ma = std::max(ma, std::fabs(a[i])); }
  printf("att diff %g (max %g)\n", md, ma);
  return 0;
}
