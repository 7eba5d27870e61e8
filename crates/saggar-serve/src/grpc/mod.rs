//! The protocol over gRPC: `inference.GRPCInferenceService` served by tonic's codec over hyper's
//! HTTP/2, with the protocol's message and field numbers (`proto.rs`). Messages above
//! `--max-request-bytes` are refused by the codec from their length prefix, before decoding.
//! Methods saggar does not serve (streaming, shared memory, statistics, trace and log settings)
//! answer `UNIMPLEMENTED`.

pub mod proto;

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;

use saggar_shape::DType;
use tonic::server::{Grpc, UnaryService};
use tonic::{Request, Response, Status};
use tonic_prost::ProstCodec;

use self::proto::*;
use crate::datatype::{parse_protocol, protocol_name};
use crate::error::ServeError;
use crate::model::{InferRequest, TensorMeta};
use crate::state::{ModelControl, State};
use crate::tensor::{InputTensor, checked_size};

/// The service's full name.
pub const SERVICE: &str = "inference.GRPCInferenceService";

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// A unary method as a closure from the request message to the response message.
struct Handler<F, Resp>(F, PhantomData<fn() -> Resp>);

impl<Req, Resp, F, Fut> UnaryService<Req> for Handler<F, Resp>
where
    F: FnMut(Req) -> Fut,
    Fut: Future<Output = Result<Resp, ServeError>> + Send + 'static,
    Resp: Send + 'static,
{
    type Response = Resp;
    type Future = BoxFuture<Result<Response<Resp>, Status>>;

    fn call(&mut self, request: Request<Req>) -> Self::Future {
        let fut = (self.0)(request.into_inner());
        Box::pin(async move {
            fut.await.map(Response::new).map_err(|e| {
                crate::error::log(&e, "grpc", std::any::type_name::<Req>().rsplit("::").next().unwrap_or("request"));
                e.grpc_status()
            })
        })
    }
}

async fn unary<Req, Resp, F, Fut, B>(request: http::Request<B>, limit: usize, f: F) -> http::Response<tonic::body::Body>
where
    Req: prost::Message + Default + Send + 'static,
    Resp: prost::Message + Send + 'static,
    F: FnMut(Req) -> Fut,
    Fut: Future<Output = Result<Resp, ServeError>> + Send + 'static,
    B: http_body::Body + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + Send,
{
    let mut grpc =
        Grpc::new(ProstCodec::<Resp, Req>::default()).apply_max_message_size_config(Some(limit), Some(usize::MAX));
    grpc.unary(Handler(f, PhantomData), request).await
}

/// Handles one gRPC call.
pub async fn handle<B>(state: Arc<State>, request: http::Request<B>) -> http::Response<tonic::body::Body>
where
    B: http_body::Body + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + Send,
{
    let path = request.uri().path().to_string();
    let limit = state.max_request_bytes;
    let Some(method) = path.strip_prefix("/inference.GRPCInferenceService/") else {
        return Status::unimplemented(format!("no service at {path}")).into_http();
    };
    let s = state.clone();
    match method {
        "ServerLive" => {
            unary(request, limit, |_: ServerLiveRequest| async { Ok(ServerLiveResponse { live: true }) }).await
        }
        "ServerReady" => {
            unary(request, limit, move |_: ServerReadyRequest| {
                let ready = s.ready();
                async move { Ok(ServerReadyResponse { ready }) }
            })
            .await
        }
        "ServerMetadata" => {
            unary(request, limit, |_: ServerMetadataRequest| async {
                Ok(ServerMetadataResponse {
                    name: crate::http::SERVER_NAME.into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    extensions: crate::http::EXTENSIONS.iter().map(|e| e.to_string()).collect(),
                })
            })
            .await
        }
        "ModelReady" => {
            unary(request, limit, move |r: ModelRef| {
                let ready = s.model(&r.name, Some(&r.version)).is_ok() && !s.shutting_down();
                async move { Ok(ModelReadyResponse { ready }) }
            })
            .await
        }
        "ModelMetadata" => {
            unary(request, limit, move |r: ModelRef| {
                let result = s.model(&r.name, Some(&r.version)).map(|m| ModelMetadataResponse {
                    name: m.name.clone(),
                    versions: m.versions.iter().map(u64::to_string).collect(),
                    platform: crate::PLATFORM.into(),
                    inputs: metadata(&m.inputs),
                    outputs: metadata(&m.outputs),
                });
                async move { result }
            })
            .await
        }
        "ModelInfer" => unary(request, limit, move |r: ModelInferRequest| infer(s.clone(), r)).await,
        "RepositoryIndex" => {
            unary(request, limit, move |r: RepositoryIndexRequest| {
                let result = s.index(r.ready).map(|index| RepositoryIndexResponse {
                    models: index
                        .into_iter()
                        .map(|e| ModelIndex { name: e.name, version: e.version, state: e.state, reason: e.reason })
                        .collect(),
                });
                async move { result }
            })
            .await
        }
        "RepositoryModelLoad" | "RepositoryModelUnload" => {
            let load = method == "RepositoryModelLoad";
            unary(request, limit, move |r: RepositoryModelRequest| {
                let s = s.clone();
                async move {
                    if s.control != ModelControl::Explicit {
                        return Err(ServeError::bad(
                            "explicit model load and unload need --model-control-mode explicit",
                        ));
                    }
                    if load {
                        s.load(&r.model_name).await?
                    } else {
                        s.unload(&r.model_name).await?
                    }
                    Ok(Empty {})
                }
            })
            .await
        }
        other => Status::unimplemented(format!("{SERVICE}/{other} is not served by saggar")).into_http(),
    }
}

fn metadata(metas: &[TensorMeta]) -> Vec<TensorMetadata> {
    metas
        .iter()
        .map(|t| TensorMetadata { name: t.name.clone(), datatype: t.datatype().into(), shape: t.shape.clone() })
        .collect()
}

async fn infer(state: Arc<State>, request: ModelInferRequest) -> Result<ModelInferResponse, ServeError> {
    let model = state.model(&request.model_name, Some(&request.model_version))?;
    let decoded = match decode(request, state.max_request_bytes) {
        Ok(decoded) => decoded,
        Err(e) => {
            model.metrics().failure(std::time::Duration::ZERO);
            return Err(e);
        }
    };
    let response = model.infer(decoded).await?;
    let outputs = response
        .outputs
        .iter()
        .map(|o| InferOutputTensor {
            name: o.name.clone(),
            datatype: protocol_name(o.dtype).into(),
            shape: o.dims.iter().map(|&d| d as i64).collect(),
            parameters: Default::default(),
            contents: None,
        })
        .collect();
    Ok(ModelInferResponse {
        model_name: response.model,
        model_version: response.version,
        id: response.id,
        parameters: Default::default(),
        outputs,
        raw_output_contents: response.outputs.into_iter().map(|o| o.data).collect(),
    })
}

/// A gRPC request as the server's [`InferRequest`], every size checked.
fn decode(mut request: ModelInferRequest, limit: usize) -> Result<InferRequest, ServeError> {
    let raw = std::mem::take(&mut request.raw_input_contents);
    if !raw.is_empty() && raw.len() != request.inputs.len() {
        return Err(ServeError::bad(format!(
            "{} raw_input_contents for {} inputs (one per input, in input order)",
            raw.len(),
            request.inputs.len()
        )));
    }
    let mut raw = raw.into_iter();
    let mut inputs = Vec::with_capacity(request.inputs.len());
    for input in request.inputs {
        let name = input.name;
        if let Some(key) = input.parameters.keys().next() {
            return Err(ServeError::bad(format!("input `{name}`: parameter `{key}` is not supported")));
        }
        let dtype = parse_protocol(&input.datatype).ok_or_else(|| {
            ServeError::bad(format!("input `{name}`: datatype `{}` is not supported", input.datatype))
        })?;
        let (shape, bytes) = checked_size(&name, dtype, &input.shape, limit)?;
        let data = match (raw.next(), input.contents) {
            (Some(_), Some(_)) => {
                return Err(ServeError::bad(format!("input `{name}` has both contents and raw_input_contents")));
            }
            (Some(data), None) if data.len() == bytes => data,
            (Some(data), None) => {
                return Err(ServeError::bad(format!(
                    "input `{name}`: {} bytes of raw contents where shape {shape:?} of {} takes {bytes}",
                    data.len(),
                    protocol_name(dtype)
                )));
            }
            (None, Some(contents)) => from_contents(&name, dtype, contents, bytes / dtype.size_bytes())?,
            (None, None) => return Err(ServeError::bad(format!("input `{name}` has no data"))),
        };
        inputs.push(InputTensor { name, dtype, shape, data });
    }
    let mut outputs = Vec::with_capacity(request.outputs.len());
    for o in request.outputs {
        if let Some(key) = o.parameters.keys().find(|k| *k != "binary_data") {
            return Err(ServeError::bad(format!("output `{}`: parameter `{key}` is not supported", o.name)));
        }
        outputs.push(o.name);
    }
    Ok(InferRequest { id: request.id, inputs, outputs })
}

/// The bytes of typed `contents`, which must hold exactly `count` values of `dtype`.
fn from_contents(name: &str, dtype: DType, c: InferTensorContents, count: usize) -> Result<Vec<u8>, ServeError> {
    fn le<T: Copy, const N: usize>(values: &[T], bytes: impl Fn(T) -> Option<[u8; N]>) -> Option<Vec<u8>> {
        let mut out = Vec::with_capacity(values.len() * N);
        for &v in values {
            out.extend(bytes(v)?);
        }
        Some(out)
    }
    let (len, data) = match dtype {
        DType::Bool => (c.bool_contents.len(), Some(c.bool_contents.iter().map(|&b| u8::from(b)).collect())),
        DType::I8 => (c.int_contents.len(), le(&c.int_contents, |v| i8::try_from(v).ok().map(i8::to_le_bytes))),
        DType::I16 => (c.int_contents.len(), le(&c.int_contents, |v| i16::try_from(v).ok().map(i16::to_le_bytes))),
        DType::I32 => (c.int_contents.len(), le(&c.int_contents, |v| Some(v.to_le_bytes()))),
        DType::I64 => (c.int64_contents.len(), le(&c.int64_contents, |v| Some(v.to_le_bytes()))),
        DType::U8 => (c.uint_contents.len(), le(&c.uint_contents, |v| u8::try_from(v).ok().map(u8::to_le_bytes))),
        DType::U16 => (c.uint_contents.len(), le(&c.uint_contents, |v| u16::try_from(v).ok().map(u16::to_le_bytes))),
        DType::U32 => (c.uint_contents.len(), le(&c.uint_contents, |v| Some(v.to_le_bytes()))),
        DType::U64 => (c.uint64_contents.len(), le(&c.uint64_contents, |v| Some(v.to_le_bytes()))),
        DType::F32 => (c.fp32_contents.len(), le(&c.fp32_contents, |v| Some(v.to_le_bytes()))),
        DType::F64 => (c.fp64_contents.len(), le(&c.fp64_contents, |v| Some(v.to_le_bytes()))),
        _ => {
            return Err(ServeError::bad(format!(
                "input `{name}`: {} data must be sent in raw_input_contents",
                protocol_name(dtype)
            )));
        }
    };
    if len != count {
        return Err(ServeError::bad(format!("input `{name}`: contents hold {len} values, its shape holds {count}")));
    }
    data.ok_or_else(|| {
        ServeError::bad(format!("input `{name}`: a value is out of the range of {}", protocol_name(dtype)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(name: &str, datatype: &str, shape: &[i64]) -> InferInputTensor {
        InferInputTensor { name: name.into(), datatype: datatype.into(), shape: shape.to_vec(), ..Default::default() }
    }

    #[test]
    fn raw_and_typed_contents_decode() {
        let mut typed = input("x", "INT32", &[2]);
        typed.contents = Some(InferTensorContents { int_contents: vec![1, -1], ..Default::default() });
        let r = ModelInferRequest { inputs: vec![typed], ..Default::default() };
        assert_eq!(decode(r, 1 << 20).unwrap().inputs[0].data, [1, 0, 0, 0, 255, 255, 255, 255]);
        let r = ModelInferRequest {
            inputs: vec![input("x", "FP16", &[1])],
            raw_input_contents: vec![vec![0, 60]],
            ..Default::default()
        };
        assert_eq!(decode(r, 1 << 20).unwrap().inputs[0].data, [0, 60]);
    }

    #[test]
    fn bad_requests_are_named() {
        let raw = |shape: &[i64], bytes: usize| ModelInferRequest {
            inputs: vec![input("x", "FP32", shape)],
            raw_input_contents: vec![vec![0; bytes]],
            ..Default::default()
        };
        let mut narrow = input("x", "INT8", &[1]);
        narrow.contents = Some(InferTensorContents { int_contents: vec![300], ..Default::default() });
        for (r, what) in [
            (raw(&[2], 4), "4 bytes of raw contents"),
            (raw(&[i64::MAX, 4], 4), "overflows"),
            (raw(&[-1], 4), "negative"),
            (ModelInferRequest { inputs: vec![input("x", "BYTES", &[1])], ..Default::default() }, "BYTES"),
            (ModelInferRequest { inputs: vec![input("x", "FP32", &[1])], ..Default::default() }, "no data"),
            (ModelInferRequest { inputs: vec![narrow], ..Default::default() }, "out of the range"),
            (
                ModelInferRequest {
                    inputs: vec![input("x", "FP32", &[1])],
                    raw_input_contents: vec![vec![], vec![]],
                    ..Default::default()
                },
                "2 raw_input_contents",
            ),
        ] {
            let e = decode(r, 1 << 20).unwrap_err();
            assert!(e.to_string().contains(what), "{what}: {e}");
            assert_eq!(e.grpc_status().code(), tonic::Code::InvalidArgument);
        }
    }
}
