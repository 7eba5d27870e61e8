//! Padded-row waste of bucket policies on realistic traces, printed as a markdown table.
//!
//! Batch sizes 1..=64 are drawn from a Zipf law (s = 1.1: small batches dominate, as in
//! interactive serving) and from a uniform law. Each policy is compared with the others at the
//! same number of buckets K. The adaptive policy is fitted on one trace and evaluated on a
//! second, independent trace from the same law, so its figures are not in-sample.
//!
//! Run with `cargo run --release -p saggar-shape --example padding_waste`.

use saggar_shape::{BatchHistogram, BucketPolicy, Splitting};

const MAX_BATCH: u64 = 64;
const REQUESTS: usize = 100_000;
const ZIPF_EXPONENT: f64 = 1.1;

/// SplitMix64: a tiny, well-mixed deterministic generator.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1) with 53 bits of precision.
    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Samples `1..=max` with probability proportional to `1 / k^s`, by inverting the cumulative
/// distribution with a binary search.
struct Zipf {
    cumulative: Vec<f64>,
}

impl Zipf {
    fn new(max: u64, exponent: f64) -> Zipf {
        let mut total = 0.0;
        let mut cumulative: Vec<f64> = (1..=max)
            .map(|k| {
                total += 1.0 / (k as f64).powf(exponent);
                total
            })
            .collect();
        cumulative.iter_mut().for_each(|c| *c /= total);
        Zipf { cumulative }
    }

    fn sample(&self, rng: &mut SplitMix64) -> u64 {
        let u = rng.next_f64();
        self.cumulative.partition_point(|&c| c <= u).min(self.cumulative.len() - 1) as u64 + 1
    }
}

fn zipf_trace(seed: u64) -> Vec<u64> {
    let zipf = Zipf::new(MAX_BATCH, ZIPF_EXPONENT);
    let mut rng = SplitMix64(seed);
    (0..REQUESTS).map(|_| zipf.sample(&mut rng)).collect()
}

fn uniform_trace(seed: u64) -> Vec<u64> {
    let mut rng = SplitMix64(seed);
    (0..REQUESTS).map(|_| 1 + rng.next_u64() % MAX_BATCH).collect()
}

/// Draws a trace of `REQUESTS` batch sizes from a seed.
type TraceLaw = fn(u64) -> Vec<u64>;

fn main() -> Result<(), saggar_shape::ShapeError> {
    println!("| trace | K | policy | buckets | padded rows / request | waste ratio |");
    println!("|---|---|---|---|---|---|");
    let traces: [(&str, TraceLaw); 2] = [("Zipf s=1.1, 1..64", zipf_trace), ("uniform 1..64", uniform_trace)];
    for (name, trace) in traces {
        let training = trace(1);
        let evaluation = trace(2);
        let mut histogram = BatchHistogram::from_trace(training)?;
        // Cover every batch up to the maximum even if training never saw it.
        histogram.record_n(MAX_BATCH, 0)?;
        let rows = [
            ("powers of two", BucketPolicy::powers_of_two(MAX_BATCH)?),
            ("stepped (1, 2, 4, then x16)", BucketPolicy::stepped_by(MAX_BATCH, 16)?),
            ("adaptive", BucketPolicy::adaptive(&histogram, 7)?),
            ("stepped (1, 2, 4, then x8)", BucketPolicy::stepped(MAX_BATCH)?),
            ("adaptive", BucketPolicy::adaptive(&histogram, 11)?),
        ];
        for (label, policy) in rows {
            let report = policy.waste_over_trace(evaluation.iter().copied(), Splitting::Allowed)?;
            println!(
                "| {name} | {} | {label} | {:?} | {:.2} | {:.1}% |",
                policy.buckets().len(),
                policy.buckets(),
                report.padded_rows_per_request(),
                100.0 * report.waste_ratio(),
            );
        }
    }
    Ok(())
}
