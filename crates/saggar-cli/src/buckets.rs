//! The `--buckets` policy: parsing, and turning it into the session's [`BucketSpec`] together with
//! the exact bucket list it yields (validated here, so a bad policy is a usage error before any
//! device is opened).

use std::fmt;
use std::str::FromStr;

use saggar_dispatch::BucketSpec;
use saggar_shape::{BatchHistogram, BucketPolicy};

use crate::error::{CliError, Result};

/// The largest bucket saggar-models compiles.
pub const MAX_BUCKET: u64 = saggar_models::MAX_BATCH;

/// A parsed `--buckets` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BucketArg {
    /// 1, 2, 4, ... up to `--max-batch`.
    Pow2,
    /// 1, 2, 4, then multiples of 8 up to `--max-batch`.
    Stepped,
    /// `K` buckets that minimise padding over the run's own trace.
    Adaptive(usize),
    /// Exactly these buckets.
    List(Vec<u64>),
}

const BUCKET_FORMS: &str = "expected pow2, stepped, adaptive:K or list:1,2,4,...";

impl FromStr for BucketArg {
    type Err = String;

    fn from_str(text: &str) -> std::result::Result<BucketArg, String> {
        match text.split_once(':') {
            None if text == "pow2" => Ok(BucketArg::Pow2),
            None if text == "stepped" => Ok(BucketArg::Stepped),
            Some(("adaptive", k)) => match k.trim().parse::<usize>() {
                Ok(k) if (1..=1024).contains(&k) => Ok(BucketArg::Adaptive(k)),
                _ => Err(format!("`{text}`: K must be a whole number of buckets between 1 and 1024")),
            },
            Some(("list", list)) => {
                let buckets = list
                    .split(',')
                    .map(|b| match b.trim().parse::<u64>() {
                        Ok(b) if (1..=MAX_BUCKET).contains(&b) => Ok(b),
                        _ => Err(format!("`{text}`: bucket `{b}` is not a whole number between 1 and {MAX_BUCKET}")),
                    })
                    .collect::<std::result::Result<Vec<u64>, String>>()?;
                Ok(BucketArg::List(buckets))
            }
            _ => Err(format!("unknown bucket policy `{text}`; {BUCKET_FORMS}")),
        }
    }
}

impl fmt::Display for BucketArg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BucketArg::Pow2 => f.write_str("pow2"),
            BucketArg::Stepped => f.write_str("stepped"),
            BucketArg::Adaptive(k) => write!(f, "adaptive:{k}"),
            BucketArg::List(list) => {
                let list: Vec<String> = list.iter().map(u64::to_string).collect();
                write!(f, "list:{}", list.join(","))
            }
        }
    }
}

/// Parses `--max-batch`.
pub fn parse_max_batch(text: &str) -> std::result::Result<u64, String> {
    match text.trim().parse::<u64>() {
        Ok(m) if (1..=MAX_BUCKET).contains(&m) => Ok(m),
        _ => Err(format!("`{text}` is not a whole number between 1 and {MAX_BUCKET}")),
    }
}

/// The session's bucket spec and the buckets it yields, ascending.
#[derive(Debug, Clone)]
pub struct Buckets {
    /// What the session is configured with.
    pub spec: BucketSpec,
    /// The buckets the policy yields.
    pub list: Vec<u64>,
}

impl BucketArg {
    /// Resolves the policy: `max_batch` bounds `pow2` and `stepped`; `trace` feeds `adaptive`.
    pub fn resolve(&self, max_batch: u64, trace: &[u64]) -> Result<Buckets> {
        let invalid = |e: saggar_shape::ShapeError| CliError::usage(format!("--buckets {self}: {e}"), BUCKET_FORMS);
        let (spec, policy) = match self {
            BucketArg::Pow2 => {
                (BucketSpec::PowersOfTwo { max: max_batch }, BucketPolicy::powers_of_two(max_batch).map_err(invalid)?)
            }
            BucketArg::Stepped => {
                (BucketSpec::Stepped { max: max_batch }, BucketPolicy::stepped(max_batch).map_err(invalid)?)
            }
            BucketArg::List(list) => {
                (BucketSpec::List(list.clone()), BucketPolicy::explicit(list.iter().copied()).map_err(invalid)?)
            }
            BucketArg::Adaptive(k) => {
                let histogram = BatchHistogram::from_trace(trace.iter().copied()).map_err(invalid)?;
                let policy = BucketPolicy::adaptive(&histogram, *k).map_err(invalid)?;
                (BucketSpec::Adaptive { histogram, k: *k }, policy)
            }
        };
        if policy.largest() > MAX_BUCKET {
            return Err(CliError::usage(
                format!(
                    "--buckets {self}: bucket {} is above the largest supported batch {MAX_BUCKET}",
                    policy.largest()
                ),
                "use smaller buckets; larger requests are split across buckets",
            ));
        }
        Ok(Buckets { spec, list: policy.buckets().to_vec() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_parse_and_print_back() {
        for text in ["pow2", "stepped", "adaptive:4", "list:1,2,4,8"] {
            assert_eq!(text.parse::<BucketArg>().unwrap().to_string(), text);
        }
        for bad in ["pow3", "adaptive:0", "adaptive:x", "list:", "list:1,,2", "list:0", "list:1,99999999", "stepped:8"]
        {
            assert!(bad.parse::<BucketArg>().is_err(), "{bad}");
        }
    }

    #[test]
    fn policies_resolve_to_their_buckets() {
        let trace = [3u64, 3, 3, 5, 9, 9, 17];
        assert_eq!(BucketArg::Pow2.resolve(64, &trace).unwrap().list, [1, 2, 4, 8, 16, 32, 64]);
        assert_eq!(BucketArg::Pow2.resolve(48, &trace).unwrap().list, [1, 2, 4, 8, 16, 32, 48]);
        assert_eq!(BucketArg::Stepped.resolve(24, &trace).unwrap().list, [1, 2, 4, 8, 16, 24]);
        assert_eq!(BucketArg::List(vec![8, 2, 8]).resolve(64, &trace).unwrap().list, [2, 8]);
        let adaptive = BucketArg::Adaptive(3).resolve(64, &trace).unwrap().list;
        assert_eq!(adaptive.len(), 3);
        assert_eq!(adaptive.last(), Some(&17), "the largest observed batch is always a bucket");
        assert_eq!(BucketArg::Adaptive(3).resolve(64, &[]).unwrap_err().exit_code(), crate::error::EXIT_USAGE);
    }
}
