//! The protocol over HTTP/1.1 (hyper): health, server and model metadata, readiness, infer (JSON
//! and binary data), the repository extension; and the metrics endpoint on its own port.
//!
//! A body is refused with 413 when its `Content-Length` is above `--max-request-bytes`, before any
//! of it is read, and when a body without one grows past the limit while it is read. Every error is
//! a JSON body `{"error": "..."}` with its status.

mod body;
pub mod infer;

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response};
use serde_json::json;

use self::body::Chunks;
use crate::error::{Result, ServeError};
use crate::metrics::{ModelView, render};
use crate::model::{LoadedModel, TensorMeta};
use crate::state::{ModelControl, State};

/// The server's name in `/v2`.
pub const SERVER_NAME: &str = "saggar";
/// The protocol extensions served.
pub const EXTENSIONS: &[&str] = &["binary_tensor_data", "model_repository", "model_configuration"];

type Reply = Response<Chunks>;

fn reply(status: u16, content_type: &str, body: impl Into<Chunks>) -> Reply {
    Response::builder().status(status).header("content-type", content_type).body(body.into()).expect("valid response")
}

fn json_reply(status: u16, value: &serde_json::Value) -> Reply {
    reply(status, "application/json", serde_json::to_vec(value).expect("serializable"))
}

fn error_reply(e: &ServeError) -> Reply {
    let mut reply = json_reply(e.http_status(), &json!({ "error": e.to_string() }));
    if matches!(e, ServeError::TooLarge(_)) {
        // The body may not have been read to its end: the connection cannot carry another request.
        reply.headers_mut().insert(hyper::header::CONNECTION, hyper::header::HeaderValue::from_static("close"));
    }
    reply
}

/// Handles one request of the inference port.
pub async fn handle(state: Arc<State>, request: Request<Incoming>) -> std::result::Result<Reply, Infallible> {
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let result = route(&state, request).await;
    Ok(result.unwrap_or_else(|e| {
        crate::error::log(&e, "http", &format!("{method} {path}"));
        error_reply(&e)
    }))
}

async fn route(state: &Arc<State>, request: Request<Incoming>) -> Result<Reply> {
    let path = request.uri().path().trim_end_matches('/').to_string();
    let segments: Vec<&str> = path.split('/').skip(1).collect();
    let method = request.method().clone();
    match (method.clone(), segments.as_slice()) {
        (Method::GET, ["v2", "health", "live"]) => Ok(json_reply(200, &json!({ "live": true }))),
        (Method::GET, ["v2", "health", "ready"]) => {
            let ready = state.ready();
            Ok(json_reply(if ready { 200 } else { 400 }, &json!({ "ready": ready })))
        }
        (Method::GET, ["v2"]) => Ok(json_reply(
            200,
            &json!({ "name": SERVER_NAME, "version": env!("CARGO_PKG_VERSION"), "extensions": EXTENSIONS }),
        )),
        (Method::POST, ["v2", "repository", "index"]) => {
            let body = read_body(request, state.max_request_bytes).await?;
            let ready = if body.is_empty() {
                false
            } else {
                let v: serde_json::Value = serde_json::from_slice(&body)
                    .map_err(|e| ServeError::bad(format!("malformed repository index JSON: {e}")))?;
                v.get("ready").and_then(serde_json::Value::as_bool).unwrap_or(false)
            };
            let index: Vec<_> = state
                .index(ready)?
                .into_iter()
                .map(|e| json!({ "name": e.name, "version": e.version, "state": e.state, "reason": e.reason }))
                .collect();
            Ok(json_reply(200, &serde_json::Value::Array(index)))
        }
        (Method::POST, ["v2", "repository", "models", name, action @ ("load" | "unload")]) => {
            let name = name.to_string();
            let action = *action;
            read_body(request, state.max_request_bytes).await?;
            if state.control != ModelControl::Explicit {
                return Err(ServeError::bad(format!(
                    "explicit model {action} is not allowed: start the server with --model-control-mode explicit"
                )));
            }
            if action == "load" {
                state.load(&name).await?
            } else {
                state.unload(&name).await?
            }
            Ok(json_reply(200, &json!({})))
        }
        (_, ["v2", "models", name, rest @ ..]) => {
            let (version, rest) = match rest {
                ["versions", v, rest @ ..] => (Some(*v), rest),
                rest => (None, rest),
            };
            let (name, version) = (name.to_string(), version.map(str::to_string));
            let rest: Vec<String> = rest.iter().map(|s| s.to_string()).collect();
            model_route(state, method, &name, version.as_deref(), &rest, request).await
        }
        _ => Err(ServeError::NotFound(format!("no route {method} {path}"))),
    }
}

async fn model_route(
    state: &Arc<State>,
    method: Method,
    name: &str,
    version: Option<&str>,
    rest: &[String],
    request: Request<Incoming>,
) -> Result<Reply> {
    let rest: Vec<&str> = rest.iter().map(String::as_str).collect();
    match (method, rest.as_slice()) {
        (Method::GET, ["ready"]) => {
            let ready = state.model(name, version).is_ok() && !state.shutting_down();
            Ok(json_reply(if ready { 200 } else { 400 }, &json!({ "name": name, "ready": ready })))
        }
        (Method::GET, []) => Ok(json_reply(200, &model_metadata(&*state.model(name, version)?))),
        (Method::GET, ["config"]) => Ok(json_reply(200, &model_config(&*state.model(name, version)?))),
        (Method::POST, ["infer"]) => {
            let header = request
                .headers()
                .get("inference-header-content-length")
                .map(|h| h.to_str().map(str::to_string).unwrap_or_default());
            let body = read_body(request, state.max_request_bytes).await?;
            let model = state.model(name, version)?;
            let parsed = match infer::parse(&body, header.as_deref(), state.max_request_bytes) {
                Ok(parsed) => parsed,
                Err(e) => {
                    model.metrics().failure(std::time::Duration::ZERO);
                    return Err(e);
                }
            };
            let (request, binary) = parsed.into_parts();
            let (body, header) = infer::respond(model.infer(request).await?, &binary);
            let mut reply = match header {
                Some(_) => reply(200, "application/octet-stream", body),
                None => reply(200, "application/json", body),
            };
            if let Some(h) = header {
                reply.headers_mut().insert("inference-header-content-length", h.into());
            }
            Ok(reply)
        }
        (method, rest) => Err(ServeError::NotFound(format!("no route {method} /v2/models/{name}/{}", rest.join("/")))),
    }
}

/// Most bytes of a refused body read and dropped so the client, which may still be sending it,
/// gets the 413 before the connection closes (beyond this the connection is closed mid-body).
const DRAIN_BYTES: u64 = 16 << 20;
/// How long the drain waits for more of a refused body.
const DRAIN_PAUSE: std::time::Duration = std::time::Duration::from_millis(200);

/// Reads a body of at most `limit` bytes: a larger `Content-Length` is refused before any of the
/// body is kept (it is read and dropped, up to [`DRAIN_BYTES`], so the client sees the answer).
async fn read_body(request: Request<Incoming>, limit: usize) -> Result<Bytes> {
    let too_large = |n: &dyn std::fmt::Display| {
        ServeError::TooLarge(format!("request body of {n} bytes is above --max-request-bytes {limit}"))
    };
    if let Some(len) = request.headers().get(hyper::header::CONTENT_LENGTH) {
        let len: u64 =
            len.to_str().ok().and_then(|s| s.parse().ok()).ok_or_else(|| ServeError::bad("bad Content-Length"))?;
        if len > limit as u64 {
            if len <= DRAIN_BYTES {
                // A client that stops sending (it waits for the answer) is answered after a pause.
                let mut body = request.into_body();
                while let Ok(Some(Ok(_))) = tokio::time::timeout(DRAIN_PAUSE, body.frame()).await {}
            }
            return Err(too_large(&len));
        }
    }
    match Limited::new(request.into_body(), limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(too_large(&format!("more than {limit}"))),
        Err(e) => Err(ServeError::bad(format!("reading the request body: {e}"))),
    }
}

fn tensors(metas: &[TensorMeta]) -> Vec<serde_json::Value> {
    metas.iter().map(|t| json!({ "name": t.name, "datatype": t.datatype(), "shape": t.shape })).collect()
}

/// `GET /v2/models/{m}`.
fn model_metadata(m: &LoadedModel) -> serde_json::Value {
    json!({
        "name": m.name,
        "versions": m.versions.iter().map(u64::to_string).collect::<Vec<_>>(),
        "platform": crate::PLATFORM,
        "inputs": tensors(&m.inputs),
        "outputs": tensors(&m.outputs),
    })
}

/// `GET /v2/models/{m}/config`: the resolved configuration in Triton's JSON form.
fn model_config(m: &LoadedModel) -> serde_json::Value {
    let skip = usize::from(m.max_batch > 0);
    let entries = |metas: &[TensorMeta]| -> Vec<serde_json::Value> {
        metas
            .iter()
            .map(|t| {
                let dims = if skip == 1 && !t.shape.is_empty() { &t.shape[1..] } else { &t.shape[..] };
                json!({ "name": t.name, "data_type": crate::datatype::config_name(t.dtype), "dims": dims })
            })
            .collect()
    };
    let mut config = json!({
        "name": m.name,
        "platform": crate::PLATFORM,
        "max_batch_size": m.max_batch,
        "input": entries(&m.inputs),
        "output": entries(&m.outputs),
        "instance_group": [{ "count": m.config.instance_count, "kind": "KIND_GPU" }],
    });
    if let Some(b) = &m.config.batching {
        config["dynamic_batching"] = json!({
            "max_queue_delay_microseconds": b.max_queue_delay.as_micros() as u64,
            "preferred_batch_size": b.preferred,
        });
    }
    config
}

/// Handles one request of the metrics port.
pub async fn handle_metrics(state: Arc<State>, request: Request<Incoming>) -> std::result::Result<Reply, Infallible> {
    if request.method() != Method::GET || request.uri().path() != "/metrics" {
        return Ok(error_reply(&ServeError::NotFound(format!(
            "no route {} {}",
            request.method(),
            request.uri().path()
        ))));
    }
    let models = state.loaded();
    let views: Vec<(ModelView<'_>, usize)> = models
        .iter()
        .map(|m| {
            (ModelView { name: &m.name, version: m.version, metrics: m.metrics(), executor: m.executor() }, m.queued())
        })
        .collect();
    Ok(reply(200, "text/plain; version=0.0.4", render(&views).into_bytes()))
}
