// ReduceLogSumExp's first pass: the largest element of the row (`top`), so exp never overflows.
@T@ top = ONNX_NEG_INF;
    for (onnx_i64 j = threadIdx.x; j < n; j += blockDim.x) { const @T@ v = x[base + ONNX_RED_OFF(j)]; top = gpu_max(top, v); }
    ONNX_BLOCK_REDUCE(top, sh, a, b, gpu_max(a, b));
    if (top == ONNX_NEG_INF) top = 0;