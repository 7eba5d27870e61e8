"""ONNX Runtime's API as saggar implements it: sessions from paths and bytes, NodeArgs and metadata
equal to ONNX Runtime's, run with every output, one output or an empty list, providers, options."""

import os
import warnings

import numpy as np
import onnxruntime
import pytest

import saggar
from conftest import MODEL_NAMES, ON_GPU, PROVIDER, feeds_for, model_path, session_of


def test_version_and_providers():
    assert saggar.__version__ == "0.1.0"
    assert saggar.get_available_providers()[-1] == "CPUExecutionProvider"
    assert "CUDAExecutionProvider" in saggar.get_all_providers()
    assert saggar.get_device() in ("CPU", "GPU")


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_node_args_and_metadata_equal_onnxruntimes(name):
    ours = session_of(name)
    theirs = onnxruntime.InferenceSession(str(model_path(name)), providers=["CPUExecutionProvider"])
    for a, b in zip(ours.get_inputs() + ours.get_outputs(), theirs.get_inputs() + theirs.get_outputs()):
        assert (a.name, a.shape, a.type) == (b.name, b.shape, b.type)
    assert len(ours.get_inputs()) == len(theirs.get_inputs())
    assert len(ours.get_outputs()) == len(theirs.get_outputs())
    m, n = ours.get_modelmeta(), theirs.get_modelmeta()
    for field in ["producer_name", "graph_name", "domain", "description", "graph_description", "version"]:
        assert getattr(m, field) == getattr(n, field), field
    assert m.custom_metadata_map == n.custom_metadata_map
    assert "NodeArg(name=" in repr(ours.get_inputs()[0])


def test_run_every_output_one_output_and_empty_list():
    session = session_of("bert")
    feeds = feeds_for(session, "bert", 3)
    everything = session.run(None, feeds)
    assert [o.shape for o in everything] == [(3, 16, 64), (3, 64)]
    assert all(o.dtype == np.float32 for o in everything)
    (pooled,) = session.run(["pooler_output"], feeds)
    np.testing.assert_array_equal(pooled, everything[1])
    assert len(session.run([], feeds)) == 2
    with pytest.raises(saggar.InvalidArgument, match="no output named 'logits'.*last_hidden_state"):
        session.run(["logits"], feeds)


def test_bytes_and_pathlike_sources_make_the_same_session():
    path = model_path("mlp")
    from_bytes = saggar.InferenceSession(path.read_bytes(), providers=[PROVIDER])
    from_path = saggar.InferenceSession(path, providers=[PROVIDER])
    x = np.random.default_rng(1).standard_normal((5, 128)).astype(np.float32)
    np.testing.assert_array_equal(from_bytes.run(None, {"x": x})[0], from_path.run(None, {"x": x})[0])
    with pytest.raises(saggar.InvalidArgument, match="path_or_bytes"):
        saggar.InferenceSession(12, providers=[PROVIDER])


def test_providers_map_and_fall_back_like_onnxruntime():
    path = str(model_path("mlp"))
    session = saggar.InferenceSession(path, providers=["host"])
    assert session.get_providers() == ["CPUExecutionProvider"]
    assert session.get_provider_options()["CPUExecutionProvider"]["device_id"] == "0"
    with pytest.raises(saggar.InvalidArgument, match="unknown execution provider `FooExecutionProvider`"):
        saggar.InferenceSession(path, providers=["FooExecutionProvider"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        session = saggar.InferenceSession(path, providers=["TensorrtExecutionProvider", ("CPUExecutionProvider", {})])
    assert session.get_providers() == ["CPUExecutionProvider"]
    assert any("saggar has no TensorrtExecutionProvider" in str(w.message) for w in caught)
    if not ON_GPU:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            session = saggar.InferenceSession(path, providers=["CUDAExecutionProvider"])
        assert session.get_providers() == ["CPUExecutionProvider"], "the CPU provider is the last resort"
        assert any("CUDAExecutionProvider is not available here" in str(w.message) for w in caught)
        quiet = saggar.SessionOptions()
        quiet.log_severity_level = 3
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            saggar.InferenceSession(path, quiet, providers=["CUDAExecutionProvider"])


def test_session_options_are_read():
    opts = saggar.SessionOptions()
    opts.buckets = [2, 8]
    opts.graphs = False
    opts.capture = "eager"
    opts.precision = "tf32"
    opts.intra_op_num_threads = 1
    opts.graph_optimization_level = saggar.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.add_session_config_entry("session.any", "1")
    session = saggar.InferenceSession(str(model_path("mlp")), opts, providers=[PROVIDER])
    assert session.buckets == [2, 8]
    assert session.get_session_options() is opts
    stepped = saggar.SessionOptions()
    stepped.buckets, stepped.max_batch = "stepped", 24
    assert saggar.InferenceSession(str(model_path("mlp")), stepped, providers=[PROVIDER]).buckets == [1, 2, 4, 8, 16, 24]
    x = np.ones((20, 128), np.float32)
    assert session.run(None, {"x": x})[0].shape == (20, 10), "batches above the largest bucket are split"
    stats = session.stats()
    assert stats["requests"] == 1 and stats["replays"] == 0, stats
    # An ONNX Runtime SessionOptions is read too (its saggar settings are the defaults).
    ort_options = onnxruntime.SessionOptions()
    ort_options.intra_op_num_threads = 1
    assert saggar.InferenceSession(str(model_path("mlp")), ort_options, providers=[PROVIDER]).buckets[-1] == 64


@pytest.mark.parametrize(
    "attribute, value, message",
    [
        ("buckets", "pow3", 'buckets must be "pow2", "stepped" or a list'),
        ("buckets", [0, 4], "size 0 is not between 1 and 65536"),
        ("max_batch", 10**9, "max_batch must be between 1 and 65536"),
        ("precision", "fp8", "unknown precision `fp8`: use fp32"),
        ("capture", "sometimes", 'capture must be "lazy" or "eager"'),
        ("pad_axes", {"a": [4], "b": [4]}, "names 2 axes; saggar pads one"),
        ("graphs", "yes", "graphs must be True or False"),
        ("devices", [], "devices must name at least one device"),
    ],
)
def test_bad_options_raise_invalid_argument(attribute, value, message):
    opts = saggar.SessionOptions()
    setattr(opts, attribute, value)
    with pytest.raises(saggar.InvalidArgument, match=message):
        saggar.InferenceSession(str(model_path("mlp")), opts, providers=[PROVIDER])


def test_cache_dir_keeps_compiled_programs(tmp_path):
    opts = saggar.SessionOptions()
    opts.cache_dir = str(tmp_path)
    opts.buckets = [1, 4]
    saggar.InferenceSession(str(model_path("mlp")), opts, providers=[PROVIDER])
    assert any(tmp_path.rglob("*")), "the compile cache has entries"
    again = saggar.InferenceSession(str(model_path("mlp")), opts, providers=[PROVIDER])
    assert again.stats()["compiles"] == 0, "the second session loads from the cache"


def test_pad_axes_serve_sequence_buckets():
    session = session_of("bert", pad_axes={"seq": [8, 16, 32]})
    reference = onnxruntime.InferenceSession(str(model_path("bert")), providers=["CPUExecutionProvider"])
    for seq in (5, 11, 16, 23):
        feeds = feeds_for(session, "bert", 2, seed=seq, seq=seq)
        ours, theirs = session.run(None, feeds), reference.run(None, feeds)
        for a, b in zip(ours, theirs):
            assert a.shape == b.shape
            np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4)


def test_run_options_and_profiling_are_accepted():
    session = session_of("mlp")
    run_options = saggar.RunOptions()
    run_options.log_severity_level = 3
    run_options.add_run_config_entry("key", "value")
    assert session.run(None, {"x": np.ones((1, 128), np.float32)}, run_options)[0].shape == (1, 10)
    assert session.end_profiling() == ""
    assert session.get_overridable_initializers() == []


@pytest.mark.skipif(ON_GPU, reason="a session group needs several devices; the GPU run has one")
def test_devices_on_the_host_provider_are_ignored(tmp_path):
    opts = saggar.SessionOptions()
    opts.devices = [0, 1]
    opts.cache_dir = os.fspath(tmp_path)
    session = saggar.InferenceSession(str(model_path("mlp")), opts, providers=["CPUExecutionProvider"])
    assert session.run(None, {"x": np.ones((2, 128), np.float32)})[0].shape == (2, 10)


@pytest.mark.parametrize("precision, bound", [("fp16", 3e-2), ("bf16", 1.5e-1)])
def test_half_precisions_round_the_products_within_their_tolerance(precision, bound):
    strict = session_of("mlp")
    half = session_of("mlp", precision=precision)
    x = np.linspace(-2, 2, 4 * 128, dtype=np.float32).reshape(4, 128)
    want, got = strict.run(None, {"x": x})[0], half.run(None, {"x": x})[0]
    assert got.dtype == np.float32, "inputs and outputs stay f32"
    err = float(np.max(np.abs(got - want)))
    assert 0 < err < bound * max(1.0, float(np.max(np.abs(want)))), err


def test_a_model_whose_output_extents_it_computes_runs_like_onnxruntime():
    """NonZero's count is computed from the data: saggar runs the model as segments, and `run`
    returns outputs of the extents each request produces, as ONNX Runtime does."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("NonZero", ["x"], ["i"]), helper.make_node("Neg", ["i"], ["y"])],
        "nonzero",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    sess = saggar.InferenceSession(model, providers=[PROVIDER])
    ort = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(3)
    for keep in (0.2, 0.7, 0.0):
        x = np.where(rng.random((3, 4)) < keep, 1.5, 0.0).astype(np.float32)
        (got,) = sess.run(None, {"x": x})
        (want,) = ort.run(None, {"x": x})
        assert got.dtype == want.dtype and got.shape == want.shape, (got.shape, want.shape)
        np.testing.assert_array_equal(got, want)
