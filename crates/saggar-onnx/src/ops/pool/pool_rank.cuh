// The body of the pooling kernel (`pool.cu`) over any number `s` of spatial axes, in indices of type
// @I@: an output position's coordinates once, then the kernel taps stepped like an odometer.
    const @I@ NC = (@I@)meta[1];
    const onnx_i64* out = in + s; const onnx_i64* ker = out + s; const onnx_i64* st = ker + s;
    const onnx_i64* pb = st + s; const onnx_i64* pe = pb + s; const onnx_i64* dil = pe + s;
    @I@ in_plane = 1, out_plane = 1, taps = 1;
    for (int d = 0; d < s; ++d) { in_plane *= (@I@)in[d]; out_plane *= (@I@)out[d]; taps *= (@I@)ker[d]; }
    ONNX_LOOP(q, (onnx_i64)NC * out_plane) {
      const @I@ i = (@I@)q, nc = i / out_plane;
      // Per axis: the input coordinate of kernel tap 0, and the tap being taken.
      @I@ first[@MAX_SPATIAL@], k[@MAX_SPATIAL@];
      @I@ rem = i - nc * out_plane;
      for (int d = s - 1; d >= 0; --d) {
        const @I@ o = rem % (@I@)out[d];
        rem /= (@I@)out[d];
        first[d] = o * (@I@)st[d] - (@I@)pb[d];
        k[d] = 0;
      }
      const @T@* xp = x + nc * in_plane;
      float acc = @INIT@;
      @I@ inside = 0, padded = 0, best = 0;
      for (@I@ t = 0; t < taps; ++t) {
        @I@ at = 0;
        int where = 0; /* 0 input, 1 padding, 2 past the padding */
        for (int d = 0; d < s; ++d) {
          const @I@ c = first[d] + k[d] * (@I@)dil[d];
          if (c >= (@I@)in[d] + (@I@)pe[d]) where = 2;
          else if ((c < 0 || c >= (@I@)in[d]) && where == 0) where = 1;
          at = where == 0 ? at * (@I@)in[d] + c : 0;
        }
        if (where == 0) { const float v = (float)xp[at]; @TAKE@ ++inside; }
        else if (where == 1) ++padded;
        for (int d = s - 1; d >= 0 && ++k[d] == (@I@)ker[d]; --d) k[d] = 0;
      }
      (void)padded; (void)best;
      @STORE@
    }
