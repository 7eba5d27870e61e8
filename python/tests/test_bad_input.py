"""Bad input: each raises a ``saggar.Error`` subclass naming the input, the expected and the actual,
and the session serves the next valid request. A non-contiguous array is accepted and copied once;
a request past the session's limits is refused before anything its size is copied or allocated."""

import ctypes
import tracemalloc

import numpy as np
import pytest

import saggar
from conftest import PROVIDER, feeds_for, model_path, session_of


def serves(session, name="mlp"):
    """The session answers a valid request correctly after a bad one."""
    feeds = feeds_for(session, name, 2, seed=7)
    first = session.run(None, feeds)
    again = session.run(None, feeds)
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)


X = np.ones((2, 128), np.float32)


@pytest.mark.parametrize(
    "feeds, error, message",
    [
        ({"x": X, "y": X}, saggar.InvalidArgument, "no input named 'y'; its inputs are: x"),
        ({}, saggar.InvalidArgument, "missing input `x`"),
        ({"x": X.astype(np.float64)}, saggar.InvalidArgument, r"input 'x': expected tensor\(float\), got tensor\(double\)"),
        ({"x": X.astype(np.int64)}, saggar.InvalidArgument, r"expected tensor\(float\), got tensor\(int64\)"),
        ({"x": X[None]}, saggar.InvalidArgument, r"input 'x': expected rank 2 \(shape \['batch', 128\]\), got rank 3"),
        ({"x": np.ones((2, 64), np.float32)}, saggar.InvalidArgument, "input `x` axis 1 is fixed at 128, the request gives 64"),
        ({"x": np.ones((0, 128), np.float32)}, saggar.InvalidArgument, "input `x` has a batch of 0"),
        ({"x": X.astype(np.complex64)}, saggar.InvalidArgument, "numpy complex64, which has no ONNX element type"),
        ({"x": "not an array"}, saggar.InvalidArgument, "'x' is numpy <U12"),
        ({1: X}, saggar.InvalidArgument, "input_feed's keys must be input names"),
    ],
    ids=["unknown-name", "missing", "float64", "int64", "rank", "fixed-extent", "zero-batch", "complex", "string", "key"],
)
def test_bad_feeds_raise_and_the_session_keeps_serving(feeds, error, message):
    session = session_of("mlp")
    with pytest.raises(error, match=message):
        session.run(None, feeds)
    serves(session)


def test_errors_are_saggar_errors():
    assert issubclass(saggar.InvalidArgument, saggar.Error)
    assert issubclass(saggar.ShapeDependsOnData, saggar.NotImplemented)
    assert issubclass(saggar.Error, Exception)


def test_a_non_contiguous_array_is_accepted_and_copied_once():
    session = session_of("mlp")
    wide = np.random.default_rng(3).standard_normal((64, 256)).astype(np.float32)
    strided = wide[:, ::2]
    assert not strided.flags["C_CONTIGUOUS"]
    expected = session.run(None, {"x": np.ascontiguousarray(strided)})[0]
    session.run(None, {"x": strided})
    tracemalloc.start()
    tracemalloc.reset_peak()
    got = session.run(None, {"x": strided})[0]
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    np.testing.assert_array_equal(got, expected)
    copy_bytes = strided.size * 4
    # One copy of the input and the output array; a second copy would double the first term.
    assert peak < copy_bytes + got.nbytes + copy_bytes // 2, (peak, copy_bytes)
    fortran = np.asfortranarray(np.ascontiguousarray(strided))
    np.testing.assert_array_equal(session.run(None, {"x": fortran})[0], expected)


def test_a_request_past_the_limits_is_refused_before_it_is_copied():
    opts = saggar.SessionOptions()
    opts.max_request_bytes = 1 << 20
    session = saggar.InferenceSession(str(model_path("mlp")), opts, providers=[PROVIDER])
    # 2^20 rows that take no memory: a zero-stride view claiming 512 MiB.
    claim = np.broadcast_to(np.ones((1, 128), np.float32), (1 << 20, 128))
    tracemalloc.start()
    with pytest.raises(saggar.InvalidArgument, match="above the session's limit"):
        session.run(None, {"x": claim})
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 1 << 20, f"{peak} bytes were allocated for a refused request"
    serves(session)
    rows = saggar.SessionOptions()
    rows.max_request_rows = 8
    limited = saggar.InferenceSession(str(model_path("mlp")), rows, providers=[PROVIDER])
    with pytest.raises(saggar.InvalidArgument, match="needs 9 rows, above the session's limit of 8"):
        limited.run(None, {"x": np.ones((9, 128), np.float32)})
    serves(limited)


def test_paths_that_are_not_models(tmp_path):
    text = tmp_path / "notes.onnx"
    text.write_text("this is not a protobuf, it is a sentence\n" * 4)
    with pytest.raises(saggar.InvalidProtobuf, match="not a valid ONNX ModelProto"):
        saggar.InferenceSession(str(text), providers=[PROVIDER])
    with pytest.raises(saggar.NoSuchFile, match="no_such.onnx"):
        saggar.InferenceSession(str(tmp_path / "no_such.onnx"), providers=[PROVIDER])
    with pytest.raises(saggar.NoSuchFile):
        saggar.InferenceSession(str(tmp_path), providers=[PROVIDER])
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(model_path("mlp").read_bytes()[:1000])
    with pytest.raises(saggar.Error):
        saggar.InferenceSession(str(truncated), providers=[PROVIDER])
    with pytest.raises(saggar.InvalidProtobuf):
        saggar.InferenceSession(b"\x00\x01garbage", providers=[PROVIDER])
    serves(session_of("mlp"))


class _ForeignTensor:
    """A DLPack producer claiming a tensor on another device (``__dlpack_device__`` is asked first,
    so its data is never touched)."""

    def __init__(self, device):
        self.device = device
        self.exported = False

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, **kwargs):
        self.exported = True
        raise AssertionError("saggar must refuse the tensor from its device before taking it")


def test_a_dlpack_tensor_on_another_device_is_refused():
    session = session_of("mlp")
    binding = session.io_binding()
    other = (2, 7)  # kDLCUDA, device 7: never the session's device
    foreign = _ForeignTensor(other)
    with pytest.raises(saggar.InvalidArgument, match="input 'x' is on cuda:7, another device than this session's"):
        binding.bind_input("x", foreign)
    assert not foreign.exported
    with pytest.raises(saggar.InvalidArgument, match="output 'probs' is on cuda:7"):
        binding.bind_output("probs", _ForeignTensor(other))
    with pytest.raises(saggar.InvalidArgument, match="is on cuda:7"):
        binding.bind_input("x", "cuda", 7, np.float32, [2, 128], 0xDEAD0000)
    binding.bind_input("x", X)
    binding.bind_output("probs")
    session.run_with_iobinding(binding)
    np.testing.assert_allclose(binding.copy_outputs_to_cpu()[0], session.run(None, {"x": X})[0])
    serves(session)


def test_a_dlpack_capsule_of_another_device_is_refused_after_reading_its_header():
    """A raw capsule has no ``__dlpack_device__``: its header says where it is. Built with ctypes as
    a producer would; the deleter runs once saggar refuses it."""

    class DLDevice(ctypes.Structure):
        _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]

    class DLDataType(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]

    class DLTensor(ctypes.Structure):
        _fields_ = [
            ("data", ctypes.c_void_p),
            ("device", DLDevice),
            ("ndim", ctypes.c_int32),
            ("dtype", DLDataType),
            ("shape", ctypes.POINTER(ctypes.c_int64)),
            ("strides", ctypes.POINTER(ctypes.c_int64)),
            ("byte_offset", ctypes.c_uint64),
        ]

    class DLManagedTensor(ctypes.Structure):
        pass

    deleter_type = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
    DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", deleter_type)]
    deleted = []
    deleter = deleter_type(lambda _: deleted.append(True))
    shape = (ctypes.c_int64 * 2)(2, 128)
    managed = DLManagedTensor(
        DLTensor(0xDEAD0000, DLDevice(2, 5), 2, DLDataType(2, 32, 1), shape, None, 0), None, deleter
    )
    new_capsule = ctypes.pythonapi.PyCapsule_New
    new_capsule.restype = ctypes.py_object
    new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    capsule = new_capsule(ctypes.addressof(managed), b"dltensor", None)
    session = session_of("mlp")
    with pytest.raises(saggar.InvalidArgument, match="input 'x' is on cuda:5"):
        session.io_binding().bind_input("x", capsule)
    assert deleted == [True], "the refused tensor's deleter was called"
    serves(session)
