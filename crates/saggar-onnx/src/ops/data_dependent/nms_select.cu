// NonMaxSuppression's selection, a block per (batch, class) writing into its own `k` rows of
// `[batch, class, box]`, in the ONNX reference's order: candidates by descending score (equal scores
// by lower index, NaN scores last; with a score threshold only scores above it), each kept unless its
// IoU with a kept box is above the threshold, until `min(max_output_boxes_per_class, k)` are kept or
// no candidate is left. Rows past the kept ones are -1, for the packing launch. The IoU is computed
// in f32 in the reference's order (candidate first), products rounded on their own (no fused
// multiply-add), as on the host. An input the node lacks (a flag 0) is not read: 0 boxes, IoU
// threshold 0, no score threshold. Two ways:
// - `k` equal to the box count (no constant cap below it, as exporters write): the candidates'
//   64-bit keys (the score's order key above the complement of the index) are packed by chunked
//   prefix sums into the last third of the class's rows, sorted there (`onnx_block_sort`), and
//   taken a tile of @BLOCK@ at a time: each
//   candidate is checked against the boxes kept so far (their corners staged in shared memory) and
//   against the tile's earlier candidates (a bit mask), then one thread walks the tile in order. A
//   kept row never overwrites a key not yet read: rows end at 3 x (candidates read), keys start at
//   2 x k.
// - otherwise each round the block finds the next candidate after the previous round's, O(boxes) a
//   round.
// meta: batches, classes, boxes, k, center_point_box, has_max, has_iou, has_score
(const onnx_i64* meta, const float* __restrict__ boxes, const float* __restrict__ scores, const long long* __restrict__ max_out, const float* __restrict__ iou_p, const float* __restrict__ score_p, long long* __restrict__ rows) {
  __shared__ float sv[@BLOCK@];
  __shared__ onnx_i64 si[@BLOCK@];
  __shared__ int hit;
  __shared__ float tile_c[@BLOCK@][4], kept_c[@BLOCK@][4];
  __shared__ int tile_i[@BLOCK@], tile_dead[@BLOCK@];
  __shared__ unsigned int tile_mask[@BLOCK@][@BLOCK@ / 32];
  __shared__ onnx_i64 shared_count, shared_taken;
  __shared__ int scan[@BLOCK@];
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
  auto before = [](float a, onnx_i64 ia, float b, onnx_i64 ib) {
    const bool an = a != a, bn = b != b;
    if (an && bn) return ia < ib;
    if (an) return false;
    if (bn) return true;
    return a > b || (a == b && ia < ib);
  };
  // x_min, x_max, y_min, y_max of a box.
  auto corners = [&](const float* b, float* c) {
    if (center) {
      const float w = mul(b[2], 0.5f), h = mul(b[3], 0.5f);
      c[0] = b[0] - w; c[1] = b[0] + w; c[2] = b[1] - h; c[3] = b[1] + h;
    } else {
      if (b[1] >= b[3]) { c[0] = b[3]; c[1] = b[1]; } else { c[0] = b[1]; c[1] = b[3]; }
      if (b[0] >= b[2]) { c[2] = b[2]; c[3] = b[0]; } else { c[2] = b[0]; c[3] = b[2]; }
    }
  };
  // Whether the candidate of corners `a` is suppressed by the kept box of corners `b`.
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
  auto suppressed = [&](const float* cand, const float* kept) -> bool {
    float a[4], b[4];
    corners(cand, a);
    corners(kept, b);
    return suppressed_c(a, b);
  };
  ONNX_ROWS(bc, meta[0] * classes) {
    const onnx_i64 batch = bc / classes, cls = bc % classes;
    const float* s = scores + bc * n;
    const float* bx = boxes + batch * n * 4;
    long long* out = rows + bc * k * 3;
    onnx_i64 taken = 0, last_i = -1;
    float last_v = 0.0f;
    if (k == n) {
      unsigned long long* keys = (unsigned long long*)out + 2 * n;
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
      onnx_block_sort(m, [&](onnx_i64 a, onnx_i64 b) {
        if (keys[b] > keys[a]) { const unsigned long long t = keys[a]; keys[a] = keys[b]; keys[b] = t; }
      });
      for (onnx_i64 tile = 0; tile < m && taken < cap; tile += blockDim.x) {
        const int t = threadIdx.x;
        const bool valid = tile + t < m;
        if (valid) {
          tile_i[t] = (int)(0xffffffffu - (unsigned int)(keys[tile + t] & 0xffffffffu));
          corners(bx + (onnx_i64)tile_i[t] * 4, tile_c[t]);
        }
        bool dead = !valid;
        __syncthreads();
        for (onnx_i64 c = 0; c < taken; c += blockDim.x) {
          if (c + t < taken) corners(bx + out[(c + t) * 3 + 2] * 4, kept_c[t]);
          __syncthreads();
          const onnx_i64 here = taken - c < (onnx_i64)blockDim.x ? taken - c : (onnx_i64)blockDim.x;
          for (onnx_i64 u = 0; u < here && !dead; ++u) dead = suppressed_c(tile_c[t], kept_c[u]);
          __syncthreads();
        }
        for (int w = 0; w < @BLOCK@ / 32; ++w) {
          unsigned int bits = 0;
          for (int b = 0; b < 32 && !dead; ++b) {
            const int u = w * 32 + b;
            if (u < t && suppressed_c(tile_c[t], tile_c[u])) bits |= 1u << b;
          }
          tile_mask[t][w] = bits;
        }
        tile_dead[t] = dead;
        __syncthreads();
        if (threadIdx.x == 0) {
          unsigned int keep[@BLOCK@ / 32] = {0};
          for (int u = 0; u < (int)blockDim.x && tile + u < m && taken < cap; ++u) {
            if (tile_dead[u]) continue;
            bool hit_kept = false;
            for (int w = 0; w <= u / 32 && !hit_kept; ++w) hit_kept = (tile_mask[u][w] & keep[w]) != 0;
            if (hit_kept) continue;
            keep[u / 32] |= 1u << (u % 32);
            out[taken * 3] = batch; out[taken * 3 + 1] = cls; out[taken * 3 + 2] = tile_i[u];
            ++taken;
          }
          shared_taken = taken;
        }
        __syncthreads();
        taken = shared_taken;
      }
    }
    while (k != n && taken < cap) {
      float bv = 0.0f;
      onnx_i64 bi = -1;
      for (onnx_i64 j = threadIdx.x; j < n; j += blockDim.x) {
        const float v = s[j];
        if (has_score && !(v > thr)) continue;
        if ((last_i < 0 || before(last_v, last_i, v, j)) && (bi < 0 || before(v, j, bv, bi))) { bv = v; bi = j; }
      }
      sv[threadIdx.x] = bv; si[threadIdx.x] = bi;
      __syncthreads();
      for (unsigned st = blockDim.x / 2; st > 0; st >>= 1) {
        if (threadIdx.x < st) {
          const onnx_i64 oi = si[threadIdx.x + st], mi = si[threadIdx.x];
          if (oi >= 0 && (mi < 0 || before(sv[threadIdx.x + st], oi, sv[threadIdx.x], mi))) { sv[threadIdx.x] = sv[threadIdx.x + st]; si[threadIdx.x] = oi; }
        }
        __syncthreads();
      }
      const onnx_i64 cand = si[0];
      last_v = sv[0];
      last_i = cand;
      if (threadIdx.x == 0) hit = 0;
      __syncthreads();
      if (cand < 0) break;
      for (onnx_i64 t = threadIdx.x; t < taken; t += blockDim.x) {
        if (suppressed(bx + cand * 4, bx + out[t * 3 + 2] * 4)) hit = 1;
      }
      __syncthreads();
      if (hit == 0) {
        if (threadIdx.x == 0) { out[taken * 3] = batch; out[taken * 3 + 1] = cls; out[taken * 3 + 2] = cand; }
        ++taken;
      }
      __syncthreads();
    }
    for (onnx_i64 e = taken * 3 + threadIdx.x; e < k * 3; e += blockDim.x) out[e] = -1;
    __syncthreads();
  }
}
