// Probe: copy-engine copy (cudaMemcpyAsync) vs an SM kernel pulling the span from mapped pinned host
// memory, prefilled and after a gather. Build: nvcc -O2 -std=c++17 -arch=sm_90 -o sm_pull_probe sm_pull_probe.cu
#include <cuda_runtime.h>
#include <cstdio>
#include "probe_common.h"

static void memcpy_copy(char* dst, const char* src, size_t n) { memcpy(dst, src, n); }

__global__ void pull(uint4* dst, const uint4* __restrict__ src, size_t n16) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n16; i += (size_t)gridDim.x * blockDim.x) dst[i] = src[i];
}
// Unrolled: each thread issues 4 independent loads before storing (more bytes in flight over PCIe).
__global__ void pull4(uint4* dst, const uint4* __restrict__ src, size_t n16) {
  size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n16; i += 4 * stride) {
    uint4 a = src[i], b = src[i + stride], c = src[i + 2 * stride], d = src[i + 3 * stride];
    dst[i] = a; dst[i + stride] = b; dst[i + 2 * stride] = c; dst[i + 3 * stride] = d;
  }
  for (; i < n16; i += stride) dst[i] = src[i];
}

int main() {
  cudaSetDevice(0); cudaFree(0);
  cudaDeviceProp prop; cudaGetDeviceProperties(&prop, 0);
  printf("%s, %d SMs\n", prop.name, prop.multiProcessorCount);
  cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  const int iters = 2000, warm = 200;
  for (auto [n, sz] : std::vector<std::pair<size_t, size_t>>{{190, 1024}, {16, 65536}}) {
    const size_t total = n * sz, n16 = total / 16;
    char* staging; cudaHostAlloc((void**)&staging, total, cudaHostAllocPortable | cudaHostAllocMapped);
    memset(staging, 1, total);
    char* staging_dev; cudaHostGetDevicePointer((void**)&staging_dev, staging, 0);
    void* dst; cudaMalloc(&dst, total);
    std::vector<std::vector<char>> src(n, std::vector<char>(sz, 3));
    auto timeit = [&](const char* what, std::function<void()> f, std::function<void()> pre = [] {}) {
      std::vector<double> p;
      for (int it = 0; it < iters + warm; it++) { pre(); double t0 = now_us(); f(); cudaStreamSynchronize(s); if (it >= warm) p.push_back(now_us() - t0); }
      double m = median(p);
      printf("  %-55s %7.2f us\n", what, m);
      return m;
    };
    printf("%zu x %zu B\n", n, sz);
    for (int round = 0; round < 2; round++) {
      double dma = timeit("prefilled DMA copy", [&] { cudaMemcpyAsync(dst, staging, total, cudaMemcpyHostToDevice, s); });
      for (int blocks : {16, 32, 66, 132, 264}) for (int tpb : {256, 512}) for (int k = 0; k < 2; k++) {
        char label[128]; snprintf(label, sizeof label, "prefilled SM pull%s, %d blocks x %d", k ? "4" : "", blocks, tpb);
        double t = timeit(label, [&] { if (k) pull4<<<blocks, tpb, 0, s>>>((uint4*)dst, (const uint4*)staging_dev, n16); else pull<<<blocks, tpb, 0, s>>>((uint4*)dst, (const uint4*)staging_dev, n16); });
        printf("      = %.2fx of the DMA copy\n", t / dma);
      }
      std::vector<char> back(total); cudaMemcpy(back.data(), dst, total, cudaMemcpyDeviceToHost);
      printf("  data check: %s\n", memcmp(back.data(), staging, total) == 0 ? "ok" : "MISMATCH");
      for (int threads : {1, 4, 8}) {
        Pool pool(threads);
        for (int nt = 0; nt < 2; nt++) for (int refresh = 0; refresh < 2; refresh++) {
          pool.part = [&, threads, nt](int p) {
            size_t a = n * p / threads, b = n * (p + 1) / threads;
            for (size_t i = a; i < b; i++) (nt ? stream_copy : memcpy_copy)(staging + i * sz, src[i].data(), sz);
            _mm_sfence();
          };
          int it = 0;
          char label[128];
          snprintf(label, sizeof label, "%d thr %s %s gather + DMA", threads, nt ? "streaming" : "plain", refresh ? "refreshed" : "static");
          double a = timeit(label, [&] { pool.run(); cudaMemcpyAsync(dst, staging, total, cudaMemcpyHostToDevice, s); }, [&] { if (refresh) { for (auto& v : src) memset(v.data(), it & 0xff, sz); } it++; });
          snprintf(label, sizeof label, "%d thr %s %s gather + SM pull4 132x512", threads, nt ? "streaming" : "plain", refresh ? "refreshed" : "static");
          double b = timeit(label, [&] { pool.run(); pull4<<<132, 512, 0, s>>>((uint4*)dst, (const uint4*)staging_dev, n16); }, [&] { if (refresh) { for (auto& v : src) memset(v.data(), it & 0xff, sz); } it++; });
          printf("      = %.2fx / %.2fx of the DMA copy\n", a / dma, b / dma);
        }
      }
    }
    cudaFreeHost(staging); cudaFree(dst);
  }
}
