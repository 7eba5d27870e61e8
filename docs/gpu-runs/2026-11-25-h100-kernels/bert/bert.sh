#!/bin/bash
# BERT rows side by side: saggar variants (flags) and PyTorch graphs on the same inputs, plus profiles.
# usage: bash bundle/bert.sh OUT [phase: small|base|all]
here=$(cd "$(dirname "$0")" && pwd)
out=$1; phase=${2:-all}; mkdir -p "$out/runs" "$out/logs"
models=$here/onnx-models
work=${WORK:-/tmp/bert-work}; mkdir -p "$work"
shapes="--shapes input_ids:1x128 --shapes attention_mask:1x128 --pad-axis seq:128"
export CUDA_VISIBLE_DEVICES=0
sg() { # tag file trace requests flags...
  local tag=$1 file=$2 trace=$3 n=$4; shift 4
  local count=(--requests "$n"); [ "$n" = - ] && count=()
  local cmd=("$here/bin/saggar" perf --backend cuda --onnx "$file" --trace "$trace" "${count[@]}" \
    --cache-dir "$work/cache-$(basename "$(dirname "$file")")" --json "$out/runs/saggar-$tag.json" $shapes "$@")
  echo "${cmd[*]}" >> "$out/commands.txt"
  "${cmd[@]}" > "$out/logs/saggar-$tag.log" 2>&1; echo "== saggar $tag rc $?"
  grep -E '^(latency|stages|startup)' "$out/logs/saggar-$tag.log" | cut -c1-400
}
tp() { # tag model file outputs times
  local cmd=(python3 "$here/peers/onnx_peers.py" --models "$models" --model "$2" --onnx "$3" --saggar-outputs "$4" \
    --saggar-times "$5" --concurrency 1 --variants graphs --json "$out/runs/torch-$1.json")
  echo "${cmd[*]}" >> "$out/commands.txt"
  "${cmd[@]}" > "$out/logs/torch-$1.log" 2>&1; echo "== torch $1 rc $?"
  grep -E '^graphs ' "$out/logs/torch-$1.log" | cut -c1-200
}
prof() { # tag file batch flags...
  local tag=$1 file=$2 b=$3; shift 3
  sg "profile-$tag" "$file" "const:$b" - --dump-profile --iterations 10 "$@"
  grep -E '^profile' "$out/logs/saggar-profile-$tag.log"
  grep -E '^STEP' -A40 "$out/logs/saggar-profile-$tag.log" | awk '{print $1, $2, $(NF-1), $NF}' 
}
bert=$models/bert/model.onnx
base=$work/models/bert-base/model.onnx
if [ "$phase" = run3 ]; then
  sg bert-b64 "$bert" const:64 300 --export-times "$work/t-bert64.jsonl" --export-outputs "$work/o-bert64"
  sg bert-b64-request "$bert" const:64 300 --binding request
  tp bert-b64 bert "$bert" "$work/o-bert64" "$work/t-bert64.jsonl"
  sg bert-b64-request-2 "$bert" const:64 300 --binding request
  sg bert-b1 "$bert" const:1 2000 --export-times "$work/t-bert1.jsonl" --export-outputs "$work/o-bert1"
  sg bert-b1-request "$bert" const:1 2000 --binding request
  tp bert-b1 bert "$bert" "$work/o-bert1" "$work/t-bert1.jsonl"
  prof bert-b64 "$bert" 64
  [ -f "$base" ] || python3 "$models/export.py" --out "$work/models" --only bert-base --allow-other-versions > "$out/logs/export-bert-base.log" 2>&1 || { echo "export failed"; tail -3 "$out/logs/export-bert-base.log"; }
  sg base-b64 "$base" const:64 60 --export-times "$work/t-base64.jsonl" --export-outputs "$work/o-base64"
  sg base-b64-request "$base" const:64 60 --binding request
  tp base-b64 bert-base "$base" "$work/o-base64" "$work/t-base64.jsonl"
  sg base-b64-request-2 "$base" const:64 60 --binding request
  sg base-b1 "$base" const:1 500 --export-times "$work/t-base1.jsonl" --export-outputs "$work/o-base1"
  sg base-b1-request "$base" const:1 500 --binding request
  tp base-b1 bert-base "$base" "$work/o-base1" "$work/t-base1.jsonl"
  prof base-b64 "$base" 64
  if [ "${EXTRA:-0}" = 1 ]; then
    sg bert-b1-request-ws4 "$bert" const:1 2000 --binding request --blas-workspace 4
    sg base-b1-request-ws4 "$base" const:1 500 --binding request --blas-workspace 4
    sg base-b64-tune-request "$base" const:64 60 --binding request --blas-tune 8
  fi
  exit 0
fi
if [ "$phase" = ws ]; then
  [ -f "$base" ] || python3 "$models/export.py" --out "$work/models" --only bert-base --allow-other-versions > "$out/logs/export-bert-base.log" 2>&1 || { echo "export failed"; tail -3 "$out/logs/export-bert-base.log"; }
  sg base-b1 "$base" const:1 500 --export-times "$work/t-base1.jsonl" --export-outputs "$work/o-base1"
  sg base-b1-request "$base" const:1 500 --binding request
  tp base-b1 bert-base "$base" "$work/o-base1" "$work/t-base1.jsonl"
  sg base-b1-request-2 "$base" const:1 500 --binding request
  sg base-b64 "$base" const:64 60 --export-times "$work/t-base64.jsonl" --export-outputs "$work/o-base64"
  sg base-b64-request "$base" const:64 60 --binding request
  tp base-b64 bert-base "$base" "$work/o-base64" "$work/t-base64.jsonl"
  sg base-b64-tune-request "$base" const:64 60 --binding request --blas-tune 8
  prof base-b64-tune "$base" 64 --blas-tune 8
  prof base-b1 "$base" 1
  exit 0
fi
if [ "$phase" = profiles ]; then
  prof bert-b64 "$bert" 64
  prof bert-b64-tune "$bert" 64 --blas-tune 8
  exit 0
fi
if [ "$phase" != base ]; then
  sg bert-b64 "$bert" const:64 300 --export-times "$work/t-bert64.jsonl" --export-outputs "$work/o-bert64"
  tp bert-b64 bert "$bert" "$work/o-bert64" "$work/t-bert64.jsonl"
  sg bert-b64-request "$bert" const:64 300 --binding request
  sg bert-b64-tune "$bert" const:64 300 --blas-tune 8
  sg bert-b64-tune-request "$bert" const:64 300 --blas-tune 8 --binding request
  sg bert-b64-rows "$bert" const:64 300 --attention rows
  sg bert-b1 "$bert" const:1 2000
  sg bert-b1-tune "$bert" const:1 2000 --blas-tune 8
  prof bert-b64 "$bert" 64
  prof bert-b64-tune "$bert" 64 --blas-tune 8
fi
if [ "$phase" != small ]; then
  [ -f "$base" ] || python3 "$models/export.py" --out "$work/models" --only bert-base --allow-other-versions > "$out/logs/export-bert-base.log" 2>&1 || { echo "export failed"; tail -3 "$out/logs/export-bert-base.log"; }
  sg base-b1 "$base" const:1 500 --export-times "$work/t-base1.jsonl" --export-outputs "$work/o-base1"
  tp base-b1 bert-base "$base" "$work/o-base1" "$work/t-base1.jsonl"
  sg base-b1-tune "$base" const:1 500 --blas-tune 8
  sg base-b1-rows "$base" const:1 500 --attention rows
  sg base-b64 "$base" const:64 60 --export-times "$work/t-base64.jsonl" --export-outputs "$work/o-base64"
  tp base-b64 bert-base "$base" "$work/o-base64" "$work/t-base64.jsonl"
  sg base-b64-tune-request "$base" const:64 60 --blas-tune 8 --binding request
  prof base-b1-tune "$base" 1 --blas-tune 8
  prof base-b64-tune "$base" 64 --blas-tune 8
fi
