// RNN's step for each unit: `H = f(X W^T + H R^T + Wb + Rb)`; @BIAS@ adds the biases to `a`, @F@ is f
// of `a`.
      for (onnx_i64 j = threadIdx.x; j < nh; j += blockDim.x) {
        const float* const wj = wd + j * ni;
        const float* const rj = rd + j * nh;
        float a = 0.0f;
        for (onnx_i64 k = 0; k < ni; ++k) a += xv[k] * wj[k];
        for (onnx_i64 k = 0; k < nh; ++k) a += h[k] * rj[k];@BIAS@
        const float hv = @F@;
        hn[j] = hv;
        yr[j] = hv;
      }
      __syncthreads();
