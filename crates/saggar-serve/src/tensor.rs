//! Request tensors as the server receives them: a name, a protocol datatype, a shape and bytes,
//! with every size checked (non-negative extents, products without overflow, the request limit)
//! before anything of that size is allocated; and the JSON number form of the protocol both ways.

use saggar_shape::DType;
use serde_json::Value;

use crate::datatype::protocol_name;
use crate::error::{Result, ServeError};

/// An input tensor of an inference request, decoded and size-checked.
#[derive(Debug, Clone, PartialEq)]
pub struct InputTensor {
    /// The model input's name.
    pub name: String,
    /// Its element type.
    pub dtype: DType,
    /// Its extents, outermost first.
    pub shape: Vec<u64>,
    /// Its bytes, row-major, little-endian.
    pub data: Vec<u8>,
}

/// The extents of a shape the client sent, and its size in bytes, checked: no negative extent, no
/// overflow of the element count or the byte count, and at most `limit` bytes.
pub fn checked_size(name: &str, dtype: DType, shape: &[i64], limit: usize) -> Result<(Vec<u64>, usize)> {
    let mut elements: u64 = 1;
    let mut dims = Vec::with_capacity(shape.len().min(64));
    if shape.len() > 64 {
        return Err(ServeError::bad(format!("input `{name}`: shape has {} dimensions (at most 64)", shape.len())));
    }
    for &d in shape {
        let d = u64::try_from(d)
            .map_err(|_| ServeError::bad(format!("input `{name}`: shape {shape:?} has a negative extent")))?;
        elements = elements
            .checked_mul(d)
            .ok_or_else(|| ServeError::bad(format!("input `{name}`: shape {shape:?} overflows (too many elements)")))?;
        dims.push(d);
    }
    let bytes = elements
        .checked_mul(dtype.size_bytes() as u64)
        .and_then(|b| usize::try_from(b).ok())
        .ok_or_else(|| ServeError::bad(format!("input `{name}`: shape {shape:?} overflows (too many bytes)")))?;
    if bytes > limit {
        return Err(ServeError::TooLarge(format!(
            "input `{name}`: shape {shape:?} of {} is {bytes} bytes, above the request limit of {limit} bytes",
            protocol_name(dtype)
        )));
    }
    Ok((dims, bytes))
}

/// The bytes of the JSON `data` (its text) of a tensor of `count` elements of `dtype`: a flat or
/// nested array of numbers (booleans for `BOOL`), row-major. The text is read element by element
/// into the bytes (never into a tree of JSON values), so memory stays at the tensor's size. More
/// or fewer elements than `count`, a value of the wrong kind or out of the type's range are errors
/// naming the input.
pub fn from_json(name: &str, dtype: DType, data: &str, count: usize) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(count.saturating_mul(dtype.size_bytes()));
    let mut de = serde_json::Deserializer::from_str(data);
    let seed = Flatten { name, dtype, out: &mut out, count };
    serde::de::DeserializeSeed::deserialize(seed, &mut de)
        .and_then(|()| de.end())
        .map_err(|e| ServeError::bad(format!("input `{name}`: {e}")))?;
    let seen = out.len() / dtype.size_bytes();
    if seen != count {
        return Err(ServeError::bad(format!("input `{name}`: data has {seen} elements, its shape holds {count}")));
    }
    Ok(out)
}

/// Reads nested arrays of scalars straight into bytes.
struct Flatten<'a> {
    name: &'a str,
    dtype: DType,
    out: &'a mut Vec<u8>,
    count: usize,
}

impl Flatten<'_> {
    fn push<E: serde::de::Error>(self, value: Value) -> std::result::Result<(), E> {
        if self.out.len() / self.dtype.size_bytes() >= self.count {
            return Err(E::custom(format!("data has more than the {} elements its shape holds", self.count)));
        }
        push_element(self.name, self.dtype, &value, self.out).map_err(|e| E::custom(e.to_string()))
    }
}

impl<'de> serde::de::DeserializeSeed<'de> for Flatten<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> std::result::Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Flatten<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "an array of {} values", protocol_name(self.dtype))
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> std::result::Result<(), E> {
        self.push(Value::Bool(v))
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> std::result::Result<(), E> {
        self.push(Value::from(v))
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> std::result::Result<(), E> {
        self.push(Value::from(v))
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> std::result::Result<(), E> {
        self.push(Value::from(v))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<(), A::Error> {
        let Flatten { name, dtype, out, count } = self;
        while seq.next_element_seed(Flatten { name, dtype, out: &mut *out, count })?.is_some() {}
        Ok(())
    }
}

fn push_element(name: &str, dtype: DType, value: &Value, out: &mut Vec<u8>) -> Result<()> {
    let kind = protocol_name(dtype);
    let wrong = || ServeError::bad(format!("input `{name}`: {value} is not a {kind} value"));
    let int = |lo: i128, hi: i128| -> Result<i128> {
        let v = value.as_i64().map(i128::from).or_else(|| value.as_u64().map(i128::from)).ok_or_else(wrong)?;
        if (lo..=hi).contains(&v) { Ok(v) } else { Err(wrong()) }
    };
    let float = || value.as_f64().ok_or_else(wrong);
    match dtype {
        DType::Bool => out.push(u8::from(value.as_bool().ok_or_else(wrong)?)),
        DType::U8 => out.push(int(0, u8::MAX.into())? as u8),
        DType::I8 => out.extend((int(i8::MIN.into(), i8::MAX.into())? as i8).to_le_bytes()),
        DType::U16 => out.extend((int(0, u16::MAX.into())? as u16).to_le_bytes()),
        DType::I16 => out.extend((int(i16::MIN.into(), i16::MAX.into())? as i16).to_le_bytes()),
        DType::U32 => out.extend((int(0, u32::MAX.into())? as u32).to_le_bytes()),
        DType::I32 => out.extend((int(i32::MIN.into(), i32::MAX.into())? as i32).to_le_bytes()),
        DType::U64 => out.extend((int(0, u64::MAX.into())? as u64).to_le_bytes()),
        DType::I64 => out.extend((int(i64::MIN.into(), i64::MAX.into())? as i64).to_le_bytes()),
        DType::F16 => out.extend(half::f16::from_f64(float()?).to_le_bytes()),
        DType::BF16 => out.extend(half::bf16::from_f64(float()?).to_le_bytes()),
        DType::F32 => out.extend((float()? as f32).to_le_bytes()),
        DType::F64 => out.extend(float()?.to_le_bytes()),
        _ => return Err(ServeError::bad(format!("input `{name}`: {kind} data must be sent as binary data"))),
    }
    Ok(())
}

/// The JSON numbers (booleans for `BOOL`) of `bytes` of `dtype`, flat and row-major. Non-finite
/// floats, which JSON cannot write, become `null`.
pub fn to_json(dtype: DType, bytes: &[u8]) -> Vec<Value> {
    bytes.chunks_exact(dtype.size_bytes()).map(|c| element_json(dtype, c)).collect()
}

/// Serializes tensor bytes as a flat JSON array, element by element.
#[derive(Debug, Clone, Copy)]
pub struct JsonData<'a>(pub DType, pub &'a [u8]);

impl serde::Serialize for JsonData<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq as _;
        let size = self.0.size_bytes();
        let mut seq = serializer.serialize_seq(Some(self.1.len() / size))?;
        for c in self.1.chunks_exact(size) {
            seq.serialize_element(&element_json(self.0, c))?;
        }
        seq.end()
    }
}

fn element_json(dtype: DType, c: &[u8]) -> Value {
    let float = |v: f64| serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number);
    let mut b = [0u8; 8];
    b[..c.len().min(8)].copy_from_slice(&c[..c.len().min(8)]);
    let [b0, b1, b2, b3, ..] = b;
    match dtype {
        DType::Bool => Value::Bool(b0 != 0),
        DType::U8 => Value::from(b0),
        DType::I8 => Value::from(b0 as i8),
        DType::U16 => Value::from(u16::from_le_bytes([b0, b1])),
        DType::I16 => Value::from(i16::from_le_bytes([b0, b1])),
        DType::U32 => Value::from(u32::from_le_bytes([b0, b1, b2, b3])),
        DType::I32 => Value::from(i32::from_le_bytes([b0, b1, b2, b3])),
        DType::U64 => Value::from(u64::from_le_bytes(b)),
        DType::I64 => Value::from(i64::from_le_bytes(b)),
        DType::F16 => float(half::f16::from_le_bytes([b0, b1]).to_f64()),
        DType::BF16 => float(half::bf16::from_le_bytes([b0, b1]).to_f64()),
        DType::F32 => float(f64::from(f32::from_le_bytes([b0, b1, b2, b3]))),
        DType::F64 => float(f64::from_le_bytes(b)),
        // The 8-bit floats and any later type: their raw byte.
        _ => Value::from(b0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sizes_are_checked_before_allocating() {
        assert_eq!(checked_size("x", DType::F32, &[2, 3], 1 << 20).unwrap(), (vec![2, 3], 24));
        assert!(
            matches!(checked_size("x", DType::F32, &[-1, 3], 1 << 20), Err(ServeError::BadRequest(m)) if m.contains("negative"))
        );
        let huge = [i64::MAX, i64::MAX];
        assert!(
            matches!(checked_size("x", DType::F32, &huge, usize::MAX), Err(ServeError::BadRequest(m)) if m.contains("overflows"))
        );
        assert!(
            matches!(checked_size("x", DType::F64, &[1 << 62], usize::MAX), Err(ServeError::BadRequest(m)) if m.contains("overflows"))
        );
        assert!(matches!(checked_size("x", DType::F32, &[1 << 20], 1 << 20), Err(ServeError::TooLarge(_))));
        assert!(checked_size("x", DType::F32, &[1; 65], 1 << 20).is_err());
    }

    #[test]
    fn json_data_flat_or_nested_round_trips() {
        let bytes = from_json("x", DType::F32, "[[1.0, 2.5], [3, -4]]", 4).unwrap();
        assert_eq!(to_json(DType::F32, &bytes), vec![json!(1.0), json!(2.5), json!(3.0), json!(-4.0)]);
        let bytes = from_json("m", DType::I64, "[1, -2, 3]", 3).unwrap();
        assert_eq!(to_json(DType::I64, &bytes), vec![json!(1), json!(-2), json!(3)]);
        let bytes = from_json("b", DType::Bool, "[true, false]", 2).unwrap();
        assert_eq!(bytes, [1, 0]);
        let bytes = from_json("h", DType::F16, "[0.5]", 1).unwrap();
        assert_eq!(to_json(DType::F16, &bytes), vec![json!(0.5)]);
    }

    #[test]
    fn json_data_of_the_wrong_kind_or_count_is_refused() {
        for (dtype, data, count) in [
            (DType::F32, json!([1.0, 2.0]), 3),
            (DType::F32, json!([1.0, 2.0, 3.0, 4.0]), 3),
            (DType::F32, json!(["a"]), 1),
            (DType::I8, json!([300]), 1),
            (DType::U32, json!([-1]), 1),
            (DType::I64, json!([1.5]), 1),
            (DType::Bool, json!([1]), 1),
            (DType::F32, json!({"a": 1}), 1),
        ] {
            let e = from_json("x", dtype, &data.to_string(), count).unwrap_err();
            assert!(matches!(&e, ServeError::BadRequest(m) if m.contains("`x`")), "{dtype} {data}: {e}");
        }
        let deep = format!("{}1.0{}", "[".repeat(200), "]".repeat(200));
        assert!(from_json("x", DType::F32, &deep, 1).is_err(), "nesting beyond serde_json's recursion limit");
        assert!(from_json("x", DType::F32, "[1.0", 1).is_err(), "truncated");
    }
}
