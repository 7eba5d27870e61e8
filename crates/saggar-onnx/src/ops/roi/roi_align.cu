// RoiAlign, one thread per output element `(region, channel, ph, pw)`: the bin's grid of samples
// (`sampling_ratio`, or adaptive: `ceil(extent / bins)`, clamped to 0..=@MAX_GRID@), each the
// bilinear interpolation of its four cells as the reference computes it (a sample outside
// `[-1, H] x [-1, W]` is 0), averaged (`is_max` 0) or the largest weighted cell of each sample, the
// largest over the samples (1). A batch index out of range or a non-finite region writes 0 (the
// host refuses them). roi/mod.rs computes the same in the same order.
// meta: n (elements), N, C, H, W, R, out_h, out_w, sampling_ratio, spatial_scale (f32 bits),
// half_pixel, is_max
(const onnx_i64* meta, const float* __restrict__ x, const float* __restrict__ rois, const @IX@* __restrict__ bidx, float* __restrict__ y) {
  const onnx_i64 N = meta[1], C = meta[2], H = meta[3], W = meta[4], oh = meta[6], ow = meta[7], ratio = meta[8];
  const float scale = __int_as_float((int)meta[9]), off = meta[10] != 0 ? 0.5f : 0.0f;
  const bool half = meta[10] != 0, is_max = meta[11] != 0;
  ONNX_LOOP(i, meta[0]) {
    const onnx_i64 pw = i % ow, ph = (i / ow) % oh, ch = (i / ow / oh) % C, r = i / ow / oh / C;
    const onnx_i64 b = (onnx_i64)bidx[r];
    const float* roi = rois + r * 4;
    bool finite = true;
    for (int k = 0; k < 4; ++k) finite = finite && roi[k] - roi[k] == 0.0f;
    if (b < 0 || b >= N || !finite) { y[i] = 0.0f; continue; }
    const float sw = roi[0] * scale - off, sh = roi[1] * scale - off;
    const float ew = roi[2] * scale - off, eh = roi[3] * scale - off;
    float rh = eh - sh, rw = ew - sw;
    if (!half) { rh = fmaxf(rh, 1.0f); rw = fmaxf(rw, 1.0f); }
    const float bh = rh / (float)oh, bw = rw / (float)ow;
    const onnx_i64 gh = ratio > 0 ? ratio : (onnx_i64)fminf(fmaxf(ceilf(rh / (float)oh), 0.0f), @MAX_GRID@.0f);
    const onnx_i64 gw = ratio > 0 ? ratio : (onnx_i64)fminf(fmaxf(ceilf(rw / (float)ow), 0.0f), @MAX_GRID@.0f);
    const float* xp = x + (b * C + ch) * H * W;
    float acc = 0.0f;
    bool any = false;
    for (onnx_i64 iy = 0; iy < gh; ++iy) {
      float yy = sh + (float)ph * bh + ((float)iy + 0.5f) * bh / (float)gh;
      for (onnx_i64 ix = 0; ix < gw; ++ix) {
        float xx = sw + (float)pw * bw + ((float)ix + 0.5f) * bw / (float)gw;
        float v = 0.0f;
        if (!(yy < -1.0f || yy > (float)H || xx < -1.0f || xx > (float)W)) {
          float sy = fmaxf(yy, 0.0f), sx = fmaxf(xx, 0.0f);
          onnx_i64 yl = (onnx_i64)sy, xl = (onnx_i64)sx, yh, xh;
          if (yl >= H - 1) { yh = yl = H - 1; sy = (float)yl; } else { yh = yl + 1; }
          if (xl >= W - 1) { xh = xl = W - 1; sx = (float)xl; } else { xh = xl + 1; }
          const float ly = sy - (float)yl, lx = sx - (float)xl, hy = 1.0f - ly, hx = 1.0f - lx;
          const float a = hy * hx * xp[yl * W + xl], bb = hy * lx * xp[yl * W + xh];
          const float c = ly * hx * xp[yh * W + xl], d = ly * lx * xp[yh * W + xh];
          v = is_max ? fmaxf(fmaxf(fmaxf(a, bb), c), d) : a + bb + c + d;
        }
        acc = !any ? v : (is_max ? fmaxf(acc, v) : acc + v);
        any = true;
      }
    }
    const onnx_i64 count = gh * gw > 1 ? gh * gw : 1;
    y[i] = is_max ? acc : acc / (float)count;
  }
}
