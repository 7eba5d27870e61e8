//! Element types by the protocol's names (`FP32`, `INT64`, `BOOL`, `FP16`, `BF16`, ...) and by
//! Triton's `config.pbtxt` names (`TYPE_FP32`, ...).

use saggar_shape::DType;

/// Every protocol name with its type. `BYTES` (strings) and the 8-bit floats have no saggar
/// counterpart in the protocol and are refused by name.
const NAMES: [(&str, DType); 13] = [
    ("BOOL", DType::Bool),
    ("UINT8", DType::U8),
    ("UINT16", DType::U16),
    ("UINT32", DType::U32),
    ("UINT64", DType::U64),
    ("INT8", DType::I8),
    ("INT16", DType::I16),
    ("INT32", DType::I32),
    ("INT64", DType::I64),
    ("FP16", DType::F16),
    ("BF16", DType::BF16),
    ("FP32", DType::F32),
    ("FP64", DType::F64),
];

/// The protocol's name of `dtype` (`FP32`); the 8-bit floats, which the protocol does not name,
/// are `FP8_E4M3` and `FP8_E5M2`.
pub fn protocol_name(dtype: DType) -> &'static str {
    match dtype {
        DType::F8E4M3 => "FP8_E4M3",
        DType::F8E5M2 => "FP8_E5M2",
        _ => NAMES.iter().find(|(_, d)| *d == dtype).map_or("UNKNOWN", |(n, _)| n),
    }
}

/// The type the protocol's `name` stands for.
pub fn parse_protocol(name: &str) -> Option<DType> {
    NAMES.iter().find(|(n, _)| *n == name).map(|(_, d)| *d)
}

/// The type a `config.pbtxt` `data_type` (`TYPE_FP32`; Triton spells the booleans `TYPE_BOOL`)
/// stands for.
pub fn parse_config(name: &str) -> Option<DType> {
    parse_protocol(name.strip_prefix("TYPE_")?)
}

/// The `config.pbtxt` name of `dtype`.
pub fn config_name(dtype: DType) -> String {
    format!("TYPE_{}", protocol_name(dtype))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for (name, dtype) in NAMES {
            assert_eq!(protocol_name(dtype), name);
            assert_eq!(parse_protocol(name), Some(dtype));
            assert_eq!(parse_config(&config_name(dtype)), Some(dtype));
        }
        assert_eq!(parse_protocol("BYTES"), None);
        assert_eq!(parse_protocol("fp32"), None, "names are upper case");
        assert_eq!(parse_config("FP32"), None, "config names carry TYPE_");
    }
}
