// The body of the pooling kernel (`pool.cu`) over two spatial axes, in indices of type @I@: the
// window's first row and column in registers and its taps stepped row by row (`pool_window.cuh`),
// so a tap costs a multiply-add, the bounds tests and a load.
    const @I@ NC = (@I@)meta[1], H = (@I@)meta[3], W = (@I@)meta[4], OH = (@I@)meta[5], OW = (@I@)meta[6];
    const @I@ KH = (@I@)meta[7], KW = (@I@)meta[8], SY = (@I@)meta[9], SX = (@I@)meta[10];
    const @I@ PY = (@I@)meta[11], PX = (@I@)meta[12], EY = H + (@I@)meta[13], EX = W + (@I@)meta[14];
    const @I@ DY = (@I@)meta[15], DX = (@I@)meta[16];
    const @I@ out_plane = OH * OW, in_plane = H * W;
    ONNX_LOOP(q, (onnx_i64)NC * out_plane) {
      const @I@ i = (@I@)q, nc = i / out_plane, p = i - nc * out_plane, oy = p / OW, ox = p - oy * OW;
      const @I@ y0 = oy * SY - PY, x0 = ox * SX - PX;
      const @T@* xp = x + nc * in_plane;
      float acc = @INIT@;
      @I@ inside = 0, padded = 0, best = 0;
      auto visit = [&](@I@ at) { const float v = (float)xp[at]; @TAKE@ };
@WINDOW@      (void)padded; (void)best;
      @STORE@
    }
