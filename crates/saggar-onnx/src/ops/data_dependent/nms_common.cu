// The part of NonMaxSuppression's kernels both ways of selecting share, pasted at the start of each
// kernel's body: the block's shared state for prefix sums and sorting, the scalar inputs (an input the
// node lacks, a flag 0, is not read: 0 boxes, IoU threshold 0, no score threshold), and
// - `corners(b, c)`: a box's x_min, x_max, y_min, y_max;
// - `suppressed_c(a, b)`: whether the candidate of corners `a` overlaps the kept box of corners `b`
//   above the threshold, computed in f32 in the reference's order (candidate first), products rounded
//   on their own (no fused multiply-add), as on the host;
// - `sort_candidates(s, keys)`: the candidates of the scores `s` (every box, or those scored above the
//   threshold) as 64-bit keys (the score's order key above the complement of the box index, so that
//   descending keys are descending scores, equal scores by lower index, NaN last), packed into `keys`
//   by chunked prefix sums and sorted descending; returns their number.
// meta: batches, classes, boxes, k, center_point_box, has_max, has_iou, has_score
  __shared__ int scan[@BLOCK@];
  __shared__ onnx_i64 shared_count;
  __shared__ unsigned long long stage[@STAGE@];
  @BLOCK_SCAN@
  const onnx_i64 classes = meta[1], n = meta[2], k = meta[3];
  const bool center = meta[4] != 0, has_score = meta[7] != 0;
  onnx_i64 cap = meta[5] ? (onnx_i64)max_out[0] : 0;
  if (cap < 0) cap = 0;
  if (cap > k) cap = k;
  const float iou = meta[6] ? iou_p[0] : 0.0f, thr = has_score ? score_p[0] : 0.0f;
#if defined(__CUDACC__) || defined(__HIPCC_RTC__) || defined(__HIP_PLATFORM_AMD__)
  auto mul = [](float a, float b) { return __fmul_rn(a, b); };
#else
  auto mul = [](float a, float b) { return a * b; };
#endif
  auto corners = [&](const float* b, float* c) {
    if (center) {
      const float w = mul(b[2], 0.5f), h = mul(b[3], 0.5f);
      c[0] = b[0] - w; c[1] = b[0] + w; c[2] = b[1] - h; c[3] = b[1] + h;
    } else {
      if (b[1] >= b[3]) { c[0] = b[3]; c[1] = b[1]; } else { c[0] = b[1]; c[1] = b[3]; }
      if (b[0] >= b[2]) { c[2] = b[2]; c[3] = b[0]; } else { c[2] = b[0]; c[3] = b[2]; }
    }
  };
  auto suppressed_c = [&](const float* a, const float* b) -> bool {
    const float ix0 = b[0] > a[0] ? b[0] : a[0], ix1 = b[1] < a[1] ? b[1] : a[1];
    const float iy0 = b[2] > a[2] ? b[2] : a[2], iy1 = b[3] < a[3] ? b[3] : a[3];
    if (ix1 <= ix0 || iy1 <= iy0) return false;
    const float inter = mul(ix1 - ix0, iy1 - iy0);
    if (inter <= 0.0f) return false;
    const float area_a = mul(a[1] - a[0], a[3] - a[2]), area_b = mul(b[1] - b[0], b[3] - b[2]);
    const float uni = (area_a + area_b) - inter;
    if (area_a <= 0.0f || area_b <= 0.0f || uni <= 0.0f) return false;
    return inter / uni > iou;
  };
  auto sort_candidates = [&](const float* s, unsigned long long* keys) -> onnx_i64 {
    if (threadIdx.x == 0) shared_count = 0;
    __syncthreads();
    for (onnx_i64 start = 0; start < n; start += blockDim.x) {
      const onnx_i64 j = start + threadIdx.x;
      const float v = j < n ? s[j] : 0.0f;
      const int flag = j < n && (!has_score || v > thr);
      const int incl = block_scan(flag);
      const onnx_i64 c0 = shared_count;
      if (flag) {
        const unsigned int u = (unsigned int)__float_as_int(v), mag = u & 0x7fffffffu;
        const unsigned int key = mag > 0x7f800000u ? 0u : mag == 0 ? 0x80000000u : (u & 0x80000000u) ? ~u : (u | 0x80000000u);
        keys[c0 + incl - 1] = ((unsigned long long)key << 32) | (0xffffffffu - (unsigned int)j);
      }
      __syncthreads();
      if (threadIdx.x == blockDim.x - 1) shared_count = c0 + incl;
      __syncthreads();
    }
    const onnx_i64 m = shared_count;
    onnx_block_sort_staged(keys, m, stage, @STAGE@, [](unsigned long long a, unsigned long long b) { return b > a; });
    __syncthreads();
    return m;
  };
  // The box index of a key.
  auto key_box = [](unsigned long long key) { return (onnx_i64)(0xffffffffu - (unsigned int)(key & 0xffffffffu)); };
