//! CPU-only probe (host backend): kiln's `gather_host` of 190 inputs of 1 KiB (streaming stores,
//! N helpers) against a bare parallel copy of the same bytes by N + 1 threads with static parts.
//! Run: copy to `crates/kiln-arena/examples/`, `cargo build --release -p kiln-arena --example
//! cpu_gather_probe`, then `cpu_gather_probe N` on the machine to measure.
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use kiln_arena::{ArenaLayout, ArenaOptions, ArenaPool, GatherOptions, InputSource, PoolConfig, SlotSpec, StagingStores};
use kiln_device::{Backend, host::HostBackend};
use kiln_shape::{Chunk, DType, PadPlan, TensorShape};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn stream_copy(dst: *mut u8, src: *const u8, n: usize) {
    use std::arch::x86_64::*;
    for i in (0..n).step_by(64) {
        // SAFETY: callers pass `n` readable bytes at `src` and `n` writable, 16-aligned bytes at `dst`.
        unsafe {
            let s = src.add(i).cast::<__m128i>();
            let d = dst.add(i).cast::<__m128i>();
            let (a, b, c, e) = (_mm_loadu_si128(s), _mm_loadu_si128(s.add(1)), _mm_loadu_si128(s.add(2)), _mm_loadu_si128(s.add(3)));
            _mm_stream_si128(d, a);
            _mm_stream_si128(d.add(1), b);
            _mm_stream_si128(d.add(2), c);
            _mm_stream_si128(d.add(3), e);
        }
    }
}

#[repr(align(128))]
struct Pad<T>(T);

fn main() {
    let helpers: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(1);
    let iters = 20000;
    let (n, bytes) = (190usize, 1024usize);
    let device = HostBackend::open(0).unwrap();
    let specs: Vec<_> = (0..n).map(|i| SlotSpec::new(format!("in{i}"), bytes, 4)).collect();
    let layout = Arc::new(ArenaLayout::new(&specs, &[], 256).unwrap());
    let host: Vec<Vec<f32>> = (0..n).map(|i| vec![i as f32; bytes / 4]).collect();
    let dims = [(bytes / 4) as u64];
    let plans: Vec<PadPlan> = (0..n)
        .map(|i| PadPlan::new(TensorShape::new(&format!("in{i}"), DType::F32, &dims), false, Chunk::whole(1, 1)).unwrap())
        .collect();
    let sources: Vec<InputSource<'_>> = host
        .iter()
        .zip(&plans)
        // SAFETY: f32 -> u8 view of initialised memory.
        .map(|(h, p)| InputSource::Host { data: unsafe { std::slice::from_raw_parts(h.as_ptr().cast::<u8>(), bytes) }, plan: *p })
        .collect();
    for round in 0..3 {
        let gather = GatherOptions { helpers, stores: StagingStores::Streaming, ..GatherOptions::auto() };
        let config = PoolConfig { arena: ArenaOptions { gather, ..ArenaOptions::default() }, ..PoolConfig::default() };
        let pool = ArenaPool::<HostBackend>::new(device.clone(), layout.clone(), config).unwrap();
        let mut lease = pool.lease().unwrap();
        let mut t = Vec::new();
        for it in 0..iters {
            let t0 = Instant::now();
            std::hint::black_box(lease.gather_host(&sources).unwrap());
            if it > iters / 10 {
                t.push(t0.elapsed().as_secs_f64() * 1e6);
            }
        }
        let kiln = median(t);
        drop(lease);
        drop(pool);
        let threads = helpers + 1;
        let mut staging = vec![0u8; n * bytes + 64];
        let base = (staging.as_mut_ptr() as usize + 63) & !63;
        let (epoch, done, stop) = (Pad(AtomicU64::new(0)), Pad(AtomicUsize::new(0)), Pad(AtomicBool::new(false)));
        let srcs: Vec<usize> = host.iter().map(|h| h.as_ptr() as usize).collect();
        let part = |p: usize| {
            for i in n * p / threads..n * (p + 1) / threads {
                stream_copy((base + i * bytes) as *mut u8, srcs[i] as *const u8, bytes);
            }
            // SAFETY: sfence has no preconditions.
            unsafe { std::arch::x86_64::_mm_sfence() };
        };
        let raw = std::thread::scope(|s| {
            for h in 0..helpers {
                let (epoch, done, stop, part) = (&epoch, &done, &stop, &part);
                s.spawn(move || {
                    let mut seen = 0;
                    while !stop.0.load(Ordering::Relaxed) {
                        let e = epoch.0.load(Ordering::Acquire);
                        if e == seen {
                            std::hint::spin_loop();
                            continue;
                        }
                        seen = e;
                        part(h + 1);
                        done.0.fetch_add(1, Ordering::Release);
                    }
                });
            }
            let mut t = Vec::new();
            for it in 0..iters {
                let t0 = Instant::now();
                done.0.store(0, Ordering::Relaxed);
                epoch.0.fetch_add(1, Ordering::SeqCst);
                part(0);
                while done.0.load(Ordering::Acquire) < helpers {
                    std::hint::spin_loop();
                }
                if it > iters / 10 {
                    t.push(t0.elapsed().as_secs_f64() * 1e6);
                }
            }
            stop.0.store(true, Ordering::Relaxed);
            median(t)
        });
        println!("round {round}: {helpers} helpers: kiln gather_host {kiln:.2} us, raw parallel copy {raw:.2} us");
    }
}
