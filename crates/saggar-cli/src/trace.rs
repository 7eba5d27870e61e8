//! Batch-size traces: the `--trace` spec, and deterministic sampling from a seed.
//!
//! | spec | requests |
//! |---|---|
//! | `const:B` | every request has `B` rows |
//! | `uniform:A..B` | uniform over `A..=B` (both ends included) |
//! | `zipf:S:MAX` | Zipf over `1..=MAX` with exponent `S >= 0`: `P(b) ∝ 1 / b^S`, so small batches dominate |
//! | `file:PATH` | one batch size per line (blank lines and `#` comments ignored), replayed in order |
//!
//! Sampling uses SplitMix64 (Steele, Lea and Flood, 2014) seeded with `--seed`, so a spec and a
//! seed always give the same trace: `saggar warmup --buckets adaptive:K` and `saggar perf --buckets
//! adaptive:K` with the same `--trace`, `--requests` and `--seed` choose the same buckets.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::error::{CliError, Result};

/// The largest batch a trace may hold: the largest bucket saggar-models compiles. Larger requests are
/// still possible through splitting, but a trace of them is almost certainly a typo.
pub const MAX_TRACE_BATCH: u64 = saggar_models::MAX_BATCH;

/// The most requests one run may have (the trace and the latencies are kept in memory).
pub const MAX_REQUESTS: u64 = 10_000_000;

/// Requests of a generated trace when `--requests` is not given.
pub const DEFAULT_REQUESTS: u64 = 2000;

/// A parsed `--trace` value.
#[derive(Debug, Clone, PartialEq)]
pub enum TraceSpec {
    /// Every request has this batch.
    Const(u64),
    /// Uniform over `lo..=hi`.
    Uniform {
        /// Smallest batch.
        lo: u64,
        /// Largest batch (included).
        hi: u64,
    },
    /// Zipf over `1..=max` with exponent `s`.
    Zipf {
        /// The exponent (0 is uniform; larger favours small batches more).
        s: f64,
        /// The largest batch.
        max: u64,
    },
    /// Batch sizes read from a file, one per line.
    File(PathBuf),
}

const TRACE_FORMS: &str = "expected const:B, uniform:A..B, zipf:S:MAX or file:PATH";

fn parse_batch(text: &str, what: &str) -> std::result::Result<u64, String> {
    let value: u64 = text.trim().parse().map_err(|_| format!("{what} `{text}` is not a whole number of rows"))?;
    check_batch(value).map_err(|e| format!("{what} {e}"))
}

fn check_batch(value: u64) -> std::result::Result<u64, String> {
    if value == 0 {
        Err("is 0; a request needs at least one row".into())
    } else if value > MAX_TRACE_BATCH {
        Err(format!("is {value}, above the largest supported batch of {MAX_TRACE_BATCH}"))
    } else {
        Ok(value)
    }
}

impl FromStr for TraceSpec {
    type Err = String;

    fn from_str(text: &str) -> std::result::Result<TraceSpec, String> {
        let (kind, rest) = text.split_once(':').ok_or_else(|| format!("`{text}` has no kind; {TRACE_FORMS}"))?;
        match kind {
            "const" => Ok(TraceSpec::Const(parse_batch(rest, "batch")?)),
            "uniform" => {
                let (lo, hi) =
                    rest.split_once("..").ok_or_else(|| format!("`{text}`: a uniform trace is uniform:A..B"))?;
                let (lo, hi) = (parse_batch(lo, "lower bound")?, parse_batch(hi, "upper bound")?);
                if lo > hi {
                    return Err(format!("`{text}`: the lower bound {lo} is above the upper bound {hi}"));
                }
                Ok(TraceSpec::Uniform { lo, hi })
            }
            "zipf" => {
                let (s, max) = rest
                    .split_once(':')
                    .ok_or_else(|| format!("`{text}`: a Zipf trace is zipf:S:MAX, e.g. zipf:1.1:64"))?;
                let s: f64 = s.trim().parse().map_err(|_| format!("`{text}`: the exponent `{s}` is not a number"))?;
                if !s.is_finite() || s < 0.0 {
                    return Err(format!("`{text}`: the exponent must be a finite number >= 0"));
                }
                Ok(TraceSpec::Zipf { s, max: parse_batch(max, "maximum")? })
            }
            "file" => {
                if rest.is_empty() {
                    return Err("`file:` needs a path, e.g. file:trace.txt".into());
                }
                Ok(TraceSpec::File(PathBuf::from(rest)))
            }
            other => Err(format!("unknown trace kind `{other}`; {TRACE_FORMS}")),
        }
    }
}

impl fmt::Display for TraceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TraceSpec::Const(b) => write!(f, "const:{b}"),
            TraceSpec::Uniform { lo, hi } => write!(f, "uniform:{lo}..{hi}"),
            TraceSpec::Zipf { s, max } => write!(f, "zipf:{s}:{max}"),
            TraceSpec::File(path) => write!(f, "file:{}", path.display()),
        }
    }
}

impl TraceSpec {
    /// The trace: `requests` batch sizes (default [`DEFAULT_REQUESTS`] for generated traces, the
    /// file's length for a file, which is replayed cyclically or cut to `requests`).
    pub fn generate(&self, requests: Option<u64>, seed: u64) -> Result<Vec<u64>> {
        if let Some(n) = requests {
            check_requests(n)?;
        }
        let n = requests.unwrap_or(DEFAULT_REQUESTS) as usize;
        let mut rng = SplitMix64::new(seed ^ 0x7472_6163_655f_6b6c);
        Ok(match self {
            TraceSpec::Const(b) => vec![*b; n],
            TraceSpec::Uniform { lo, hi } => (0..n).map(|_| lo + rng.below(hi - lo + 1)).collect(),
            TraceSpec::Zipf { s, max } => {
                let cdf = zipf_cdf(*s, *max);
                (0..n).map(|_| sample_cdf(&cdf, rng.unit())).collect()
            }
            TraceSpec::File(path) => {
                let file = read_trace_file(path)?;
                match requests {
                    None => file,
                    Some(n) => file.iter().copied().cycle().take(n as usize).collect(),
                }
            }
        })
    }
}

fn check_requests(n: u64) -> Result<()> {
    if n == 0 || n > MAX_REQUESTS {
        return Err(CliError::usage(
            format!("--requests {n} is outside 1..={MAX_REQUESTS}"),
            "pass a positive number of requests",
        ));
    }
    Ok(())
}

/// Reads a trace file: one batch size per line; blank lines and lines starting with `#` are skipped.
pub fn read_trace_file(path: &Path) -> Result<Vec<u64>> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        CliError::usage(format!("cannot read trace file {}: {e}", path.display()), "check the path after `file:`")
    })?;
    parse_trace_text(&text).map_err(|e| e.context(format_args!("trace file {}", path.display())))
}

/// Parses the text of a trace file.
pub fn parse_trace_text(text: &str) -> Result<Vec<u64>> {
    let hint = "a trace file holds one batch size (a whole number of rows, at least 1) per line";
    let mut out = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let batch =
            parse_batch(line, "batch").map_err(|e| CliError::usage(format!("line {}: {e}", index + 1), hint))?;
        out.push(batch);
    }
    if out.is_empty() {
        return Err(CliError::usage("holds no batch sizes", hint));
    }
    check_requests(out.len() as u64)?;
    Ok(out)
}

/// The cumulative distribution of Zipf(`s`) over `1..=max`.
fn zipf_cdf(s: f64, max: u64) -> Vec<f64> {
    let mut cdf = Vec::with_capacity(max as usize);
    let mut total = 0.0;
    for b in 1..=max {
        total += (b as f64).powf(-s);
        cdf.push(total);
    }
    for c in &mut cdf {
        *c /= total;
    }
    cdf
}

/// The batch whose CDF interval holds `u` in `[0, 1)`.
fn sample_cdf(cdf: &[f64], u: f64) -> u64 {
    let index = cdf.partition_point(|&c| c <= u).min(cdf.len() - 1);
    index as u64 + 1
}

/// SplitMix64: a tiny, well-mixed, seedable generator; good enough to sample traces and
/// deterministic everywhere.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64 { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n >= 1`), by multiply-shift (bias below 2^-40 for any n of a trace).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `[0, 1)` with 53 random bits.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_print_back() {
        for text in ["const:8", "uniform:1..64", "zipf:1.1:64", "file:trace.txt"] {
            assert_eq!(text.parse::<TraceSpec>().unwrap().to_string(), text);
        }
        assert_eq!("uniform:3..3".parse::<TraceSpec>().unwrap(), TraceSpec::Uniform { lo: 3, hi: 3 });
    }

    #[test]
    fn bad_specs_are_rejected_with_a_reason() {
        for (text, needle) in [
            ("8", "no kind"),
            ("const:0", "at least one row"),
            ("const:x", "not a whole number"),
            ("const:70000", "above the largest"),
            ("uniform:5..2", "above the upper bound"),
            ("uniform:1-4", "uniform:A..B"),
            ("zipf:-1:8", ">= 0"),
            ("zipf:nan:8", ">= 0"),
            ("zipf:1.1", "zipf:S:MAX"),
            ("file:", "needs a path"),
            ("poisson:3", "unknown trace kind"),
        ] {
            let e = text.parse::<TraceSpec>().unwrap_err();
            assert!(e.contains(needle), "{text}: {e}");
        }
    }

    #[test]
    fn generated_traces_are_deterministic_and_in_range() {
        let uniform = TraceSpec::Uniform { lo: 3, hi: 9 };
        let a = uniform.generate(Some(5000), 7).unwrap();
        assert_eq!(a, uniform.generate(Some(5000), 7).unwrap());
        assert_ne!(a, uniform.generate(Some(5000), 8).unwrap());
        assert!(a.iter().all(|b| (3..=9).contains(b)));
        for b in 3..=9 {
            let count = a.iter().filter(|&&x| x == b).count();
            assert!((500..930).contains(&count), "batch {b} drawn {count} times of 5000");
        }
        assert_eq!(TraceSpec::Const(8).generate(None, 1).unwrap(), vec![8; DEFAULT_REQUESTS as usize]);
    }

    #[test]
    fn zipf_favours_small_batches_and_stays_in_range() {
        let trace = TraceSpec::Zipf { s: 1.2, max: 64 }.generate(Some(20_000), 3).unwrap();
        assert!(trace.iter().all(|b| (1..=64).contains(b)));
        let ones = trace.iter().filter(|&&b| b == 1).count();
        let twos = trace.iter().filter(|&&b| b == 2).count();
        let sixty_fours = trace.iter().filter(|&&b| b == 64).count();
        // P(1) / P(2) = 2^1.2 = 2.30; P(1) = 1 / H(64, 1.2) = 0.30.
        let ratio = ones as f64 / twos as f64;
        assert!((2.0..2.6).contains(&ratio), "P(1)/P(2) = {ratio}");
        assert!((5400..6600).contains(&ones), "{ones} ones");
        assert!(sixty_fours < ones / 50);
        // Exponent 0 is uniform.
        let flat = TraceSpec::Zipf { s: 0.0, max: 4 }.generate(Some(8000), 3).unwrap();
        for b in 1..=4 {
            let count = flat.iter().filter(|&&x| x == b).count();
            assert!((1800..2200).contains(&count), "batch {b}: {count}");
        }
    }

    #[test]
    fn trace_files_skip_comments_and_report_bad_lines() {
        assert_eq!(parse_trace_text("# sizes\n4\n\n 16 \n1\n").unwrap(), vec![4, 16, 1]);
        let e = parse_trace_text("4\nfour\n").unwrap_err();
        assert!(e.message().contains("line 2"), "{e}");
        assert_eq!(e.exit_code(), crate::error::EXIT_USAGE);
        assert!(parse_trace_text("# nothing\n").is_err());
        assert!(parse_trace_text("0\n").unwrap_err().message().contains("line 1"));
    }

    #[test]
    fn file_traces_replay_cyclically_to_the_requested_length() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.txt");
        std::fs::write(&path, "1\n2\n3\n").unwrap();
        let spec = TraceSpec::File(path);
        assert_eq!(spec.generate(None, 0).unwrap(), vec![1, 2, 3]);
        assert_eq!(spec.generate(Some(7), 0).unwrap(), vec![1, 2, 3, 1, 2, 3, 1]);
        assert_eq!(spec.generate(Some(2), 0).unwrap(), vec![1, 2]);
        assert_eq!(spec.generate(Some(0), 0).unwrap_err().exit_code(), crate::error::EXIT_USAGE);
        let missing = TraceSpec::File(dir.path().join("missing.txt")).generate(None, 0).unwrap_err();
        assert_eq!(missing.exit_code(), crate::error::EXIT_USAGE);
    }
}
