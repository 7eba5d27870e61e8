//! One-copy inputs against per-input copies, on the best backend present (CUDA on the GPU machine,
//! the host simulator elsewhere). Run by the GPU bundle; prints a table and, with `--json PATH`,
//! writes the figures.
//!
//! For each case (190 inputs of 1 KiB; 16 inputs of 64 KiB), all measured in one run, median of many
//! iterations, each iteration ending with a stream synchronize:
//! - `arena`: gather the host inputs into the pinned staging buffer, ONE host-to-device copy; once per
//!   gather configuration (the calling thread alone, then with 1, 3 and 7 helper threads where the
//!   machine has the cores, and the default); and at low load, requests 1 ms and 10 ms apart (parked
//!   helpers), the calling thread alone and the default in alternation, with their ratio (target:
//!   the default within 1.05x of the calling thread alone);
//! - `gather only`: the host side of the same gather, without the copy (where the time goes);
//! - `per_input`: one asynchronous copy per input from an already-filled pinned buffer;
//! - `request`: the inputs written in place into the staging slots (what a dispatcher `Request`
//!   does: no gather), streamed (`Arena::write_staged_input`) or through the views with plain
//!   stores, ONE copy, waited for;
//! - `single_prefilled`: one copy of the same bytes from an already-filled pinned buffer (the floor);
//!   for each gather configuration measured in alternation with its `arena` iterations, so the ratio
//!   compares the two under the same machine state; for the diagnostic rows, measured once per case.

use std::sync::Arc;
use std::time::{Duration, Instant};

use saggar_arena::{
    ArenaLayout, ArenaOptions, ArenaPool, GatherOptions, GatherStats, InputSource, PoolConfig, SlotSpec, StagingStores,
};
use saggar_device::{
    Backend, BackendChoice, BackendVisitor, Device, DeviceBuffer, PinnedBuffer, Stream, resolve, visit_backend,
};
use saggar_shape::{Chunk, DType, PadPlan, TensorShape};

struct Case {
    inputs: usize,
    bytes: usize,
}

#[derive(Debug)]
struct Row {
    case: String,
    gather: String,
    arena_us: f64,
    gather_only_us: f64,
    per_input_us: f64,
    single_prefilled_us: f64,
    /// How the configuration's split gathers ran over its timed loops (arena and gather only).
    stats: Option<GatherStats>,
    /// For the default gather at low load: its time over the calling thread's alone, measured in
    /// alternation with it (the target: at most 1.05).
    vs_alone: Option<f64>,
}

impl Row {
    /// A row of one timed variant beside the prefilled copy, with no gather-only time or stats.
    fn alongside(case: &str, gather: String, arena_us: f64, per_input_us: f64, single_prefilled_us: f64) -> Row {
        Row {
            case: case.to_string(),
            gather,
            arena_us,
            gather_only_us: f64::NAN,
            per_input_us,
            single_prefilled_us,
            stats: None,
            vs_alone: None,
        }
    }
}

/// The gather configurations measured: the calling thread alone with plain and with streaming
/// stores, then 1, 3 and 7 helpers with streaming stores (as far as the machine has spare hardware
/// threads), 7 with plain stores, and the default. The low-load rows ([`APART`]) are measured
/// apart from these.
fn gather_configs() -> Vec<(String, GatherOptions, Option<Duration>)> {
    let spare = std::thread::available_parallelism().map_or(1, |n| n.get()).saturating_sub(1);
    let stores = |streaming| if streaming { StagingStores::Streaming } else { StagingStores::Plain };
    let inline = |streaming| GatherOptions::INLINE.with_stores(stores(streaming));
    let helped = |helpers, streaming| GatherOptions::auto().with_helpers(helpers).with_stores(stores(streaming));
    let mut configs = vec![
        ("calling thread, plain".to_string(), inline(false), None),
        ("calling thread, streaming".to_string(), inline(true), None),
    ];
    for helpers in [1, 3, 7].into_iter().filter(|h| *h <= spare) {
        configs.push((format!("{helpers} helpers, streaming"), helped(helpers, true), None));
    }
    if spare >= 7 {
        configs.push(("7 helpers, plain".to_string(), helped(7, false), None));
    }
    let auto = GatherOptions::auto();
    configs.push((format!("default ({} helpers)", auto.helpers), auto, None));
    configs
}

/// The low-load rows: requests this far apart (longer than the helpers' spin, so they park between
/// requests), each with how many of the back-to-back iterations it runs (every one sleeps).
const APART: [(Duration, usize); 2] = [(Duration::from_millis(1), 4), (Duration::from_millis(10), 20)];

/// A JSON number, or `null` for a figure not measured.
fn json_number(value: f64) -> String {
    if value.is_finite() { format!("{value:.3}") } else { "null".to_string() }
}

fn median(mut samples: Vec<Duration>) -> f64 {
    samples.sort();
    samples[samples.len() / 2].as_secs_f64() * 1e6
}

/// Median time of `f` over `iterations` (after a warm-up), sleeping `pause` before each timed call.
fn time(iterations: usize, pause: Option<Duration>, mut f: impl FnMut()) -> f64 {
    let [us] = time_each(iterations, pause, [&mut f]);
    us
}

/// Median time of each body over `iterations` rounds (after a warm-up); a round runs the bodies in
/// turn, each timed alone with `pause` slept before it, so all of them see the same machine state
/// (the prefilled copy drifts by 10 to 20% between runs on one machine).
fn time_each<const N: usize>(
    iterations: usize,
    pause: Option<Duration>,
    mut bodies: [&mut dyn FnMut(); N],
) -> [f64; N] {
    for _ in 0..iterations / 10 + 1 {
        bodies.iter_mut().for_each(|body| body());
    }
    let mut samples: [Vec<Duration>; N] = std::array::from_fn(|_| Vec::with_capacity(iterations));
    for _ in 0..iterations {
        for (body, samples) in bodies.iter_mut().zip(&mut samples) {
            if let Some(pause) = pause {
                std::thread::sleep(pause);
            }
            let t = Instant::now();
            body();
            samples.push(t.elapsed());
        }
    }
    samples.map(median)
}

struct Bench {
    iterations: usize,
}

impl BackendVisitor for Bench {
    type Output = Result<(String, Vec<Row>), String>;

    fn visit<B: Backend>(self) -> Self::Output {
        let device = B::open(0).map_err(|e| e.to_string())?;
        let _pin = device.pin().map_err(|e| e.to_string())?;
        let stream = device.create_stream().map_err(|e| e.to_string())?;
        let mut rows = Vec::new();
        for case in [Case { inputs: 190, bytes: 1024 }, Case { inputs: 16, bytes: 64 * 1024 }] {
            let specs: Vec<_> = (0..case.inputs).map(|i| SlotSpec::new(format!("in{i}"), case.bytes, 4)).collect();
            let layout = Arc::new(ArenaLayout::new(&specs, &[], 256).map_err(|e| e.to_string())?);
            let host: Vec<Vec<f32>> = (0..case.inputs).map(|i| vec![i as f32; case.bytes / 4]).collect();
            let names: Vec<String> = (0..case.inputs).map(|i| format!("in{i}")).collect();
            let dims = [(case.bytes / 4) as u64];
            let plans: Vec<PadPlan> = names
                .iter()
                .map(|n| PadPlan::new(TensorShape::new(n, DType::F32, &dims), false, Chunk::whole(1, 1)).unwrap())
                .collect();
            let mut pinned = device.alloc_pinned(layout.input_span()).map_err(|e| e.to_string())?;
            for (slot, h) in layout.inputs().iter().zip(&host) {
                // SAFETY: f32 -> u8 view of initialised memory.
                let bytes = unsafe { std::slice::from_raw_parts(h.as_ptr().cast::<u8>(), case.bytes) };
                pinned.as_mut_slice()[slot.offset..slot.offset + case.bytes].copy_from_slice(bytes);
            }
            let target = device.alloc(layout.input_span()).map_err(|e| e.to_string())?;
            let per_input_us = time(self.iterations, None, || {
                for slot in layout.inputs() {
                    // SAFETY: `pinned` and `target` outlive the synchronize right after the loop.
                    unsafe {
                        stream
                            .copy_h2d_async(&pinned, slot.offset, target.slice(slot.offset, case.bytes).unwrap())
                            .unwrap()
                    };
                }
                stream.synchronize().unwrap();
            });
            let single_prefilled_us = time(self.iterations, None, || {
                // SAFETY: as above.
                unsafe { stream.copy_h2d_async(&pinned, 0, target.as_slice()).unwrap() };
                stream.synchronize().unwrap();
            });
            // Diagnostics: the prefilled copy plus an event recorded after it (a timed one, and the
            // untimed kind an arena's fence records); a plain memcpy refill of the pinned buffer (no
            // arena code) before the copy.
            let copy_and_event_us = |event: B::Event| {
                time(self.iterations, None, || {
                    // SAFETY: as above.
                    unsafe { stream.copy_h2d_async(&pinned, 0, target.as_slice()).unwrap() };
                    stream.record(&event).unwrap();
                    stream.synchronize().unwrap();
                })
            };
            let copy_and_timed_event_us = copy_and_event_us(device.create_event().map_err(|e| e.to_string())?);
            let copy_and_untimed_event_us =
                copy_and_event_us(device.create_untimed_event().map_err(|e| e.to_string())?);
            // The CPU cost of enqueueing the prefilled copy alone, the wait untimed.
            let mut enqueue_samples = Vec::with_capacity(self.iterations);
            for _ in 0..self.iterations {
                let t = Instant::now();
                // SAFETY: as above.
                unsafe { stream.copy_h2d_async(&pinned, 0, target.as_slice()).unwrap() };
                enqueue_samples.push(t.elapsed());
                stream.synchronize().unwrap();
            }
            let enqueue_only_us = median(enqueue_samples);
            let refill_and_copy_us = time(self.iterations, None, || {
                for (slot, h) in layout.inputs().iter().zip(&host) {
                    // SAFETY: f32 -> u8 view of initialised memory.
                    let bytes = unsafe { std::slice::from_raw_parts(h.as_ptr().cast::<u8>(), case.bytes) };
                    pinned.as_mut_slice()[slot.offset..slot.offset + case.bytes].copy_from_slice(bytes);
                }
                // SAFETY: as above.
                unsafe { stream.copy_h2d_async(&pinned, 0, target.as_slice()).unwrap() };
                stream.synchronize().unwrap();
            });
            let case_name = format!("{} inputs x {} KiB", case.inputs, case.bytes / 1024);
            for (label, us) in [
                ("diag: prefilled copy + timed event", copy_and_timed_event_us),
                ("diag: prefilled copy + untimed event", copy_and_untimed_event_us),
                ("diag: prefilled copy, enqueue CPU only", enqueue_only_us),
                ("diag: memcpy refill + copy", refill_and_copy_us),
            ] {
                rows.push(Row::alongside(&case_name, label.to_string(), us, per_input_us, single_prefilled_us));
            }
            let sources: Vec<InputSource<'_>> = host
                .iter()
                .zip(&plans)
                .map(|(h, p)| {
                    // SAFETY: f32 -> u8 view of initialised memory.
                    let bytes = unsafe { std::slice::from_raw_parts(h.as_ptr().cast::<u8>(), case.bytes) };
                    InputSource::Host { data: bytes, plan: *p }
                })
                .collect();
            // Inputs written in place (what a dispatcher `Request` does on the host): the caller's
            // writes into the staging slots (streamed, as `Request::write_input` does, or through the
            // views with plain stores), ONE copy (by the copy engine, as the prefilled copy), the
            // wait; measured in alternation with the prefilled copy.
            {
                let arena = ArenaOptions::default().with_kernel_copies_up_to(0);
                let pool =
                    ArenaPool::<B>::new(device.clone(), layout.clone(), PoolConfig { arena, ..PoolConfig::default() })
                        .map_err(|e| e.to_string())?;
                let mut lease = pool.lease().map_err(|e| e.to_string())?;
                let lease = std::cell::RefCell::new(&mut lease);
                // The inputs fill their slots (no padding): as a `Request` at its bucket's batch, no
                // padding pass, the whole span in one copy.
                let span = lease.borrow().layout().input_span();
                let send = || {
                    // SAFETY: waited for right below, before the next write.
                    unsafe { lease.borrow().enqueue_upload(&stream, span).unwrap() };
                    stream.synchronize().unwrap();
                };
                let [streamed_us, views_us, prefilled_alongside_us] = time_each(
                    self.iterations,
                    None,
                    [
                        &mut || {
                            for (index, (h, plan)) in host.iter().zip(&plans).enumerate() {
                                // SAFETY: f32 -> u8 view of initialised memory.
                                let bytes = unsafe { std::slice::from_raw_parts(h.as_ptr().cast::<u8>(), case.bytes) };
                                lease.borrow_mut().write_staged_input(index, plan, bytes).unwrap();
                            }
                            send();
                        },
                        &mut || {
                            for (index, (h, plan)) in host.iter().zip(&plans).enumerate() {
                                let mut lease = lease.borrow_mut();
                                let view = lease.staged_input_mut(index, plan).unwrap();
                                // SAFETY: f32 -> u8 view of initialised memory.
                                view.copy_from_slice(unsafe {
                                    std::slice::from_raw_parts(h.as_ptr().cast::<u8>(), case.bytes)
                                });
                            }
                            send();
                        },
                        &mut || {
                            // SAFETY: as above.
                            unsafe { stream.copy_h2d_async(&pinned, 0, target.as_slice()).unwrap() };
                            stream.synchronize().unwrap();
                        },
                    ],
                );
                for (label, us) in
                    [("request: written in place, streamed", streamed_us), ("request: written through views", views_us)]
                {
                    rows.push(Row::alongside(&case_name, label.to_string(), us, per_input_us, prefilled_alongside_us));
                }
            }
            for (label, gather, pause) in gather_configs() {
                // Requests 1 ms apart: parked helpers; fewer iterations (each waits the pause).
                let iterations = if pause.is_some() { self.iterations / 4 } else { self.iterations };
                // The copy by the copy engine, as the prefilled copy it is measured against: these
                // rows are the gather's cost. The kernel copy's rows follow.
                let arena = ArenaOptions::default().with_gather(gather).with_kernel_copies_up_to(0);
                let config = PoolConfig { arena, ..PoolConfig::default() };
                let pool = ArenaPool::<B>::new(device.clone(), layout.clone(), config).map_err(|e| e.to_string())?;
                let mut lease = pool.lease().map_err(|e| e.to_string())?;
                let before = lease.gather_stats();
                let [arena_us, prefilled_alongside_us] = time_each(
                    iterations,
                    pause,
                    [
                        &mut || {
                            lease.stage_inputs(&stream, &sources).unwrap();
                            stream.synchronize().unwrap();
                        },
                        &mut || {
                            // SAFETY: as above.
                            unsafe { stream.copy_h2d_async(&pinned, 0, target.as_slice()).unwrap() };
                            stream.synchronize().unwrap();
                        },
                    ],
                );
                let gather_only_us = time(iterations, pause, || {
                    std::hint::black_box(lease.gather_host(&sources).unwrap());
                });
                let after = lease.gather_stats();
                let stats = after.since(&before);
                let mut stage_rows = Vec::new();
                if label.starts_with("default (") {
                    // The CPU cost of staging alone (gather, enqueue, fence), the wait untimed.
                    let mut samples = Vec::with_capacity(iterations);
                    for _ in 0..iterations {
                        let t = Instant::now();
                        lease.stage_inputs(&stream, &sources).unwrap();
                        samples.push(t.elapsed());
                        stream.synchronize().unwrap();
                    }
                    // Pieces of it: waiting for the previous fence when it has completed; recording
                    // the fence.
                    let (mut waits, mut fences) = (Vec::with_capacity(iterations), Vec::with_capacity(iterations));
                    for _ in 0..iterations {
                        lease.stage_inputs(&stream, &sources).unwrap();
                        stream.synchronize().unwrap();
                        let t = Instant::now();
                        lease.wait_idle().unwrap();
                        waits.push(t.elapsed());
                        let t = Instant::now();
                        lease.fence(&stream).unwrap();
                        fences.push(t.elapsed());
                        stream.synchronize().unwrap();
                    }
                    let case = format!("{} inputs x {} KiB", case.inputs, case.bytes / 1024);
                    stage_rows = [
                        ("diag: stage_inputs CPU only", median(samples)),
                        ("diag: wait for a completed fence", median(waits)),
                        ("diag: fence (record untimed event)", median(fences)),
                    ]
                    .into_iter()
                    .map(|(label, us)| Row::alongside(&case, label.to_string(), us, per_input_us, single_prefilled_us))
                    .collect();
                }
                rows.push(Row {
                    case: format!("{} inputs x {} KiB", case.inputs, case.bytes / 1024),
                    gather: label,
                    arena_us,
                    gather_only_us,
                    per_input_us,
                    single_prefilled_us: prefilled_alongside_us,
                    stats: Some(stats),
                    vs_alone: None,
                });
                rows.extend(stage_rows);
            }
            // The copy by a kernel through the mapped staging buffer (the limit raised to this case's
            // span, above the 64 KiB default), after the default gather, and alone from a prefilled
            // staging buffer, against the prefilled copy-engine copy.
            {
                let span = layout.input_span();
                let arena = ArenaOptions::default().with_kernel_copies_up_to(span);
                let pool =
                    ArenaPool::<B>::new(device.clone(), layout.clone(), PoolConfig { arena, ..PoolConfig::default() })
                        .map_err(|e| e.to_string())?;
                let mut lease = pool.lease().map_err(|e| e.to_string())?;
                let by_kernel = lease.copies_by_kernel(span);
                let lease = std::cell::RefCell::new(&mut lease);
                let [gathered_us, kernel_only_us, prefilled_alongside_us] = time_each(
                    self.iterations,
                    None,
                    [
                        &mut || {
                            lease.borrow_mut().stage_inputs(&stream, &sources).unwrap();
                            stream.synchronize().unwrap();
                        },
                        &mut || {
                            // SAFETY: waited for right below, before the next write.
                            unsafe { lease.borrow().enqueue_upload(&stream, span).unwrap() };
                            stream.synchronize().unwrap();
                        },
                        &mut || {
                            // SAFETY: as above.
                            unsafe { stream.copy_h2d_async(&pinned, 0, target.as_slice()).unwrap() };
                            stream.synchronize().unwrap();
                        },
                    ],
                );
                let how = if by_kernel { "kernel copy" } else { "copy engine (kernel copies unavailable)" };
                for (label, us) in
                    [(format!("default gather, {how}"), gathered_us), (format!("prefilled, {how}"), kernel_only_us)]
                {
                    rows.push(Row::alongside(&case_name, label, us, per_input_us, prefilled_alongside_us));
                }
            }
            // Low load: the calling thread alone and the default gather (helpers parked between
            // requests), with the same stores (chosen by the backend), measured in alternation with
            // each other and the prefilled copy, so their ratio compares them under the same machine
            // state.
            for (pause, divisor) in APART {
                let iterations = (self.iterations / divisor).max(20);
                let pool_with = |gather: GatherOptions| {
                    let config =
                        PoolConfig { arena: ArenaOptions::default().with_gather(gather), ..PoolConfig::default() };
                    ArenaPool::<B>::new(device.clone(), layout.clone(), config).map_err(|e| e.to_string())
                };
                let (alone_pool, default_pool) = (pool_with(GatherOptions::INLINE)?, pool_with(GatherOptions::auto())?);
                let mut alone = alone_pool.lease().map_err(|e| e.to_string())?;
                let mut default = default_pool.lease().map_err(|e| e.to_string())?;
                let before = default.gather_stats();
                let [alone_us, default_us, prefilled_alongside_us] = time_each(
                    iterations,
                    Some(pause),
                    [
                        &mut || {
                            alone.stage_inputs(&stream, &sources).unwrap();
                            stream.synchronize().unwrap();
                        },
                        &mut || {
                            default.stage_inputs(&stream, &sources).unwrap();
                            stream.synchronize().unwrap();
                        },
                        &mut || {
                            // SAFETY: as above.
                            unsafe { stream.copy_h2d_async(&pinned, 0, target.as_slice()).unwrap() };
                            stream.synchronize().unwrap();
                        },
                    ],
                );
                let [alone_gather_us, default_gather_us] = time_each(
                    iterations,
                    Some(pause),
                    [
                        &mut || {
                            std::hint::black_box(alone.gather_host(&sources).unwrap());
                        },
                        &mut || {
                            std::hint::black_box(default.gather_host(&sources).unwrap());
                        },
                    ],
                );
                let stats = default.gather_stats().since(&before);
                let ms = pause.as_millis();
                for (label, us, gather_us, stats, vs_alone) in [
                    (format!("calling thread, {ms} ms apart"), alone_us, alone_gather_us, GatherStats::default(), None),
                    (
                        format!("default, {ms} ms apart"),
                        default_us,
                        default_gather_us,
                        stats,
                        Some(default_us / alone_us),
                    ),
                ] {
                    rows.push(Row {
                        case: case_name.clone(),
                        gather: label,
                        arena_us: us,
                        gather_only_us: gather_us,
                        per_input_us,
                        single_prefilled_us: prefilled_alongside_us,
                        stats: Some(stats),
                        vs_alone,
                    });
                }
            }
        }
        Ok((format!("{} ({})", device.info().name, B::KIND), rows))
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let json = args.iter().position(|a| a == "--json").and_then(|i| args.get(i + 1)).cloned();
    // `cargo bench` passes `--bench`; keep the run short there and on the host backend.
    let kind = resolve(BackendChoice::Auto).expect("auto always resolves");
    let iterations = if kind == saggar_device::BackendKind::Host { 200 } else { 2000 };
    let (device, rows) = match visit_backend(kind, Bench { iterations })
        .and_then(|r| r.map_err(|e| saggar_device::Error::Compile { name: "bench".into(), log: e }))
    {
        Ok(v) => v,
        Err(e) => {
            eprintln!("gpu_arena: {e}");
            std::process::exit(1);
        }
    };
    println!("gpu_arena on {device}, median of {iterations} iterations (each ends with a stream synchronize)");
    println!(
        "{:<20} {:<36} {:>9} {:>12} {:>12} {:>12} {:>16} {:>13}  split gathers: parts on helpers, found parked, alone (busy), mean wait for helpers; alone (parked), woke helpers; helper spin per gather",
        "case", "gather", "arena us", "gather-only", "per-input us", "single us", "per-input/arena", "arena/single"
    );
    let mut out = String::from("{\"bench\":\"gpu_arena\",\"device\":");
    out.push_str(&format!("{:?},\"iterations\":{iterations},\"cases\":[", device));
    for (i, r) in rows.iter().enumerate() {
        let stats = r.stats.map_or(String::new(), |s| {
            let per = |ns: u64, n: u64| ns as f64 / 1e3 / n.max(1) as f64;
            let on_helpers = 100.0 * s.parts_on_helpers as f64 / s.parts.max(1) as f64;
            let gathers = s.split + s.alone_parked + s.alone_busy;
            format!(
                "  {on_helpers:.0}% of {} parts, {} of {}, {}, {:.2} us; {}, {}; {:.1} us",
                s.parts,
                s.found_parked,
                s.split,
                s.alone_busy,
                per(s.helper_wait_ns, s.split),
                s.alone_parked,
                s.woke_helpers,
                per(s.helper_spin_ns, gathers),
            )
        });
        let stats = match r.vs_alone {
            Some(ratio) => format!("{stats}; {ratio:.3}x the calling thread alone (target <= 1.05x)"),
            None => stats,
        };
        println!(
            "{:<20} {:<36} {:>9.2} {:>12.2} {:>12.2} {:>12.2} {:>15.1}x {:>12.2}x{stats}",
            r.case,
            r.gather,
            r.arena_us,
            r.gather_only_us,
            r.per_input_us,
            r.single_prefilled_us,
            r.per_input_us / r.arena_us,
            r.arena_us / r.single_prefilled_us
        );
        if i > 0 {
            out.push(',');
        }
        out.push_str(&format!(
            "{{\"case\":{:?},\"gather\":{:?},\"arena_us\":{:.3},\"gather_only_us\":{},\"per_input_us\":{:.3},\"single_prefilled_us\":{:.3},\"speedup_vs_per_input\":{:.3},\"ratio_vs_single\":{:.3},\"gather_stats\":{},\"vs_calling_thread\":{}}}",
            r.case, r.gather, r.arena_us, json_number(r.gather_only_us), r.per_input_us, r.single_prefilled_us, r.per_input_us / r.arena_us, r.arena_us / r.single_prefilled_us,
            r.stats.map_or("null".to_string(), |s| format!("{{\"split\":{},\"parts\":{},\"parts_on_helpers\":{},\"found_parked\":{},\"alone_busy\":{},\"helper_wait_ns\":{},\"alone_parked\":{},\"woke_helpers\":{},\"helper_spin_ns\":{}}}", s.split, s.parts, s.parts_on_helpers, s.found_parked, s.alone_busy, s.helper_wait_ns, s.alone_parked, s.woke_helpers, s.helper_spin_ns)),
            r.vs_alone.map_or("null".to_string(), |v| format!("{v:.3}"))
        ));
    }
    out.push_str("]}\n");
    if let Some(path) = json {
        std::fs::write(&path, out).unwrap_or_else(|e| eprintln!("gpu_arena: cannot write {path}: {e}"));
    }
}
