// MaxRoiPool, one thread per output element `(region, channel, ph, pw)`: the region
// `(batch, x1, y1, x2, y2)` scaled and rounded (half away from zero) to cells, split into bins of
// `max(end - start + 1, 1) / pooled` cells (floor of the start, ceiling of the end, clamped to the
// input); an empty bin is 0, else the largest cell. A batch index out of range or a non-finite
// region writes 0 (the host refuses them). roi/mod.rs computes the same.
// meta: n (elements), N, C, H, W, R, pooled_h, pooled_w, spatial_scale (f32 bits)
(const onnx_i64* meta, const float* __restrict__ x, const float* __restrict__ rois, float* __restrict__ y) {
  const onnx_i64 N = meta[1], C = meta[2], H = meta[3], W = meta[4], PH = meta[6], PW = meta[7];
  const float scale = __int_as_float((int)meta[8]);
  ONNX_LOOP(i, meta[0]) {
    const onnx_i64 pw = i % PW, ph = (i / PW) % PH, ch = (i / PW / PH) % C, r = i / PW / PH / C;
    const float* roi = rois + r * 5;
    bool finite = true;
    for (int k = 0; k < 5; ++k) finite = finite && roi[k] - roi[k] == 0.0f;
    const float bf = finite ? truncf(roi[0]) : -1.0f;
    if (!(bf >= 0.0f && bf < (float)N)) { y[i] = 0.0f; continue; }
    const onnx_i64 b = (onnx_i64)bf;
    auto cell = [&](float v) -> onnx_i64 { return (onnx_i64)fminf(fmaxf(roundf(v * scale), -@LIMIT@), @LIMIT@); };
    // The cells [start, end) of bin p along an axis of `len` for a region from lo to hi.
    auto cells = [](onnx_i64 p, onnx_i64 bins, onnx_i64 lo, onnx_i64 hi, onnx_i64 len, onnx_i64* s, onnx_i64* e) {
      const float size = (float)(hi - lo + 1 > 1 ? hi - lo + 1 : 1) / (float)bins;
      onnx_i64 a = (onnx_i64)floorf((float)p * size) + lo, z = (onnx_i64)ceilf((float)(p + 1) * size) + lo;
      *s = a < 0 ? 0 : (a > len ? len : a);
      *e = z < 0 ? 0 : (z > len ? len : z);
    };
    onnx_i64 h0, h1, w0, w1;
    cells(ph, PH, cell(roi[2]), cell(roi[4]), H, &h0, &h1);
    cells(pw, PW, cell(roi[1]), cell(roi[3]), W, &w0, &w1);
    const float* xp = x + (b * C + ch) * H * W;
    float m = (h1 <= h0 || w1 <= w0) ? 0.0f : -3.402823466e38f;
    for (onnx_i64 hh = h0; hh < h1; ++hh)
      for (onnx_i64 ww = w0; ww < w1; ++ww) {
        const float e = xp[hh * W + ww];
        if (e > m) m = e;
      }
    y[i] = m;
  }
}
