#!/bin/bash
# The onnx_aligned16 prelude helper again: gpu_onnx on CUDA once, gpu_onnx_hip via the fixture three
# times, both ONNX backend suites, DLRM and the BERT test model at batch 1.
here=$(cd "$(dirname "$0")" && pwd); out=$1; mkdir -p "$out"
export CUDA_VISIBLE_DEVICES=0
for d in /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda/lib64; do
  [ -d "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done
$here/tests/gpu_onnx > $out/gpu_onnx.log 2>&1; echo "gpu_onnx rc $? $(grep 'test result' $out/gpu_onnx.log)"
fx=$here/hip-fixture
for i in 1 2 3; do
  LD_LIBRARY_PATH=$fx${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} $fx/tests/gpu_onnx_hip > $out/gpu_onnx_hip-$i.log 2>&1
  echo "gpu_onnx_hip $i rc $? $(grep 'test result' $out/gpu_onnx_hip-$i.log)"
done
SAGGAR_SKIP_TESTS=1 SAGGAR_SKIP_HIP=1 SAGGAR_SKIP_BENCHES=1 SAGGAR_SKIP_PROFILE=1 SAGGAR_SKIP_SANITIZER=1 SAGGAR_SKIP_PEERS=1 \
  SAGGAR_SKIP_ONNX_PEERS=1 bash $here/run.sh $out/suites > $out/suites.log 2>&1
grep -E "ONNX backend tests on" $out/suites.log
bash $here/kc2.sh $out/models onnx | cut -c1-110
