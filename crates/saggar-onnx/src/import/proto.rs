//! The ONNX protobuf messages saggar reads and writes, as hand-written `prost` messages.
//!
//! Field numbers and types are those of `onnx.proto3` (ONNX 1.17, IR version 10). Only the messages
//! an inference graph needs are declared; fields saggar refuses (sparse tensors, non-tensor types) are
//! kept as raw bytes, so their presence is detected without decoding them, and so are subgraphs,
//! which the importer decodes one nesting level at a time (no unbounded recursion in the decoder);
//! unknown fields are skipped by prost as protobuf requires. See the "ONNX parsing"
//! section of `docs/ARCHITECTURE.md` for why these are written by hand instead of generated.

use saggar_shape::DType;

/// `ModelProto`: the top-level file.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelProto {
    /// The IR version the file follows.
    #[prost(int64, tag = "1")]
    pub ir_version: i64,
    /// Operator sets the model imports.
    #[prost(message, repeated, tag = "8")]
    pub opset_import: Vec<OperatorSetIdProto>,
    /// The tool that made the file.
    #[prost(string, tag = "2")]
    pub producer_name: String,
    /// Its version.
    #[prost(string, tag = "3")]
    pub producer_version: String,
    /// A reverse-DNS model namespace.
    #[prost(string, tag = "4")]
    pub domain: String,
    /// The model's version.
    #[prost(int64, tag = "5")]
    pub model_version: i64,
    /// Documentation.
    #[prost(string, tag = "6")]
    pub doc_string: String,
    /// The graph.
    #[prost(message, optional, tag = "7")]
    pub graph: Option<GraphProto>,
    /// Free-form metadata.
    #[prost(message, repeated, tag = "14")]
    pub metadata_props: Vec<StringStringEntryProto>,
    /// Model-local functions (refused when a node calls one: kept undecoded).
    #[prost(bytes = "vec", repeated, tag = "25")]
    pub functions: Vec<Vec<u8>>,
}

/// `OperatorSetIdProto`: one imported operator set.
#[derive(Clone, PartialEq, prost::Message)]
pub struct OperatorSetIdProto {
    /// The domain (`""` or `"ai.onnx"` is the default domain).
    #[prost(string, tag = "1")]
    pub domain: String,
    /// The opset version.
    #[prost(int64, tag = "2")]
    pub version: i64,
}

/// `StringStringEntryProto`: a key/value pair.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StringStringEntryProto {
    /// Key.
    #[prost(string, tag = "1")]
    pub key: String,
    /// Value.
    #[prost(string, tag = "2")]
    pub value: String,
}

/// `GraphProto`: nodes, initializers, inputs and outputs.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GraphProto {
    /// Nodes (topologically sorted in valid files; saggar sorts again and refuses cycles).
    #[prost(message, repeated, tag = "1")]
    pub node: Vec<NodeProto>,
    /// The graph's name.
    #[prost(string, tag = "2")]
    pub name: String,
    /// Constant tensors.
    #[prost(message, repeated, tag = "5")]
    pub initializer: Vec<TensorProto>,
    /// Sparse constant tensors (refused; undecoded).
    #[prost(bytes = "vec", repeated, tag = "15")]
    pub sparse_initializer: Vec<Vec<u8>>,
    /// Documentation.
    #[prost(string, tag = "10")]
    pub doc_string: String,
    /// Inputs (in IR version < 4 files, initializers are listed here too).
    #[prost(message, repeated, tag = "11")]
    pub input: Vec<ValueInfoProto>,
    /// Outputs.
    #[prost(message, repeated, tag = "12")]
    pub output: Vec<ValueInfoProto>,
    /// Types of intermediate values (hints; saggar infers its own).
    #[prost(message, repeated, tag = "13")]
    pub value_info: Vec<ValueInfoProto>,
}

/// `NodeProto`: one op application.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeProto {
    /// Input value names (`""` marks an absent optional input).
    #[prost(string, repeated, tag = "1")]
    pub input: Vec<String>,
    /// Output value names.
    #[prost(string, repeated, tag = "2")]
    pub output: Vec<String>,
    /// The node's name (may be empty).
    #[prost(string, tag = "3")]
    pub name: String,
    /// The operator.
    #[prost(string, tag = "4")]
    pub op_type: String,
    /// The operator's domain.
    #[prost(string, tag = "7")]
    pub domain: String,
    /// Attributes.
    #[prost(message, repeated, tag = "5")]
    pub attribute: Vec<AttributeProto>,
    /// Documentation.
    #[prost(string, tag = "6")]
    pub doc_string: String,
}

/// `AttributeProto.AttributeType`.
pub mod attribute_type {
    /// FLOAT.
    pub const FLOAT: i32 = 1;
    /// INT.
    pub const INT: i32 = 2;
    /// STRING.
    pub const STRING: i32 = 3;
    /// TENSOR.
    pub const TENSOR: i32 = 4;
    /// GRAPH.
    pub const GRAPH: i32 = 5;
    /// FLOATS.
    pub const FLOATS: i32 = 6;
    /// INTS.
    pub const INTS: i32 = 7;
    /// STRINGS.
    pub const STRINGS: i32 = 8;
    /// TENSORS.
    pub const TENSORS: i32 = 9;
    /// GRAPHS.
    pub const GRAPHS: i32 = 10;
}

/// `AttributeProto`: one named attribute value.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AttributeProto {
    /// The attribute's name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// In a function body, the caller's attribute this one refers to (refused).
    #[prost(string, tag = "21")]
    pub ref_attr_name: String,
    /// Documentation.
    #[prost(string, tag = "13")]
    pub doc_string: String,
    /// Which field holds the value ([`attribute_type`]).
    #[prost(int32, tag = "20")]
    pub r#type: i32,
    /// FLOAT value.
    #[prost(float, tag = "2")]
    pub f: f32,
    /// INT value.
    #[prost(int64, tag = "3")]
    pub i: i64,
    /// STRING value.
    #[prost(bytes = "vec", tag = "4")]
    pub s: Vec<u8>,
    /// TENSOR value.
    #[prost(message, optional, tag = "5")]
    pub t: Option<TensorProto>,
    /// GRAPH value (an encoded `GraphProto`, decoded by the importer).
    #[prost(bytes = "vec", optional, tag = "6")]
    pub g: Option<Vec<u8>>,
    /// FLOATS value.
    #[prost(float, repeated, tag = "7")]
    pub floats: Vec<f32>,
    /// INTS value.
    #[prost(int64, repeated, tag = "8")]
    pub ints: Vec<i64>,
    /// STRINGS value.
    #[prost(bytes = "vec", repeated, tag = "9")]
    pub strings: Vec<Vec<u8>>,
    /// TENSORS value.
    #[prost(message, repeated, tag = "10")]
    pub tensors: Vec<TensorProto>,
    /// GRAPHS value (refused; undecoded).
    #[prost(bytes = "vec", repeated, tag = "11")]
    pub graphs: Vec<Vec<u8>>,
}

/// `TensorProto.DataLocation`: where the elements are.
pub mod data_location {
    /// In this message.
    pub const DEFAULT: i32 = 0;
    /// In a side file named by `external_data`.
    pub const EXTERNAL: i32 = 1;
}

/// `TensorProto`: a constant tensor, inline or in a side file.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorProto {
    /// Dimensions.
    #[prost(int64, repeated, tag = "1")]
    pub dims: Vec<i64>,
    /// Element type (`TensorProto.DataType`, see [`dtype_from_onnx`]).
    #[prost(int32, tag = "2")]
    pub data_type: i32,
    /// FLOAT elements.
    #[prost(float, repeated, tag = "4")]
    pub float_data: Vec<f32>,
    /// INT32, INT16, INT8, UINT16, UINT8, BOOL and FLOAT16 elements.
    #[prost(int32, repeated, tag = "5")]
    pub int32_data: Vec<i32>,
    /// STRING elements.
    #[prost(bytes = "vec", repeated, tag = "6")]
    pub string_data: Vec<Vec<u8>>,
    /// INT64 elements.
    #[prost(int64, repeated, tag = "7")]
    pub int64_data: Vec<i64>,
    /// The tensor's name.
    #[prost(string, tag = "8")]
    pub name: String,
    /// Documentation.
    #[prost(string, tag = "12")]
    pub doc_string: String,
    /// Elements as little-endian bytes (takes precedence over the typed fields).
    #[prost(bytes = "vec", tag = "9")]
    pub raw_data: Vec<u8>,
    /// `location`, `offset`, `length`, `checksum` of external data.
    #[prost(message, repeated, tag = "13")]
    pub external_data: Vec<StringStringEntryProto>,
    /// [`data_location`].
    #[prost(int32, tag = "14")]
    pub data_location: i32,
    /// DOUBLE and COMPLEX128 elements.
    #[prost(double, repeated, tag = "10")]
    pub double_data: Vec<f64>,
    /// UINT32 and UINT64 elements.
    #[prost(uint64, repeated, tag = "11")]
    pub uint64_data: Vec<u64>,
}

/// `ValueInfoProto`: a named, typed value (graph input, output or hint).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ValueInfoProto {
    /// The value's name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Its type.
    #[prost(message, optional, tag = "2")]
    pub r#type: Option<TypeProto>,
    /// Documentation.
    #[prost(string, tag = "3")]
    pub doc_string: String,
}

/// `TypeProto`: only tensor types are decoded; the others are detected and refused.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TypeProto {
    /// A dense tensor.
    #[prost(message, optional, tag = "1")]
    pub tensor_type: Option<TypeProtoTensor>,
    /// A sequence (refused; undecoded).
    #[prost(bytes = "vec", optional, tag = "4")]
    pub sequence_type: Option<Vec<u8>>,
    /// A map (refused; undecoded).
    #[prost(bytes = "vec", optional, tag = "5")]
    pub map_type: Option<Vec<u8>>,
    /// A sparse tensor (refused; undecoded).
    #[prost(bytes = "vec", optional, tag = "8")]
    pub sparse_tensor_type: Option<Vec<u8>>,
    /// An optional (refused; undecoded).
    #[prost(bytes = "vec", optional, tag = "9")]
    pub optional_type: Option<Vec<u8>>,
    /// A denotation.
    #[prost(string, tag = "6")]
    pub denotation: String,
}

/// `TypeProto.Tensor`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TypeProtoTensor {
    /// Element type.
    #[prost(int32, tag = "1")]
    pub elem_type: i32,
    /// Shape (absent: unknown rank).
    #[prost(message, optional, tag = "2")]
    pub shape: Option<TensorShapeProto>,
}

/// `TensorShapeProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorShapeProto {
    /// Dimensions.
    #[prost(message, repeated, tag = "1")]
    pub dim: Vec<TensorShapeDimension>,
}

/// `TensorShapeProto.Dimension`: a fixed extent, a named symbol, or neither (unknown).
#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorShapeDimension {
    /// A fixed extent.
    #[prost(int64, optional, tag = "1")]
    pub dim_value: Option<i64>,
    /// A symbol.
    #[prost(string, optional, tag = "2")]
    pub dim_param: Option<String>,
    /// A denotation.
    #[prost(string, tag = "3")]
    pub denotation: String,
}

/// ONNX `TensorProto.DataType` codes.
pub mod data_type {
    /// float.
    pub const FLOAT: i32 = 1;
    /// uint8.
    pub const UINT8: i32 = 2;
    /// int8.
    pub const INT8: i32 = 3;
    /// uint16.
    pub const UINT16: i32 = 4;
    /// int16.
    pub const INT16: i32 = 5;
    /// int32.
    pub const INT32: i32 = 6;
    /// int64.
    pub const INT64: i32 = 7;
    /// string.
    pub const STRING: i32 = 8;
    /// bool.
    pub const BOOL: i32 = 9;
    /// float16.
    pub const FLOAT16: i32 = 10;
    /// double.
    pub const DOUBLE: i32 = 11;
    /// uint32.
    pub const UINT32: i32 = 12;
    /// uint64.
    pub const UINT64: i32 = 13;
    /// bfloat16.
    pub const BFLOAT16: i32 = 16;
}

/// The saggar element type of an ONNX `DataType` code, if saggar has one (supported or not).
pub fn dtype_from_onnx(code: i64) -> Option<DType> {
    let code = i32::try_from(code).ok()?;
    Some(match code {
        data_type::FLOAT => DType::F32,
        data_type::UINT8 => DType::U8,
        data_type::INT8 => DType::I8,
        data_type::UINT16 => DType::U16,
        data_type::INT16 => DType::I16,
        data_type::INT32 => DType::I32,
        data_type::INT64 => DType::I64,
        data_type::BOOL => DType::Bool,
        data_type::FLOAT16 => DType::F16,
        data_type::DOUBLE => DType::F64,
        data_type::UINT32 => DType::U32,
        data_type::UINT64 => DType::U64,
        data_type::BFLOAT16 => DType::BF16,
        _ => return None,
    })
}

/// The ONNX `DataType` code of a supported element type.
pub fn dtype_to_onnx(dtype: DType) -> i32 {
    match dtype {
        DType::F32 => data_type::FLOAT,
        DType::I64 => data_type::INT64,
        DType::I32 => data_type::INT32,
        DType::Bool => data_type::BOOL,
        DType::U8 => data_type::UINT8,
        DType::I8 => data_type::INT8,
        DType::U16 => data_type::UINT16,
        DType::I16 => data_type::INT16,
        DType::F16 => data_type::FLOAT16,
        DType::F64 => data_type::DOUBLE,
        DType::U32 => data_type::UINT32,
        DType::U64 => data_type::UINT64,
        DType::BF16 => data_type::BFLOAT16,
        _ => 0,
    }
}
