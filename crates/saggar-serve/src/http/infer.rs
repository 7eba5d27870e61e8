//! `POST .../infer` over HTTP: the protocol's JSON body, and Triton's binary-data extension (the
//! JSON header's length in `Inference-Header-Content-Length`, then each binary input's bytes in
//! input order, each sized by its `binary_data_size` parameter; outputs asked for with
//! `binary_data` come back the same way).

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use super::body::Chunks;
use crate::datatype::{parse_protocol, protocol_name};
use crate::error::{Result, ServeError};
use crate::model::{InferRequest, InferResponse};
use crate::tensor::{InputTensor, JsonData, checked_size, from_json};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RequestJson<'a> {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    parameters: Option<serde_json::Map<String, Value>>,
    #[serde(borrow)]
    inputs: Vec<InputJson<'a>>,
    #[serde(default)]
    outputs: Option<Vec<OutputRequestJson>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct InputJson<'a> {
    name: String,
    shape: Vec<i64>,
    datatype: String,
    #[serde(default)]
    parameters: Option<serde_json::Map<String, Value>>,
    #[serde(borrow, default)]
    data: Option<&'a RawValue>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct OutputRequestJson {
    name: String,
    #[serde(default)]
    parameters: Option<serde_json::Map<String, Value>>,
}

#[derive(Serialize)]
struct ResponseJson<'a> {
    model_name: &'a str,
    model_version: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    id: &'a str,
    outputs: Vec<OutputJson<'a>>,
}

#[derive(Serialize)]
struct OutputJson<'a> {
    name: &'a str,
    datatype: &'static str,
    shape: &'a [u64],
    #[serde(skip_serializing_if = "Option::is_none")]
    parameters: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<JsonData<'a>>,
}

/// A parsed request, and which of its outputs go back as binary data.
#[derive(Debug)]
pub struct ParsedRequest {
    /// The request.
    pub request: InferRequest,
    /// Per requested output (in the order asked): binary or JSON. With no output named, `all_binary`.
    pub binary: Vec<bool>,
    /// `binary_data_output`: every output not named goes back as binary data.
    pub all_binary: bool,
}

fn flag(parameters: &Option<serde_json::Map<String, Value>>, name: &str) -> Result<Option<bool>> {
    match parameters.as_ref().and_then(|p| p.get(name)) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(ServeError::bad(format!("parameter `{name}` must be true or false, not {v}"))),
    }
}

/// Parses an infer body. `header_length` is the `Inference-Header-Content-Length` header, if any.
pub fn parse(body: &[u8], header_length: Option<&str>, limit: usize) -> Result<ParsedRequest> {
    let json_len = match header_length {
        None => body.len(),
        Some(h) => match h.trim().parse::<usize>() {
            Ok(n) if n <= body.len() => n,
            _ => {
                return Err(ServeError::bad(format!(
                    "Inference-Header-Content-Length `{h}` is not a length within the body's {} bytes",
                    body.len()
                )));
            }
        },
    };
    let (head, mut binary) = body.split_at(json_len);
    let text = std::str::from_utf8(head).map_err(|_| ServeError::bad("the request's JSON is not UTF-8"))?;
    let json: RequestJson<'_> =
        serde_json::from_str(text).map_err(|e| ServeError::bad(format!("malformed request JSON: {e}")))?;
    if let Some(p) = &json.parameters {
        for key in p.keys() {
            if !["binary_data_output", "sequence_id", "priority", "timeout"].contains(&key.as_str()) {
                return Err(ServeError::bad(format!("request parameter `{key}` is not supported")));
            }
        }
    }
    let all_binary = flag(&json.parameters, "binary_data_output")?.unwrap_or(false);
    let mut inputs = Vec::with_capacity(json.inputs.len());
    for input in json.inputs {
        let dtype = parse_protocol(&input.datatype).ok_or_else(|| {
            ServeError::bad(format!("input `{}`: datatype `{}` is not supported", input.name, input.datatype))
        })?;
        let (shape, bytes) = checked_size(&input.name, dtype, &input.shape, limit)?;
        let binary_size = match input.parameters.as_ref().and_then(|p| p.get("binary_data_size")) {
            None => None,
            Some(v) => Some(v.as_u64().ok_or_else(|| {
                ServeError::bad(format!("input `{}`: binary_data_size {v} is not a byte count", input.name))
            })?),
        };
        if let Some(p) = &input.parameters
            && let Some(key) = p.keys().find(|k| *k != "binary_data_size")
        {
            return Err(ServeError::bad(format!("input `{}`: parameter `{key}` is not supported", input.name)));
        }
        let data = match (binary_size, input.data) {
            (Some(_), Some(_)) => {
                return Err(ServeError::bad(format!("input `{}` has both data and binary_data_size", input.name)));
            }
            (Some(size), None) => {
                if size != bytes as u64 {
                    return Err(ServeError::bad(format!(
                        "input `{}`: binary_data_size {size} where shape {:?} of {} takes {bytes} bytes",
                        input.name,
                        shape,
                        protocol_name(dtype)
                    )));
                }
                if binary.len() < bytes {
                    return Err(ServeError::bad(format!(
                        "input `{}`: {bytes} bytes of binary data announced, {} left in the body",
                        input.name,
                        binary.len()
                    )));
                }
                let (mine, rest) = binary.split_at(bytes);
                binary = rest;
                mine.to_vec()
            }
            (None, Some(raw)) => from_json(&input.name, dtype, raw.get(), bytes / dtype.size_bytes())?,
            (None, None) => return Err(ServeError::bad(format!("input `{}` has no data", input.name))),
        };
        inputs.push(InputTensor { name: input.name, dtype, shape, data });
    }
    if !binary.is_empty() {
        return Err(ServeError::bad(format!("{} bytes of binary data follow the inputs' data", binary.len())));
    }
    let mut names = Vec::new();
    let mut binary_out = Vec::new();
    for o in json.outputs.unwrap_or_default() {
        if let Some(p) = &o.parameters
            && let Some(key) = p.keys().find(|k| *k != "binary_data")
        {
            return Err(ServeError::bad(format!("output `{}`: parameter `{key}` is not supported", o.name)));
        }
        binary_out.push(flag(&o.parameters, "binary_data")?.unwrap_or(all_binary));
        names.push(o.name);
    }
    Ok(ParsedRequest {
        request: InferRequest { id: json.id.unwrap_or_default(), inputs, outputs: names },
        binary: binary_out,
        all_binary,
    })
}

impl ParsedRequest {
    /// The request, and how its outputs go back.
    pub fn into_parts(self) -> (InferRequest, OutputEncoding) {
        (self.request, OutputEncoding { binary: self.binary, all_binary: self.all_binary })
    }
}

/// Which of a request's outputs go back as binary data.
#[derive(Debug, Clone)]
pub struct OutputEncoding {
    /// Per requested output (in the order asked); empty when none was named.
    binary: Vec<bool>,
    /// Every output, when none was named.
    all_binary: bool,
}

/// The response body (the JSON header, then each binary output's bytes, moved, not copied), and
/// the JSON header's length when binary data follows it.
pub fn respond(response: InferResponse, encoding: &OutputEncoding) -> (Chunks, Option<usize>) {
    let binary: Vec<bool> = if encoding.binary.is_empty() {
        vec![encoding.all_binary; response.outputs.len()]
    } else {
        encoding.binary.clone()
    };
    let outputs = response
        .outputs
        .iter()
        .zip(&binary)
        .map(|(o, &bin)| OutputJson {
            name: &o.name,
            datatype: protocol_name(o.dtype),
            shape: &o.dims,
            parameters: bin.then(|| serde_json::json!({ "binary_data_size": o.data.len() })),
            data: (!bin).then_some(JsonData(o.dtype, &o.data)),
        })
        .collect();
    let json =
        ResponseJson { model_name: &response.model, model_version: &response.version, id: &response.id, outputs };
    let head = serde_json::to_vec(&json).expect("serializable");
    if !binary.iter().any(|&b| b) {
        return (Chunks::from(head), None);
    }
    let header = head.len();
    let data = response.outputs.into_iter().zip(&binary).filter(|(_, b)| **b).map(|(o, _)| Bytes::from(o.data));
    (Chunks::new(std::iter::once(Bytes::from(head)).chain(data)), Some(header))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_and_binary_inputs_parse() {
        let body = br#"{"id":"7","inputs":[{"name":"x","shape":[1,2],"datatype":"FP32","data":[1,2]}],"outputs":[{"name":"y","parameters":{"binary_data":true}}]}"#;
        let p = parse(body, None, 1 << 20).unwrap();
        assert_eq!(
            (p.request.id.as_str(), p.request.outputs.clone(), p.binary.clone()),
            ("7", vec!["y".to_string()], vec![true])
        );
        assert_eq!(p.request.inputs[0].data, [1f32.to_le_bytes(), 2f32.to_le_bytes()].concat());
        let head = br#"{"inputs":[{"name":"x","shape":[2],"datatype":"INT32","parameters":{"binary_data_size":8}}]}"#;
        let mut body = head.to_vec();
        body.extend([1, 0, 0, 0, 2, 0, 0, 0]);
        let p = parse(&body, Some(&head.len().to_string()), 1 << 20).unwrap();
        assert_eq!(p.request.inputs[0].data, [1, 0, 0, 0, 2, 0, 0, 0]);
    }

    #[test]
    fn bad_bodies_are_named() {
        let head = br#"{"inputs":[{"name":"x","shape":[2],"datatype":"INT32","parameters":{"binary_data_size":8}}]}"#;
        let short = [head.as_slice(), &[1, 0, 0]].concat();
        for (body, header, what) in [
            (b"{".to_vec(), None, "malformed request JSON"),
            (br#"{"inputs":[{"name":"x","shape":[1],"datatype":"FP99","data":[1]}]}"#.to_vec(), None, "FP99"),
            (br#"{"inputs":[{"name":"x","shape":[3],"datatype":"FP32","data":[1]}]}"#.to_vec(), None, "1 elements"),
            (br#"{"inputs":[{"name":"x","shape":[1],"datatype":"FP32"}]}"#.to_vec(), None, "no data"),
            (br#"{"inputs":[{"name":"x","shape":[4611686018427387904,4],"datatype":"FP32","data":[]}]}"#.to_vec(), None, "overflows"),
            (br#"{"inputs":[],"extra":1}"#.to_vec(), None, "unknown field"),
            (short.clone(), Some(head.len().to_string()), "3 left"),
            (short, Some("999".into()), "Inference-Header-Content-Length"),
            (br#"{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1],"parameters":{"shared_memory_region":"r"}}]}"#.to_vec(), None, "shared_memory_region"),
        ] {
            let e = parse(&body, header.as_deref(), 1 << 20).unwrap_err();
            assert!(e.to_string().contains(what), "{}: {e}", String::from_utf8_lossy(&body));
            assert!(e.is_client_error());
        }
    }
}
