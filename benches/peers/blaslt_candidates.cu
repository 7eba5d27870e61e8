// cuBLAS's sgemm against every cuBLASLt heuristic candidate, strict f32, at BERT-base's GEMM shapes
// (128 and 8192 rows) with a 4 MiB and a 32 MiB workspace, with and without a bias epilogue, and
// the attention's two batched products through cublasSgemmStridedBatched: what each workspace lets
// the heuristic offer and how fast each candidate runs (algorithm id, tile, split-K, reduction
// scheme, stages, workspace). Operands are zeros; times are means of back-to-back calls on one stream.
// Build and run on the GPU machine:
//   nvcc -O2 -std=c++20 -arch=sm_90 blaslt_candidates.cu -lcublas -lcublasLt -o blaslt_candidates
//   ./blaslt_candidates
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <cublasLt.h>
#define CK(x) do { auto ck_e = (x); if ((int)ck_e != 0) { printf("ERR %s:%d %d\n", __FILE__, __LINE__, (int)ck_e); } } while (0)
static float time_it(cudaStream_t s, int iters, auto f) {
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  for (int i = 0; i < 3; i++) f();
  cudaEventRecord(a, s);
  for (int i = 0; i < iters; i++) f();
  cudaEventRecord(b, s); cudaEventSynchronize(b);
  float ms; cudaEventElapsedTime(&ms, a, b); return ms * 1000.f / iters;
}
int main() {
  int shapes[][3] = {{128,768,768},{128,3072,768},{128,768,3072},{128,2304,768},{8192,768,768},{8192,3072,768},{8192,768,3072}};
  cudaStream_t s; cudaStreamCreate(&s);
  cublasHandle_t h; CK(cublasCreate(&h)); CK(cublasSetStream(h, s));
  cublasLtHandle_t lt; CK(cublasLtCreate(&lt));
  float *A, *B, *C, *bias; void* ws; size_t wsmax = 64<<20;
  cudaMalloc(&A, 8192*3072*4); cudaMalloc(&B, 8192*3072*4); cudaMalloc(&C, 8192*3072*4); cudaMalloc(&bias, 3072*4); cudaMalloc(&ws, wsmax);
  cudaMemset(A, 0, 8192*3072*4); cudaMemset(B, 0, 8192*3072*4); cudaMemset(bias, 0, 3072*4);
  float one = 1.f, zero = 0.f;
  for (auto& sh : shapes) {
    int M = sh[0], N = sh[1], K = sh[2];
    int iters = M > 1000 ? 20 : 200;
    // row-major C[M,N] = A[M,K] B[K,N]  ==  col-major C^T[N,M] = B^T[N,K] A^T[K,M]
    float t = time_it(s, iters, [&]{ cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &one, B, N, A, K, &zero, C, N); });
    printf("shape M=%d N=%d K=%d  cublasSgemm %.1f us\n", M, N, K, t);
    for (int epi = 0; epi < 2; epi++) for (size_t wsb : {(size_t)4<<20, (size_t)32<<20}) {
      cublasLtMatmulDesc_t d; CK(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
      cublasOperation_t op = CUBLAS_OP_N;
      CK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &op, sizeof(op)));
      CK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &op, sizeof(op)));
      if (epi) {
        cublasLtEpilogue_t e = CUBLASLT_EPILOGUE_BIAS;
        CK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof(e)));
        CK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
      }
      cublasLtMatrixLayout_t la, lb, lc;
      CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, N, K, N));
      CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, K, M, K));
      CK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, N, M, N));
      cublasLtMatmulPreference_t p; CK(cublasLtMatmulPreferenceCreate(&p));
      uint64_t w = wsb; CK(cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &w, sizeof(w)));
      cublasLtMatmulHeuristicResult_t r[32]; int n = 0;
      CK(cublasLtMatmulAlgoGetHeuristic(lt, d, la, lb, lc, lc, p, 32, r, &n));
      printf("  Lt bias=%d ws=%zuMiB: %d candidates:", epi, wsb>>20, n);
      float best = 1e9; int bi = -1;
      for (int i = 0; i < n; i++) {
        float tt = time_it(s, iters, [&]{ cublasLtMatmul(lt, d, &one, B, la, A, lb, &zero, C, lc, C, lc, &r[i].algo, ws, wsb, s); });
        int id=0, tile=0, sk=0, red=0, stages=0; size_t sz;
        cublasLtMatmulAlgoConfigGetAttribute(&r[i].algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof(id), &sz);
        cublasLtMatmulAlgoConfigGetAttribute(&r[i].algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile), &sz);
        cublasLtMatmulAlgoConfigGetAttribute(&r[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &sk, sizeof(sk), &sz);
        cublasLtMatmulAlgoConfigGetAttribute(&r[i].algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red, sizeof(red), &sz);
        cublasLtMatmulAlgoConfigGetAttribute(&r[i].algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof(stages), &sz);
        printf(" [%d %.1fus id%d t%d sk%d r%d st%d ws%zu]", i, tt, id, tile, sk, red, stages, r[i].workspaceSize);
        if (tt < best) { best = tt; bi = i; }
      }
      printf("\n    first %s best #%d %.1f us\n", n ? "" : "-", bi, best);
      cublasLtMatmulPreferenceDestroy(p); cublasLtMatrixLayoutDestroy(la); cublasLtMatrixLayoutDestroy(lb); cublasLtMatrixLayoutDestroy(lc); cublasLtMatmulDescDestroy(d);
    }
  }
  // attention batched at BERT-base b1 and b64: scores [S,64]x[64,S] per head, context [S,S]x[S,64]
  for (int b : {12, 768}) {
    int S = 128, D = 64;
    int iters = b > 100 ? 20 : 200;
    float t1 = time_it(s, iters, [&]{ cublasSgemmStridedBatched(h, CUBLAS_OP_T, CUBLAS_OP_N, S, S, D, &one, A, D, S*D, A, D, S*D, &zero, C, S, S*S, b); });
    float t2 = time_it(s, iters, [&]{ cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, D, S, S, &one, A, D, S*D, B, S, S*S, &zero, C, D, S*D, b); });
    printf("batched heads=%d  QK^T %.1f us  PV %.1f us (cublas)\n", b, t1, t2);
  }
  return 0;
}
