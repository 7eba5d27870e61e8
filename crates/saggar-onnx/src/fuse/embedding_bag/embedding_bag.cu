// The embedding bag: a Gather read only by a ReduceSum or ReduceMean over its index axes, as one
// kernel. Threads run along a row's elements (`threadIdx.x`, coalesced) and bags (`threadIdx.y`, then
// blocks); each thread adds its element of the bag's rows in index order (@IX@ indices, negative
// ones counting from the end, out of range adding nothing); @FINISH@ divides for a mean.
// meta: bags, len, width, rows
(const onnx_i64* meta, const float* __restrict__ data, const @IX@* __restrict__ idx, float* __restrict__ out) {
  const onnx_i64 bags = meta[0], len = meta[1], width = meta[2], rows = meta[3];
  for (onnx_i64 b = (onnx_i64)blockIdx.x * blockDim.y + threadIdx.y; b < bags; b += (onnx_i64)gridDim.x * blockDim.y) {
    const @IX@* bag = idx + b * len;
    for (onnx_i64 d = threadIdx.x; d < width; d += blockDim.x) {
      float acc = 0.0f;
#pragma unroll 4
      for (onnx_i64 l = 0; l < len; ++l) {
        onnx_i64 x = (onnx_i64)bag[l];
        if (x < 0) x += rows;
        if (x >= 0 && x < rows) acc += data[x * width + d];
      }
      out[b * width + d] = acc@FINISH@;
    }
  }
}
