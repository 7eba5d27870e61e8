// LSTM's step for each unit: the pre-activations of the gates i, o, f, c (`W[iofc]`) summed
// together, @BIAS@ adding the biases, @PEEP_IF@ the peepholes of i and f (times the previous cell
// state `cp`) and @PEEP_O@ o's (times the new one `cn`); @F_I@, @F_F@ (`1 - ig` with input_forget),
// @G_C@, @F_O@ are the clipped activations, @H_C@ is h of `cn`. Every lane of the group computes
// the unit's update; lane 0 stores it (after the lanes' sums, which no lane passes before every
// lane has read the previous cell state `cp`).
      for (onnx_i64 j0 = 0; j0 < nh; j0 += groups) {
        const onnx_i64 j = j0 + group < nh ? j0 + group : nh - 1;
        const bool live = j0 + group < nh;
        const onnx_i64 wg = nh * ni, rg = nh * nh;
        const float* const wj = wd + j * ni;
        const float* const rj = rd + j * nh;
        const float cp = s3[j];
        float ai = 0.0f, ao = 0.0f, af = 0.0f, ac = 0.0f;
        for (onnx_i64 k = lane; k < ni; k += ONNX_ROW_LANES) {
          const float v = xv[k];
          ai += v * wj[k];
          ao += v * wj[wg + k];
          af += v * wj[2 * wg + k];
          ac += v * wj[3 * wg + k];
        }
        for (onnx_i64 k = lane; k < nh; k += ONNX_ROW_LANES) {
          const float v = h[k];
          ai += v * rj[k];
          ao += v * rj[rg + k];
          af += v * rj[2 * rg + k];
          ac += v * rj[3 * rg + k];
        }
        ai = onnx_lanes_fold<false>(ai);
        ao = onnx_lanes_fold<false>(ao);
        af = onnx_lanes_fold<false>(af);
        ac = onnx_lanes_fold<false>(ac);@BIAS@
@PEEP_IF@
        const float ig = @F_I@;
        const float fg = @F_F@;
        const float cg = @G_C@;
        const float cn = fg * cp + ig * cg;@PEEP_O@
        const float og = @F_O@;
        const float hv = og * @H_C@;
        if (live && lane == 0) {
          s3[j] = cn;
          hn[j] = hv;
          yr[j] = hv;
        }
      }
      __syncthreads();
