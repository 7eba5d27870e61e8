// Resize in nearest mode, one thread per output element, moving elements as bits: along each
// resized axis the source coordinate (`resize_coord.cuh`) is rounded by `pick` (0 round_prefer_floor,
// 1 round_prefer_ceil, 2 floor, 3 ceil, 4 floor when upsampling and ceil when downsampling) and
// clamped to the axis; tf_crop_and_resize writes `fill` where a source coordinate is outside.
// meta: rank, n, k (resized axes), coord, pick, flags, fill (the element's bits), 6 cubic constants,
// out_dims[rank], in_strides[rank], then per resized axis in ascending order a record of 10:
// axis, in, taps, t0, and as f32 bits scale, out_w, p, q, c, stretch (geometry.rs `AxisPlan`).
(const onnx_i64* meta, const @T@* __restrict__ x, @T@* __restrict__ y) {
  const int rank = (int)meta[0], k = (int)meta[2], coord = (int)meta[3], pick = (int)meta[4];
  const onnx_i64* od = meta + @HEADER@;
  const onnx_i64* is = od + rank;
  const onnx_i64* ax = is + rank;
  ONNX_LOOP(i, meta[1]) {
    onnx_i64 rem = i, off = 0;
    int a = k - 1;
    bool outside = false;
    for (int d = rank - 1; d >= 0; --d) {
      const onnx_i64 o = rem % od[d];
      rem /= od[d];
      onnx_i64 j = o;
      if (a >= 0 && ax[a * @RECORD@] == d) {
        const onnx_i64* m = ax + a * @RECORD@;
        --a;
        const float xr = (float)o;
@COORD@
        outside = outside || away;
        if (outside) {
          j = 0;
        } else {
          const float fl = floorf(xo);
          float v;
          switch (pick) {
            case 0: v = xo - fl <= 0.5f ? fl : fl + 1.0f; break;
            case 1: v = xo - fl < 0.5f ? fl : fl + 1.0f; break;
            case 2: v = fl; break;
            case 3: v = ceilf(xo); break;
            default: v = scale < 1.0f ? ceilf(xo) : fl;
          }
          j = (onnx_i64)v;
          j = j < 0 ? 0 : (j >= m[1] ? m[1] - 1 : j);
        }
      }
      off += j * is[d];
    }
    y[i] = outside ? (@T@)meta[6] : x[off];
  }
}
