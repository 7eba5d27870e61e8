#!/bin/bash
# Throughput at uniform:1..64, C=8, the variants in the order given, ROUNDS times.
here=$(cd "$(dirname "$0")" && pwd); out=$1; rounds=$2; shift 2; mkdir -p "$out"
export CUDA_VISIBLE_DEVICES=0
for r in $(seq 1 $rounds); do
  for v in "$@"; do
    case $v in
      old) cmd=("$here/old/saggar" perf);; new) cmd=("$here/bin/saggar" perf);;
      engine) cmd=("$here/bin/saggar" perf --kernel-copies-up-to 0);; 1m) cmd=("$here/bin/saggar" perf --kernel-copies-up-to 1048576);;
    esac
    "${cmd[@]}" --backend cuda --trace uniform:1..64 --concurrency 8 --requests 20000 --json $out/$v-$r.json > $out/$v-$r.log 2>&1
    echo "$v $r $(grep -E '^throughput' $out/$v-$r.log)"
  done
done
