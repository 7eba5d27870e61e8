//! Probe (session 5): where the time of kiln's split gather goes, with TSC trace points inside kiln
//! (a temporary patch), against bare parallel copies (static parts; claimed parts) of the same bytes
//! into a pinned buffer, each followed by the one copy, timed in alternation with the prefilled copy.
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crossbeam::utils::CachePadded;
use kiln_arena::{ArenaLayout, ArenaOptions, ArenaPool, GatherOptions, InputSource, PoolConfig, SlotSpec, trace};
use kiln_device::{
    Backend, BackendChoice, BackendVisitor, Device, DeviceBuffer, PinnedBuffer, Stream, resolve, visit_backend,
};
use kiln_shape::{Chunk, DType, PadPlan, TensorShape};

fn tsc_per_ns() -> f64 {
    let (t0, c0) = (Instant::now(), trace::now());
    std::thread::sleep(Duration::from_millis(50));
    (trace::now() - c0) as f64 / t0.elapsed().as_nanos() as f64
}

fn med(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn pct(mut v: Vec<f64>, q: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[((v.len() - 1) as f64 * q) as usize]
}

fn stream_copy(dst: *mut u8, src: *const u8, n: usize) {
    use std::arch::x86_64::*;
    for i in (0..n).step_by(64) {
        // SAFETY: callers pass n readable bytes at src and n writable 64-aligned bytes at dst.
        unsafe {
            let s = src.add(i).cast::<__m128i>();
            let d = dst.add(i).cast::<__m128i>();
            let (a, b, c, e) =
                (_mm_loadu_si128(s), _mm_loadu_si128(s.add(1)), _mm_loadu_si128(s.add(2)), _mm_loadu_si128(s.add(3)));
            _mm_stream_si128(d, a);
            _mm_stream_si128(d.add(1), b);
            _mm_stream_si128(d.add(2), c);
            _mm_stream_si128(d.add(3), e);
        }
    }
}

struct Probe;

const N: usize = 190;
const BYTES: usize = 1024;

impl BackendVisitor for Probe {
    type Output = ();
    fn visit<B: Backend>(self) {
        let iters = 3000;
        let per_ns = tsc_per_ns();
        let device = B::open(0).unwrap();
        let _pin = device.pin().unwrap();
        let stream = device.create_stream().unwrap();
        let specs: Vec<_> = (0..N).map(|i| SlotSpec::new(format!("in{i}"), BYTES, 4)).collect();
        let layout = Arc::new(ArenaLayout::new(&specs, &[], 256).unwrap());
        let host: Vec<Vec<f32>> = (0..N).map(|i| vec![i as f32; BYTES / 4]).collect();
        let dims = [(BYTES / 4) as u64];
        let plans: Vec<PadPlan> = (0..N)
            .map(|i| PadPlan::new(TensorShape::new(&format!("in{i}"), DType::F32, &dims), false, Chunk::whole(1, 1)).unwrap())
            .collect();
        let sources: Vec<InputSource<'_>> = host
            .iter()
            .zip(&plans)
            // SAFETY: f32 -> u8 view of initialised memory.
            .map(|(h, p)| InputSource::Host { data: unsafe { std::slice::from_raw_parts(h.as_ptr().cast::<u8>(), BYTES) }, plan: *p })
            .collect();
        let mut pinned = device.alloc_pinned(layout.input_span()).unwrap();
        let mut raw_staging = device.alloc_pinned(layout.input_span()).unwrap();
        for (slot, h) in layout.inputs().iter().zip(&host) {
            // SAFETY: f32 -> u8 view.
            let bytes = unsafe { std::slice::from_raw_parts(h.as_ptr().cast::<u8>(), BYTES) };
            pinned.as_mut_slice()[slot.offset..slot.offset + BYTES].copy_from_slice(bytes);
        }
        let target = device.alloc(layout.input_span()).unwrap();
        let prefilled = || {
            // SAFETY: buffers outlive the synchronize.
            unsafe { stream.copy_h2d_async(&pinned, 0, target.as_slice()).unwrap() };
            stream.synchronize().unwrap();
        };
        let ns = |t: u64, t0: u64| (t.wrapping_sub(t0)) as f64 / per_ns;

        let pool = ArenaPool::<B>::new(device.clone(), layout.clone(), PoolConfig {
            arena: ArenaOptions { gather: GatherOptions::auto(), ..ArenaOptions::default() },
            ..PoolConfig::default()
        })
        .unwrap();
        let helpers = GatherOptions::auto().helpers;
        let parts = helpers + 1;
        println!("tsc {per_ns:.3}/ns, {helpers} helpers, {parts} parts");
        for round in 0..2 {
            let mut lease = pool.lease().unwrap();
            let (mut arena, mut single, mut snaps) = (Vec::new(), Vec::new(), Vec::new());
            for it in 0..iters + 300 {
                let t = Instant::now();
                lease.stage_inputs(&stream, &sources).unwrap();
                stream.synchronize().unwrap();
                let a = t.elapsed().as_secs_f64() * 1e6;
                let snap = trace::snapshot();
                let t = Instant::now();
                prefilled();
                let s = t.elapsed().as_secs_f64() * 1e6;
                if it >= 300 {
                    arena.push(a);
                    single.push(s);
                    snaps.push(snap);
                }
            }
            let (a, s) = (med(arena), med(single));
            println!("\n[kiln round {round}] stage+sync {a:.2} us, prefilled {s:.2} us, ratio {:.3}", a / s);
            let col = |f: &dyn Fn(&[u64; 64]) -> f64| med(snaps.iter().map(f).collect());
            let t0 = |s: &[u64; 64]| s[0];
            println!(
                "  caller: wait_idle {:.0} ns, parts built {:.0}, published {:.0}, own parts done {:.0}, helpers done {:.0}, return {:.0}",
                col(&|s| ns(s[1], t0(s))),
                col(&|s| ns(s[2], t0(s))),
                col(&|s| ns(s[3], t0(s))),
                col(&|s| ns(s[4], t0(s))),
                col(&|s| ns(s[5], t0(s))),
                col(&|s| ns(s[6], t0(s)))
            );
            let p90 = |f: &dyn Fn(&[u64; 64]) -> f64| pct(snaps.iter().map(f).collect(), 0.9);
            println!("  return p90 {:.0} ns", p90(&|s| ns(s[6], t0(s))));
            for p in 0..parts {
                let on_caller = snaps.iter().filter(|s| s[32 + p] == 0).count() as f64 / snaps.len() as f64;
                println!(
                    "  part {p}: task start {:.0} ns, copy start {:.0}, end {:.0} (p90 end {:.0}); on caller {:.0}%",
                    col(&|s| ns(s[8 + p], t0(s))),
                    col(&|s| ns(s[16 + p], t0(s))),
                    col(&|s| ns(s[24 + p], t0(s))),
                    p90(&|s| ns(s[24 + p], t0(s))),
                    on_caller * 100.0
                );
            }
            for h in 0..helpers {
                println!(
                    "  helper {h}: saw epoch {:.0} ns after publish, first claim {:.0}",
                    col(&|s| ns(s[40 + h], s[3])),
                    col(&|s| ns(s[48 + h], s[3]))
                );
            }
            drop(lease);
        }

        // Bare: the same bytes, static or claimed parts, helpers spinning on an epoch.
        let base = raw_staging.as_mut_slice().as_mut_ptr() as usize;
        let offsets: Vec<usize> = layout.inputs().iter().map(|s| s.offset).collect();
        let srcs: Vec<usize> = host.iter().map(|h| h.as_ptr() as usize).collect();
        let starts: Vec<usize> = (0..=parts).map(|p| N * p / parts).collect();
        for claimed in [false, true] {
            let epoch = CachePadded::new(AtomicU64::new(0));
            let claim = CachePadded::new(AtomicUsize::new(0));
            let done = CachePadded::new(AtomicUsize::new(0));
            let stop = CachePadded::new(std::sync::atomic::AtomicBool::new(false));
            let marks: Vec<CachePadded<AtomicU64>> = (0..3 * parts).map(|_| CachePadded::new(AtomicU64::new(0))).collect();
            let part = |p: usize| {
                marks[p].store(trace::now(), Ordering::Relaxed);
                for i in starts[p]..starts[p + 1] {
                    stream_copy((base + offsets[i]) as *mut u8, srcs[i] as *const u8, BYTES);
                }
                // SAFETY: sfence has no preconditions.
                unsafe { std::arch::x86_64::_mm_sfence() };
                marks[parts + p].store(trace::now(), Ordering::Relaxed);
            };
            let run_claims = |first: Option<usize>| {
                if let Some(p) = first.filter(|_| !claimed) {
                    part(p);
                    return 1;
                }
                let mut n = 0;
                loop {
                    let p = claim.fetch_add(1, Ordering::AcqRel);
                    if p >= parts {
                        return n;
                    }
                    part(p);
                    n += 1;
                }
            };
            let (mut arena, mut single, mut snaps) = (Vec::new(), Vec::new(), Vec::new());
            std::thread::scope(|s| {
                for h in 0..helpers {
                    let (epoch, done, stop, run_claims) = (&epoch, &done, &stop, &run_claims);
                    s.spawn(move || {
                        let mut seen = 0;
                        while !stop.load(Ordering::Relaxed) {
                            let e = epoch.load(Ordering::Acquire);
                            if e == seen {
                                std::hint::spin_loop();
                                continue;
                            }
                            seen = e;
                            let n = run_claims(Some(h + 1));
                            done.fetch_add(n, Ordering::Release);
                        }
                    });
                }
                for it in 0..iters + 300 {
                    let t = Instant::now();
                    let t0 = trace::now();
                    done.store(0, Ordering::Relaxed);
                    claim.store(0, Ordering::Relaxed);
                    epoch.fetch_add(1, Ordering::SeqCst);
                    let mine = run_claims(Some(0));
                    while done.load(Ordering::Acquire) + mine < parts {
                        std::hint::spin_loop();
                    }
                    let t1 = trace::now();
                    // SAFETY: buffers outlive the synchronize.
                    unsafe { stream.copy_h2d_async(&raw_staging, 0, target.as_slice()).unwrap() };
                    stream.synchronize().unwrap();
                    let a = t.elapsed().as_secs_f64() * 1e6;
                    let snap: Vec<f64> = std::iter::once(ns(t1, t0))
                        .chain((0..2 * parts).map(|i| ns(marks[i].load(Ordering::Relaxed), t0)))
                        .collect();
                    let t = Instant::now();
                    prefilled();
                    let s = t.elapsed().as_secs_f64() * 1e6;
                    if it >= 300 {
                        arena.push(a);
                        single.push(s);
                        snaps.push(snap);
                    }
                }
                stop.store(true, Ordering::Relaxed);
            });
            let (a, s) = (med(arena), med(single));
            let name = if claimed { "claimed" } else { "static" };
            println!("\n[bare {name}] gather+copy+sync {a:.2} us, prefilled {s:.2} us, ratio {:.3}", a / s);
            println!("  gather done {:.0} ns", med(snaps.iter().map(|v| v[0]).collect()));
            for p in 0..parts {
                println!(
                    "  part {p}: start {:.0} ns, end {:.0}",
                    med(snaps.iter().map(|v| v[1 + p]).collect()),
                    med(snaps.iter().map(|v| v[1 + parts + p]).collect())
                );
            }
        }
    }
}

fn main() {
    let kind = resolve(BackendChoice::Auto).unwrap();
    visit_backend(kind, Probe).unwrap();
}
