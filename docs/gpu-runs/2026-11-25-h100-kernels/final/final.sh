#!/bin/bash
# The final build's GPU checks in one call: gpu_onnx on CUDA and on the HIP backend via the fixture, the
# cold-start bench, then run.sh's ONNX backend suite and ONNX peers steps (eager, graphs, ONNX Runtime).
here=$(cd "$(dirname "$0")" && pwd); out=$1; mkdir -p "$out/logs"
CUDA_VISIBLE_DEVICES=0 "$here/tests/gpu_onnx" > "$out/logs/test-gpu_onnx-gpu0.log" 2>&1
echo "gpu_onnx cuda rc $? $(grep 'test result' "$out/logs/test-gpu_onnx-gpu0.log")"
CUDA_VISIBLE_DEVICES=0 LD_LIBRARY_PATH="$here/hip-fixture" "$here/hip-fixture/tests/gpu_onnx_hip" > "$out/logs/test-gpu_onnx_hip-hip-fixture.log" 2>&1
echo "gpu_onnx_hip fixture rc $? $(grep 'test result' "$out/logs/test-gpu_onnx_hip-hip-fixture.log")"
CUDA_VISIBLE_DEVICES=0 "$here/benches/gpu_cold_start" --json "$out/bench-gpu_cold_start.json" > "$out/logs/bench-gpu_cold_start.log" 2>&1
echo "gpu_cold_start rc $?"; grep -E "^cold_start (cold|warm|process)" "$out/logs/bench-gpu_cold_start.log" | cut -c1-330
SAGGAR_SKIP_TESTS=1 SAGGAR_SKIP_HIP=1 SAGGAR_SKIP_BENCHES=1 SAGGAR_SKIP_PROFILE=1 SAGGAR_SKIP_SANITIZER=1 SAGGAR_SKIP_PEERS=1 \
  SAGGAR_SKIP_BERT_BASE=1 SAGGAR_ONNX_PEERS_VARIANTS=eager,graphs,ort bash "$here/run.sh" "$out/run" > "$out/logs/run-stdout.log" 2>&1
echo "run.sh rc $?"; cat "$out/run/onnx-suite.index"; grep -E "^\| (bert|dlrm|mlp|cnn)" "$out/run/peers-onnx.md" | head -20
