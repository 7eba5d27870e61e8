// The tile kernels' reading of the attention `meta` table (see attention.cu): the batch rank `nb`,
// the extents, the scale, the batch extents `bd`, and each operand's batch strides and its 32-bit
// row and column strides; the batch positions, the tiles of BQ query rows, and whether Q, K and V
// are read four floats a load (rows contiguous along the head, every offset a multiple of four
// floats, 16-byte aligned).
  const int nb = (int)meta[0];
  const int Sq = meta[1], Sk = meta[2];
  const float scale = __int_as_float((int)meta[5]);
  const onnx_i64* bd = meta + 6;
  const onnx_i64* qm = bd + nb; const onnx_i64* km = qm + nb + 2; const onnx_i64* vm = km + nb + 2;
  const onnx_i64* mm = vm + nb + 2; const onnx_i64* om = mm + nb + 2;
  const int q_rs = qm[nb], q_cs = qm[nb + 1], k_rs = km[nb], k_cs = km[nb + 1], v_rs = vm[nb], v_cs = vm[nb + 1];
  const int m_rs = mm[nb], m_cs = mm[nb + 1], o_rs = om[nb], o_cs = om[nb + 1];
  (void)m_rs; (void)m_cs;
  int positions = 1;
  for (int a = 0; a < nb; ++a) positions *= bd[a];
  const int tiles = (Sq + BQ - 1) / BQ;
  bool vec4 = D % 4 == 0 && DV % 4 == 0 && q_cs == 1 && k_rs == 1 && v_cs == 1 && q_rs % 4 == 0 && k_cs % 4 == 0 && v_rs % 4 == 0
    && onnx_aligned16(q) && onnx_aligned16(k) && onnx_aligned16(v);
  for (int a = 0; a < nb; ++a) vec4 = vec4 && qm[a] % 4 == 0 && km[a] % 4 == 0 && vm[a] % 4 == 0;
