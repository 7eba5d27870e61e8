// The body of the im2col kernel (`im2col.cu`) over any number `s` of spatial axes, in indices of
// type @I@: a position's output coordinates once, then the kernel taps stepped like an odometer.
    const int s = (int)meta[0];
    const @I@ NC = (@I@)(meta[1] * meta[2]);
    const onnx_i64* in = meta + 3; const onnx_i64* out = in + s; const onnx_i64* ker = out + s;
    const onnx_i64* st = ker + s; const onnx_i64* pad = st + s; const onnx_i64* dil = pad + s;
    @I@ in_plane = 1, plane = 1, taps = 1;
    for (int d = 0; d < s; ++d) { in_plane *= (@I@)in[d]; plane *= (@I@)out[d]; taps *= (@I@)ker[d]; }
    ONNX_LOOP(q, (onnx_i64)NC * plane) {
      const @I@ nc = (@I@)q / plane, p = (@I@)q - nc * plane;
      // Per axis: the input coordinate of kernel tap 0, and the tap being written.
      @I@ first[@MAX_SPATIAL@], k[@MAX_SPATIAL@];
      @I@ rem = p;
      for (int d = s - 1; d >= 0; --d) {
        const @I@ o = rem % (@I@)out[d];
        rem /= (@I@)out[d];
        first[d] = o * (@I@)st[d] - (@I@)pad[d];
        k[d] = 0;
      }
      const @T@* xp = x + nc * in_plane;
      @T@* cp = col + nc * taps * plane + p;
      for (@I@ t = 0; t < taps; ++t, cp += plane) {
        @I@ at = 0;
        bool inside = true;
        for (int d = 0; d < s; ++d) {
          const @I@ c = first[d] + k[d] * (@I@)dil[d];
          inside = inside && c >= 0 && c < (@I@)in[d];
          at = inside ? at * (@I@)in[d] + c : 0;
        }
        *cp = inside ? xp[at] : (@T@)0;
        for (int d = s - 1; d >= 0 && ++k[d] == (@I@)ker[d]; --d) k[d] = 0;
      }
    }
