"""Shared by the client tests of `saggar serve`: a model repository made from the repository's test
models, a server process on free loopback ports, ONNX Runtime references, and a raw HTTP helper."""

import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
import onnx.numpy_helper
import onnxruntime as ort

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
MODELS = os.path.join(ROOT, "crates", "saggar-onnx", "models")

# Dynamic batching that waits a little, so concurrent clients merge even on a fast machine.
MLP_CONFIG = """
max_batch_size: 64
dynamic_batching { max_queue_delay_microseconds: 2000 }
instance_group [ { count: 2 } ]
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_repository(models, configs=None):
    """A temporary Triton-style repository: <name>/1/model.onnx (+ config.pbtxt)."""
    repo = tempfile.mkdtemp(prefix="saggar-serve-repo-")
    for name in models:
        os.makedirs(os.path.join(repo, name, "1"))
        shutil.copy(os.path.join(MODELS, name, "model.onnx"), os.path.join(repo, name, "1", "model.onnx"))
        if configs and name in configs:
            with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
                f.write(configs[name])
    return repo


class Server:
    """`saggar serve` on the host backend, device 0, free ports; stopped with SIGTERM."""

    def __init__(self, saggar, repo, extra=()):
        self.http_port, self.grpc_port, self.metrics_port = free_port(), free_port(), free_port()
        self.cache = tempfile.mkdtemp(prefix="saggar-serve-cache-")
        self.log = open(os.path.join(self.cache, "serve.log"), "w+")
        cmd = [saggar, "serve", "--model-repository", repo, "--backend", "host", "--devices", "0",
               "--cache-dir", self.cache, "--http-port", str(self.http_port), "--grpc-port", str(self.grpc_port),
               "--metrics-port", str(self.metrics_port), *extra]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        self.http_url = f"127.0.0.1:{self.http_port}"
        self.grpc_url = f"127.0.0.1:{self.grpc_port}"

    def wait_ready(self, timeout=300):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"saggar serve exited with {self.proc.returncode}:\n{self.logs()}")
            try:
                status, _ = request("GET", self.http_port, "/v2/health/ready")
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"saggar serve not ready after {timeout} s:\n{self.logs()}")

    def metrics(self):
        _, body = request("GET", self.metrics_port, "/metrics")
        values = {}
        for line in body.decode().splitlines():
            if line and not line.startswith("#"):
                key, value = line.rsplit(" ", 1)
                values[key] = float(value)
        return values

    def rss_kib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def logs(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def stop(self, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise


def request(method, port, path, body=None, headers=None, conn=None):
    """One HTTP request; returns (status, body bytes)."""
    own = conn is None
    conn = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        if own:
            conn.close()


def load_inputs(model, data_set=0):
    """The test data set's inputs as {name: array}, in the model's input order."""
    folder = os.path.join(MODELS, model, f"test_data_set_{data_set}")
    names = [i.name for i in ort.InferenceSession(os.path.join(MODELS, model, "model.onnx")).get_inputs()]
    arrays = {}
    for i, name in enumerate(names):
        t = onnx.TensorProto()
        with open(os.path.join(folder, f"input_{i}.pb"), "rb") as f:
            t.ParseFromString(f.read())
        arrays[name] = onnx.numpy_helper.to_array(t)
    return arrays


class Reference:
    """ONNX Runtime on the CPU, the independent check of every answer."""

    def __init__(self, model):
        self.session = ort.InferenceSession(os.path.join(MODELS, model, "model.onnx"), providers=["CPUExecutionProvider"])
        self.outputs = [o.name for o in self.session.get_outputs()]

    def run(self, inputs):
        return dict(zip(self.outputs, self.session.run(None, inputs)))


def close(actual, expected, what):
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    assert np.allclose(actual, expected, rtol=1e-4, atol=1e-5), f"{what}: max diff {np.abs(actual - expected).max()}"


class Tally:
    """Counts checks and prints the closing line CI reads: 'N passed, N failed'."""

    def __init__(self):
        self.passed, self.failed = 0, 0

    def check(self, name, fn):
        started = time.time()
        try:
            fn()
            self.passed += 1
            print(f"ok   {name} ({time.time() - started:.1f} s)", flush=True)
        except Exception as e:  # noqa: BLE001 - every failure is reported the same way
            self.failed += 1
            print(f"FAIL {name}: {type(e).__name__}: {e}", flush=True)

    def finish(self):
        print(f"{self.passed} passed, {self.failed} failed", flush=True)
        sys.exit(1 if self.failed else 0)


def json_body(inputs, outputs=None, binary_outputs=False):
    body = {"inputs": [{"name": n, "shape": list(a.shape), "datatype": datatype(a), "data": a.flatten().tolist()}
                       for n, a in inputs.items()]}
    if outputs:
        body["outputs"] = [{"name": o, "parameters": {"binary_data": binary_outputs}} for o in outputs]
    return json.dumps(body).encode()


def datatype(array):
    return {np.dtype("float32"): "FP32", np.dtype("int64"): "INT64", np.dtype("int32"): "INT32",
            np.dtype("bool"): "BOOL", np.dtype("float64"): "FP64"}[array.dtype]
