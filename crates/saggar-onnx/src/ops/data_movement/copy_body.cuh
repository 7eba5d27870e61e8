// The body of the copy kernel (`copy.cu`) in coordinates of type @U@ and offsets of type @I@: thread
// `i` takes unit `i >> shift` (an element, or a group of four) and moves it whole, or (`shift` 2) its
// element `i & 3`. The outermost coordinate is what remains after the inner axes' divisions.
    ONNX_LOOP(i, meta[1] << shift) {
      @U@ rem = (@U@)(i >> shift);
      @I@ a = (@I@)meta[2], b = (@I@)meta[3];
      for (int d = rank - 1; d > 0; --d) {
        const @U@ e = (@U@)dims[d], q = rem / e;
        const @I@ c = (@I@)(rem - q * e);
        a += c * (@I@)is[d]; b += c * (@I@)os[d]; rem = q;
      }
      a += (@I@)rem * (@I@)is[0]; b += (@I@)rem * (@I@)os[0];
      if (vec) {
        const @V@* src = (const @V@*)(in + a);
        @V@* dst = (@V@*)(out + b);
#pragma unroll
        for (int k = 0; k < @VN@; ++k) dst[k] = src[k];
      } else {
        const @I@ l = (@I@)(i & ((1 << shift) - 1));
        out[b + l] = in[a + l];
      }
    }
