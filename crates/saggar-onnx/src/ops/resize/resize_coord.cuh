// A fragment of both resize kernels: the source coordinate `xo` of output coordinate `xr` along
// the axis whose `meta` record `m` is, for coordinate_transformation_mode `coord`; also `scale` and
// `inm1` (input extent - 1). `AxisPlan::source` (geometry.rs) computes the same, in the same order.
        const float scale = __int_as_float((int)m[4]), out_w = __int_as_float((int)m[5]);
        const float p = __int_as_float((int)m[6]), q = __int_as_float((int)m[7]), c = __int_as_float((int)m[8]);
        const float inm1 = (float)(m[1] - 1);
        float xo;
        switch (coord) {
          case 1: xo = p + (xr + 0.5f) / scale - 0.5f; break;                          // half_pixel_symmetric
          case 2: xo = out_w > 1.0f ? (xr + 0.5f) / scale - 0.5f : 0.0f; break;        // pytorch_half_pixel
          case 3: xo = out_w == 1.0f ? 0.0f : xr * inm1 / (out_w - 1.0f); break;       // align_corners
          case 4: xo = xr / scale; break;                                              // asymmetric
          case 5: xo = (xr + 0.5f) / scale; break;                                     // tf_half_pixel_for_nn
          case 6: xo = out_w == 1.0f ? c : xr * p * inm1 / (out_w - 1.0f) + q; break;  // tf_crop_and_resize
          default: xo = (xr + 0.5f) / scale - 0.5f;                                    // half_pixel
        }
        const bool away = coord == 6 && !(xo >= 0.0f && xo <= inm1);
