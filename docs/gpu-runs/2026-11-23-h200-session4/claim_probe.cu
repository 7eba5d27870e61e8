// Probe: which part of kiln's gather protocol costs time? 190 x 1 KiB, 8 threads, streaming stores, then one copy.
// static: thread t always copies part t (the PR-probe protocol). claim: parts claimed from a shared counter
// (kiln's protocol), caller first. +pf: each part prefetches its sources into L2 before copying.
#include <cuda_runtime.h>
#include <xmmintrin.h>
#include <cstdio>
#include "probe_common.h"

struct alignas(128) Padded { std::atomic<unsigned long> v{0}; };

int main(int argc, char** argv) {
  int threads = 8;
  cudaSetDevice(0); cudaFree(0);
  cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  const size_t n = 190, sz = 1024, total = n * sz;
  char* staging; cudaHostAlloc((void**)&staging, total, cudaHostAllocPortable);
  void* dst; cudaMalloc(&dst, total);
  std::vector<std::vector<char>> src(n, std::vector<char>(sz, 3));
  Padded epoch, claims, done;
  std::atomic<bool> stop{false};
  int mode = 0;  // 0 static, 1 claim
  bool prefetch = false;
  auto part = [&](int p) {
    size_t a = n * p / threads, b = n * (p + 1) / threads;
    if (prefetch) for (size_t i = a; i < b; i++) for (size_t o = 0; o < sz; o += 64) _mm_prefetch(src[i].data() + o, _MM_HINT_T1);
    for (size_t i = a; i < b; i++) stream_copy(staging + i * sz, src[i].data(), sz);
    _mm_sfence();
  };
  std::vector<std::thread> helpers;
  for (int h = 0; h + 1 < threads; h++)
    helpers.emplace_back([&, h] {
      unsigned long seen = 0;
      while (!stop.load()) {
        unsigned long e = epoch.v.load(std::memory_order_acquire);
        if (e == seen) { _mm_pause(); continue; }
        seen = e;
        if (mode == 0) { part(h + 1); done.v.fetch_add(1, std::memory_order_release); }
        else {
          for (;;) { unsigned long p = claims.v.fetch_add(1, std::memory_order_acq_rel); if (p >= (unsigned long)threads) break; part(p); done.v.fetch_add(1, std::memory_order_release); }
        }
      }
    });
  auto gather = [&] {
    done.v.store(0, std::memory_order_relaxed);
    claims.v.store(0, std::memory_order_release);
    epoch.v.fetch_add(1, std::memory_order_seq_cst);
    unsigned long mine = 0;
    if (mode == 0) { part(0); mine = 1; }
    else { for (;;) { unsigned long p = claims.v.fetch_add(1, std::memory_order_acq_rel); if (p >= (unsigned long)threads) break; part(p); mine++; } }
    while (done.v.load(std::memory_order_acquire) + mine < (unsigned long)threads) _mm_pause();
  };
  const int iters = 3000, warm = 300;
  for (int round = 0; round < 3; round++) {
    std::vector<double> p;
    for (int it = 0; it < iters + warm; it++) { double t0 = now_us(); cudaMemcpyAsync(dst, staging, total, cudaMemcpyHostToDevice, s); cudaStreamSynchronize(s); if (it >= warm) p.push_back(now_us() - t0); }
    double pre = median(p);
    printf("round %d: prefilled copy %.2f us\n", round, pre);
    for (int refresh = 0; refresh < 2; refresh++)
      for (int m = 0; m < 2; m++)
        for (int pf = 0; pf < 2; pf++) {
          mode = m; prefetch = pf;
          std::vector<double> g, t;
          for (int it = 0; it < iters + warm; it++) {
            if (refresh) for (auto& v : src) memset(v.data(), it & 0xff, sz);
            double t0 = now_us();
            gather();
            double t1 = now_us();
            cudaMemcpyAsync(dst, staging, total, cudaMemcpyHostToDevice, s);
            cudaStreamSynchronize(s);
            double t2 = now_us();
            if (it >= warm) { g.push_back(t1 - t0); t.push_back(t2 - t0); }
          }
          printf("  %-9s %-6s %-3s gather %5.2f us, gather+copy %6.2f us = %.2fx\n", refresh ? "refreshed" : "static",
                 m ? "claim" : "static", pf ? "+pf" : "", median(g), median(t), median(t) / pre);
        }
  }
  stop = true; epoch.v.fetch_add(1);
  for (auto& h : helpers) h.join();
}
