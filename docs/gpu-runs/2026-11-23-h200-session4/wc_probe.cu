// Probe: does a write-combined staging buffer (cudaHostAllocWriteCombined) make gather + one copy cheaper?
// 190 x 1 KiB and 16 x 64 KiB, gathered by 1..8 threads with streaming or plain stores into ordinary or
// write-combined pinned memory, then one copy; against prefilled copies from both kinds of buffer.
// "refreshed": the calling thread rewrites every source before each (timed) gather, as a server that
// just decoded a request would. Build: nvcc -O2 -std=c++17 -o wc_probe wc_probe.cu -lcuda
#include <cuda_runtime.h>
#include <cstdio>
#include <string>
#include "probe_common.h"

int main() {
  cudaSetDevice(0); cudaFree(0);
  cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  const int iters = 2000, warm = 200;
  for (auto [n, sz] : std::vector<std::pair<size_t, size_t>>{{190, 1024}, {16, 65536}}) {
    const size_t total = n * sz;
    char *normal, *wc;
    cudaHostAlloc((void**)&normal, total, cudaHostAllocDefault);
    cudaHostAlloc((void**)&wc, total, cudaHostAllocWriteCombined);
    memset(normal, 1, total); memset(wc, 1, total);
    void* dst; cudaMalloc(&dst, total);
    std::vector<std::vector<char>> src(n, std::vector<char>(sz, 3));
    auto prefilled = [&](char* buf) {
      std::vector<double> p;
      for (int it = 0; it < iters + warm; it++) { double t0 = now_us(); cudaMemcpyAsync(dst, buf, total, cudaMemcpyHostToDevice, s); cudaStreamSynchronize(s); if (it >= warm) p.push_back(now_us() - t0); }
      return median(p);
    };
    for (int round = 0; round < 2; round++) {
      double p_normal = prefilled(normal), p_wc = prefilled(wc);
      printf("%zu x %zu B round %d: prefilled copy ordinary %.2f us | prefilled copy write-combined %.2f us\n", n, sz, round, p_normal, p_wc);
      for (int threads : {1, 2, 4, 8}) {
        Pool pool(threads);
        for (int variant = 0; variant < 4; variant++) {
          for (int refresh = 0; refresh < 2; refresh++) {
            char* staging = (variant & 1) ? wc : normal;
            bool nt = !(variant & 2);
            pool.part = [&](int p) {
              size_t a = n * p / threads, b = n * (p + 1) / threads;
              for (size_t i = a; i < b; i++) (nt ? stream_copy : plain_copy)(staging + i * sz, src[i].data(), sz);
              _mm_sfence();
            };
            std::vector<double> g, t;
            for (int it = 0; it < iters + warm; it++) {
              if (refresh) for (auto& v : src) memset(v.data(), it & 0xff, sz);
              double t0 = now_us();
              pool.run();
              double t1 = now_us();
              cudaMemcpyAsync(dst, staging, total, cudaMemcpyHostToDevice, s);
              cudaStreamSynchronize(s);
              double t2 = now_us();
              if (it >= warm) { g.push_back(t1 - t0); t.push_back(t2 - t0); }
            }
            double tt = median(t);
            printf("  %d thr %-14s %-9s %-9s gather %6.2f us, gather+copy %6.2f us = %.2fx ordinary prefilled, %.2fx wc prefilled\n",
                   threads, (variant & 1) ? "write-combined" : "ordinary", nt ? "streaming" : "plain", refresh ? "refreshed" : "static",
                   median(g), tt, tt / p_normal, tt / p_wc);
          }
        }
      }
    }
    cudaFreeHost(normal); cudaFreeHost(wc); cudaFree(dst);
  }
}
