"""ONNX's own backend test runner on saggar: ``onnx.backend.test.BackendTest(saggar.backend,
__name__)`` over the node tests. On the host backend the number that pass is the number ``cargo
xtask onnx-tests`` reports for the node suite (``docs/onnx-backend-tests.md``, same onnx version),
and none fails; a test saggar does not import (an op, opset or element type outside its declared
set) is skipped by ``saggar.backend.is_compatible``."""

import collections
import json
import re
import unittest

import onnx
import onnx.backend.test
import pytest

import saggar
import saggar.backend
from conftest import ON_GPU, REPO

REPORT = REPO / "docs" / "onnx-backend-tests.md"
EXPECTATIONS = REPO / "crates" / "saggar-onnx" / "tests" / "backend_expectations.txt"
GPU_REPORT = REPO / "docs" / "gpu-runs" / "onnx-backend-suite.json"
ONNX_VERSION = "1.19.1"


def xtask_node_passes():
    """The node suite's passed count in the report ``cargo xtask onnx-tests`` writes."""
    text = REPORT.read_text()
    assert f"onnx {ONNX_VERSION}" in text, "the report is of the onnx version CI pins"
    row = re.search(r"^\| node \| (\d+) \| (\d+) \|", text, re.M)
    return int(row.group(2))


def xtask_cuda_node_passes():
    """The node suite's passed count of the last GPU bundle run on CUDA (docs/gpu-runs)."""
    report = json.loads(GPU_REPORT.read_text())
    assert ONNX_VERSION in report["title"]
    return report["results"]["cuda"]["by_suite"]["node"]["passed"]


def expected_failures():
    """The tests ``cargo xtask onnx-tests`` expects to fail, each with its reason (the same list)."""
    names = set()
    for line in EXPECTATIONS.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            names.add(line.split("#")[0].strip())
    return names


def unexpected(problems, device):
    """The problems of tests not listed as expected failures."""
    listed = expected_failures()
    return [p for p in problems if re.search(rf"\.(test_\w+)_{device}:", p).group(1) not in listed]


def run_node_tests(device):
    """Runs ONNX's node tests for ``device`` through ``BackendTest(saggar.backend, __name__)`` and
    sorts the outcomes: passed; skipped (``is_compatible`` says saggar does not import the model);
    not imported (onnx versions from 1.20 on run node tests without asking ``is_compatible``, and
    saggar refuses the model at ``prepare``); refused by the backend (a node the GPU backend does not
    lower); wrong (an output differs); other errors."""
    backend_test = onnx.backend.test.BackendTest(saggar.backend, __name__)
    cases = backend_test.test_cases["OnnxBackendNodeModelTest"]
    suite = unittest.TestSuite(
        cases(name) for name in unittest.TestLoader().getTestCaseNames(cases) if name.endswith(f"_{device}")
    )
    result = unittest.TestResult()
    suite.run(result)
    outcome = collections.Counter(skipped=len(result.skipped))
    problems = []
    for test, tb in result.errors + result.failures:
        raised = re.findall(r"^(saggar\.\w+|AssertionError): (.*)$", tb, re.M)
        kind, message = raised[-1] if raised else ("", tb.strip().splitlines()[-1])
        refused_by_backend = re.search(r"not supported on the (Cuda|Hip) backend", tb)
        if kind in ("saggar.NotImplemented", "saggar.InvalidGraph") and refused_by_backend:
            outcome["refused by the backend"] += 1
        elif kind in ("saggar.NotImplemented", "saggar.InvalidGraph") and "in prepare" in tb:
            outcome["not imported"] += 1
        else:
            outcome["wrong" if kind == "AssertionError" else "other errors"] += 1
            problems.append(f"{test.id()}: {kind}: {message}")
    outcome["passed"] = result.testsRun - len(result.skipped) - len(result.errors) - len(result.failures)
    print(f"onnx {onnx.__version__} node tests on {device}: " + ", ".join(f"{v} {k}" for k, v in sorted(outcome.items())))
    return outcome, problems


@pytest.mark.skipif(ON_GPU, reason="the host backend's count; the GPU run is test_node_tests_on_cuda")
def test_node_tests_pass_as_in_xtask_onnx_tests():
    outcome, problems = run_node_tests("cpu")
    problems = unexpected(problems, "cpu")
    assert not problems, "\n".join(problems[:20])
    if onnx.__version__ == ONNX_VERSION:
        assert outcome["passed"] == xtask_node_passes()


@pytest.mark.skipif(not ON_GPU, reason="needs CUDAExecutionProvider")
def test_node_tests_on_cuda():
    """On CUDA, as on the host, no output is wrong; a node the backend does not lower is refused at
    ``prepare``. With onnx 1.19.1 the count is the GPU bundle's (``docs/gpu-runs``)."""
    outcome, problems = run_node_tests("cuda")
    problems = unexpected(problems, "cuda")
    assert not problems, "\n".join(problems[:20])
    assert outcome["passed"] > 0
    if onnx.__version__ == ONNX_VERSION:
        assert outcome["passed"] == xtask_cuda_node_passes()


def test_backend_api():
    import numpy as np
    from onnx import helper

    node = helper.make_node("Add", ["a", "b"], ["c"])
    a, b = np.ones((2, 3), np.float32), np.full((2, 3), 2, np.float32)
    (c,) = saggar.backend.run_node(node, [a, b], device="CUDA" if ON_GPU else "CPU")
    np.testing.assert_array_equal(c, a + b)
    assert saggar.backend.supports_device("CPU")
    assert saggar.backend.supports_device("CUDA") == ("CUDAExecutionProvider" in saggar.get_available_providers())
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["n", 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    (y,) = saggar.backend.run_model(model, [np.array([[-1, 2, -3, 4]], np.float32)])
    np.testing.assert_array_equal(y, [[0, 2, 0, 4]])
    unsupported = helper.make_model(
        helper.make_graph(
            [helper.make_node("SaggarNoSuchOp", ["x"], ["y"])],
            "g",
            [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4])],
            [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4])],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
        ir_version=8,
    )
    assert not saggar.backend.is_compatible(unsupported)
    with pytest.raises(saggar.NotImplemented, match="SaggarNoSuchOp"):
        saggar.backend.prepare(unsupported)
