//! The one error type of the server: what went wrong, in words a client can act on, and the HTTP
//! status and gRPC code it maps to.

use saggar_dispatch::{DispatchError, FailureKind};

/// A failed request or operation. Every variant carries a message naming what is wrong (the
/// model, input, expected and actual shape or size).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The request is malformed or does not fit the model (HTTP 400, gRPC `INVALID_ARGUMENT`).
    #[error("{0}")]
    BadRequest(String),
    /// No such model, version or route (HTTP 404, gRPC `NOT_FOUND`).
    #[error("{0}")]
    NotFound(String),
    /// The request body is above `--max-request-bytes` (HTTP 413, gRPC `RESOURCE_EXHAUSTED`).
    #[error("{0}")]
    TooLarge(String),
    /// The queue is full, the model is not ready, or the server is shutting down (HTTP 503, gRPC
    /// `UNAVAILABLE`). Answered at once: a request is never dropped silently.
    #[error("{0}")]
    Unavailable(String),
    /// The model failed to load, or a run failed on the device (HTTP 500, gRPC `INTERNAL`).
    #[error("{0}")]
    Internal(String),
    /// The device that ran the batch is lost (a sticky fault): the batch fails (HTTP 500, gRPC
    /// `INTERNAL`), the device's executor threads stop, and the model's other devices keep serving.
    #[error("{0}")]
    DeviceLost(String),
}

impl ServeError {
    /// A [`ServeError::BadRequest`].
    pub fn bad(message: impl Into<String>) -> ServeError {
        ServeError::BadRequest(message.into())
    }

    /// The HTTP status code.
    pub fn http_status(&self) -> u16 {
        match self {
            ServeError::BadRequest(_) => 400,
            ServeError::NotFound(_) => 404,
            ServeError::TooLarge(_) => 413,
            ServeError::Unavailable(_) => 503,
            ServeError::Internal(_) | ServeError::DeviceLost(_) => 500,
        }
    }

    /// The gRPC status.
    pub fn grpc_status(&self) -> tonic::Status {
        let message = self.to_string();
        match self {
            ServeError::BadRequest(_) => tonic::Status::invalid_argument(message),
            ServeError::NotFound(_) => tonic::Status::not_found(message),
            ServeError::TooLarge(_) => tonic::Status::resource_exhausted(message),
            ServeError::Unavailable(_) => tonic::Status::unavailable(message),
            ServeError::Internal(_) | ServeError::DeviceLost(_) => tonic::Status::internal(message),
        }
    }

    /// Whether the client caused it (a 4xx): counted as a failed request but not logged as a
    /// server error.
    pub fn is_client_error(&self) -> bool {
        matches!(self, ServeError::BadRequest(_) | ServeError::NotFound(_) | ServeError::TooLarge(_))
    }

    /// A session's error for a request of `model`: requests that do not fit the model or its
    /// limits are the client's; device, compile and other failures are the server's.
    pub fn from_dispatch(model: &str, error: &DispatchError) -> ServeError {
        match error.failure_kind() {
            FailureKind::Request | FailureKind::Limit => ServeError::bad(format!("model `{model}`: {error}")),
            _ if error.is_device_lost() => ServeError::DeviceLost(format!("model `{model}`: {error}")),
            _ => ServeError::Internal(format!("model `{model}`: {error}")),
        }
    }
}

/// Logs a refused request as one line: the client's mistakes (4xx) at `info`, the server's at
/// `warn` (a full queue, a model not ready) or `error` (a failed load or run).
pub fn log(error: &ServeError, transport: &str, what: &str) {
    let status = error.http_status();
    match error {
        ServeError::Internal(_) | ServeError::DeviceLost(_) => {
            tracing::error!(transport, request = what, status, error = %error, "request failed")
        }
        ServeError::Unavailable(_) => {
            tracing::warn!(transport, request = what, status, error = %error, "request refused")
        }
        _ => tracing::info!(transport, request = what, status, error = %error, "bad request"),
    }
}

/// A result with a [`ServeError`].
pub type Result<T, E = ServeError> = std::result::Result<T, E>;
