//! `saggar.Error` and its subclasses, named after ONNX Runtime's (`InvalidArgument`, `NoSuchFile`,
//! `InvalidProtobuf`, ...), and the mapping of every saggar error onto them. The message is the
//! saggar error's own: it names the input, the expected and the actual.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use saggar_dispatch::{DispatchError, FailureKind};
use saggar_onnx::OnnxError;

create_exception!(saggar, Error, PyException, "Every error saggar raises.");
create_exception!(
    saggar,
    InvalidArgument,
    Error,
    "A bad call: an unknown, missing or duplicate input, a wrong dtype, rank or extent, a zero batch, a request past the \
     session's limits, a tensor on another device, an invalid option. The session keeps serving."
);
create_exception!(saggar, NoSuchFile, Error, "The model path names no readable file.");
create_exception!(saggar, InvalidProtobuf, Error, "The file or bytes are not an ONNX model (a serialized ModelProto).");
create_exception!(saggar, InvalidGraph, Error, "An ONNX model saggar cannot import: a malformed graph or types.");
create_exception!(
    saggar,
    NotImplemented,
    Error,
    "An ONNX model outside saggar's declared op set (an op, opset, attribute or element type), or an op the chosen \
     backend does not lower."
);
create_exception!(
    saggar,
    ShapeDependsOnData,
    NotImplemented,
    "An output's shape depends on the values of some inputs, not only their shapes: saggar compiles per input shape. \
     Bind those inputs as constants (saggar.backend does this for the ONNX backend tests)."
);
create_exception!(saggar, EPFail, Error, "The execution provider's device failed (a driver error).");
create_exception!(saggar, Fail, Error, "Anything else: the compile cache, a compile, an internal failure.");

/// Adds the exception classes to the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("Error", py.get_type::<Error>())?;
    m.add("InvalidArgument", py.get_type::<InvalidArgument>())?;
    m.add("NoSuchFile", py.get_type::<NoSuchFile>())?;
    m.add("InvalidProtobuf", py.get_type::<InvalidProtobuf>())?;
    m.add("InvalidGraph", py.get_type::<InvalidGraph>())?;
    m.add("NotImplemented", py.get_type::<NotImplemented>())?;
    m.add("ShapeDependsOnData", py.get_type::<ShapeDependsOnData>())?;
    m.add("EPFail", py.get_type::<EPFail>())?;
    m.add("Fail", py.get_type::<Fail>())?;
    Ok(())
}

/// An `InvalidArgument` with `message`.
pub(crate) fn invalid(message: impl Into<String>) -> PyErr {
    InvalidArgument::new_err(message.into())
}

/// The exception for an import or compile error of saggar-onnx.
pub(crate) fn onnx(error: &OnnxError) -> PyErr {
    let message = error.to_string();
    match error {
        OnnxError::Io(e) if e.source.kind() == std::io::ErrorKind::NotFound => NoSuchFile::new_err(message),
        OnnxError::Io(_) => NoSuchFile::new_err(message),
        OnnxError::Decode { .. } => InvalidProtobuf::new_err(message),
        OnnxError::ShapeDependsOnData { .. } => ShapeDependsOnData::new_err(message),
        OnnxError::UnsupportedOp { .. }
        | OnnxError::Opset { .. }
        | OnnxError::IrVersion { .. }
        | OnnxError::Node { .. }
        | OnnxError::Nodes { .. }
        | OnnxError::ValueType { .. }
        | OnnxError::UnsupportedOnBackend { .. } => NotImplemented::new_err(message),
        OnnxError::Request { .. } => InvalidArgument::new_err(message),
        OnnxError::Device(_) => EPFail::new_err(message),
        _ => InvalidGraph::new_err(message),
    }
}

/// The exception for a session error, by the kind the session counts it as
/// (`DispatchError::failure_kind`): a bad request or one past the limits is an `InvalidArgument`, a
/// device error an `EPFail`, a compile error the class of the compiler's own error.
pub(crate) fn dispatch(error: DispatchError) -> PyErr {
    let message = error.to_string();
    match (&error, error.failure_kind()) {
        (DispatchError::Compile { source, .. } | DispatchError::Load { source, .. }, _) => {
            match source.downcast_ref::<OnnxError>() {
                // The compile error's own class (an op the backend does not lower, data-dependent
                // shapes), with the session's message naming the model and shapes.
                Some(onnx_error) => {
                    let err = onnx(onnx_error);
                    Python::attach(|py| PyErr::from_type(err.get_type(py), message))
                }
                None => Fail::new_err(message),
            }
        }
        (_, FailureKind::Request | FailureKind::Limit) | (DispatchError::Config(_), _) => {
            InvalidArgument::new_err(message)
        }
        (_, FailureKind::Device) => EPFail::new_err(message),
        _ => Fail::new_err(message),
    }
}
