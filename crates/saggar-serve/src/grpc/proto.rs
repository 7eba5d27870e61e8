//! The messages of the Open Inference Protocol's gRPC service (`package inference`, Triton's
//! `grpc_service.proto`, a superset of KServe's `grpc_predict_v2.proto`), written by hand with
//! `prost` derives as saggar-onnx writes ONNX's: only the messages served, with the schema's field
//! numbers, so Triton's and KServe's generated clients speak to it unchanged. Fields of a message
//! the server does not read are skipped by the decoder, as protobuf requires.

use std::collections::HashMap;

/// `ServerLiveRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ServerLiveRequest {}
/// `ServerLiveResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ServerLiveResponse {
    /// Whether the server is live.
    #[prost(bool, tag = "1")]
    pub live: bool,
}
/// `ServerReadyRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ServerReadyRequest {}
/// `ServerReadyResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ServerReadyResponse {
    /// Whether the server is ready.
    #[prost(bool, tag = "1")]
    pub ready: bool,
}
/// `ModelReadyRequest`, and `ModelMetadataRequest`, `ModelConfigRequest` (the same fields).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelRef {
    /// The model's name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Its version; empty for the served one.
    #[prost(string, tag = "2")]
    pub version: String,
}
/// `ModelReadyResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelReadyResponse {
    /// Whether the model is ready.
    #[prost(bool, tag = "1")]
    pub ready: bool,
}
/// `ServerMetadataRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ServerMetadataRequest {}
/// `ServerMetadataResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ServerMetadataResponse {
    /// The server's name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Its version.
    #[prost(string, tag = "2")]
    pub version: String,
    /// The protocol extensions it serves.
    #[prost(string, repeated, tag = "3")]
    pub extensions: Vec<String>,
}
/// `ModelMetadataResponse.TensorMetadata`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorMetadata {
    /// Its name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Its datatype (`FP32`).
    #[prost(string, tag = "2")]
    pub datatype: String,
    /// Its shape, -1 where variable.
    #[prost(int64, repeated, tag = "3")]
    pub shape: Vec<i64>,
}
/// `ModelMetadataResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelMetadataResponse {
    /// The model's name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Its versions.
    #[prost(string, repeated, tag = "2")]
    pub versions: Vec<String>,
    /// Its platform.
    #[prost(string, tag = "3")]
    pub platform: String,
    /// Its inputs.
    #[prost(message, repeated, tag = "4")]
    pub inputs: Vec<TensorMetadata>,
    /// Its outputs.
    #[prost(message, repeated, tag = "5")]
    pub outputs: Vec<TensorMetadata>,
}
/// `InferParameter`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct InferParameter {
    /// The value.
    #[prost(oneof = "ParameterChoice", tags = "1, 2, 3, 4, 5")]
    pub parameter_choice: Option<ParameterChoice>,
}
/// `InferParameter.parameter_choice`.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum ParameterChoice {
    /// `bool_param`.
    #[prost(bool, tag = "1")]
    BoolParam(bool),
    /// `int64_param`.
    #[prost(int64, tag = "2")]
    Int64Param(i64),
    /// `string_param`.
    #[prost(string, tag = "3")]
    StringParam(String),
    /// `double_param`.
    #[prost(double, tag = "4")]
    DoubleParam(f64),
    /// `uint64_param`.
    #[prost(uint64, tag = "5")]
    Uint64Param(u64),
}
/// `InferTensorContents`: a tensor's values by type, when not sent raw.
#[derive(Clone, PartialEq, prost::Message)]
pub struct InferTensorContents {
    /// `BOOL`.
    #[prost(bool, repeated, tag = "1")]
    pub bool_contents: Vec<bool>,
    /// `INT8`, `INT16`, `INT32`.
    #[prost(int32, repeated, tag = "2")]
    pub int_contents: Vec<i32>,
    /// `INT64`.
    #[prost(int64, repeated, tag = "3")]
    pub int64_contents: Vec<i64>,
    /// `UINT8`, `UINT16`, `UINT32`.
    #[prost(uint32, repeated, tag = "4")]
    pub uint_contents: Vec<u32>,
    /// `UINT64`.
    #[prost(uint64, repeated, tag = "5")]
    pub uint64_contents: Vec<u64>,
    /// `FP32`.
    #[prost(float, repeated, tag = "6")]
    pub fp32_contents: Vec<f32>,
    /// `FP64`.
    #[prost(double, repeated, tag = "7")]
    pub fp64_contents: Vec<f64>,
    /// `BYTES` (refused: saggar has no string tensors).
    #[prost(bytes = "vec", repeated, tag = "8")]
    pub bytes_contents: Vec<Vec<u8>>,
}
/// `ModelInferRequest.InferInputTensor` and `ModelInferResponse.InferOutputTensor`: the schema
/// gives both the same fields and numbers.
#[derive(Clone, PartialEq, prost::Message)]
pub struct InferTensor {
    /// Its name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Its datatype.
    #[prost(string, tag = "2")]
    pub datatype: String,
    /// Its shape.
    #[prost(int64, repeated, tag = "3")]
    pub shape: Vec<i64>,
    /// Its parameters.
    #[prost(map = "string, message", tag = "4")]
    pub parameters: HashMap<String, InferParameter>,
    /// Its values, when not in the raw contents (saggar always answers raw).
    #[prost(message, optional, tag = "5")]
    pub contents: Option<InferTensorContents>,
}
/// `ModelInferRequest.InferInputTensor`.
pub type InferInputTensor = InferTensor;
/// `ModelInferResponse.InferOutputTensor`.
pub type InferOutputTensor = InferTensor;
/// `ModelInferRequest.InferRequestedOutputTensor`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct InferRequestedOutputTensor {
    /// Its name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Its parameters.
    #[prost(map = "string, message", tag = "2")]
    pub parameters: HashMap<String, InferParameter>,
}
/// `ModelInferRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelInferRequest {
    /// The model's name.
    #[prost(string, tag = "1")]
    pub model_name: String,
    /// Its version; empty for the served one.
    #[prost(string, tag = "2")]
    pub model_version: String,
    /// The request's id, echoed back.
    #[prost(string, tag = "3")]
    pub id: String,
    /// Its parameters.
    #[prost(map = "string, message", tag = "4")]
    pub parameters: HashMap<String, InferParameter>,
    /// Its inputs.
    #[prost(message, repeated, tag = "5")]
    pub inputs: Vec<InferInputTensor>,
    /// The outputs asked for; empty for all.
    #[prost(message, repeated, tag = "6")]
    pub outputs: Vec<InferRequestedOutputTensor>,
    /// Each input's bytes, in input order, when sent raw.
    #[prost(bytes = "vec", repeated, tag = "7")]
    pub raw_input_contents: Vec<Vec<u8>>,
}
/// `ModelInferResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelInferResponse {
    /// The model's name.
    #[prost(string, tag = "1")]
    pub model_name: String,
    /// The version that ran.
    #[prost(string, tag = "2")]
    pub model_version: String,
    /// The request's id.
    #[prost(string, tag = "3")]
    pub id: String,
    /// Its parameters.
    #[prost(map = "string, message", tag = "4")]
    pub parameters: HashMap<String, InferParameter>,
    /// Its outputs.
    #[prost(message, repeated, tag = "5")]
    pub outputs: Vec<InferOutputTensor>,
    /// Each output's bytes, in output order.
    #[prost(bytes = "vec", repeated, tag = "6")]
    pub raw_output_contents: Vec<Vec<u8>>,
}
/// `RepositoryIndexRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RepositoryIndexRequest {
    /// The repository (saggar serves one; ignored).
    #[prost(string, tag = "1")]
    pub repository_name: String,
    /// Only ready models.
    #[prost(bool, tag = "2")]
    pub ready: bool,
}
/// `RepositoryIndexResponse.ModelIndex`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelIndex {
    /// The model's name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Its version.
    #[prost(string, tag = "2")]
    pub version: String,
    /// Its state (`READY`, `LOADING`, `UNAVAILABLE`).
    #[prost(string, tag = "3")]
    pub state: String,
    /// Why it is unavailable.
    #[prost(string, tag = "4")]
    pub reason: String,
}
/// `RepositoryIndexResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RepositoryIndexResponse {
    /// Every model.
    #[prost(message, repeated, tag = "1")]
    pub models: Vec<ModelIndex>,
}
/// `RepositoryModelLoadRequest` and `RepositoryModelUnloadRequest` (the fields saggar reads).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RepositoryModelRequest {
    /// The repository (ignored).
    #[prost(string, tag = "1")]
    pub repository_name: String,
    /// The model.
    #[prost(string, tag = "2")]
    pub model_name: String,
}
/// `RepositoryModelLoadResponse`, `RepositoryModelUnloadResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Empty {}
