//! A disk hit of a 10 MiB artifact (open, read, header and checksum check) beside
//! `std::fs::read` of the same file. Target: within 1.5x of `std::fs::read`.
//!
//! Run with `cargo bench -p saggar-cache --bench disk_hit`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use saggar_cache::{CacheConfig, CacheKey, CompileCache};

const LEN: usize = 10 << 20;

fn artifact() -> Vec<u8> {
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut out = Vec::with_capacity(LEN + 8);
    while out.len() < LEN {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        out.extend_from_slice(&state.to_le_bytes());
    }
    out.truncate(LEN);
    out
}

fn disk_hit(c: &mut Criterion) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cache");
    let key = CacheKey::builder()
        .model_hash(CacheKey::hash_model_bytes(b"bench model"))
        .shape("batch=8")
        .backend("host")
        .arch("x86_64")
        .compiler("bench")
        .compiler_version("1")
        .build()
        .unwrap();
    // No memory tier: every lookup is a disk hit.
    let open = |threads: Option<usize>| {
        let mut b = CacheConfig::builder(&dir).memory_budget_bytes(0);
        if let Some(t) = threads {
            b = b.load_threads(t);
        }
        CompileCache::open(b.build()).unwrap()
    };
    let cache = open(None);
    let single = open(Some(1));
    cache.put(&key, artifact()).unwrap();
    let path = cache.entry_path(&key);
    assert_eq!(cache.read_disk(&key).unwrap().unwrap().len(), LEN);

    let mut group = c.benchmark_group("disk_hit_10MiB");
    group
        .throughput(Throughput::Bytes(LEN as u64))
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    group.bench_function("std_fs_read", |b| b.iter(|| black_box(std::fs::read(black_box(&path)).unwrap())));
    group.bench_function("saggar_read_disk", |b| {
        b.iter(|| black_box(cache.read_disk(black_box(&key)).unwrap().unwrap()))
    });
    group.bench_function("saggar_read_disk_1_thread", |b| {
        b.iter(|| black_box(single.read_disk(black_box(&key)).unwrap().unwrap()))
    });
    group.finish();
}

criterion_group!(benches, disk_hit);
criterion_main!(benches);
