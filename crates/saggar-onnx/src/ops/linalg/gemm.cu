// `C[b] = alpha op(A[b]) op(B[b]) + beta bias`, accumulated in f32 (A and B of type @IN@, C and the
// bias of type @OUT@), tiled in shared memory (@TILE@ x @TILE@ threads).
// meta: M, N, K, brank, a_rs, a_cs, b_rs, b_cs, bias_rs, bias_cs, bdims[brank], a_bstride[brank],
// b_bstride[brank]
(const onnx_i64* meta, const @IN@* __restrict__ A, const @IN@* __restrict__ B@BIAS_PARAM@, @OUT@* __restrict__ Y) {
  __shared__ float ta[@TILE@][@TILE@ + 1];
  __shared__ float tb[@TILE@][@TILE@ + 1];
  const onnx_i64 M = meta[0], N = meta[1], K = meta[2];
  const int br = (int)meta[3];
  const onnx_i64 a_rs = meta[4], a_cs = meta[5], b_rs = meta[6], b_cs = meta[7], c_rs = meta[8], c_cs = meta[9];
  const onnx_i64* bdims = meta + 10; const onnx_i64* abs_ = bdims + br; const onnx_i64* bbs = abs_ + br;
  (void)c_rs; (void)c_cs;
  onnx_i64 nb = 1;
  for (int d = 0; d < br; ++d) nb *= bdims[d];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const onnx_i64 col = (onnx_i64)blockIdx.x * @TILE@ + tx;
  for (onnx_i64 bz = blockIdx.z; bz < nb; bz += gridDim.z) {
    onnx_i64 ao = 0, bo = 0, rem = bz;
    for (int d = br - 1; d >= 0; --d) { const onnx_i64 c = rem % bdims[d]; rem /= bdims[d]; ao += c * abs_[d]; bo += c * bbs[d]; }
    for (onnx_i64 r0 = (onnx_i64)blockIdx.y * @TILE@; r0 < M; r0 += (onnx_i64)gridDim.y * @TILE@) {
      const onnx_i64 row = r0 + ty;
      float acc = 0.0f;
      for (onnx_i64 k0 = 0; k0 < K; k0 += @TILE@) {
        const onnx_i64 ka = k0 + tx, kb = k0 + ty;
        ta[ty][tx] = (row < M && ka < K) ? @LOAD_A@ : 0.0f;
        tb[ty][tx] = (kb < K && col < N) ? @LOAD_B@ : 0.0f;
        __syncthreads();
        for (int kk = 0; kk < @TILE@; ++kk) acc += ta[ty][kk] * tb[kk][tx];
        __syncthreads();
      }
      if (row < M && col < N) Y[(bz * M + row) * N + col] = @RESULT@;
    }
  }
}
