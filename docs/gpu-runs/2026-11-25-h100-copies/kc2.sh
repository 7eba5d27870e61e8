#!/bin/bash
# Copies by kernel through mapped pinned memory against the copy engine, and this build against the
# previous one (bundle/old/saggar: build d0b3aae's CLI). The recommender at batch 1 with both
# bindings, alternating, twice each; throughput at uniform:1..64 with C=8 and C=1 for kernel-copy
# limits 64 KiB (default), 1 MiB and 0 (copy engine only) and the previous build; cold and warm start
# of 64 buckets; DLRM and the BERT test model at batch 1.
# usage: bash bundle/kc2.sh OUT [phase: latency|throughput|start|onnx|all]
here=$(cd "$(dirname "$0")" && pwd); out=$1; phase=${2:-all}; mkdir -p "$out"
export CUDA_VISIBLE_DEVICES=0
old=$here/old/saggar; new=$here/bin/saggar
run() { # label, binary, args... (the recommender unless --onnx is given)
  local label=$1 bin=$2; shift 2
  echo "$bin perf --backend cuda $* --json $out/$label.json" >> "$out/commands.txt"
  "$bin" perf --backend cuda "$@" --json $out/$label.json > $out/$label.log 2>&1
  echo "$label rc $? $(grep -E '^(latency|throughput)' $out/$label.log | cut -c1-100 | tr '\n' ' ')"
}
if [ $phase = latency ] || [ $phase = all ]; then
  for r in 1 2; do
    b1="--trace const:1 --requests 3000"
    run rec-b1-old-pinned-$r $old $b1 --binding pinned
    run rec-b1-new-pinned-$r $new $b1 --binding pinned
    run rec-b1-new-request-$r $new $b1 --binding request
    run rec-b1-engine-pinned-$r $new $b1 --binding pinned --kernel-copies-up-to 0
    run rec-b1-engine-request-$r $new $b1 --binding request --kernel-copies-up-to 0
  done
fi
if [ $phase = throughput ] || [ $phase = all ]; then
  for c in 8 1; do
    n=20000; [ $c = 1 ] && n=5000
    for r in 1 2; do
      u="--trace uniform:1..64 --concurrency $c --requests $n"
      run tput-c$c-old-$r $old $u
      run tput-c$c-new-$r $new $u
      run tput-c$c-1m-$r $new $u --kernel-copies-up-to 1048576
      run tput-c$c-engine-$r $new $u --kernel-copies-up-to 0
    done
  done
fi
if [ $phase = start ] || [ $phase = all ]; then
  list=$(seq -s, 1 64)
  for v in old new; do
    b=$old; [ $v = new ] && b=$new
    rm -rf /tmp/kc2-cache-$v
    for w in cold warm; do
      "$b" perf --backend cuda --trace uniform:1..64 --requests 500 --buckets list:$list --max-batch 64 --graphs on --capture eager \
        --cache-dir /tmp/kc2-cache-$v --json $out/start-$v-$w.json > $out/start-$v-$w.log 2>&1
      echo "start $v $w $(grep -E '^(startup|cache)' $out/start-$v-$w.log | cut -c1-120 | tr '\n' ' ')"
    done
  done
fi
if [ $phase = onnx ] || [ $phase = all ]; then
  for r in 1 2; do
    for m in dlrm bert; do
      for v in old new engine; do
        b=$new; [ $v = old ] && b=$old
        extra=(); [ $m = bert ] && extra=(--shapes input_ids:1x128 --shapes attention_mask:1x128 --pad-axis seq:128)
        [ $v = engine ] && extra+=(--kernel-copies-up-to 0)
        run $m-b1-$v-$r $b --onnx $here/onnx-models/$m/model.onnx --trace const:1 --requests 2000 --cache-dir /tmp/kc2-onnx-$v "${extra[@]}"
      done
    done
  done
fi
