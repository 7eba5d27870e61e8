"""``saggar.backend``: an ``onnx.backend.base.Backend`` over saggar sessions, so ONNX's own test
runner (``onnx.backend.test.BackendTest(saggar.backend, __name__)``) runs on saggar.

``prepare`` imports the model into a session on the device's provider (``"CPU"``: the host
backend; ``"CUDA"``: the cuda backend). A model whose output shapes depend on the values of some
inputs (a Reshape ``shape`` or Slice ``starts`` fed as graph inputs, as in many node tests) gets a
program per shape and values of those inputs, every input fed, as ``cargo xtask onnx-tests`` runs
it. ``is_compatible`` says whether saggar imports the model (its ops, opsets and element types), so
the runner skips what saggar does not declare.

``onnx`` is needed only by this module, not by ``saggar`` itself.
"""

import warnings

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep, Device, DeviceType, namedtupledict

from . import Error, InferenceSession, SessionOptions, get_available_providers
from . import NotImplemented as NotImplementedHere

#: The newest opset saggar imports (``run_node`` builds its models at it).
MAX_OPSET = 21

_PROVIDERS = {DeviceType.CPU: "CPUExecutionProvider", DeviceType.CUDA: "CUDAExecutionProvider"}


def _provider(device):
    return _PROVIDERS[Device(device).type]


def _options():
    options = SessionOptions()
    # Node tests have fixed shapes; a small grid keeps session creation short for the rest.
    options.max_batch = 4
    return options


def _session(model_bytes, provider, **kwargs):
    """A session on ``provider`` alone. An ``InferenceSession`` falls back to the next provider (the
    CPU) when its provider refuses the model, as ONNX Runtime does; a backend runs on the device it
    was asked for, so a refusal is raised, with the provider's reason."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        session = InferenceSession(model_bytes, _options(), providers=[provider], **kwargs)
    if session.get_providers() != [provider]:
        reasons = "; ".join(str(w.message) for w in caught)
        raise NotImplementedHere(f"{provider} does not run the model: {reasons}")
    return session


class SaggarRep(BackendRep):
    """A prepared model: its session."""

    def __init__(self, input_names, output_names, session):
        self._inputs = input_names
        self._outputs = output_names
        self._session = session

    def run(self, inputs, **kwargs):
        if isinstance(inputs, dict):
            feeds = dict(inputs)
        else:
            if not isinstance(inputs, (list, tuple)):
                inputs = [inputs]
            feeds = dict(zip(self._inputs, inputs))
        feeds = {name: np.asarray(value) for name, value in feeds.items()}
        outputs = self._session.run(None, feeds)
        return namedtupledict("Outputs", self._outputs)(*outputs)


#: The last model prepared (bytes, provider) and its rep: the runner asks ``is_compatible`` and then
#: ``prepare`` for the same model, which should not compile twice.
_last = None


class SaggarBackend(Backend):
    """saggar as an ONNX backend."""

    @classmethod
    def is_compatible(cls, model, device="CPU", **kwargs):
        """Whether saggar imports ``model`` on ``device``'s provider: its ops, opsets and element
        types are in saggar's declared op set."""
        if not cls.supports_device(device):
            return False
        try:
            cls.prepare(model, device, **kwargs)
        except Error:
            return False
        return True

    @classmethod
    def prepare(cls, model, device="CPU", **kwargs):
        if not isinstance(model, (bytes, bytearray)):
            model_bytes = model.SerializeToString()
        else:
            model_bytes = bytes(model)
            model = onnx.load_from_string(model_bytes)
        initializers = {i.name for i in model.graph.initializer}
        input_names = [i.name for i in model.graph.input if i.name not in initializers]
        output_names = [o.name for o in model.graph.output]
        provider = _provider(device)
        global _last
        if _last is not None and _last[0] == model_bytes and _last[1] == provider:
            return _last[2]
        rep = SaggarRep(input_names, output_names, _session(model_bytes, provider))
        _last = (model_bytes, provider, rep)
        return rep

    @classmethod
    def run_model(cls, model, inputs, device="CPU", **kwargs):
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node, inputs, device="CPU", outputs_info=None, **kwargs):
        """Runs one node on ``inputs`` (numpy arrays, in the node's input order) by making a model of
        it; output types come from ``outputs_info`` (``(dtype, shape)`` pairs) or ONNX's shape
        inference."""
        values = [np.asarray(v) for v in inputs]
        names = [n for n in node.input if n]
        graph_inputs = [
            onnx.helper.make_tensor_value_info(n, onnx.helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
            for n, v in zip(names, values)
        ]
        if outputs_info is not None:
            graph_outputs = [
                onnx.helper.make_tensor_value_info(n, onnx.helper.np_dtype_to_tensor_dtype(np.dtype(t)), s)
                for n, (t, s) in zip(node.output, outputs_info)
            ]
        else:
            graph_outputs = [onnx.helper.make_empty_tensor_value_info(n) for n in node.output if n]
        graph = onnx.helper.make_graph([node], "node", graph_inputs, graph_outputs)
        # The newest opset saggar imports (and the IR version of that opset), unless asked otherwise.
        opset = kwargs.get("opset_version", min(onnx.defs.onnx_opset_version(), MAX_OPSET))
        ir_version = onnx.helper.find_min_ir_version_for([onnx.helper.make_opsetid("", opset)])
        model = onnx.helper.make_model(
            graph, opset_imports=[onnx.helper.make_opsetid("", opset)], ir_version=ir_version
        )
        if outputs_info is None:
            model = onnx.shape_inference.infer_shapes(model)
            inferred = {v.name: v for v in model.graph.value_info}
            for out in model.graph.output:
                if out.name in inferred:
                    out.CopyFrom(inferred[out.name])
        return cls.run_model(model, dict(zip(names, values)), device, **kwargs)

    @classmethod
    def supports_device(cls, device):
        try:
            provider = _provider(device)
        except KeyError:
            return False
        return provider in get_available_providers()


prepare = SaggarBackend.prepare
run_model = SaggarBackend.run_model
run_node = SaggarBackend.run_node
supports_device = SaggarBackend.supports_device
is_compatible = SaggarBackend.is_compatible
