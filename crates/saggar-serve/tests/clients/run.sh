#!/usr/bin/env bash
# The client tests of `saggar serve` on the host backend: Triton's Python clients against the server,
# then the soak test. Usage: bash run.sh SAGGAR_BINARY
# Makes its own virtualenv, target/serve-clients-venv (apart from any other Python environment of the
# repository), from requirements.txt (pinned), and reuses it while requirements.txt is unchanged.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../../.." && pwd)
saggar=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
venv="$root/target/serve-clients-venv"
if ! cmp -s "$here/requirements.txt" "$venv/requirements.txt" 2>/dev/null; then
  echo "== serve clients: virtualenv $venv (tritonclient, onnxruntime, onnx, numpy; pinned)"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt"
  cp "$here/requirements.txt" "$venv/requirements.txt"
fi
cd "$here"
echo "== serve clients: tritonclient[http,grpc] against saggar serve (host backend)"
"$venv/bin/python" test_tritonclient.py "$saggar"
echo "== serve clients: soak (10,000 requests from 16 clients, half malformed)"
"$venv/bin/python" soak.py "$saggar"
