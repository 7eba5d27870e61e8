// Where a batch-1 request's device time goes: DMA copies around a graph vs copies done by kernels
// through mapped pinned memory, vs a bare graph.
#include <cuda_runtime.h>
#include <cstdio>
#include <vector>
#include <algorithm>
#include <chrono>
#define CK(x) do{cudaError_t e=(x); if(e){printf("%s:%d %s\n",__FILE__,__LINE__,cudaGetErrorString(e)); exit(1);}}while(0)

__global__ void work(const float* in, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) { float v = in[i]; for (int k = 0; k < 16; k++) v = v * 1.0001f + 0.5f; out[i] = v; }
}
__global__ void copy16(const uint4* __restrict__ src, uint4* __restrict__ dst, int n16) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += gridDim.x * blockDim.x) dst[i] = src[i];
}

int main(int argc, char** argv) {
  int up = argc > 1 ? atoi(argv[1]) : 48640;   // upload bytes
  int down = 256, K = argc > 2 ? atoi(argv[2]) : 6, N = 4096, iters = 3000;
  CK(cudaSetDeviceFlags(cudaDeviceMapHost));
  cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  char *stage, *rb; CK(cudaHostAlloc(&stage, up, cudaHostAllocMapped)); CK(cudaHostAlloc(&rb, 4096, cudaHostAllocMapped));
  char *dstage, *drb; CK(cudaHostGetDevicePointer((void**)&dstage, stage, 0)); CK(cudaHostGetDevicePointer((void**)&drb, rb, 0));
  memset(stage, 1, up);
  char* slots; CK(cudaMalloc(&slots, up + (1 << 20)));
  float *a, *b; CK(cudaMalloc(&a, N * 4)); CK(cudaMalloc(&b, N * 4));
  auto kernels = [&](cudaStream_t st) {
    for (int k = 0; k < K; k++) work<<<N / 256, 256, 0, st>>>(k % 2 ? b : a, k % 2 ? a : b, N);
  };
  auto capture = [&](auto body) { cudaGraph_t g; cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal)); body(s); CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&ge, g, 0ULL)); return ge; };
  cudaGraphExec_t bare = capture([&](cudaStream_t st) { kernels(st); });
  cudaGraphExec_t dma = capture([&](cudaStream_t st) { CK(cudaMemcpyAsync(slots, stage, up, cudaMemcpyHostToDevice, st)); kernels(st);
      CK(cudaMemcpyAsync(rb, a, down, cudaMemcpyDeviceToHost, st)); });
  int blocks = std::min(132, (up / 16 + 255) / 256);
  cudaGraphExec_t kcopy = capture([&](cudaStream_t st) { copy16<<<blocks, 256, 0, st>>>((uint4*)dstage, (uint4*)slots, up / 16); kernels(st);
      copy16<<<1, 256, 0, st>>>((uint4*)a, (uint4*)drb, down / 16); });
  cudaGraphExec_t kin_dmaout = capture([&](cudaStream_t st) { copy16<<<blocks, 256, 0, st>>>((uint4*)dstage, (uint4*)slots, up / 16); kernels(st);
      CK(cudaMemcpyAsync(rb, a, down, cudaMemcpyDeviceToHost, st)); });
  cudaGraphExec_t dmain_kout = capture([&](cudaStream_t st) { CK(cudaMemcpyAsync(slots, stage, up, cudaMemcpyHostToDevice, st)); kernels(st);
      copy16<<<1, 256, 0, st>>>((uint4*)a, (uint4*)drb, down / 16); });
  const char* names[] = {"A stream copies + bare graph", "B graph with DMA copy nodes", "C graph, kernel copies via mapped", "D bare graph", "E kernel in, DMA out", "F DMA in, kernel out"};
  std::vector<double> t[6];
  for (int it = 0; it < iters; it++) for (int v = 0; v < 6; v++) {
    auto t0 = std::chrono::steady_clock::now();
    switch (v) {
      case 0: CK(cudaMemcpyAsync(slots, stage, up, cudaMemcpyHostToDevice, s)); CK(cudaGraphLaunch(bare, s)); CK(cudaMemcpyAsync(rb, a, down, cudaMemcpyDeviceToHost, s)); break;
      case 1: CK(cudaGraphLaunch(dma, s)); break;
      case 2: CK(cudaGraphLaunch(kcopy, s)); break;
      case 3: CK(cudaGraphLaunch(bare, s)); break;
      case 4: CK(cudaGraphLaunch(kin_dmaout, s)); break;
      case 5: CK(cudaGraphLaunch(dmain_kout, s)); break;
    }
    CK(cudaStreamSynchronize(s));
    t[v].push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  printf("upload %d bytes, %d kernels\n", up, K);
  for (int v = 0; v < 6; v++) { std::sort(t[v].begin(), t[v].end()); printf("%-36s p50 %7.2f us  p90 %7.2f\n", names[v], t[v][iters / 2], t[v][iters * 9 / 10]); }
}
