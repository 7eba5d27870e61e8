#!/bin/bash
# Startup side by side in one run: saggar's cold start (empty cache: import, compile of every bucket and
# eager capture of every bucket) against torch.compile max-autotune's compile on the same model, for the
# BERT test model and DLRM at batch 1 (PyTorch graphs too, as the latency reference).
here=$(cd "$(dirname "$0")" && pwd); out=$1; mkdir -p "$out/runs" "$out/logs"; w=$(mktemp -d /tmp/coldstart.XXXXXX)
export CUDA_VISIBLE_DEVICES=0
run() { # model, saggar flags...
  local m=$1; shift
  local cmd=("$here/bin/saggar" perf --backend cuda --onnx "$here/onnx-models/$m/model.onnx" --trace const:1 --requests 2000 \
    --capture eager --cache-dir "$w/cache-$m" --export-times "$w/t-$m.jsonl" --export-outputs "$w/o-$m" --json "$out/runs/saggar-$m.json" "$@")
  echo "${cmd[*]}" >> "$out/commands.txt"
  "${cmd[@]}" > "$out/logs/saggar-$m.log" 2>&1; echo "== saggar $m rc $?"; grep -E '^(startup|latency)' "$out/logs/saggar-$m.log" | cut -c1-300
  cmd=(python3 "$here/peers/onnx_peers.py" --models "$here/onnx-models" --model "$m" --onnx "$here/onnx-models/$m/model.onnx" \
    --saggar-outputs "$w/o-$m" --saggar-times "$w/t-$m.jsonl" --concurrency 1 --label const:1 --variants graphs,compile-max \
    --compile-timeout 200 --json "$out/runs/torch-$m.json")
  echo "${cmd[*]}" >> "$out/commands.txt"
  "${cmd[@]}" > "$out/logs/torch-$m.log" 2>&1; echo "== torch $m rc $?"; grep -E '^(graphs|compile)' "$out/logs/torch-$m.log" | cut -c1-400
}
run bert --shapes input_ids:1x128 --shapes attention_mask:1x128 --pad-axis seq:128
run dlrm
rm -rf "$w"
