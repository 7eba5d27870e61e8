"""Triton's own Python clients (tritonclient[http,grpc] from PyPI) against `saggar serve` on the host
backend, every answer compared with ONNX Runtime on the CPU. Usage: python test_tritonclient.py SAGGAR"""

import json
import sys
import threading

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from common import (MLP_CONFIG, Reference, Server, Tally, close, json_body, load_inputs, make_repository, request)

MAX_REQUEST_BYTES = 1 << 20


def main():
    saggar = sys.argv[1]
    tally = Tally()
    repo = make_repository(["mlp", "dlrm"], {"mlp": MLP_CONFIG})
    server = Server(saggar, repo, ["--max-request-bytes", str(MAX_REQUEST_BYTES)])
    try:
        server.wait_ready()
        run_checks(tally, server)
    finally:
        code = server.stop()
        tally.check("SIGTERM: saggar serve exits 0", lambda: assert_equal(code, 0, server.logs()))
    explicit = Server(saggar, repo, ["--model-control-mode", "explicit"])
    try:
        explicit.wait_ready()
        tally.check("repository extension: index, load, unload (http and grpc)", lambda: repository(explicit))
    finally:
        explicit.stop()
    tally.finish()


def assert_equal(actual, expected, context=""):
    assert actual == expected, f"{actual!r} != {expected!r} {context[-2000:]}"


def run_checks(tally, server):
    http = httpclient.InferenceServerClient(server.http_url)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    mlp, dlrm = Reference("mlp"), Reference("dlrm")

    def health():
        assert http.is_server_live() and http.is_server_ready()
        assert grpc.is_server_live() and grpc.is_server_ready()
        assert http.is_model_ready("mlp") and grpc.is_model_ready("dlrm")
        assert not http.is_model_ready("nope") and not grpc.is_model_ready("nope")

    def metadata():
        for meta in (http.get_server_metadata(), grpc.get_server_metadata(as_json=True)):
            assert meta["name"] == "saggar" and "binary_tensor_data" in meta["extensions"], meta
        m = http.get_model_metadata("mlp")
        assert_equal([(i["name"], i["datatype"], i["shape"]) for i in m["inputs"]], [("x", "FP32", [-1, 128])])
        assert_equal([(o["name"], o["datatype"], o["shape"]) for o in m["outputs"]], [("probs", "FP32", [-1, 10])])
        g = grpc.get_model_metadata("dlrm", as_json=True)
        assert_equal(len(g["inputs"]), 27)
        assert_equal((g["inputs"][0]["name"], g["inputs"][0]["datatype"], g["inputs"][0]["shape"]), ("dense", "FP32", ["-1", "13"]))
        assert_equal((g["outputs"][0]["name"], g["outputs"][0]["datatype"]), ("score", "FP32"))
        config = http.get_model_config("mlp")
        assert_equal((config["max_batch_size"], config["dynamic_batching"]["max_queue_delay_microseconds"]), (64, 2000))

    def http_infer(binary):
        inputs = load_inputs("mlp")
        infer_inputs = []
        for name, array in inputs.items():
            i = httpclient.InferInput(name, list(array.shape), "FP32")
            i.set_data_from_numpy(array, binary_data=binary)
            infer_inputs.append(i)
        outputs = [httpclient.InferRequestedOutput("probs", binary_data=binary)]
        result = http.infer("mlp", infer_inputs, outputs=outputs, request_id="r-1")
        assert_equal(result.get_response()["id"], "r-1")
        close(result.as_numpy("probs"), mlp.run(inputs)["probs"], f"mlp over http (binary={binary})")

    def grpc_dlrm():
        inputs = load_inputs("dlrm")
        infer_inputs = []
        for name, array in inputs.items():
            i = grpcclient.InferInput(name, list(array.shape), "FP32" if array.dtype == np.float32 else "INT64")
            i.set_data_from_numpy(array)
            infer_inputs.append(i)
        result = grpc.infer("dlrm", infer_inputs, request_id="g-1")
        close(result.as_numpy("score"), dlrm.run(inputs)["score"], "dlrm (27 inputs) over grpc")

    tally.check("health over http and grpc", health)
    tally.check("server and model metadata (names, FP32, -1 for the batch)", metadata)
    tally.check("http infer, JSON data", lambda: http_infer(False))
    tally.check("http infer, binary data", lambda: http_infer(True))
    tally.check("grpc infer of the 27-input DLRM model", grpc_dlrm)
    tally.check("48 concurrent clients x 10 single-row requests are batched", lambda: batching(server, mlp))
    tally.check("bad requests get a 4xx naming the problem; the server keeps serving", lambda: bad_requests(server, grpc))


def batching(server, reference):
    before = server.metrics()
    rng = np.random.default_rng(1)
    rows = rng.standard_normal((48, 10, 128)).astype(np.float32)
    errors = []

    def client(c):
        try:
            http = httpclient.InferenceServerClient(server.http_url)
            for r in range(10):
                x = rows[c, r:r + 1]
                i = httpclient.InferInput("x", [1, 128], "FP32")
                i.set_data_from_numpy(x)
                result = http.infer("mlp", [i])
                close(result.as_numpy("probs"), reference.run({"x": x})["probs"], f"client {c} request {r}")
        except Exception as e:  # noqa: BLE001
            errors.append(f"client {c}: {e}")

    threads = [threading.Thread(target=client, args=(c,)) for c in range(48)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    after = server.metrics()
    label = '{model="mlp",version="1"}'
    success = after["nv_inference_request_success" + label] - before["nv_inference_request_success" + label]
    executions = after["nv_inference_exec_count" + label] - before["nv_inference_exec_count" + label]
    print(f"     480 requests: nv_inference_request_success +{success:.0f}, nv_inference_exec_count +{executions:.0f}")
    assert_equal(success, 480)
    assert executions < 480, f"no request was merged: {executions} executions"


def bad_requests(server, grpc):
    port = server.http_port
    good = json_body({"x": np.zeros((1, 128), np.float32)})
    row = [0.0] * 128
    cases = [
        ("malformed JSON", "/v2/models/mlp/infer", b'{"inputs": [', 400, "malformed"),
        ("wrong datatype", "/v2/models/mlp/infer", body_of("x", [1, 128], "INT64", [0] * 128), 400, "datatype INT64"),
        ("unsupported datatype", "/v2/models/mlp/infer", body_of("x", [1, 128], "BYTES", row), 400, "BYTES"),
        ("wrong shape", "/v2/models/mlp/infer", body_of("x", [1, 64], "FP32", row[:64]), 400, "shape"),
        ("data shorter than the shape", "/v2/models/mlp/infer", body_of("x", [1, 128], "FP32", row[:100]), 400, "100 elements"),
        ("unknown model", "/v2/models/nope/infer", good, 404, "unknown model"),
        ("unknown input", "/v2/models/mlp/infer", body_of("y", [1, 128], "FP32", row), 400, "no input `y`"),
        ("overflowing shape", "/v2/models/mlp/infer", body_of("x", [2**62, 2**62], "FP32", []), 400, "overflows"),
        ("negative extent", "/v2/models/mlp/infer", body_of("x", [-1, 128], "FP32", row), 400, "negative"),
        ("batch above max_batch_size", "/v2/models/mlp/infer", body_of("x", [65, 128], "FP32", row * 65), 400, "max_batch_size"),
    ]
    for name, path, body, status, words in cases:
        got, reply = request("POST", port, path, body)
        assert_equal(got, status, name)
        message = json.loads(reply)["error"]
        assert words in message, f"{name}: {message!r} lacks {words!r}"
        assert_equal(request("POST", port, "/v2/models/mlp/infer", good)[0], 200, f"after {name}")
    # A body above --max-request-bytes, refused from its Content-Length before it is read.
    import socket
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(f"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Length: {MAX_REQUEST_BYTES + 1}\r\n\r\n{{".encode())
        reply = s.recv(65536).decode()
        assert reply.startswith("HTTP/1.1 413"), reply[:200]
        assert "max-request-bytes" in reply, reply
    assert_equal(request("POST", port, "/v2/models/mlp/infer", good)[0], 200, "after a body above the limit")
    # gRPC: the same mistakes are INVALID_ARGUMENT / NOT_FOUND.
    for model, datatype, code in [("nope", "FP32", "StatusCode.NOT_FOUND"), ("mlp", "INT64", "StatusCode.INVALID_ARGUMENT")]:
        i = grpcclient.InferInput("x", [1, 128], datatype)
        i.set_data_from_numpy(np.zeros((1, 128), np.float32 if datatype == "FP32" else np.int64))
        try:
            grpc.infer(model, [i])
            raise AssertionError(f"grpc {model} {datatype} succeeded")
        except InferenceServerException as e:
            assert_equal(e.status(), code, str(e))


def body_of(name, shape, datatype, data):
    return json.dumps({"inputs": [{"name": name, "shape": shape, "datatype": datatype, "data": data}]}).encode()


def repository(server):
    http = httpclient.InferenceServerClient(server.http_url)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    index = {m["name"]: m.get("state", "") for m in http.get_model_repository_index()}
    assert set(index) == {"mlp", "dlrm"} and not http.is_model_ready("mlp"), index
    http.load_model("mlp")
    assert http.is_model_ready("mlp") and grpc.is_model_ready("mlp")
    grpc.load_model("dlrm")
    assert_equal({m.name: m.state for m in grpc.get_model_repository_index().models}, {"mlp": "READY", "dlrm": "READY"})
    http.unload_model("mlp")
    assert not http.is_model_ready("mlp")
    for name, words in [("../etc", "no route"), ("..etc", "not a model name"), ("missing", "not in the repository")]:
        try:
            http.load_model(name)
            raise AssertionError(f"{name} loaded")
        except InferenceServerException as e:
            assert words in str(e), str(e)


if __name__ == "__main__":
    main()
