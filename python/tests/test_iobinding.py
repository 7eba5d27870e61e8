"""``io_binding`` on host memory (the provider under test's host path): numpy arrays bound in and
out, new outputs as ``OrtValue``s with DLPack, ONNX Runtime's forms of the calls, and the errors of
a binding used wrongly. Device tensors are in ``gpu/test_cuda.py``."""

import numpy as np
import pytest

import saggar
from conftest import ON_GPU, feeds_for, session_of


def test_numpy_in_new_outputs_out():
    session = session_of("bert")
    feeds = feeds_for(session, "bert", 3, seed=2)
    expected = session.run(None, feeds)
    binding = session.io_binding()
    for name, value in feeds.items():
        binding.bind_input(name, value)
    binding.bind_output("pooler_output")
    binding.bind_output("last_hidden_state", "cpu")
    session.run_with_iobinding(binding)
    values = binding.get_outputs()
    assert [v.shape() for v in values] == [[3, 64], [3, 16, 64]], "outputs in the order they were bound"
    assert values[0].device_name() == "cpu" and values[0].data_type() == "tensor(float)"
    np.testing.assert_array_equal(values[0].numpy(), expected[1])
    np.testing.assert_array_equal(binding.copy_outputs_to_cpu()[1], expected[0])
    np.testing.assert_array_equal(np.from_dlpack(values[1]), expected[0])
    assert binding._last_binding_mode == "PinnedCopy"


def test_outputs_written_in_place_into_the_callers_array():
    session = session_of("mlp")
    x = np.random.default_rng(0).standard_normal((4, 128)).astype(np.float32)
    out = np.zeros((4, 10), np.float32)
    binding = session.io_binding()
    binding.bind_cpu_input("x", x)
    binding.bind_output("probs", out)
    session.run_with_iobinding(binding)
    np.testing.assert_array_equal(out, session.run(None, {"x": x})[0])
    assert binding.get_outputs()[0].data_ptr() == out.ctypes.data, "the caller's array, not a copy"
    # Rebinding a new input of the same shape reuses the binding.
    y = x * 2
    binding.bind_input("x", y)
    session.run_with_iobinding(binding)
    np.testing.assert_array_equal(out, session.run(None, {"x": y})[0])


def test_ortvalues_bind_like_onnxruntimes():
    session = session_of("mlp")
    x = np.ones((2, 128), np.float32)
    value = saggar.OrtValue.ortvalue_from_numpy(x)
    assert value.shape() == [2, 128] and value.is_tensor() and value.has_value()
    binding = session.io_binding()
    binding.bind_ortvalue_input("x", value)
    out = saggar.OrtValue.ortvalue_from_numpy(np.empty((2, 10), np.float32))
    binding.bind_ortvalue_output("probs", out)
    session.run_with_iobinding(binding)
    np.testing.assert_array_equal(out.numpy(), session.run(None, {"x": x})[0])
    if not ON_GPU:
        with pytest.raises(saggar.NotImplemented, match="bind a torch or cupy tensor"):
            saggar.OrtValue.ortvalue_from_numpy(x, "cuda", 0)


def test_a_non_contiguous_bound_input_is_copied_once_per_run():
    session = session_of("mlp")
    wide = np.random.default_rng(4).standard_normal((3, 256)).astype(np.float32)
    binding = session.io_binding()
    binding.bind_input("x", wide[:, ::2])
    binding.bind_output("probs")
    session.run_with_iobinding(binding)
    np.testing.assert_array_equal(binding.copy_outputs_to_cpu()[0], session.run(None, {"x": wide[:, ::2].copy()})[0])


def test_a_badly_used_binding_raises_and_the_session_keeps_serving():
    session = session_of("mlp")
    binding = session.io_binding()
    binding.bind_output("probs")
    with pytest.raises(saggar.InvalidArgument, match="input 'x' is not bound"):
        session.run_with_iobinding(binding)
    with pytest.raises(saggar.InvalidArgument, match="no input named 'y'"):
        binding.bind_input("y", np.ones((1, 128), np.float32))
    with pytest.raises(saggar.InvalidArgument, match=r"expected tensor\(float\), got tensor\(int32\)"):
        binding.bind_input("x", np.ones((1, 128), np.int32))
    with pytest.raises(saggar.InvalidArgument, match="no output named 'logits'"):
        binding.bind_output("logits")
    binding.bind_input("x", np.ones((2, 128), np.float32))
    binding.bind_output("probs", np.zeros((3, 10), np.float32))
    with pytest.raises(saggar.InvalidArgument, match=r"output 'probs' is bound to a tensor of shape \[3, 10\]"):
        session.run_with_iobinding(binding)
    with pytest.raises(saggar.InvalidArgument, match="writable C-contiguous"):
        binding.bind_output("probs", np.zeros((10, 2), np.float32).T)
    if not ON_GPU:
        with pytest.raises(saggar.InvalidArgument, match="the session runs on the CPU"):
            binding.bind_output("probs", "cuda")
    other = session_of("cnn").io_binding()
    with pytest.raises(saggar.InvalidArgument, match="belongs to another session"):
        session.run_with_iobinding(other)
    binding.clear_binding_outputs()
    binding.bind_output("probs")
    session.run_with_iobinding(binding)
    assert binding.copy_outputs_to_cpu()[0].shape == (2, 10)
    binding.clear_binding_inputs()
    with pytest.raises(saggar.InvalidArgument, match="not bound"):
        session.run_with_iobinding(binding)
    binding.synchronize_inputs()
    binding.synchronize_outputs()


def test_torch_cpu_tensors_bind_through_dlpack():
    torch = pytest.importorskip("torch")
    session = session_of("mlp")
    x = torch.randn(3, 128)
    out = torch.zeros(3, 10)
    binding = session.io_binding()
    binding.bind_input("x", x)
    binding.bind_output("probs", out)
    session.run_with_iobinding(binding)
    np.testing.assert_allclose(out.numpy(), session.run(None, {"x": x.numpy()})[0])
