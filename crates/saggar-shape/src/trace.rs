//! Batch histograms and padding-waste reports over traces of requests.

use std::collections::BTreeMap;

use crate::{BucketPolicy, ShapeError, SplitPlan, Splitting};

/// How often each batch size occurred: the input of [`BucketPolicy::adaptive`] and of
/// [`BucketPolicy::waste_over_histogram`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BatchHistogram {
    counts: BTreeMap<u64, u64>,
    total: u64,
}

impl BatchHistogram {
    /// An empty histogram.
    pub fn new() -> BatchHistogram {
        BatchHistogram::default()
    }

    /// The histogram of a trace of batch sizes; fails on a batch of zero.
    pub fn from_trace(trace: impl IntoIterator<Item = u64>) -> Result<BatchHistogram, ShapeError> {
        let mut histogram = BatchHistogram::new();
        for batch in trace {
            histogram.record(batch)?;
        }
        Ok(histogram)
    }

    /// Counts one request of `batch` rows.
    pub fn record(&mut self, batch: u64) -> Result<(), ShapeError> {
        self.record_n(batch, 1)
    }

    /// Counts `count` requests of `batch` rows. A count of zero still registers the size, which
    /// makes [`BucketPolicy::adaptive`] cover it without weighting it.
    pub fn record_n(&mut self, batch: u64, count: u64) -> Result<(), ShapeError> {
        if batch == 0 {
            return Err(ShapeError::ZeroBatchSize);
        }
        self.total = self.total.checked_add(count).ok_or(ShapeError::HistogramOverflow)?;
        *self.counts.entry(batch).or_insert(0) += count;
        Ok(())
    }

    /// `(batch, count)` pairs by ascending batch.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.counts.iter().map(|(&batch, &count)| (batch, count))
    }

    /// The number of requests counted.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The number of distinct batch sizes.
    pub fn distinct(&self) -> usize {
        self.counts.len()
    }

    /// The largest batch size recorded.
    pub fn max_batch(&self) -> Option<u64> {
        self.counts.keys().next_back().copied()
    }
}

/// Rows computed for nothing over a set of requests.
///
/// Counts saturate rather than wrap, so a report over an absurd trace stays an upper bound.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct WasteReport {
    /// Requests served.
    pub requests: u64,
    /// Program launches (chunks), at least one per request.
    pub launches: u64,
    /// Real rows, the sum of the requests' batches.
    pub useful_rows: u64,
    /// Padding rows computed and thrown away.
    pub padded_rows: u64,
}

impl WasteReport {
    /// Adds one request served by `plan`.
    pub fn record(&mut self, plan: &SplitPlan) {
        self.record_n(plan, 1);
    }

    /// Adds `times` requests served by `plan`.
    pub fn record_n(&mut self, plan: &SplitPlan, times: u64) {
        self.requests = self.requests.saturating_add(times);
        self.launches = self.launches.saturating_add(plan.chunk_count().saturating_mul(times));
        self.useful_rows = self.useful_rows.saturating_add(plan.batch().saturating_mul(times));
        self.padded_rows = self.padded_rows.saturating_add(plan.padded_rows().saturating_mul(times));
    }

    /// Rows computed in total, useful plus padded.
    pub fn computed_rows(&self) -> u64 {
        self.useful_rows.saturating_add(self.padded_rows)
    }

    /// The fraction of computed rows that were padding, in `[0, 1)`; 0 for an empty report.
    pub fn waste_ratio(&self) -> f64 {
        match self.computed_rows() {
            0 => 0.0,
            computed => self.padded_rows as f64 / computed as f64,
        }
    }

    /// Padded rows per request: the expected padding of one request of the trace.
    pub fn padded_rows_per_request(&self) -> f64 {
        match self.requests {
            0 => 0.0,
            requests => self.padded_rows as f64 / requests as f64,
        }
    }
}

impl BucketPolicy {
    /// The padding this policy causes over a trace of batch sizes.
    ///
    /// Fails on a batch of zero, or on a batch above the largest bucket when `splitting` is
    /// disabled.
    pub fn waste_over_trace(
        &self,
        trace: impl IntoIterator<Item = u64>,
        splitting: Splitting,
    ) -> Result<WasteReport, ShapeError> {
        let mut report = WasteReport::default();
        for batch in trace {
            report.record(&self.plan(batch, splitting)?);
        }
        Ok(report)
    }

    /// The padding this policy causes over the requests a histogram counts.
    pub fn waste_over_histogram(
        &self,
        histogram: &BatchHistogram,
        splitting: Splitting,
    ) -> Result<WasteReport, ShapeError> {
        let mut report = WasteReport::default();
        for (batch, count) in histogram.iter() {
            report.record_n(&self.plan(batch, splitting)?, count);
        }
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_over_a_small_trace() {
        let policy = BucketPolicy::powers_of_two(8).unwrap();
        let report = policy.waste_over_trace([1, 3, 5, 8, 10], Splitting::Allowed).unwrap();
        // 3 -> 4 (1 padded), 5 -> 8 (3), 10 -> 8 + 2 (0).
        assert_eq!(report.requests, 5);
        assert_eq!(report.launches, 6);
        assert_eq!(report.useful_rows, 27);
        assert_eq!(report.padded_rows, 4);
        assert!((report.waste_ratio() - 4.0 / 31.0).abs() < 1e-12);
        let histogram = BatchHistogram::from_trace([1, 3, 5, 8, 10]).unwrap();
        assert_eq!(policy.waste_over_histogram(&histogram, Splitting::Allowed), Ok(report));
        assert!(policy.waste_over_trace([10], Splitting::Disabled).is_err());
        assert_eq!(policy.waste_over_trace([0], Splitting::Allowed), Err(ShapeError::ZeroBatchSize));
    }

    #[test]
    fn histogram_counts_and_rejects_zero() {
        let mut histogram = BatchHistogram::from_trace([4, 2, 4]).unwrap();
        assert_eq!(histogram.iter().collect::<Vec<_>>(), [(2, 1), (4, 2)]);
        assert_eq!(histogram.total(), 3);
        assert_eq!(histogram.max_batch(), Some(4));
        assert_eq!(histogram.record(0), Err(ShapeError::ZeroBatchSize));
        histogram.record_n(9, u64::MAX - 3).unwrap();
        assert_eq!(histogram.record(1), Err(ShapeError::HistogramOverflow));
        assert_eq!(WasteReport::default().waste_ratio(), 0.0);
    }
}
