// Det: the determinant of each `n x n` matrix (n <= @MAX@), one block per matrix, by LU
// factorisation with partial pivoting in shared memory: each column's pivot is the first row of the
// largest magnitude at or below the diagonal, a zero pivot gives 0.
// meta: batch, n
(const onnx_i64* meta, const float* __restrict__ x, float* __restrict__ y) {
  __shared__ float a[@MAX@ * @MAX@];
  __shared__ float best_v[@BLOCK@];
  __shared__ int best_r[@BLOCK@];
  const int n = (int)meta[1];
  const int t = (int)threadIdx.x, threads = (int)blockDim.x;
  ONNX_ROWS(m, meta[0]) {
    const float* src = x + m * n * n;
    for (int i = t; i < n * n; i += threads) a[i] = src[i];
    __syncthreads();
    float det = 1.0f;
    for (int c = 0; c < n; ++c) {
      float bv = 0.0f;
      int br = -1;
      for (int r = c + t; r < n; r += threads) { const float v = fabsf(a[r * n + c]); if (br < 0 || v > bv) { bv = v; br = r; } }
      best_v[t] = bv; best_r[t] = br;
      __syncthreads();
      for (int s = threads / 2; s > 0; s >>= 1) {
        if (t < s) {
          const int o = best_r[t + s], mine = best_r[t];
          const float ov = best_v[t + s], mv = best_v[t];
          if (o >= 0 && (mine < 0 || ov > mv || (ov == mv && o < mine))) { best_v[t] = ov; best_r[t] = o; }
        }
        __syncthreads();
      }
      const int p = best_r[0];
      const float pv = best_v[0];
      __syncthreads();
      if (pv == 0.0f) { det = 0.0f; break; }
      if (p != c) {
        for (int j = t; j < n; j += threads) { const float v = a[p * n + j]; a[p * n + j] = a[c * n + j]; a[c * n + j] = v; }
        det = -det;
      }
      __syncthreads();
      const float piv = a[c * n + c];
      det *= piv;
      const int w = n - c - 1;
      for (int e = t; e < w * w; e += threads) {
        const int r = c + 1 + e / w, j = c + 1 + e % w;
        a[r * n + j] -= (a[r * n + c] / piv) * a[c * n + j];
      }
      __syncthreads();
    }
    if (t == 0) y[m] = det;
    __syncthreads();
  }
}
