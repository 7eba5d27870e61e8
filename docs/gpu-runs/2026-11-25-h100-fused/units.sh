#!/bin/bash
# After translation units were balanced by text: gpu_onnx on CUDA and via the HIP fixture, the cold-start
# bench, and coldstart.sh (saggar's cold start against max-autotune's compile, same run).
here=$(cd "$(dirname "$0")" && pwd); out=$1; mkdir -p "$out/logs"
CUDA_VISIBLE_DEVICES=0 "$here/tests/gpu_onnx" > "$out/logs/test-gpu_onnx-gpu0.log" 2>&1
echo "gpu_onnx cuda rc $? $(grep 'test result' "$out/logs/test-gpu_onnx-gpu0.log")"
CUDA_VISIBLE_DEVICES=0 LD_LIBRARY_PATH="$here/hip-fixture" "$here/hip-fixture/tests/gpu_onnx_hip" > "$out/logs/test-gpu_onnx_hip-hip-fixture.log" 2>&1
echo "gpu_onnx_hip fixture rc $? $(grep 'test result' "$out/logs/test-gpu_onnx_hip-hip-fixture.log")"
CUDA_VISIBLE_DEVICES=0 "$here/benches/gpu_cold_start" --json "$out/bench-gpu_cold_start.json" > "$out/logs/bench-gpu_cold_start.log" 2>&1
echo "gpu_cold_start rc $?"; grep -E "^cold_start (cold|warm|process)" "$out/logs/bench-gpu_cold_start.log" | cut -c1-330
bash "$here/coldstart.sh" "$out/coldstart"
