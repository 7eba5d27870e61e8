// RNN's step for each unit: `H = f(X W^T + H R^T + Wb + Rb)`; @BIAS@ adds the biases to `a`, @F@ is f
// of `a`. Lane 0 of the unit's group stores it.
      for (onnx_i64 j0 = 0; j0 < nh; j0 += groups) {
        const onnx_i64 j = j0 + group < nh ? j0 + group : nh - 1;
        const bool live = j0 + group < nh;
        const float* const wj = wd + j * ni;
        const float* const rj = rd + j * nh;
        float a = 0.0f;
        for (onnx_i64 k = lane; k < ni; k += ONNX_ROW_LANES) a += xv[k] * wj[k];
        for (onnx_i64 k = lane; k < nh; k += ONNX_ROW_LANES) a += h[k] * rj[k];
        a = onnx_lanes_fold<false>(a);@BIAS@
        const float hv = @F@;
        if (live && lane == 0) {
          hn[j] = hv;
          yr[j] = hv;
        }
      }
      __syncthreads();
