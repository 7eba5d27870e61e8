"""Shared fixtures of the saggar Python tests.

The provider under test is ``SAGGAR_TEST_PROVIDER`` (default ``CPUExecutionProvider``, the host
backend, as in CI); ``gpu/run_gpu.sh`` runs the same tests with ``CUDAExecutionProvider``. A
provider named there that has no device fails the run instead of falling back to the CPU.
"""

import os
from pathlib import Path

import numpy as np
import pytest

import saggar

REPO = Path(__file__).resolve().parents[2]
MODELS = REPO / "crates" / "saggar-onnx" / "models"
MODEL_NAMES = ["bert", "dlrm", "mlp", "cnn"]
PROVIDER = os.environ.get("SAGGAR_TEST_PROVIDER", "CPUExecutionProvider")
ON_GPU = PROVIDER != "CPUExecutionProvider"


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a GPU provider (CUDAExecutionProvider); skipped on the host")
    if PROVIDER not in saggar.get_available_providers():
        raise pytest.UsageError(
            f"SAGGAR_TEST_PROVIDER={PROVIDER} has no device here (available: {saggar.get_available_providers()})"
        )


def pytest_report_header(config):
    return f"saggar {saggar.__version__}, provider under test: {PROVIDER}"


def model_path(name):
    return MODELS / name / "model.onnx"


def read_pb(path):
    """A TensorProto file as a numpy array (needs onnx)."""
    import onnx
    from onnx import numpy_helper

    tensor = onnx.TensorProto()
    tensor.ParseFromString(Path(path).read_bytes())
    return numpy_helper.to_array(tensor)


def data_sets(name):
    """The model's test data sets: (inputs, expected outputs) per set."""
    sets = []
    for set_dir in sorted((MODELS / name).glob("test_data_set_*")):
        number = lambda p: int(p.stem.split("_")[1])  # noqa: E731
        inputs = [read_pb(p) for p in sorted(set_dir.glob("input_*.pb"), key=number)]
        outputs = [read_pb(p) for p in sorted(set_dir.glob("output_*.pb"), key=number)]
        sets.append((inputs, outputs))
    return sets


def rows_pool(name):
    """Every input row of the model's data sets, per input (batch axis 0), for requests of any batch."""
    pools = None
    for inputs, _ in data_sets(name):
        if pools is None:
            pools = [[] for _ in inputs]
        for k, x in enumerate(inputs):
            pools[k].extend(list(x))
    return [np.stack(p) for p in pools]


def feeds_for(session, name, batch, seed=0, seq=None):
    """A request of ``batch`` rows drawn from the model's data sets; for BERT with ``seq`` the
    sequence is cut or repeated to that length (the mask keeps a masked tail)."""
    rng = np.random.default_rng(seed)
    pools = rows_pool(name)
    picks = rng.integers(0, len(pools[0]), size=batch)
    names = [i.name for i in session.get_inputs()]
    feeds = {}
    for n, pool in zip(names, pools):
        x = pool[picks]
        if seq is not None:
            reps = -(-seq // x.shape[1])
            x = np.tile(x, (1, reps))[:, :seq]
            if n == "attention_mask":
                x = np.ones_like(x)
                x[:, max(1, seq - 3):] = rng.integers(0, 2, size=(batch, seq - max(1, seq - 3)))
        feeds[n] = np.ascontiguousarray(x)
    return feeds


@pytest.fixture(scope="session")
def provider():
    return PROVIDER


_sessions = {}


def session_of(name, **options):
    """A session of repository model ``name`` on the provider under test, cached per options."""
    key = (name, repr(sorted(options.items())))
    if key not in _sessions:
        opts = saggar.SessionOptions()
        for k, v in options.items():
            setattr(opts, k, v)
        _sessions[key] = saggar.InferenceSession(str(model_path(name)), opts, providers=[PROVIDER])
    return _sessions[key]
