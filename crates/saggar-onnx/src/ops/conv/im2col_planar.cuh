// The body of the im2col kernel (`im2col.cu`) over two spatial axes (a one-axis convolution comes
// with a leading axis of extent 1), in indices of type @I@: the row and column coordinates of a
// position in registers, so an element costs a multiply-add, a bounds test, a load and a store.
    const @I@ NC = (@I@)(meta[1] * meta[2]), H = (@I@)meta[3], W = (@I@)meta[4];
    const @I@ OH = (@I@)meta[5], OW = (@I@)meta[6], KH = (@I@)meta[7], KW = (@I@)meta[8];
    const @I@ SY = (@I@)meta[9], SX = (@I@)meta[10], PY = (@I@)meta[11], PX = (@I@)meta[12];
    const @I@ DY = (@I@)meta[13], DX = (@I@)meta[14];
    const @I@ plane = OH * OW, taps = KH * KW, in_plane = H * W;
    ONNX_LOOP(q, (onnx_i64)NC * plane) {
      const @I@ nc = (@I@)q / plane, p = (@I@)q - nc * plane, oy = p / OW, ox = p - oy * OW;
      const @I@ y0 = oy * SY - PY, x0 = ox * SX - PX;
      const @T@* xp = x + nc * in_plane;
      @T@* cp = col + nc * taps * plane + p;
      for (@I@ ky = 0; ky < KH; ++ky) {
        const @I@ iy = y0 + ky * DY;
        const bool row = iy >= 0 && iy < H;
        const @T@* xr = xp + (row ? iy * W : 0);
        for (@I@ kx = 0; kx < KW; ++kx, cp += plane) {
          const @I@ ix = x0 + kx * DX;
          *cp = row && ix >= 0 && ix < W ? xr[ix] : (@T@)0;
        }
      }
    }
