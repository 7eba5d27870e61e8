//! Split plans: serving a batch as one or more bucket-sized chunks.

use smallvec::SmallVec;

use crate::bucket::UNREACHABLE;
use crate::{BucketPolicy, ShapeError};

/// One program launch of a [`SplitPlan`]: rows `offset .. offset + rows` of the request, run
/// at `bucket` rows (the last `bucket - rows` of them padding).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Chunk {
    /// The first request row of the chunk.
    pub offset: u64,
    /// Real rows in the chunk, at least 1.
    pub rows: u64,
    /// The bucket the chunk runs at, at least `rows`.
    pub bucket: u64,
}

impl Chunk {
    /// The whole of a batch of `rows` rows run at `bucket`: the only chunk of an unsplit request.
    pub const fn whole(rows: u64, bucket: u64) -> Chunk {
        Chunk { offset: 0, rows, bucket }
    }

    /// Rows of padding in this chunk.
    pub const fn padded_rows(&self) -> u64 {
        self.bucket.saturating_sub(self.rows)
    }
}

/// What to do with a batch above the largest bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Splitting {
    /// Split it into chunks (see [`BucketPolicy::plan`]).
    #[default]
    Allowed,
    /// Refuse it with [`ShapeError::BatchAboveLargestBucket`].
    Disabled,
}

/// How one request is served: consecutive chunks covering its rows exactly, in row order.
///
/// A batch within the largest bucket is one chunk. A larger batch is some number of full
/// chunks at the largest bucket followed by a short tail, stored as a count plus at most a few
/// chunks, so even an absurd batch takes constant memory. [`chunks`](SplitPlan::chunks)
/// yields them all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitPlan {
    batch: u64,
    largest: u64,
    full_chunks: u64,
    tail: SmallVec<[Chunk; 4]>,
}

impl SplitPlan {
    /// The request's batch.
    pub fn batch(&self) -> u64 {
        self.batch
    }

    /// Number of chunks, that is of program launches.
    pub fn chunk_count(&self) -> u64 {
        self.full_chunks + self.tail.len() as u64
    }

    /// Whether the request needs more than one launch.
    pub fn is_split(&self) -> bool {
        self.chunk_count() > 1
    }

    /// The chunks in row order.
    pub fn chunks(&self) -> impl Iterator<Item = Chunk> + '_ {
        let largest = self.largest;
        (0..self.full_chunks)
            .map(move |index| Chunk { offset: index * largest, rows: largest, bucket: largest })
            .chain(self.tail.iter().copied())
    }

    /// Rows of padding over all chunks.
    pub fn padded_rows(&self) -> u64 {
        // Full chunks carry no padding.
        self.tail.iter().map(Chunk::padded_rows).sum()
    }
}

impl BucketPolicy {
    /// The chunks that serve a batch of `batch` rows.
    ///
    /// A batch within the largest bucket `M` is one chunk at [`bucket_for`](Self::bucket_for).
    /// A larger batch is refused when `splitting` is [`Splitting::Disabled`]; otherwise it is
    /// split by this rule:
    ///
    /// 1. **Fewest launches.** Each chunk is one program launch, which costs far more than a
    ///    padded row, so the plan uses the fewest chunks possible, `n = ceil(batch / M)`.
    /// 2. **Then fewest padded rows.** Among all ways to serve the batch with `n` chunks, it
    ///    takes one with the least padding: `n - r` full chunks at `M` and `r` chunks at
    ///    smaller buckets whose shortfalls `M - b` add up to as much as possible without
    ///    exceeding the slack `n * M - batch`. The last chunk takes the remaining rows and is
    ///    the only one with padding. The best shortfall sum comes from a table built with the
    ///    policy (a small knapsack over slack values below `M`), so planning allocates only
    ///    past four chunks in the tail and never scans more than `M` table entries.
    ///
    /// So 70 rows over powers of two up to 32 become 32 + 32 + 8 (6 real rows in the last
    /// chunk, 2 padded), as greedy splitting would give; but 80 rows over buckets {24, 32}
    /// become 32 + 24 + 24 with no padding, where greedy splitting (32 + 32 + 16 in a 24
    /// bucket) pads 8. When the largest bucket is 65536 or more, or the table would take more
    /// than 2^24 steps to build, the plan falls back to the greedy rule: full chunks, then
    /// the remainder in its own bucket.
    pub fn plan(&self, batch: u64, splitting: Splitting) -> Result<SplitPlan, ShapeError> {
        let largest = self.largest();
        if batch == 0 {
            return Err(ShapeError::ZeroBatchSize);
        }
        if batch <= largest {
            let bucket = self.bucket_for(batch)?;
            let tail = SmallVec::from_slice(&[Chunk::whole(batch, bucket)]);
            return Ok(SplitPlan { batch, largest, full_chunks: 0, tail });
        }
        if splitting == Splitting::Disabled {
            return Err(ShapeError::BatchAboveLargestBucket { batch, largest });
        }

        let chunks = batch.div_ceil(largest);
        let slack = (largest - batch % largest) % largest;
        let mut smaller: SmallVec<[u64; 4]> = SmallVec::new();
        match &self.split {
            Some(table) => {
                let fits = |items: u16| items != UNREACHABLE && u64::from(items) <= chunks;
                // Slack 0 always fits (no smaller bucket), so this stops.
                let mut reduction = (0..=slack as usize).rev().find(|&c| fits(table.items[c])).unwrap_or(0);
                while reduction > 0 {
                    let bucket = self.buckets()[usize::from(table.last[reduction])];
                    smaller.push(bucket);
                    reduction -= (largest - bucket) as usize;
                }
            }
            None => {
                let remainder = batch - (chunks - 1) * largest;
                let bucket = self.bucket_for(remainder)?;
                if bucket < largest {
                    smaller.push(bucket);
                }
            }
        }
        smaller.sort_unstable_by(|a, b| b.cmp(a));
        if smaller.is_empty() {
            // The last full-size chunk takes the remainder.
            smaller.push(largest);
        }

        let full_chunks = chunks - smaller.len() as u64;
        let mut offset = full_chunks * largest;
        let mut tail = SmallVec::with_capacity(smaller.len());
        for (index, &bucket) in smaller.iter().enumerate() {
            let rows = if index + 1 == smaller.len() { batch - offset } else { bucket };
            debug_assert!(rows >= 1 && rows <= bucket, "split rows {rows} bucket {bucket}");
            tail.push(Chunk { offset, rows, bucket });
            offset += rows;
        }
        Ok(SplitPlan { batch, largest, full_chunks, tail })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn described(plan: &SplitPlan) -> Vec<(u64, u64, u64)> {
        plan.chunks().map(|chunk| (chunk.offset, chunk.rows, chunk.bucket)).collect()
    }

    #[test]
    fn seventy_over_thirty_two() {
        let policy = BucketPolicy::powers_of_two(32).unwrap();
        let plan = policy.plan(70, Splitting::Allowed).unwrap();
        assert_eq!(described(&plan), [(0, 32, 32), (32, 32, 32), (64, 6, 8)]);
        assert_eq!(plan.padded_rows(), 2);
        assert_eq!(
            policy.plan(70, Splitting::Disabled),
            Err(ShapeError::BatchAboveLargestBucket { batch: 70, largest: 32 })
        );
    }

    #[test]
    fn cheaper_cover_than_greedy() {
        let policy = BucketPolicy::explicit([24, 32]).unwrap();
        let plan = policy.plan(80, Splitting::Allowed).unwrap();
        assert_eq!(described(&plan), [(0, 32, 32), (32, 24, 24), (56, 24, 24)]);
        assert_eq!(plan.padded_rows(), 0);
    }

    #[test]
    fn exact_multiple_and_small_batch() {
        let policy = BucketPolicy::powers_of_two(32).unwrap();
        assert_eq!(described(&policy.plan(64, Splitting::Allowed).unwrap()), [(0, 32, 32), (32, 32, 32)]);
        assert_eq!(described(&policy.plan(5, Splitting::Disabled).unwrap()), [(0, 5, 8)]);
        assert_eq!(policy.plan(0, Splitting::Allowed), Err(ShapeError::ZeroBatchSize));
    }

    #[test]
    fn huge_batch_takes_constant_memory() {
        let policy = BucketPolicy::powers_of_two(1).unwrap();
        let plan = policy.plan(u64::MAX, Splitting::Allowed).unwrap();
        assert_eq!(plan.chunk_count(), u64::MAX);
        assert_eq!(plan.padded_rows(), 0);
    }
}
