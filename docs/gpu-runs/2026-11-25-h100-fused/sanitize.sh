#!/bin/bash
# compute-sanitizer memcheck and racecheck over gpu_onnx (the four models' generated kernels at several batches).
here=$(cd "$(dirname "$0")" && pwd); out=$1; mkdir -p "$out"
for tool in memcheck racecheck; do
  CUDA_VISIBLE_DEVICES=0 timeout 270 compute-sanitizer --tool $tool --error-exitcode 9 "$here/tests/gpu_onnx" --test-threads 1 > "$out/sanitizer-$tool-gpu_onnx.log" 2>&1
  echo "$tool rc $? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|test result' "$out/sanitizer-$tool-gpu_onnx.log" | tr '\n' ' ')"
done
