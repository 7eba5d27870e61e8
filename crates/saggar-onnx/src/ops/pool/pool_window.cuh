// The window walk of the two-axis pooling bodies (`pool_planar.cuh`, `pool_nhwc.cuh`), in indices
// of type @I@: taps row by row from the window's first row `y0` and column `x0`, the visit `visit(at)`
// of each tap inside the input (its offset `at` in the plane), counted in `inside`, and of each in
// the padding counted in `padded`; the first tap past an axis's padded end ends the row, or the
// window (taps only increase along an axis), as the host visits them.
      for (@I@ ky = 0; ky < KH; ++ky) {
        const @I@ iy = y0 + ky * DY;
        if (iy >= EY) break;
        const bool row = iy >= 0 && iy < H;
        const @I@ line = row ? iy * W : 0;
        for (@I@ kx = 0; kx < KW; ++kx) {
          const @I@ ix = x0 + kx * DX;
          if (ix >= EX) break;
          if (row && ix >= 0 && ix < W) { visit(line + ix); ++inside; }
          else ++padded;
        }
      }
