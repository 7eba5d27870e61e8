// Shared by this folder's probes: timing, medians, the gather's copy loops and a pool of spinning
// helper threads (thread t runs part(t); the caller runs the last part).
#pragma once
#include <emmintrin.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

static double now_us() { return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
static double median(std::vector<double> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; }

// Copies n bytes (a multiple of 64 gets the vector loop; the rest memcpy), streaming or plain stores.
template <bool Streaming>
static void copy_lines(char* dst, const char* src, size_t n) {
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    __m128i a = _mm_loadu_si128((const __m128i*)(src + i)), b = _mm_loadu_si128((const __m128i*)(src + i + 16));
    __m128i c = _mm_loadu_si128((const __m128i*)(src + i + 32)), d = _mm_loadu_si128((const __m128i*)(src + i + 48));
    if (Streaming) {
      _mm_stream_si128((__m128i*)(dst + i), a); _mm_stream_si128((__m128i*)(dst + i + 16), b);
      _mm_stream_si128((__m128i*)(dst + i + 32), c); _mm_stream_si128((__m128i*)(dst + i + 48), d);
    } else {
      _mm_storeu_si128((__m128i*)(dst + i), a); _mm_storeu_si128((__m128i*)(dst + i + 16), b);
      _mm_storeu_si128((__m128i*)(dst + i + 32), c); _mm_storeu_si128((__m128i*)(dst + i + 48), d);
    }
  }
  memcpy(dst + i, src + i, n - i);
}
static void stream_copy(char* dst, const char* src, size_t n) { copy_lines<true>(dst, src, n); }
static void plain_copy(char* dst, const char* src, size_t n) { copy_lines<false>(dst, src, n); }

struct Pool {
  int threads;
  std::atomic<unsigned long> epoch{0};
  std::atomic<int> remaining{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> helpers;
  std::function<void(int)> part;
  Pool(int t) : threads(t) {
    for (int h = 0; h + 1 < threads; h++)
      helpers.emplace_back([this, h] {
        unsigned long seen = 0;
        while (!stop.load()) {
          unsigned long e = epoch.load(std::memory_order_acquire);
          if (e == seen) { _mm_pause(); continue; }
          seen = e; part(h); remaining.fetch_sub(1, std::memory_order_release);
        }
      });
  }
  void run() {
    remaining.store(threads - 1); epoch.fetch_add(1, std::memory_order_release);
    part(threads - 1);
    while (remaining.load(std::memory_order_acquire) != 0) _mm_pause();
  }
  ~Pool() { stop = true; epoch.fetch_add(1); for (auto& h : helpers) h.join(); }
};
