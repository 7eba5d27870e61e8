#!/bin/bash
# The cold-start bench, then run.sh's ONNX peers step on the four test models (eager, graphs, ONNX Runtime;
# BERT-base is measured by bert.sh).
here=$(cd "$(dirname "$0")" && pwd); out=$1; mkdir -p "$out/logs"
CUDA_VISIBLE_DEVICES=0 "$here/benches/gpu_cold_start" --json "$out/bench-gpu_cold_start.json" > "$out/logs/bench-gpu_cold_start.log" 2>&1
echo "gpu_cold_start rc $?"; grep -E "^cold_start (cold|warm|process)" "$out/logs/bench-gpu_cold_start.log" | cut -c1-330
SAGGAR_SKIP_TESTS=1 SAGGAR_SKIP_HIP=1 SAGGAR_SKIP_BENCHES=1 SAGGAR_SKIP_PROFILE=1 SAGGAR_SKIP_ONNX=1 SAGGAR_SKIP_SANITIZER=1 SAGGAR_SKIP_PEERS=1 \
  SAGGAR_SKIP_BERT_BASE=1 SAGGAR_ONNX_PEERS_VARIANTS=eager,graphs,ort bash "$here/run.sh" "$out/run" > "$out/logs/run-stdout.log" 2>&1
echo "run.sh rc $?"; grep -E "^\| (bert|dlrm|mlp|cnn)" "$out/run/peers-onnx.md" | head -20
