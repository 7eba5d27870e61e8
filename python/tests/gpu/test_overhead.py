"""Python's overhead per ``run``: the BERT test model at batch 1 on CUDA, ``session.run`` from Python
against the same request through Rust's ``Session::run_into`` (``_rust_run_into_seconds``: the same
session and feeds, a loop with no Python in it), both measured in this one process, interleaved in
rounds, medians compared. The issue's bound: at most 10 us more per run."""

import gc
import json
import os
import statistics
import time

import pytest

import saggar
from conftest import feeds_for, model_path

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        "CUDAExecutionProvider" not in saggar.get_available_providers(), reason="no CUDA device for saggar here"
    ),
]

BOUND_US = 10.0
ROUNDS = 7
ITERATIONS = 2000


def python_seconds(session, feeds, iterations):
    """Seconds per ``run`` from Python, with the garbage collector off as ``timeit`` has it."""
    run = session.run
    gc.disable()
    try:
        started = time.perf_counter()
        for _ in range(iterations):
            run(None, feeds)
        return (time.perf_counter() - started) / iterations
    finally:
        gc.enable()


def test_python_overhead_per_run_is_at_most_10us():
    opts = saggar.SessionOptions()
    # Batch 1 at sequence 16 is an exact grid cell: the ultra-fast path and a replayed graph.
    opts.pad_axes = {"seq": [16]}
    session = saggar.InferenceSession(str(model_path("bert")), opts, providers=["CUDAExecutionProvider"])
    feeds = feeds_for(session, "bert", 1, seed=0)
    python_seconds(session, feeds, 500)
    session._rust_run_into_seconds(feeds, 500)
    rust, python = [], []
    for _ in range(ROUNDS):
        rust.append(session._rust_run_into_seconds(feeds, ITERATIONS, 50) * 1e6)
        python.append(python_seconds(session, feeds, ITERATIONS) * 1e6)
    rust_us, python_us = statistics.median(rust), statistics.median(python)
    overhead = python_us - rust_us
    report = {
        "model": "bert (crates/saggar-onnx/models/bert), batch 1, seq 16",
        "provider": "CUDAExecutionProvider",
        "rust_run_into_us": rust_us,
        "python_run_us": python_us,
        "overhead_us": overhead,
        "overhead_of_best_rounds_us": min(python) - min(rust),
        "rounds_rust_us": rust,
        "rounds_python_us": python,
        "iterations_per_round": ITERATIONS,
        "stats": session.stats(),
    }
    print(json.dumps(report, indent=1))
    out = os.environ.get("SAGGAR_OVERHEAD_REPORT")
    if out:
        with open(out, "w") as f:
            json.dump(report, f, indent=1)
    assert overhead <= BOUND_US, report
