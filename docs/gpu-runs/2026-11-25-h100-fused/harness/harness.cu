#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <cmath>
#include <cuda_runtime.h>
#include "prelude.cuh"
#include "gelu0.cuh"
#include "gelu2.cuh"
#include "ln0.cuh"
#include "ln1.cuh"
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
static onnx_i64* upload(const std::vector<onnx_i64>& v) { onnx_i64* d; CK(cudaMalloc(&d, v.size() * 8)); CK(cudaMemcpy(d, v.data(), v.size() * 8, cudaMemcpyHostToDevice)); return d; }
static float* upf(const std::vector<float>& v) { float* d; CK(cudaMalloc(&d, v.size() * 4)); CK(cudaMemcpy(d, v.data(), v.size() * 4, cudaMemcpyHostToDevice)); return d; }
static float maxdiff(const float* a, const float* b, size_t n) {
  std::vector<float> x(n), y(n); cudaMemcpy(x.data(), a, n * 4, cudaMemcpyDeviceToHost); cudaMemcpy(y.data(), b, n * 4, cudaMemcpyDeviceToHost);
  float m = 0; for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i] - y[i])); return m;
}
int main() {
  int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  printf("SMs %d\n", sms);
  // GELU over [64,128,3072]
  const onnx_i64 B = 64, S = 128, F = 3072, n = B * S * F;
  std::vector<float> hx(n); srand(1); for (auto& v : hx) v = (rand() / (float)RAND_MAX - 0.5f) * 6.0f;
  float* x = upf(hx); float *sq = upf({1.4142135f}), *one = upf({1.0f}), *half = upf({0.5f});
  float *o0, *o1; CK(cudaMalloc(&o0, n * 4)); CK(cudaMalloc(&o1, n * 4));
  std::vector<onnx_i64> gm = {3, n, B, S, F};
  auto st = [&](std::vector<onnx_i64> s) { gm.insert(gm.end(), s.begin(), s.end()); };
  st({S * F, F, 1}); st({0, 0, 0}); st({0, 0, 0}); st({S * F, F, 1}); st({0, 0, 0});
  st({1, 0, 3, 0, 3, 0, 1, 0, 3, 0, 1});
  onnx_i64* gmeta = upload(gm);
  auto g0 = [&](unsigned blocks, float* o) { return [=] { gelu0<<<blocks, 256>>>(gmeta, x, sq, one, x, half, o); }; };
  auto g2 = [&](unsigned blocks, float* o) { return [=] { gelu2<<<blocks, 256>>>(gmeta, x, sq, one, x, half, o); }; };
  unsigned cur = (unsigned)std::min<onnx_i64>((n + 255) / 256, 65535), quads = (unsigned)((n / 4 + 255) / 256);
  printf("gelu0 current grid %u: %.1f us\n", cur, timeit(g0(cur, o0)));
  printf("gelu0 quad grid %u: %.1f us\n", quads, timeit(g0(quads, o1)));
  for (unsigned b : {(unsigned)sms * 4, (unsigned)sms * 8, (unsigned)sms * 16, 2048u, 4096u})
    printf("gelu0 grid %u: %.1f us\n", b, timeit(g0(b, o1)));
  printf("gelu2(inline) current grid: %.1f us\n", timeit(g2(cur, o1)));
  printf("gelu2(inline) quad grid: %.1f us\n", timeit(g2(quads, o1)));
  printf("gelu2(inline) grid %u: %.1f us\n", sms * 8, timeit(g2(sms * 8, o1)));
  printf("gelu diff %g\n", maxdiff(o0, o1, n));
  printf("copy-equivalent (cudaMemcpy D2D 2 x %lld B): %.1f us\n", (long long)n * 4, timeit([&] { cudaMemcpyAsync(o1, x, n * 4, cudaMemcpyDeviceToDevice); }));
  // LayerNorm fused: rows 8192, cols 768; in0 + in1(bias) + in2(residual)
  const onnx_i64 H = 768, R = B * S, m = R * H;
  std::vector<float> ha(m), hb(H), hr(m), hg(H), hbb(H);
  for (auto& v : ha) v = rand() / (float)RAND_MAX - 0.5f; for (auto& v : hb) v = rand() / (float)RAND_MAX;
  for (auto& v : hr) v = rand() / (float)RAND_MAX * 2.0f; for (auto& v : hg) v = rand() / (float)RAND_MAX; for (auto& v : hbb) v = rand() / (float)RAND_MAX;
  float *a = upf(ha), *bb = upf(hb), *res = upf(hr), *g = upf(hg), *be = upf(hbb), *y0, *y1;
  CK(cudaMalloc(&y0, m * 4)); CK(cudaMalloc(&y1, m * 4));
  std::vector<onnx_i64> lm = {R, H, 1, 3, m, B, S, H};
  auto lst = [&](std::vector<onnx_i64> s) { lm.insert(lm.end(), s.begin(), s.end()); };
  lst({S * H, H, 1}); lst({0, 0, 1}); lst({S * H, H, 1}); lst({0, 0, 1}); lst({0, 0, 1});
  lst({1, 0, 2, H, 1, 0, 2, H, 2, H, 1});
  onnx_i64* lmeta = upload(lm);
  dim3 blk(32, 8); unsigned lg = (unsigned)(R / 8); size_t shm = 8 * H * 4;
  printf("ln0 current: %.1f us\n", timeit([&] { ln0<<<lg, blk, shm>>>(lmeta, a, bb, res, g, be, y0); }));
  printf("ln1 fast: %.1f us\n", timeit([&] { ln1<<<lg, blk, shm>>>(lmeta, a, bb, res, g, be, y1); }));
  CK(cudaDeviceSynchronize());
  printf("ln diff %g\n", maxdiff(y0, y1, m));
  for (int gy : {2, 4, 16}) {
    dim3 b2(32, gy); size_t s2 = gy * H * 4; if (s2 > 49152) continue;
    printf("ln1 groups %d: %.1f us\n", gy, timeit([&] { ln1<<<(unsigned)(R / gy), b2, s2>>>(lmeta, a, bb, res, g, be, y1); }));
  }
  printf("ln copy-equivalent (3 x %lld B moved): %.1f us\n", (long long)m * 4, timeit([&] { cudaMemcpyAsync(y1, a, m * 4, cudaMemcpyDeviceToDevice); }));
  return 0;
}
