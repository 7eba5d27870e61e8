// RNN, GRU and LSTM over whole sequences: a block per (direction, batch entry) looping over the time
// steps, with the state in shared memory (`h`, the next state `hn`, and for LSTM the cell state `s3`,
// for GRU the reset products `s3`) and __syncthreads between steps. Within a step each group of
// ONNX_ROW_LANES lanes takes one hidden unit at a time: its lanes stride along the unit's rows of W
// and R (coalesced reads; the weights stay in L2 across steps), and onnx_lanes_fold sums their
// partial products. Every group makes the same number of passes (a group past the last unit repeats
// it without storing), so the lanes' sums stay uniform across the block. A step at or past the
// entry's length (clamped to [0, nt]) keeps the state and writes zeros to Y. @STEP@ is the cell's
// step: each unit's pre-activations (input and recurrence products, then the biases).
// meta: nt (steps), nb (batch), ni (input size), nh (hidden size), nd (directions), reversed (bit d:
// direction d runs from the last step), X strides (time, batch), Y strides (time, direction,
// batch), state strides (direction, batch)
(const onnx_i64* meta, const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ r@PARAMS@) {
  __shared__ float sh[@ARRAYS@ * @MAX_HIDDEN@];
  const onnx_i64 nt = meta[0], nb = meta[1], ni = meta[2], nh = meta[3];
  const onnx_i64 xt = meta[6], xb = meta[7], yt = meta[8], yd = meta[9], yb = meta[10], sd = meta[11], sb = meta[12];
  const onnx_i64 lane = threadIdx.x % ONNX_ROW_LANES, group = threadIdx.x / ONNX_ROW_LANES;
  const onnx_i64 groups = blockDim.x / ONNX_ROW_LANES;
  ONNX_ROWS(row, meta[4] * nb) {
    const onnx_i64 d = row / nb, b = row % nb;
    const bool rev = ((meta[5] >> d) & 1) != 0;
    const float* const wd = w + d * @GATES@ * nh * ni;
    const float* const rd = r + d * @GATES@ * nh * nh;
    const onnx_i64 st = d * sd + b * sb;
    const onnx_i64 len0 = @LEN@;
    const onnx_i64 len = len0 < 0 ? 0 : (len0 > nt ? nt : len0);
    float* h = sh;
    float* hn = sh + nh;@POINTERS@
    for (onnx_i64 j = threadIdx.x; j < nh; j += blockDim.x) {@INIT@ }
    __syncthreads();
    for (onnx_i64 step = 0; step < nt; ++step) {
      const onnx_i64 t = rev ? nt - 1 - step : step;
      float* const yr = y + t * yt + d * yd + b * yb;
      if (t >= len) {
        for (onnx_i64 j = threadIdx.x; j < nh; j += blockDim.x) yr[j] = 0.0f;
        continue;
      }
      const float* const xv = x + t * xt + b * xb;
@STEP@
      float* const swap = h;
      h = hn;
      hn = swap;
    }
    for (onnx_i64 j = threadIdx.x; j < nh; j += blockDim.x) {@FINAL@ }
    __syncthreads();
  }
}
