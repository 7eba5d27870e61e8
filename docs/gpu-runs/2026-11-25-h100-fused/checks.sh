#!/bin/bash
# Correctness of this build on the GPU: gpu_onnx on CUDA and on the HIP backend via the fixture, the ONNX
# backend suite on both (run.sh's ONNX step), then DLRM at batch 1 against PyTorch graphs (dlrm.sh).
here=$(cd "$(dirname "$0")" && pwd); out=$1; mkdir -p "$out/logs"
CUDA_VISIBLE_DEVICES=0 "$here/tests/gpu_onnx" > "$out/logs/test-gpu_onnx-gpu0.log" 2>&1
echo "gpu_onnx cuda rc $? $(grep 'test result' "$out/logs/test-gpu_onnx-gpu0.log")"
CUDA_VISIBLE_DEVICES=0 LD_LIBRARY_PATH="$here/hip-fixture" "$here/hip-fixture/tests/gpu_onnx_hip" > "$out/logs/test-gpu_onnx_hip-hip-fixture.log" 2>&1
echo "gpu_onnx_hip fixture rc $? $(grep 'test result' "$out/logs/test-gpu_onnx_hip-hip-fixture.log")"
SAGGAR_SKIP_TESTS=1 SAGGAR_SKIP_HIP=1 SAGGAR_SKIP_BENCHES=1 SAGGAR_SKIP_PROFILE=1 SAGGAR_SKIP_SANITIZER=1 SAGGAR_SKIP_PEERS=1 \
  SAGGAR_SKIP_ONNX_PEERS=1 bash "$here/run.sh" "$out/run" > "$out/logs/run-stdout.log" 2>&1
echo "run.sh (ONNX suite) rc $?"; cat "$out/run/onnx-suite.index"
bash "$here/dlrm.sh" "$out/dlrm"
