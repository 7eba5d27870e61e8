// Probe: hide the enqueue of the one copy behind the gather. The copy is enqueued first, behind a
// stream wait on a flag in mapped pinned memory (cuStreamWaitValue32); the host gathers, then
// writes the flag. 190 x 1 KiB, 8 threads, streaming stores. Each mode alternates with the
// prefilled copy (enqueue + synchronize) in the same loop.
#include <cuda.h>
#include <cuda_runtime.h>
#include <cstdio>
#include "../2026-11-23-h200-session4/probe_common.h"

int main() {
  const int threads = 8;
  cudaSetDevice(0); cudaFree(0);
  cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  const size_t n = 190, sz = 1024, total = n * sz;
  char *staging, *prefilled;
  cudaHostAlloc((void**)&staging, total, cudaHostAllocPortable);
  cudaHostAlloc((void**)&prefilled, total, cudaHostAllocPortable);
  memset(prefilled, 5, total);
  volatile unsigned* flag; cudaHostAlloc((void**)&flag, 64, cudaHostAllocMapped | cudaHostAllocPortable);
  *flag = 0;
  CUdeviceptr flag_dev; cudaHostGetDevicePointer((void**)&flag_dev, (void*)flag, 0);
  int attr = 0; cuDeviceGetAttribute(&attr, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR, 0);
  printf("stream mem ops supported (wait NOR attr) %d\n", attr);
  void* dst; cudaMalloc(&dst, total);
  std::vector<std::vector<char>> src(n, std::vector<char>(sz, 3));
  auto part = [&](int p) {
    size_t a = n * p / threads, b = n * (p + 1) / threads;
    for (size_t i = a; i < b; i++) stream_copy(staging + i * sz, src[i].data(), sz);
    _mm_sfence();
  };
  // A pool whose start and finish are separate, so the caller can enqueue in between.
  std::atomic<unsigned long> epoch{0}; std::atomic<int> remaining{0}; std::atomic<bool> stop{false};
  std::vector<std::thread> helpers;
  for (int h = 1; h < threads; h++)
    helpers.emplace_back([&, h] {
      unsigned long seen = 0;
      while (!stop.load()) {
        unsigned long e = epoch.load(std::memory_order_acquire);
        if (e == seen) { _mm_pause(); continue; }
        seen = e; part(h); remaining.fetch_sub(1, std::memory_order_release);
      }
    });
  auto start = [&] { remaining.store(threads - 1); epoch.fetch_add(1, std::memory_order_seq_cst); };
  auto finish = [&] { while (remaining.load(std::memory_order_acquire) != 0) _mm_pause(); };
  unsigned value = 0;
  auto prefilled_copy = [&] { cudaMemcpyAsync(dst, prefilled, total, cudaMemcpyHostToDevice, s); cudaStreamSynchronize(s); };
  auto enqueue_gated = [&] {
    value++;
    CUresult r = cuStreamWaitValue32((CUstream)s, flag_dev, value, CU_STREAM_WAIT_VALUE_GEQ);
    if (r != CUDA_SUCCESS) { printf("cuStreamWaitValue32 failed: %d\n", r); exit(1); }
    cudaMemcpyAsync(dst, staging, total, cudaMemcpyHostToDevice, s);
  };
  auto release = [&] { _mm_sfence(); *flag = value; };
  const char* names[] = {"gather, then enqueue (kiln today)", "gated: enqueue, gather, flag", "gated: gather || enqueue, flag",
                         "gated, no gather (wait cost)", "enqueue, no gather (= prefilled)"};
  const int iters = 3000, warm = 300;
  for (int round = 0; round < 3; round++) {
    for (int mode = 0; mode < 5; mode++) {
      std::vector<double> a, p, g;
      for (int it = 0; it < iters + warm; it++) {
        double t0 = now_us();
        if (mode == 0) { start(); part(0); finish(); cudaMemcpyAsync(dst, staging, total, cudaMemcpyHostToDevice, s); }
        else if (mode == 1) { enqueue_gated(); start(); part(0); finish(); release(); }
        else if (mode == 2) { start(); enqueue_gated(); part(0); finish(); release(); }
        else if (mode == 3) { enqueue_gated(); release(); }
        else { cudaMemcpyAsync(dst, staging, total, cudaMemcpyHostToDevice, s); }
        double t1 = now_us();
        cudaStreamSynchronize(s);
        double t2 = now_us();
        prefilled_copy();
        double t3 = now_us();
        if (it >= warm) { a.push_back(t2 - t0); g.push_back(t1 - t0); p.push_back(t3 - t2); }
      }
      printf("round %d %-36s %6.2f us (host part %5.2f), prefilled %6.2f us: %.2fx\n", round, names[mode], median(a), median(g), median(p), median(a) / median(p));
    }
  }
  stop = true; epoch.fetch_add(1);
  for (auto& h : helpers) h.join();
}
