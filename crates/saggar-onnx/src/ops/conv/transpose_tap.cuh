// A fragment of the transposed-convolution gathers (`conv_transpose.cu`, `col2im.cu`): for kernel
// tap `t` of output position `pos`, whether an input position reaches it (`hit`: `pos + pad - k * dil`
// a non-negative multiple of the stride, within the input extents `xd`) and its offset `at` in an
// input plane.
      onnx_i64 tr = t, at = 0, stride = 1;
      bool hit = true;
      for (int d = s - 1; d >= 0; --d) {
        const onnx_i64 k = tr % ker[d]; tr /= ker[d];
        const onnx_i64 q = pos[d] + pad[d] - k * dil[d];
        const onnx_i64 o = q / st[d];
        hit = hit && q >= 0 && o * st[d] == q && o < xd[d];
        at += o * stride; stride *= xd[d];
      }
