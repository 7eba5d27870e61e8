// GRU's step: first each unit's update gate z (kept in `hn`) and reset gate r, `s3` taking @RESET@
// (r, or r * h without linear_before_reset); then each unit's hidden gate, @HIDDEN@ adding its
// recurrence and biases to `ah`, and the new state. @BIAS_ZR@ adds z's and r's biases; @F_Z@, @F_R@
// and @G_H@ are the clipped activations.
      for (onnx_i64 j = threadIdx.x; j < nh; j += blockDim.x) {
        const float* const wj = wd + j * ni;
        const float* const rj = rd + j * nh;
        float az = 0.0f, ar = 0.0f;
        for (onnx_i64 k = 0; k < ni; ++k) {
          const float v = xv[k];
          az += v * wj[k];
          ar += v * wj[nh * ni + k];
        }
        for (onnx_i64 k = 0; k < nh; ++k) {
          const float v = h[k];
          az += v * rj[k];
          ar += v * rj[nh * nh + k];
        }@BIAS_ZR@
        const float z = @F_Z@;
        const float rg = @F_R@;
        hn[j] = z;
        s3[j] = @RESET@;
      }
      __syncthreads();
      for (onnx_i64 j = threadIdx.x; j < nh; j += blockDim.x) {
        const float* const wj = wd + (2 * nh + j) * ni;
        const float* const rj = rd + (2 * nh + j) * nh;
        float ah = 0.0f;
        for (onnx_i64 k = 0; k < ni; ++k) ah += xv[k] * wj[k];@HIDDEN@
        const float hc = @G_H@;
        const float z = hn[j];
        const float hv = (1.0f - z) * hc + z * h[j];
        hn[j] = hv;
        yr[j] = hv;
      }
      __syncthreads();
