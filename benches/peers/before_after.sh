#!/bin/bash
# Two builds of saggar side by side on one GPU: `saggar perf --onnx` of the earlier and the later CLI,
# alternating, on the BERT test model and DLRM at batch 1 and a BERT-base encoder at batch 64 (exported
# here by onnx-models/export.py), each with `--binding request`. For refactors that must not change
# performance: compare the two columns of each row, run by run.
# usage (from a GPU bundle): bash peers/before_after.sh OUT BEFORE_SAGGAR AFTER_SAGGAR [ROUNDS]
here=$(cd "$(dirname "$0")/.." && pwd)
out=$1; before=$2; after=$3; rounds=${4:-3}
[ -n "$out" ] && [ -x "$before" ] && [ -x "$after" ] || { echo "usage: $0 OUT BEFORE_SAGGAR AFTER_SAGGAR [ROUNDS]"; exit 2; }
models=$here/onnx-models; work=${WORK:-/tmp/before-after}; mkdir -p "$out" "$work"
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
base=$work/models/bert-base/model.onnx
[ -f "$base" ] || python3 "$models/export.py" --out "$work/models" --only bert-base --allow-other-versions \
  > "$out/export-bert-base.log" 2>&1 || { echo "BERT-base export failed:"; tail -3 "$out/export-bert-base.log"; }
seq="--shapes input_ids:1x128 --shapes attention_mask:1x128 --pad-axis seq:128"
run() { # tag cli model trace requests flags...
  local tag=$1 cli=$2 model=$3 trace=$4 n=$5; shift 5
  [ -f "$model" ] || { echo "$tag: no $model"; return; }
  local cmd=("$cli" perf --backend cuda --onnx "$model" --trace "$trace" --requests "$n" --binding request \
    --cache-dir "$work/cache-$tag" --json "$out/$tag.json" "$@")
  echo "${cmd[*]}" >> "$out/commands.txt"
  "${cmd[@]}" > "$out/$tag.log" 2>&1
  echo "$tag rc $? $(grep -E '^latency' "$out/$tag.log" | cut -c1-110)"
}
for r in $(seq "$rounds"); do
  for side in before after; do
    cli=$before; [ "$side" = after ] && cli=$after
    run "bert-b1-$side-$r" "$cli" "$models/bert/model.onnx" const:1 2000 $seq
    run "dlrm-b1-$side-$r" "$cli" "$models/dlrm/model.onnx" const:1 2000
    run "base-b64-$side-$r" "$cli" "$base" const:64 60 $seq
  done
done
