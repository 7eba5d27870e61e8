// NonMaxSuppression's selection a block per (batch, class), writing into its own `k` rows of
// `[batch, class, box]`, in the ONNX reference's order: candidates by descending score (equal scores
// by lower index, NaN scores last; with a score threshold only scores above it), each kept unless its
// IoU with a kept box is above the threshold, until `min(max_output_boxes_per_class, k)` are kept or
// no candidate is left. Rows past the kept ones are -1, for the packing launch. The boxes, the IoU
// test and the candidates' sort are `nms_common.cu`'s. Where the IoU bit matrix of `nms_mask.cu` does
// not fit its working memory, two ways:
// - `k` equal to the box count (no constant cap below it, as exporters write): the candidates' keys
//   are sorted in the last third of the class's rows and taken a tile of @BLOCK@ at a time: each
//   candidate is checked against the boxes kept so far (their corners staged in shared memory) and
//   against the tile's earlier candidates (a bit mask), then one thread walks the tile in order. A
//   kept row never overwrites a key not yet read: rows end at 3 x (candidates read), keys start at
//   2 x k.
// - otherwise each round the block finds the next candidate after the previous round's, O(boxes) a
//   round.
(const onnx_i64* meta, const float* __restrict__ boxes, const float* __restrict__ scores, const long long* __restrict__ max_out, const float* __restrict__ iou_p, const float* __restrict__ score_p, long long* __restrict__ rows) {
  __shared__ float sv[@BLOCK@];
  __shared__ onnx_i64 si[@BLOCK@];
  __shared__ int hit;
  __shared__ float tile_c[@BLOCK@][4], kept_c[@BLOCK@][4];
  __shared__ int tile_i[@BLOCK@], tile_dead[@BLOCK@];
  __shared__ unsigned int tile_mask[@BLOCK@][@BLOCK@ / 32];
  __shared__ onnx_i64 shared_taken;
  @NMS_COMMON@
  auto before = [](float a, onnx_i64 ia, float b, onnx_i64 ib) {
    const bool an = a != a, bn = b != b;
    if (an && bn) return ia < ib;
    if (an) return false;
    if (bn) return true;
    return a > b || (a == b && ia < ib);
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
      const onnx_i64 m = sort_candidates(s, (unsigned long long*)out + 2 * n);
      const unsigned long long* keys = (const unsigned long long*)out + 2 * n;
      for (onnx_i64 tile = 0; tile < m && taken < cap; tile += blockDim.x) {
        const int t = threadIdx.x;
        const bool valid = tile + t < m;
        if (valid) {
          tile_i[t] = (int)key_box(keys[tile + t]);
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
