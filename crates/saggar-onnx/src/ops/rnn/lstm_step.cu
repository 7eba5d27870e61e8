// LSTM's step for each unit: the pre-activations of the gates i, o, f, c (`W[iofc]`) summed
// together, @BIAS@ adding the biases, @PEEP_IF@ the peepholes of i and f (times the previous cell
// state `cp`) and @PEEP_O@ o's (times the new one `cn`); @F_I@, @F_F@ (`1 - ig` with input_forget),
// @G_C@, @F_O@ are the clipped activations, @H_C@ is h of `cn`.
      for (onnx_i64 j = threadIdx.x; j < nh; j += blockDim.x) {
        const onnx_i64 wg = nh * ni, rg = nh * nh;
        const float* const wj = wd + j * ni;
        const float* const rj = rd + j * nh;
        float ai = 0.0f, ao = 0.0f, af = 0.0f, ac = 0.0f;
        for (onnx_i64 k = 0; k < ni; ++k) {
          const float v = xv[k];
          ai += v * wj[k];
          ao += v * wj[wg + k];
          af += v * wj[2 * wg + k];
          ac += v * wj[3 * wg + k];
        }
        for (onnx_i64 k = 0; k < nh; ++k) {
          const float v = h[k];
          ai += v * rj[k];
          ao += v * rj[rg + k];
          af += v * rj[2 * rg + k];
          ac += v * rj[3 * rg + k];
        }@BIAS@
        const float cp = s3[j];@PEEP_IF@
        const float ig = @F_I@;
        const float fg = @F_F@;
        const float cg = @G_C@;
        const float cn = fg * cp + ig * cg;@PEEP_O@
        const float og = @F_O@;
        const float hv = og * @H_C@;
        s3[j] = cn;
        hn[j] = hv;
        yr[j] = hv;
      }
      __syncthreads();
