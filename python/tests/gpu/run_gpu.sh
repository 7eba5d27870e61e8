#!/usr/bin/env bash
# The saggar Python tests on a GPU machine (no Rust, no network needed).
#
#   bash python/tests/gpu/run_gpu.sh WHEEL [REPORT_DIR]
#
# WHEEL is the wheel `maturin build --release` made (in python/: target/wheels/saggar-*.whl). It is
# installed with `pip --target` into a folder of its own, put first on PYTHONPATH, so the machine's
# Python keeps its packages (torch, numpy, onnx, onnxruntime, pytest) and nothing is installed into
# it. Then, from python/tests:
#   1. the GPU tests (gpu/): CUDAExecutionProvider, torch CUDA tensors through io_binding read in
#      place (checked by pointer), and Python's overhead per run against Rust's run_into
#      (REPORT_DIR/overhead.json);
#   2. the whole suite with SAGGAR_TEST_PROVIDER=CUDAExecutionProvider (outputs against ONNX Runtime
#      CPU, threads, bad input, the ONNX node tests on CUDA).
# Each step's output is also in REPORT_DIR (default gpu-report); the script exits non-zero if either
# step fails. SAGGAR_EXTRA_WHEELS=DIR installs the wheels in DIR beside saggar's (the onnx 1.19.1
# wheel for this Python, so the node-test counts compare with the GPU bundle's; without it the
# machine's onnx is used and the counts are that version's).
set -uo pipefail
wheel=$(realpath "$1")
out=$(realpath -m "${2:-gpu-report}")
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
site=$(mktemp -d)
python3 -m pip install --quiet --no-deps --no-index --target "$site" "$wheel" || exit 1
if [ -n "${SAGGAR_EXTRA_WHEELS:-}" ]; then
  python3 -m pip install --quiet --no-deps --no-index --target "$site" "$SAGGAR_EXTRA_WHEELS"/*.whl || exit 1
fi
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
cd "$here/.."
python3 -c "import saggar, sys, onnx, onnxruntime, numpy, torch; print('saggar', saggar.__version__, saggar.get_available_providers(), 'python', sys.version.split()[0], 'onnx', onnx.__version__, 'onnxruntime', onnxruntime.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__)" | tee "$out/versions.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$out/versions.txt"

status=0
echo "== GPU tests (gpu/)"
SAGGAR_OVERHEAD_REPORT="$out/overhead.json" python3 -m pytest gpu -v -rs -s -p no:cacheprovider 2>&1 | tee "$out/gpu-tests.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
echo "== the suite with CUDAExecutionProvider"
SAGGAR_TEST_PROVIDER=CUDAExecutionProvider python3 -m pytest . --ignore=gpu -v -rs -s -p no:cacheprovider 2>&1 | tee "$out/suite-cuda.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
echo "== reports in $out"
exit $status
