#!/bin/bash
# The HIP backend suite via the fixture, repeated, with the default lazy module loading and with eager loading.
here=$(cd "$(dirname "$0")" && pwd); out=$1; mkdir -p "$out"
for loading in ${LOADINGS:-LAZY EAGER}; do
  for i in $(seq 1 ${RUNS:-3}); do
    env CUDA_VISIBLE_DEVICES=0 CUDA_MODULE_LOADING=$loading LD_LIBRARY_PATH=$here/hip-fixture SAGGAR_ONNX_BACKEND=hip \
      SAGGAR_ONNX_BACKEND_TESTS="$here/onnx-suite/data" SAGGAR_ONNX_EXPECTATIONS="$here/onnx-suite/backend_expectations.txt" \
      SAGGAR_ONNX_REPORT="$out/hip-$loading-$i.md" "$here/hip-fixture/onnx/backend_suite" > "$out/hip-$loading-$i.log" 2>&1
    echo "$loading run $i rc $? $(grep -iE 'passed|failed' "$out/hip-$loading-$i.log" | tail -1 | cut -c1-150)"
    grep -iE "EXECUTION_FAILED|invalidated" "$out/hip-$loading-$i.log" | head -2 | cut -c1-200
  done
done
