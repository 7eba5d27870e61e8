// GRU's step: first each unit's update gate z (kept in `hn`) and reset gate r, `s3` taking @RESET@
// (r, or r * h without linear_before_reset); then each unit's hidden gate, @HIDDEN@ adding its
// recurrence and biases to `ah` and summing the group's lanes, and the new state. A unit's z is read
// before the lanes' sum, which no lane passes before every lane has read it, and lane 0 stores after.
// @BIAS_ZR@ adds z's and r's biases; @F_Z@, @F_R@ and @G_H@ are the clipped activations. Lane 0 of
// the unit's group stores.
      for (onnx_i64 j0 = 0; j0 < nh; j0 += groups) {
        const onnx_i64 j = j0 + group < nh ? j0 + group : nh - 1;
        const bool live = j0 + group < nh;
        const float* const wj = wd + j * ni;
        const float* const rj = rd + j * nh;
        float az = 0.0f, ar = 0.0f;
        for (onnx_i64 k = lane; k < ni; k += ONNX_ROW_LANES) {
          const float v = xv[k];
          az += v * wj[k];
          ar += v * wj[nh * ni + k];
        }
        for (onnx_i64 k = lane; k < nh; k += ONNX_ROW_LANES) {
          const float v = h[k];
          az += v * rj[k];
          ar += v * rj[nh * nh + k];
        }
        az = onnx_lanes_fold<false>(az);
        ar = onnx_lanes_fold<false>(ar);@BIAS_ZR@
        const float z = @F_Z@;
        const float rg = @F_R@;
        if (live && lane == 0) {
          hn[j] = z;
          s3[j] = @RESET@;
        }
      }
      __syncthreads();
      for (onnx_i64 j0 = 0; j0 < nh; j0 += groups) {
        const onnx_i64 j = j0 + group < nh ? j0 + group : nh - 1;
        const bool live = j0 + group < nh;
        const float* const wj = wd + (2 * nh + j) * ni;
        const float* const rj = rd + (2 * nh + j) * nh;
        const float z = hn[j];
        float ah = 0.0f;
        for (onnx_i64 k = lane; k < ni; k += ONNX_ROW_LANES) ah += xv[k] * wj[k];@HIDDEN@
        const float hc = @G_H@;
        const float hv = (1.0f - z) * hc + z * h[j];
        if (live && lane == 0) {
          hn[j] = hv;
          yr[j] = hv;
        }
      }
      __syncthreads();
