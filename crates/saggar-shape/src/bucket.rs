//! Bucket policies: which precompiled batch size serves a request.

use std::fmt;

use crate::{BatchHistogram, ShapeError};

/// Policies whose largest bucket is at most this answer lookups from a direct table (two bytes
/// per batch size, 8 KiB at most); larger ones binary-search their sorted bucket list.
pub const LOOKUP_TABLE_LIMIT: u64 = 4096;

/// The most buckets a policy may have.
pub const MAX_BUCKETS: usize = 1 << 16;

/// Split tables (see [`BucketPolicy::plan`]) are built when the largest bucket is below this and
/// the table costs at most `SPLIT_TABLE_WORK` steps to build.
const SPLIT_TABLE_LIMIT: u64 = 1 << 16;
const SPLIT_TABLE_WORK: u64 = 1 << 24;
/// A slack no combination of smaller buckets reaches.
pub(crate) const UNREACHABLE: u16 = u16::MAX;

/// How a policy chose its buckets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PolicyKind {
    /// 1, 2, 4, ... up to the maximum (and the maximum itself when it is not a power of two).
    PowersOfTwo,
    /// A caller-given list.
    Explicit,
    /// 1, 2, 4, then every multiple of `step` up to the maximum (and the maximum itself).
    Stepped {
        /// The distance between buckets above 4.
        step: u64,
    },
    /// Chosen by [`BucketPolicy::adaptive`] from a histogram of observed batches.
    Adaptive,
}

/// A sorted set of batch sizes ("buckets") that programs are compiled for, and the rule that
/// maps a request's batch to the smallest bucket that holds it.
///
/// Every policy answers [`bucket_for`](BucketPolicy::bucket_for) without allocating: powers of
/// two in O(1) by arithmetic, the others in O(1) from a direct table when their largest bucket
/// is at most [`LOOKUP_TABLE_LIMIT`], otherwise in O(log K) by binary search over the K buckets. Batches above the largest bucket are served by
/// a [`SplitPlan`](crate::SplitPlan) from [`plan`](BucketPolicy::plan).
#[derive(Clone)]
pub struct BucketPolicy {
    kind: PolicyKind,
    buckets: Box<[u64]>,
    lookup: Lookup,
    pub(crate) split: Option<SplitTable>,
}

#[derive(Clone)]
enum Lookup {
    /// Buckets `1, 2, 4, ..., 2^m` and perhaps a last, larger one: the index is the exponent of
    /// the next power of two, capped at the last bucket.
    PowersOfTwo,
    /// `table[b]` is the index of the bucket serving batch `b`, for `1 <= b <= largest`.
    Table(Box<[u16]>),
    Search,
}

/// For each slack `c < largest`: the fewest smaller buckets whose shortfalls against the largest
/// bucket add up to exactly `c` ([`UNREACHABLE`] if none do), and the last bucket index used.
#[derive(Clone)]
pub(crate) struct SplitTable {
    pub(crate) items: Box<[u16]>,
    pub(crate) last: Box<[u16]>,
}

impl BucketPolicy {
    /// Buckets 1, 2, 4, ... up to `max`; if `max` is not a power of two it is the last bucket,
    /// so every batch up to `max` is served without splitting. This is seed 001's policy.
    pub fn powers_of_two(max: u64) -> Result<BucketPolicy, ShapeError> {
        check_max(max)?;
        let mut buckets: Vec<u64> = (0..64).map(|shift| 1u64 << shift).take_while(|&bucket| bucket <= max).collect();
        if buckets.last() != Some(&max) {
            buckets.push(max);
        }
        Ok(BucketPolicy::from_sorted(PolicyKind::PowersOfTwo, buckets))
    }

    /// Exactly the given buckets, in any order; repeats are ignored.
    pub fn explicit(buckets: impl IntoIterator<Item = u64>) -> Result<BucketPolicy, ShapeError> {
        let mut buckets: Vec<u64> = buckets.into_iter().collect();
        buckets.sort_unstable();
        buckets.dedup();
        if buckets.is_empty() {
            return Err(ShapeError::InvalidPolicy { reason: "an explicit policy needs at least one bucket" });
        }
        if buckets[0] == 0 {
            return Err(ShapeError::InvalidPolicy { reason: "a bucket of 0 rows serves nothing" });
        }
        if buckets.len() > MAX_BUCKETS {
            return Err(ShapeError::InvalidPolicy { reason: "more than MAX_BUCKETS buckets" });
        }
        Ok(BucketPolicy::from_sorted(PolicyKind::Explicit, buckets))
    }

    /// Buckets 1, 2, 4, then multiples of 8 up to `max` (and `max` itself): small batches keep
    /// their exact power of two, large ones waste fewer than 8 rows.
    pub fn stepped(max: u64) -> Result<BucketPolicy, ShapeError> {
        BucketPolicy::stepped_by(max, 8)
    }

    /// Buckets 1, 2, 4, then multiples of `step` up to `max` (and `max` itself).
    pub fn stepped_by(max: u64, step: u64) -> Result<BucketPolicy, ShapeError> {
        check_max(max)?;
        if step == 0 {
            return Err(ShapeError::InvalidPolicy { reason: "a step of 0" });
        }
        if max / step > MAX_BUCKETS as u64 {
            return Err(ShapeError::InvalidPolicy { reason: "more than MAX_BUCKETS buckets" });
        }
        let mut buckets: Vec<u64> =
            [1, 2, 4].into_iter().chain((1..=max / step).map(|k| k * step)).chain([max]).collect();
        buckets.retain(|&bucket| bucket <= max);
        buckets.sort_unstable();
        buckets.dedup();
        Ok(BucketPolicy::from_sorted(PolicyKind::Stepped { step }, buckets))
    }

    /// The `budget` buckets that minimise the expected number of padded rows over `histogram`.
    ///
    /// # Algorithm
    ///
    /// Let the distinct observed batch sizes be `s_1 < s_2 < ... < s_n` with counts `c_i`. A
    /// batch is served by the smallest bucket that holds it and wastes `bucket - s` rows; the
    /// total waste of a bucket set `B` is `W(B) = sum_i c_i * (min{b in B : b >= s_i} - s_i)`.
    /// Minimising `W` minimises the expected waste `W / sum_i c_i`.
    ///
    /// 1. *Buckets sit on observed sizes.* If a bucket `b` is not an observed size, lower it to
    ///    the largest observed size it serves (or drop it if it serves none): every batch it
    ///    served still fits and wastes no more. So some optimal set uses only observed sizes,
    ///    and it contains `s_n`, the only bucket able to serve `s_n`.
    /// 2. *Buckets cut the sorted sizes into runs.* With buckets `s_{j_1} < ... < s_{j_k} = s_n`,
    ///    bucket `s_{j_t}` serves exactly the run `s_{j_{t-1}+1} ..= s_{j_t}`. The waste of a run
    ///    `i+1 ..= j` is `cost(i, j) = s_j * (C_j - C_i) - (S_j - S_i)` with prefix sums
    ///    `C_j = sum_{t<=j} c_t` and `S_j = sum_{t<=j} c_t * s_t`, an O(1) lookup.
    /// 3. *Dynamic programming over prefixes.* `f(1, j) = cost(0, j)` and
    ///    `f(k, j) = min_{k-1 <= i < j} f(k-1, i) + cost(i, j)` is the least waste that serves
    ///    `s_1 ..= s_j` with `k` buckets, the largest being `s_j`. Each term is a run partition
    ///    and every run partition into `k` runs appears, so `f(k, n)` is exact. Splitting a run
    ///    never adds waste, so `f(min(K, n), n)` is the optimum over all sets of at most `K`
    ///    buckets; the run boundaries are recovered from the argmin table.
    ///
    /// Cost: O(K * n^2) time and O(K * n) memory over the `n` distinct observed sizes (a
    /// histogram of 4096 distinct sizes with K = 16 takes well under a second). Waste is summed
    /// in 128 bits, which cannot overflow because the histogram's total count fits in 64.
    ///
    /// The largest observed batch is always a bucket, so the policy serves every observed batch
    /// without splitting. To cover sizes up to some maximum that was not observed, record the
    /// maximum with a count of zero. With fewer than `budget` distinct sizes every size becomes
    /// a bucket and the waste is zero.
    pub fn adaptive(histogram: &BatchHistogram, budget: usize) -> Result<BucketPolicy, ShapeError> {
        if budget == 0 {
            return Err(ShapeError::InvalidPolicy { reason: "a budget of zero buckets" });
        }
        if histogram.distinct() == 0 {
            return Err(ShapeError::InvalidPolicy { reason: "an empty histogram" });
        }
        if budget.min(histogram.distinct()) > MAX_BUCKETS {
            return Err(ShapeError::InvalidPolicy { reason: "more than MAX_BUCKETS buckets" });
        }
        let (sizes, counts): (Vec<u64>, Vec<u64>) = histogram.iter().unzip();
        Ok(BucketPolicy::from_sorted(PolicyKind::Adaptive, optimal_buckets(&sizes, &counts, budget)))
    }

    /// Builds the lookup and split tables over a sorted, deduplicated, non-empty bucket list.
    fn from_sorted(kind: PolicyKind, buckets: Vec<u64>) -> BucketPolicy {
        let largest = *buckets.last().expect("policies have at least one bucket");
        let lookup = if kind == PolicyKind::PowersOfTwo {
            Lookup::PowersOfTwo
        } else if largest <= LOOKUP_TABLE_LIMIT {
            let mut table = vec![0u16; largest as usize + 1];
            let mut index = 0;
            for (batch, entry) in table.iter_mut().enumerate().skip(1) {
                while buckets[index] < batch as u64 {
                    index += 1;
                }
                *entry = index as u16;
            }
            Lookup::Table(table.into())
        } else {
            Lookup::Search
        };
        let split = (largest < SPLIT_TABLE_LIMIT && largest * buckets.len() as u64 <= SPLIT_TABLE_WORK)
            .then(|| split_table(&buckets));
        BucketPolicy { kind, buckets: buckets.into(), lookup, split }
    }

    /// How the buckets were chosen.
    pub fn kind(&self) -> PolicyKind {
        self.kind
    }

    /// The buckets, ascending.
    pub fn buckets(&self) -> &[u64] {
        &self.buckets
    }

    /// The largest bucket: batches above it are split.
    pub fn largest(&self) -> u64 {
        self.buckets[self.buckets.len() - 1]
    }

    /// The smallest bucket that holds `batch`.
    ///
    /// Fails with [`ShapeError::ZeroBatchSize`] for 0 and with
    /// [`ShapeError::BatchAboveLargestBucket`] above the largest bucket (use
    /// [`plan`](BucketPolicy::plan) to split those). O(1) or O(log K), never allocates.
    #[inline]
    pub fn bucket_for(&self, batch: u64) -> Result<u64, ShapeError> {
        self.bucket_index_for(batch).map(|index| self.buckets[index])
    }

    /// The position in [`buckets`](BucketPolicy::buckets) of the bucket that serves `batch`:
    /// the natural index into a per-bucket array of programs.
    #[inline]
    pub fn bucket_index_for(&self, batch: u64) -> Result<usize, ShapeError> {
        if batch == 0 || batch > self.largest() {
            return Err(self.lookup_error(batch));
        }
        Ok(match &self.lookup {
            Lookup::PowersOfTwo => {
                let exponent = batch.checked_next_power_of_two().map_or(64, u64::trailing_zeros) as usize;
                exponent.min(self.buckets.len() - 1)
            }
            Lookup::Table(table) => usize::from(table[batch as usize]),
            Lookup::Search => self.buckets.partition_point(|&bucket| bucket < batch),
        })
    }

    #[cold]
    fn lookup_error(&self, batch: u64) -> ShapeError {
        if batch == 0 {
            ShapeError::ZeroBatchSize
        } else {
            ShapeError::BatchAboveLargestBucket { batch, largest: self.largest() }
        }
    }
}

impl fmt::Debug for BucketPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BucketPolicy").field("kind", &self.kind).field("buckets", &self.buckets).finish_non_exhaustive()
    }
}

impl PartialEq for BucketPolicy {
    fn eq(&self, other: &Self) -> bool {
        self.kind == other.kind && self.buckets == other.buckets
    }
}

impl Eq for BucketPolicy {}

fn check_max(max: u64) -> Result<(), ShapeError> {
    if max == 0 {
        return Err(ShapeError::InvalidPolicy { reason: "the largest bucket must be at least 1" });
    }
    Ok(())
}

/// The exact dynamic programme documented on [`BucketPolicy::adaptive`].
fn optimal_buckets(sizes: &[u64], counts: &[u64], budget: usize) -> Vec<u64> {
    let n = sizes.len();
    if budget >= n {
        return sizes.to_vec();
    }
    let runs = budget;
    let mut count_prefix = vec![0u128; n + 1];
    let mut rows_prefix = vec![0u128; n + 1];
    for i in 0..n {
        count_prefix[i + 1] = count_prefix[i] + u128::from(counts[i]);
        rows_prefix[i + 1] = rows_prefix[i] + u128::from(counts[i]) * u128::from(sizes[i]);
    }
    // Waste of serving sizes i+1 ..= j (1-based) with bucket s_j.
    let cost = |i: usize, j: usize| {
        u128::from(sizes[j - 1]) * (count_prefix[j] - count_prefix[i]) - (rows_prefix[j] - rows_prefix[i])
    };

    // `best[j]`: least waste serving the first j sizes with the current number of runs.
    let mut best: Vec<u128> = (0..=n).map(|j| if j == 0 { 0 } else { cost(0, j) }).collect();
    // `start[k][j]`: where the last run begins in the optimum for k + 1 runs over j sizes.
    let mut start = vec![vec![0u32; n + 1]; runs];
    for (k, starts) in start.iter_mut().enumerate().skip(1) {
        let mut next = vec![u128::MAX; n + 1];
        for j in k + 1..=n {
            let (least, from) = best[..j]
                .iter()
                .enumerate()
                .skip(k)
                .map(|(i, &before)| (before + cost(i, j), i))
                .min()
                .expect("k < j, so the range is not empty");
            next[j] = least;
            starts[j] = from as u32;
        }
        best = next;
    }

    let mut buckets = Vec::with_capacity(runs);
    let mut end = n;
    for k in (0..runs).rev() {
        buckets.push(sizes[end - 1]);
        end = start[k][end] as usize;
    }
    buckets.reverse();
    buckets
}

/// The fewest smaller buckets whose shortfalls against the largest add up to each slack.
fn split_table(buckets: &[u64]) -> SplitTable {
    let largest = buckets[buckets.len() - 1];
    let size = largest as usize;
    let mut items = vec![UNREACHABLE; size];
    let mut last = vec![0u16; size];
    items[0] = 0;
    for slack in 1..size {
        for (index, &bucket) in buckets[..buckets.len() - 1].iter().enumerate() {
            let shortfall = (largest - bucket) as usize;
            if shortfall > slack {
                continue;
            }
            let before = items[slack - shortfall];
            if before != UNREACHABLE && before + 1 < items[slack] {
                items[slack] = before + 1;
                last[slack] = index as u16;
            }
        }
    }
    SplitTable { items: items.into(), last: last.into() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn powers_of_two_append_a_non_power_max() {
        assert_eq!(BucketPolicy::powers_of_two(32).unwrap().buckets(), &[1, 2, 4, 8, 16, 32]);
        assert_eq!(BucketPolicy::powers_of_two(48).unwrap().buckets(), &[1, 2, 4, 8, 16, 32, 48]);
        assert_eq!(BucketPolicy::powers_of_two(1).unwrap().buckets(), &[1]);
        let huge = BucketPolicy::powers_of_two(u64::MAX).unwrap();
        assert_eq!(huge.buckets().len(), 65);
        assert_eq!(huge.bucket_for(u64::MAX), Ok(u64::MAX));
        assert_eq!(huge.bucket_for((1 << 63) + 1), Ok(u64::MAX));
    }

    #[test]
    fn stepped_lists() {
        assert_eq!(BucketPolicy::stepped(32).unwrap().buckets(), &[1, 2, 4, 8, 16, 24, 32]);
        assert_eq!(BucketPolicy::stepped(20).unwrap().buckets(), &[1, 2, 4, 8, 16, 20]);
        assert_eq!(BucketPolicy::stepped(3).unwrap().buckets(), &[1, 2, 3]);
        assert_eq!(BucketPolicy::stepped_by(64, 16).unwrap().buckets(), &[1, 2, 4, 16, 32, 48, 64]);
        assert!(BucketPolicy::stepped_by(64, 0).is_err());
        assert!(BucketPolicy::stepped_by(u64::MAX, 1).is_err());
    }

    #[test]
    fn invalid_policies_are_typed_errors() {
        assert!(matches!(BucketPolicy::powers_of_two(0), Err(ShapeError::InvalidPolicy { .. })));
        assert!(matches!(BucketPolicy::explicit([]), Err(ShapeError::InvalidPolicy { .. })));
        assert!(matches!(BucketPolicy::explicit([0, 4]), Err(ShapeError::InvalidPolicy { .. })));
        let histogram = BatchHistogram::from_trace([3, 5]).unwrap();
        assert!(matches!(BucketPolicy::adaptive(&histogram, 0), Err(ShapeError::InvalidPolicy { .. })));
        assert!(matches!(BucketPolicy::adaptive(&BatchHistogram::new(), 2), Err(ShapeError::InvalidPolicy { .. })));
    }

    #[test]
    fn powers_of_two_arithmetic_matches_search() {
        for max in [1, 2, 3, 48, 64, 5000, (1 << 40) + 3, u64::MAX] {
            let policy = BucketPolicy::powers_of_two(max).unwrap();
            assert!(matches!(policy.lookup, Lookup::PowersOfTwo));
            let probes =
                (1..200).chain([max / 2, max / 2 + 1, max - 1, max, (1 << 63) + 1]).filter(|&b| b >= 1 && b <= max);
            for batch in probes {
                let expected = policy.buckets().partition_point(|&bucket| bucket < batch);
                assert_eq!(policy.bucket_index_for(batch), Ok(expected), "max {max} batch {batch}");
            }
        }
    }

    #[test]
    fn table_and_search_agree() {
        let small = BucketPolicy::explicit([3, 10, 4000]).unwrap();
        let large = BucketPolicy::explicit([3, 10, 4000, 5000]).unwrap();
        assert!(matches!(small.lookup, Lookup::Table(_)));
        assert!(matches!(large.lookup, Lookup::Search));
        for batch in 1..=4000 {
            assert_eq!(small.bucket_for(batch), large.bucket_for(batch), "batch {batch}");
        }
        assert_eq!(large.bucket_for(4001), Ok(5000));
    }

    #[test]
    fn adaptive_small_example() {
        // 90 requests of 3 and 10 of 4: with two buckets, {3, 4} wastes nothing.
        let histogram =
            BatchHistogram::from_trace(std::iter::repeat_n(3, 90).chain(std::iter::repeat_n(4, 10))).unwrap();
        assert_eq!(BucketPolicy::adaptive(&histogram, 2).unwrap().buckets(), &[3, 4]);
        // With one bucket it must be the largest observed size.
        assert_eq!(BucketPolicy::adaptive(&histogram, 1).unwrap().buckets(), &[4]);
        // Sizes 1, 2, 8 (counts 1, 50, 1) and K = 2: {2, 8} wastes 1 row, {1, 8} wastes 300.
        let mut histogram = BatchHistogram::new();
        histogram.record_n(1, 1).unwrap();
        histogram.record_n(2, 50).unwrap();
        histogram.record_n(8, 1).unwrap();
        assert_eq!(BucketPolicy::adaptive(&histogram, 2).unwrap().buckets(), &[2, 8]);
    }

    #[test]
    fn split_table_counts_fewest_buckets() {
        // Largest 32, smaller 24 and 8: shortfalls 8 and 24.
        let policy = BucketPolicy::explicit([8, 24, 32]).unwrap();
        let table = policy.split.as_ref().unwrap();
        assert_eq!(table.items[0], 0);
        assert_eq!(table.items[8], 1);
        assert_eq!(table.items[16], 2);
        assert_eq!(table.items[24], 1);
        assert_eq!(table.items[7], UNREACHABLE);
    }
}
