// Probe: the floor of a parallel gather (190 x 1 KiB, NT stores) with spinning helper threads, then one copy.
#include <cuda_runtime.h>
#include <emmintrin.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

static double now_us() { return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
static double median(std::vector<double> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; }
static void stream_copy(char* dst, const char* src, size_t n) {
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    __m128i a = _mm_loadu_si128((const __m128i*)(src + i)), b = _mm_loadu_si128((const __m128i*)(src + i + 16));
    __m128i c = _mm_loadu_si128((const __m128i*)(src + i + 32)), d = _mm_loadu_si128((const __m128i*)(src + i + 48));
    _mm_stream_si128((__m128i*)(dst + i), a); _mm_stream_si128((__m128i*)(dst + i + 16), b);
    _mm_stream_si128((__m128i*)(dst + i + 32), c); _mm_stream_si128((__m128i*)(dst + i + 48), d);
  }
  memcpy(dst + i, src + i, n - i);
}

int main() {
  cudaSetDevice(0); cudaFree(0);
  const size_t n = 190, sz = 1024, total = n * sz;
  char* staging; cudaHostAlloc((void**)&staging, total, cudaHostAllocDefault);
  void* dst; cudaMalloc(&dst, total);
  std::vector<std::vector<char>> src(n, std::vector<char>(sz, 3));
  cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  for (int threads : {1, 2, 4, 8}) {
    std::atomic<unsigned long> epoch{0};
    std::atomic<int> remaining{0};
    std::atomic<bool> stop{false};
    auto part = [&](int p) {
      size_t a = n * p / threads, b = n * (p + 1) / threads;
      for (size_t i = a; i < b; i++) stream_copy(staging + i * sz, src[i].data(), sz);
      _mm_sfence();
    };
    std::vector<std::thread> helpers;
    for (int h = 0; h + 1 < threads; h++)
      helpers.emplace_back([&, h] {
        unsigned long seen = 0;
        while (!stop.load()) {
          unsigned long e = epoch.load(std::memory_order_acquire);
          if (e == seen) { _mm_pause(); continue; }
          seen = e; part(h); remaining.fetch_sub(1, std::memory_order_release);
        }
      });
    std::vector<double> g, t;
    for (int it = 0; it < 2200; it++) {
      double t0 = now_us();
      remaining.store(threads - 1); epoch.fetch_add(1, std::memory_order_release);
      part(threads - 1);
      while (remaining.load(std::memory_order_acquire) != 0) _mm_pause();
      double t1 = now_us();
      cudaMemcpyAsync(dst, staging, total, cudaMemcpyHostToDevice, s);
      cudaStreamSynchronize(s);
      double t2 = now_us();
      if (it >= 200) { g.push_back(t1 - t0); t.push_back(t2 - t0); }
    }
    stop = true; epoch.fetch_add(1);
    for (auto& h : helpers) h.join();
    printf("%d threads: gather %.2f us, gather + copy %.2f us\n", threads, median(g), median(t));
  }
  std::vector<double> p;
  for (int it = 0; it < 2200; it++) { double t0 = now_us(); cudaMemcpyAsync(dst, staging, total, cudaMemcpyHostToDevice, s); cudaStreamSynchronize(s); if (it >= 200) p.push_back(now_us() - t0); }
  printf("prefilled copy %.2f us\n", median(p));
}
