// NonMaxSuppression's selection through an IoU bit matrix, for `k` equal to the box count (no
// constant cap below it, as exporters write) where the matrix fits its working memory, in the same
// order as `nms_select.cu`, with `nms_common.cu`'s boxes, IoU test and sort. Three launches over
// `work` (int64s: each (batch, class)'s candidate count, then each one's `boxes` sorted keys, then
// each one's matrix):
// - phase 0, a block per (batch, class): its candidates' keys sorted, and their number;
// - phase 1, a block per (batch, class), row word `r` and four column words: for candidate `i` of
//   rows `64 r ..`, bit `b` of word `w` says whether candidate `64 w + b`, later than `i`, is
//   suppressed by it. Row word `r` keeps only the words from `r` on (`words - r` a row): nothing left
//   of the diagonal is stored;
// - phase 2, a block per (batch, class): the candidates walked a word of 64 at a time: one thread
//   keeps each not yet suppressed (the diagonal word suppressing the word's later ones), up to
//   `min(max_output_boxes_per_class, k)`; then the threads OR the kept rows' later words into the
//   suppressed set, in shared memory. Rows past the kept ones are -1, for the packing launch.
// meta: batches, classes, boxes, k, center_point_box, has_max, has_iou, has_score, words
(const onnx_i64* meta, const float* __restrict__ boxes, const float* __restrict__ scores, const long long* __restrict__ max_out, const float* __restrict__ iou_p, const float* __restrict__ score_p, long long* __restrict__ rows, long long* __restrict__ work) {
  @NMS_COMMON@
  const onnx_i64 pairs = meta[0] * classes, words = meta[8];
  // Where candidate `i`'s word `w` (w >= i / 64) of a (batch, class)'s matrix is.
  auto at = [&](onnx_i64 i, onnx_i64 w) {
    const onnx_i64 r = i / 64;
    return 64 * (r * words - r * (r - 1) / 2) + (i % 64) * (words - r) + (w - r);
  };
  auto keys_of = [&](onnx_i64 bc) { return (unsigned long long*)work + pairs + bc * n; };
  auto matrix_of = [&](onnx_i64 bc) {
    return (unsigned long long*)work + pairs + pairs * n + bc * 64 * (words * (words + 1) / 2);
  };
  if (@PHASE@ == 0) {
    ONNX_ROWS(bc, pairs) {
      const onnx_i64 m = sort_candidates(scores + bc * n, keys_of(bc));
      if (threadIdx.x == 0) work[bc] = m;
    }
    return;
  }
  if (@PHASE@ == 1) {
    __shared__ float row_c[64][4], col_c[256][4];
    const onnx_i64 groups = (words + 3) / 4;
    ONNX_ROWS(block, pairs * words * groups) {
      const onnx_i64 bc = block / (words * groups), r = block / groups % words, w0 = block % groups * 4;
      const onnx_i64 m = work[bc];
      // Uniform over the block: rows past the candidates, or column words all left of the diagonal.
      if (64 * r >= m || 64 * w0 >= m || w0 + 3 < r) continue;
      const unsigned long long* keys = keys_of(bc);
      const float* bx = boxes + bc / classes * n * 4;
      const int t = threadIdx.x;
      for (int c = t; c < 256; c += blockDim.x) {
        if (64 * w0 + c < m) corners(bx + key_box(keys[64 * w0 + c]) * 4, col_c[c]);
      }
      if (t < 64 && 64 * r + t < m) corners(bx + key_box(keys[64 * r + t]) * 4, row_c[t]);
      __syncthreads();
      for (int e = t; e < 256; e += blockDim.x) {
        const onnx_i64 i = 64 * r + e % 64, w = w0 + e / 64;
        if (i >= m || w < r || w >= words) continue;
        unsigned long long bits = 0;
        for (int b = 0; b < 64; ++b) {
          const onnx_i64 j = 64 * w + b;
          if (j > i && j < m && suppressed_c(col_c[e / 64 * 64 + b], row_c[e % 64])) bits |= 1ull << b;
        }
        matrix_of(bc)[at(i, w)] = bits;
      }
      __syncthreads();
    }
    return;
  }
  __shared__ unsigned long long gone[@MAX_WORDS@], diagonal[64];
  __shared__ onnx_i64 box_of[64];
  __shared__ int kept[64], kept_n;
  ONNX_ROWS(bc, pairs) {
    const onnx_i64 m = work[bc], used = (m + 63) / 64;
    const unsigned long long* keys = keys_of(bc);
    const unsigned long long* matrix = matrix_of(bc);
    long long* out = rows + bc * k * 3;
    for (onnx_i64 w = threadIdx.x; w < used; w += blockDim.x) gone[w] = 0;
    onnx_i64 taken = 0;
    __syncthreads();
    for (onnx_i64 w = 0; w < used && taken < cap; ++w) {
      const int t = threadIdx.x;
      if (t < 64) {
        const bool live = 64 * w + t < m;
        diagonal[t] = live ? matrix[at(64 * w + t, w)] : 0;
        box_of[t] = live ? key_box(keys[64 * w + t]) : 0;
      }
      __syncthreads();
      // One thread decides the word from shared memory alone; the rows are written by all.
      if (t == 0) {
        unsigned long long cur = gone[w];
        int nk = 0;
        for (int b = 0; b < 64 && 64 * w + b < m && taken + nk < cap; ++b) {
          if ((cur >> b) & 1) continue;
          cur |= diagonal[b];
          kept[nk++] = b;
        }
        kept_n = nk;
      }
      __syncthreads();
      const int nk = kept_n;
      if (t < nk) {
        out[(taken + t) * 3] = bc / classes; out[(taken + t) * 3 + 1] = bc % classes;
        out[(taken + t) * 3 + 2] = box_of[kept[t]];
      }
      taken += nk;
      for (onnx_i64 v = w + 1 + t; v < used; v += blockDim.x) {
        unsigned long long g = gone[v];
        for (int e = 0; e < nk; ++e) g |= matrix[at(64 * w + kept[e], v)];
        gone[v] = g;
      }
      __syncthreads();
    }
    for (onnx_i64 e = taken * 3 + threadIdx.x; e < k * 3; e += blockDim.x) out[e] = -1;
    __syncthreads();
  }
}
