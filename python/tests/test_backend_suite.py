"""ONNX's own backend test runner on saggar: ``onnx.backend.test.BackendTest(saggar.backend,
__name__)`` over the node tests. On the host backend the number that pass is the number ``cargo
xtask onnx-tests`` reports for the node suite (``docs/onnx-backend-tests.md``, same onnx version),
and none fails; a test saggar does not import (an op, opset or element type outside its declared
set) is skipped by ``saggar.backend.is_compatible``."""

import re
import unittest

import onnx
import onnx.backend.test
import pytest

import saggar
import saggar.backend
from conftest import ON_GPU, REPO

REPORT = REPO / "docs" / "onnx-backend-tests.md"
ONNX_VERSION = "1.19.1"


def xtask_node_passes():
    """The node suite's passed count in the report ``cargo xtask onnx-tests`` writes."""
    text = REPORT.read_text()
    assert f"onnx {ONNX_VERSION}" in text, "the report is of the onnx version CI pins"
    row = re.search(r"^\| node \| (\d+) \| (\d+) \|", text, re.M)
    return int(row.group(2))


def run_node_tests(device):
    backend_test = onnx.backend.test.BackendTest(saggar.backend, __name__)
    cases = backend_test.test_cases["OnnxBackendNodeModelTest"]
    suite = unittest.TestSuite(
        cases(name) for name in unittest.TestLoader().getTestCaseNames(cases) if name.endswith(f"_{device}")
    )
    result = unittest.TestResult()
    suite.run(result)
    passed = result.testsRun - len(result.skipped) - len(result.failures) - len(result.errors)
    return result, passed


@pytest.mark.skipif(ON_GPU, reason="the host backend's count; the GPU run is test_node_tests_on_cuda")
@pytest.mark.skipif(onnx.__version__ != ONNX_VERSION, reason=f"the xtask count is of onnx {ONNX_VERSION}")
def test_node_tests_pass_as_in_xtask_onnx_tests():
    result, passed = run_node_tests("cpu")
    problems = [f"{t.id()}: {tb.strip().splitlines()[-1]}" for t, tb in result.failures + result.errors]
    print(f"onnx {onnx.__version__} node tests on host: {passed} passed, {len(result.skipped)} skipped, "
          f"{len(problems)} failed")
    assert not problems, "\n".join(problems[:20])
    assert passed == xtask_node_passes()


@pytest.mark.skipif(not ON_GPU, reason="needs CUDAExecutionProvider")
def test_node_tests_on_cuda():
    """On CUDA a node the backend does not lower is refused (saggar.NotImplemented) at prepare;
    every other test passes."""
    result, passed = run_node_tests("cuda")
    refused = [t for t, tb in result.errors if "saggar.NotImplemented" in tb or "not supported on the Cuda backend" in tb]
    problems = [f"{t.id()}: {tb.strip().splitlines()[-1]}" for t, tb in result.failures + result.errors if t not in refused]
    print(f"onnx {onnx.__version__} node tests on CUDA: {passed} passed, {len(refused)} refused by the backend, "
          f"{len(result.skipped)} skipped, {len(problems)} failed")
    assert not problems, "\n".join(problems[:20])
    assert passed > 0


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
            [helper.make_node("Cos", ["x"], ["y"])],
            "g",
            [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4])],
            [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4])],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
        ir_version=8,
    )
    assert not saggar.backend.is_compatible(unsupported)
    with pytest.raises(saggar.NotImplemented, match="Cos"):
        saggar.backend.prepare(unsupported)
