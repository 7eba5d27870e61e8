//! Bucket lookup for every policy (the target is under 10 ns).

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use saggar_shape::{BatchHistogram, BucketPolicy, Splitting};

fn bucket_lookup(c: &mut Criterion) {
    let histogram =
        BatchHistogram::from_trace((1..=64).flat_map(|batch| std::iter::repeat_n(batch, (65 - batch) as usize)))
            .unwrap();
    let policies = [
        ("powers_of_two(64)", BucketPolicy::powers_of_two(64).unwrap()),
        ("stepped(64)", BucketPolicy::stepped(64).unwrap()),
        ("explicit(13 buckets)", BucketPolicy::explicit([1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 40, 48, 64]).unwrap()),
        ("adaptive(K=7)", BucketPolicy::adaptive(&histogram, 7).unwrap()),
        ("powers_of_two(1<<20) (arithmetic)", BucketPolicy::powers_of_two(1 << 20).unwrap()),
        (
            "explicit(21 buckets up to 1<<20) (binary search)",
            BucketPolicy::explicit((0..20).map(|shift| 1u64 << shift).chain([(1 << 20) - 1])).unwrap(),
        ),
    ];
    // Cycle through batch sizes so the branch predictor cannot learn one answer.
    let batches: Vec<u64> = (0..256u64).map(|i| 1 + (i * 37) % 64).collect();

    let mut group = c.benchmark_group("bucket_lookup");
    group.measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_secs(1)).sample_size(30);
    for (name, policy) in &policies {
        let mut next = 0usize;
        group.bench_function(*name, |b| {
            b.iter(|| {
                next = (next + 1) & 255;
                // Consumed as a caller would (`?` or a default), not stored whole: the 96-byte
                // `Result` itself would otherwise be what the benchmark measures.
                policy.bucket_for(black_box(batches[next])).unwrap_or_default()
            })
        });
    }
    group.finish();

    let policy = BucketPolicy::powers_of_two(32).unwrap();
    let mut group = c.benchmark_group("split_plan");
    group.measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_secs(1)).sample_size(30);
    group.bench_function("plan(70) over powers_of_two(32)", |b| {
        b.iter(|| policy.plan(black_box(70), Splitting::Allowed))
    });
    group.finish();
}

criterion_group!(benches, bucket_lookup);
criterion_main!(benches);
