// The body of the channels-last im2col kernel (`im2col_nhwc.cu`) in indices of type @I@.
    const @I@ CU = (@I@)meta[1], H = (@I@)meta[2], W = (@I@)meta[3];
    const @I@ OH = (@I@)meta[4], OW = (@I@)meta[5], KH = (@I@)meta[6], KW = (@I@)meta[7];
    const @I@ SY = (@I@)meta[8], SX = (@I@)meta[9], PY = (@I@)meta[10], PX = (@I@)meta[11];
    const @I@ DY = (@I@)meta[12], DX = (@I@)meta[13];
    const @I@ plane = OH * OW, row_units = KH * KW * CU;
    const @T@ zero{};
    ONNX_LOOP(q, (onnx_i64)meta[0] * plane * row_units) {
      const @I@ row = (@I@)q / row_units, r = (@I@)q - row * row_units;
      const @I@ t = r / CU, u = r - t * CU, ky = t / KW, kx = t - ky * KW;
      const @I@ n = row / plane, p = row - n * plane, oy = p / OW, ox = p - oy * OW;
      const @I@ iy = oy * SY - PY + ky * DY, ix = ox * SX - PX + kx * DX;
      const bool in = iy >= 0 && iy < H && ix >= 0 && ix < W;
      col[q] = in ? x[((n * H + iy) * W + ix) * CU + u] : zero;
    }
