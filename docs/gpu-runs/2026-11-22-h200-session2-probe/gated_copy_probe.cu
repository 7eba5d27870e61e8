// Probe: does enqueueing the copy before the gather, gated by a host-written flag
// (cuStreamWaitValue32), hide the copy's launch latency behind the gather?
#include <cuda.h>
#include <cuda_runtime.h>
#include <emmintrin.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>
#include <atomic>

static double median(std::vector<double> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; }
static double now_us() { return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

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
  cuInit(0);
  cudaSetDevice(0);
  cudaFree(0);
  CUdevice dev; cuDeviceGet(&dev, 0);
  int memops = -1, waitnor = -1;
  cuDeviceGetAttribute(&memops, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1, dev);
  cuDeviceGetAttribute(&waitnor, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR_V1, dev);
  printf("memops_v1=%d wait_nor=%d\n", memops, waitnor);
  for (int inputs_kib : {1, 64}) {
    size_t n = inputs_kib == 1 ? 190 : 16, sz = inputs_kib * 1024, total = n * sz;
    char* staging; cudaHostAlloc((void**)&staging, total, cudaHostAllocDefault);
    memset(staging, 1, total);
    unsigned* flag; cudaHostAlloc((void**)&flag, 64, cudaHostAllocMapped);
    *flag = 0;
    CUdeviceptr dflag; cuMemHostGetDevicePointer(&dflag, flag, 0);
    void* dst; cudaMalloc(&dst, total);
    std::vector<std::vector<char>> src(n, std::vector<char>(sz, 3));
    cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaEvent_t ev; cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    auto gather = [&]() { for (size_t i = 0; i < n; i++) stream_copy(staging + i * sz, src[i].data(), sz); _mm_sfence(); };
    const int iters = 2000;
    std::vector<double> a, b, c, g;
    unsigned epoch = 0;
    for (int it = 0; it < iters + 200; it++) {
      double t0 = now_us();
      cudaMemcpyAsync(dst, staging, total, cudaMemcpyHostToDevice, s);
      cudaStreamSynchronize(s);
      double t1 = now_us();
      gather();
      double t2 = now_us();
      cudaMemcpyAsync(dst, staging, total, cudaMemcpyHostToDevice, s);
      cudaEventRecord(ev, s);
      cudaStreamSynchronize(s);
      double t3 = now_us();
      epoch++;
      CUresult r = cuStreamWaitValue32((CUstream)s, dflag, epoch, CU_STREAM_WAIT_VALUE_GEQ);
      if (r != CUDA_SUCCESS) { printf("cuStreamWaitValue32 failed: %d\n", r); return 1; }
      cudaMemcpyAsync(dst, staging, total, cudaMemcpyHostToDevice, s);
      cudaEventRecord(ev, s);
      gather();
      std::atomic_thread_fence(std::memory_order_seq_cst);
      *(volatile unsigned*)flag = epoch;
      cudaStreamSynchronize(s);
      double t4 = now_us();
      if (it >= 200) { a.push_back(t1 - t0); g.push_back(t2 - t1); b.push_back(t3 - t2); c.push_back(t4 - t3); }
    }
    printf("%zu x %d KiB: prefilled copy %.2f us | gather %.2f us | gather then copy+event %.2f us (gather incl: %.2f) | copy gated, enqueued before gather %.2f us\n",
           n, inputs_kib, median(a), median(g), median(b), median(g) + median(b), median(c));
  }
  return 0;
}
