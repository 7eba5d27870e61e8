"""saggar: ONNX Runtime's Python API over saggar sessions.

Code written for ``onnxruntime`` runs with its import changed::

    import saggar as ort

    session = ort.InferenceSession("model.onnx", providers=["CUDAExecutionProvider"])
    outputs = session.run(None, {"x": x})

Providers map onto saggar's backends: ``CUDAExecutionProvider`` is cuda,
``ROCMExecutionProvider`` and ``MIGraphXExecutionProvider`` are hip, ``CPUExecutionProvider`` is
the host backend (saggar's own names ``cuda``, ``hip`` and ``host`` work too). ``saggar.backend`` is
an ``onnx.backend.base.Backend`` for ONNX's own test runner.
"""

from ._saggar import (
    EPFail,
    Error,
    Fail,
    InferenceSession,
    InvalidArgument,
    InvalidGraph,
    InvalidProtobuf,
    IOBinding,
    ModelMetadata,
    NodeArg,
    NoSuchFile,
    NotImplemented,
    OrtValue,
    ShapeDependsOnData,
    __version__,
    get_all_providers,
    get_available_providers,
    get_device,
)
from ._options import ExecutionMode, ExecutionOrder, GraphOptimizationLevel, RunOptions, SessionOptions

__all__ = [
    "EPFail",
    "Error",
    "ExecutionMode",
    "ExecutionOrder",
    "Fail",
    "GraphOptimizationLevel",
    "InferenceSession",
    "InvalidArgument",
    "InvalidGraph",
    "InvalidProtobuf",
    "IOBinding",
    "ModelMetadata",
    "NodeArg",
    "NoSuchFile",
    "NotImplemented",
    "OrtValue",
    "RunOptions",
    "SessionOptions",
    "ShapeDependsOnData",
    "__version__",
    "get_all_providers",
    "get_available_providers",
    "get_device",
]
