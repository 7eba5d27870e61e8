"""Soak test of `saggar serve` on the host backend: 10,000 requests from 16 clients, half of them
malformed in random ways. Every valid request is answered correctly (checked against ONNX Runtime),
every malformed one gets a 4xx with an error body, and the server's memory settles: its RSS at the end
is within 10% of its RSS after the first 1,000 requests. Usage: python soak.py SAGGAR"""

import http.client
import json
import random
import sys
import threading
import time

import numpy as np

from common import MLP_CONFIG, Reference, Server, Tally, close, make_repository

REQUESTS, CLIENTS, WARM = 10_000, 16, 1_000
MAX_REQUEST_BYTES = 1 << 20


def body(name="x", shape=(1, 128), datatype="FP32", data=None):
    data = [0.5] * int(np.prod(shape)) if data is None else data
    return json.dumps({"inputs": [{"name": name, "shape": list(shape), "datatype": datatype, "data": data}]}).encode()


def malformed(rng):
    """A random malformed request: (path, body, headers)."""
    infer = "/v2/models/mlp/infer"
    good = body()
    kind = rng.randrange(12)
    if kind == 0:
        return infer, good[: rng.randrange(1, len(good) - 1)], {}
    if kind == 1:
        return infer, body(datatype=rng.choice(["INT64", "FP16", "BOOL", "BYTES", "fp32"])), {}
    if kind == 2:
        return infer, body(shape=(1, rng.choice([1, 127, 129, 256]))), {}
    if kind == 3:
        return infer, body(data=[0.5] * rng.randrange(0, 128)), {}
    if kind == 4:
        return "/v2/models/" + rng.choice(["nope", "mlp2", "MLP"]) + "/infer", good, {}
    if kind == 5:
        return infer, body(name=rng.choice(["y", "X", ""])), {}
    if kind == 6:
        return infer, body(shape=(2**40, 2**40), data=[]), {}
    if kind == 7:
        return infer, body(data=["a"] * 128), {}
    if kind == 8:
        return infer, good, {"Inference-Header-Content-Length": str(len(good) + rng.randrange(1, 100))}
    if kind == 9:
        head = json.dumps({"inputs": [{"name": "x", "shape": [1, 128], "datatype": "FP32",
                                        "parameters": {"binary_data_size": 512}}]}).encode()
        return infer, head + b"\0" * rng.randrange(0, 511), {"Inference-Header-Content-Length": str(len(head))}
    if kind == 10:
        return infer, b"x" * (MAX_REQUEST_BYTES + 1), {}
    return infer, body(shape=(rng.choice([0, 65]), 128)), {}


def main():
    saggar = sys.argv[1]
    tally = Tally()
    reference = Reference("mlp")
    rng = np.random.default_rng(7)
    pool = []
    for _ in range(32):
        x = rng.standard_normal((int(rng.integers(1, 5)), 128)).astype(np.float32)
        pool.append((x, reference.run({"x": x})["probs"]))
    server = Server(saggar, make_repository(["mlp"], {"mlp": MLP_CONFIG}), ["--max-request-bytes", str(MAX_REQUEST_BYTES)])
    counts = {"done": 0, "valid": 0, "malformed": 0}
    failures, rss = [], {}
    lock = threading.Lock()

    def client(c):
        r = random.Random(c)
        conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=120)
        for _ in range(REQUESTS // CLIENTS):
            bad = r.random() < 0.5
            try:
                if bad:
                    path, payload, headers = malformed(r)
                else:
                    x, expected = pool[r.randrange(len(pool))]
                    path, payload, headers = "/v2/models/mlp/infer", body(shape=x.shape, data=x.flatten().tolist()), {}
                conn.request("POST", path, body=payload, headers=headers)
                response = conn.getresponse()
                reply = response.read()
                if response.getheader("connection", "").lower() == "close":
                    conn.close()
                if bad:
                    assert 400 <= response.status < 500, f"malformed request got {response.status}: {reply[:200]}"
                    assert "error" in json.loads(reply), reply[:200]
                else:
                    assert response.status == 200, f"valid request got {response.status}: {reply[:200]}"
                    out = json.loads(reply)["outputs"][0]
                    close(np.array(out["data"], np.float32).reshape(out["shape"]), expected, "valid answer")
            except Exception as e:  # noqa: BLE001
                conn.close()
                with lock:
                    failures.append(f"{'malformed' if bad else 'valid'}: {type(e).__name__}: {e}")
            with lock:
                counts["done"] += 1
                counts["malformed" if bad else "valid"] += 1
                if counts["done"] == WARM:
                    rss["warm"] = server.rss_kib()

    try:
        server.wait_ready()
        started = time.time()
        threads = [threading.Thread(target=client, args=(c,)) for c in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        rss["end"] = server.rss_kib()
        seconds = time.time() - started
        print(f"     {counts['done']} requests ({counts['valid']} valid, {counts['malformed']} malformed) in {seconds:.1f} s; "
              f"RSS {rss.get('warm', 0) / 1024:.1f} MiB after {WARM}, {rss['end'] / 1024:.1f} MiB at the end")
        tally.check("every valid request answered correctly, every malformed one a 4xx with an error body",
                    lambda: check(not failures, f"{len(failures)} failures: {failures[:5]}"))
        tally.check("the server is still ready", lambda: check(server_ready(server), "not ready"))
        tally.check("RSS at the end within 10% of RSS after the first 1,000 requests",
                    lambda: check(rss["end"] <= rss["warm"] * 1.10, f"{rss}"))
    finally:
        code = server.stop()
    tally.check("SIGTERM after the soak: exit 0", lambda: check(code == 0, server.logs()[-2000:]))
    tally.finish()


def server_ready(server):
    conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=30)
    conn.request("GET", "/v2/health/ready")
    return conn.getresponse().status == 200


def check(condition, message):
    assert condition, message


if __name__ == "__main__":
    main()
