#!/bin/bash
# DLRM at batch 1: saggar and PyTorch graphs alternating, twice each, plus a per-step profile.
here=$(cd "$(dirname "$0")" && pwd); out=$1; mkdir -p "$out"; w=/tmp/dlrm-work; mkdir -p $w
m=$here/onnx-models/dlrm/model.onnx
export CUDA_VISIBLE_DEVICES=0
for r in 1 2; do
  "$here/bin/saggar" perf --backend cuda --onnx $m --trace const:1 --concurrency 1 --cache-dir $w/cache --export-times $w/t$r.jsonl \
    --export-outputs $w/o$r --json $out/saggar-dlrm-b1-$r.json --requests 2000 > $out/saggar-dlrm-b1-$r.log 2>&1
  echo "saggar $r rc $? $(grep -E '^latency' $out/saggar-dlrm-b1-$r.log | cut -c1-80)"
  python3 "$here/peers/onnx_peers.py" --models "$here/onnx-models" --model dlrm --onnx $m --saggar-outputs $w/o$r --saggar-times $w/t$r.jsonl \
    --concurrency 1 --label const:1 --variants graphs --json $out/torch-dlrm-b1-$r.json > $out/torch-dlrm-b1-$r.log 2>&1
  echo "torch $r rc $? $(grep -E '^graphs ' $out/torch-dlrm-b1-$r.log | cut -c1-120)"
done
"$here/bin/saggar" perf --backend cuda --onnx $m --trace const:1 --dump-profile --iterations 50 --quiet --cache-dir $w/cache > $out/profile-dlrm.log 2>&1
sed -n '/^profile:/,$p' $out/profile-dlrm.log | head -14
