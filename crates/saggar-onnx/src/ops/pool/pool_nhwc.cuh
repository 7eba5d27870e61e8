// The body of the pooling kernel (`pool.cu`) over two spatial axes of a channels-last input
// `[N, H, W, C]` (C is the meta table's last entry), in indices of type @I@: consecutive threads on
// consecutive channels of one position, so every tap's loads are consecutive too; the taps are
// visited as the planar body visits them (`pool_window.cuh`). With C a multiple of four a thread
// takes four channels (four independent loads a tap, the position's arithmetic once), else one.
    const @I@ NC = (@I@)meta[1], H = (@I@)meta[3], W = (@I@)meta[4], OH = (@I@)meta[5], OW = (@I@)meta[6];
    const @I@ KH = (@I@)meta[7], KW = (@I@)meta[8], SY = (@I@)meta[9], SX = (@I@)meta[10];
    const @I@ PY = (@I@)meta[11], PX = (@I@)meta[12], EY = H + (@I@)meta[13], EX = W + (@I@)meta[14];
    const @I@ DY = (@I@)meta[15], DX = (@I@)meta[16], C = (@I@)meta[18];
    const @I@ out_plane = OH * OW, in_plane = H * W, lanes = C % 4 == 0 ? 4 : 1;
    ONNX_LOOP(q, (onnx_i64)NC * out_plane / lanes) {
      const @I@ first = (@I@)q * lanes, pc = first / C, c = first - pc * C, img = pc / out_plane;
      const @I@ p = pc - img * out_plane, oy = p / OW, ox = p - oy * OW;
      const @I@ y0 = oy * SY - PY, x0 = ox * SX - PX;
      const @T@* xp = x + img * in_plane * C + c;
      float accs[4] = {@INIT@, @INIT@, @INIT@, @INIT@};
      @I@ inside = 0, padded = 0, best = 0;
      auto take = [&](float& acc, float v, @I@ at) { (void)at; @TAKE@ };
      auto visit = [&](@I@ at) {
        const @T@* tap = xp + at * C;
        if (lanes == 4) {
          const float v0 = (float)tap[0], v1 = (float)tap[1], v2 = (float)tap[2], v3 = (float)tap[3];
          take(accs[0], v0, at); take(accs[1], v1, at); take(accs[2], v2, at); take(accs[3], v3, at);
        } else {
          take(accs[0], (float)tap[0], at);
        }
      };
@WINDOW@      (void)padded; (void)best;
      for (@I@ k = 0; k < lanes; ++k) {
        const @I@ i = first + k, nc = img * C + c + k;
        const float acc = accs[k];
        (void)nc;
        @STORE@
      }
    }
