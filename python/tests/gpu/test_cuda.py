"""On a GPU (``gpu/run_gpu.sh``): ``CUDAExecutionProvider``, torch CUDA tensors bound through
io_binding and read and written in place (checked by pointer and by the binding mode: the
dispatcher's direct-bind path bakes the caller's pointers into its graph), and outputs handed back
to torch through DLPack without a copy. Skipped, with the reason, where there is no CUDA device or
no torch with CUDA."""

import numpy as np
import pytest

import saggar
from conftest import feeds_for, model_path

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        "CUDAExecutionProvider" not in saggar.get_available_providers(), reason="no CUDA device for saggar here"
    ),
    pytest.mark.skipif(not torch.cuda.is_available(), reason="torch has no CUDA device here"),
]

CUDA = "CUDAExecutionProvider"


def cuda_session(name, **options):
    opts = saggar.SessionOptions()
    for k, v in options.items():
        setattr(opts, k, v)
    return saggar.InferenceSession(str(model_path(name)), opts, providers=[CUDA, "CPUExecutionProvider"])


def test_the_cuda_provider_is_used():
    session = cuda_session("mlp")
    assert session.get_providers() == [CUDA]
    assert saggar.get_device() == "GPU"
    x = np.random.default_rng(0).standard_normal((5, 128)).astype(np.float32)
    host = saggar.InferenceSession(str(model_path("mlp")), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(None, {"x": x})[0], host.run(None, {"x": x})[0], rtol=1e-3, atol=1e-5)


def test_torch_cuda_tensors_are_read_and_written_in_place():
    session = cuda_session("mlp", buckets=[1, 4, 8])
    x = torch.randn(4, 128, device="cuda")
    out = torch.empty(4, 10, device="cuda")
    binding = session.io_binding()
    binding.bind_input("x", x)
    binding.bind_output("probs", out)
    for _ in range(3):
        session.run_with_iobinding(binding)
    pointers = binding._device_pointers()
    assert pointers["x"] == x.data_ptr(), "the input is read where torch keeps it"
    assert pointers["probs"] == out.data_ptr(), "the output is written where torch keeps it"
    assert binding._last_binding_mode == "DirectBind", "the caller's pointers are baked into the graph"
    assert binding.get_outputs()[0].data_ptr() == out.data_ptr()
    expected = session.run(None, {"x": x.cpu().numpy()})[0]
    np.testing.assert_allclose(out.cpu().numpy(), expected, rtol=1e-4, atol=1e-6)
    # Torch writes the next request into the same tensor; the binding reads it in place again.
    x.mul_(2)
    session.run_with_iobinding(binding)
    np.testing.assert_allclose(out.cpu().numpy(), session.run(None, {"x": x.cpu().numpy()})[0], rtol=1e-4, atol=1e-6)
    stats = session.stats()
    assert stats["replays"] >= 3, stats


def test_outputs_saggar_allocates_go_to_torch_without_a_copy():
    session = cuda_session("bert")
    feeds = feeds_for(session, "bert", 2, seed=3)
    binding = session.io_binding()
    for name, value in feeds.items():
        binding.bind_input(name, torch.from_numpy(value).cuda())
    binding.bind_output("last_hidden_state", "cuda")
    binding.bind_output("pooler_output", "cuda", 0)
    session.run_with_iobinding(binding)
    hidden, pooled = binding.get_outputs()
    assert hidden.device_name() == "cuda"
    as_torch = torch.from_dlpack(hidden)
    assert as_torch.is_cuda and as_torch.data_ptr() == hidden.data_ptr()
    expected = session.run(None, feeds)
    np.testing.assert_allclose(as_torch.cpu().numpy(), expected[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(pooled.numpy(), expected[1], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(binding.copy_outputs_to_cpu()[1], expected[1], rtol=1e-4, atol=1e-5)


def test_onnxruntime_long_form_with_raw_pointers():
    session = cuda_session("mlp", buckets=[2])
    x = torch.randn(2, 128, device="cuda")
    out = torch.empty(2, 10, device="cuda")
    binding = session.io_binding()
    binding.bind_input("x", "cuda", 0, np.float32, list(x.shape), x.data_ptr())
    binding.bind_output("probs", "cuda", 0, np.float32, list(out.shape), out.data_ptr())
    session.run_with_iobinding(binding)
    np.testing.assert_allclose(out.cpu().numpy(), session.run(None, {"x": x.cpu().numpy()})[0], rtol=1e-4, atol=1e-6)


def test_host_inputs_with_device_outputs_and_mixed_bindings():
    session = cuda_session("mlp")
    x = np.random.default_rng(2).standard_normal((3, 128)).astype(np.float32)
    binding = session.io_binding()
    binding.bind_cpu_input("x", x)
    binding.bind_output("probs", "cuda")
    session.run_with_iobinding(binding)
    (value,) = binding.get_outputs()
    assert value.device_name() == "cuda"
    np.testing.assert_allclose(torch.from_dlpack(value).cpu().numpy(), session.run(None, {"x": x})[0], rtol=1e-5)


def test_a_tensor_on_another_device_is_refused():
    session = cuda_session("mlp")
    binding = session.io_binding()
    if torch.cuda.device_count() > 1:
        with pytest.raises(saggar.InvalidArgument, match="is on cuda:1, another device than this session's"):
            binding.bind_input("x", torch.randn(2, 128, device="cuda:1"))
    noncontiguous = torch.randn(128, 2, device="cuda").t()
    with pytest.raises(saggar.InvalidArgument, match="not contiguous"):
        binding.bind_input("x", noncontiguous)
    with pytest.raises(saggar.InvalidArgument, match=r"expected tensor\(float\), got tensor\(float16\)"):
        binding.bind_input("x", torch.randn(2, 128, device="cuda", dtype=torch.float16))
    x = np.ones((2, 128), np.float32)
    assert session.run(None, {"x": x})[0].shape == (2, 10), "the session keeps serving"
