//! Probe: how split gathers run in a stage+sync loop and then a gather-only loop (gpu_arena's order).
use std::sync::Arc;
use std::time::{Duration, Instant};

use kiln_arena::{
    ArenaLayout, ArenaOptions, ArenaPool, GatherOptions, GatherStats, InputSource, PoolConfig, SlotSpec, StagingStores,
};
use kiln_device::{Backend, BackendChoice, BackendVisitor, Device, DeviceBuffer, Stream, resolve, visit_backend};
use kiln_shape::{Chunk, DType, PadPlan, TensorShape};

struct P;
fn d(a: GatherStats, b: GatherStats) -> String {
    format!(
        "split {} helper parts {} found parked {} alone {}",
        b.split - a.split,
        b.parts_on_helpers - a.parts_on_helpers,
        b.found_parked - a.found_parked,
        b.alone_busy - a.alone_busy
    )
}
impl BackendVisitor for P {
    type Output = ();
    fn visit<B: Backend>(self) {
        let device = B::open(0).unwrap();
        let _pin = device.pin().unwrap();
        let stream = device.create_stream().unwrap();
        for (n, bytes) in [(190usize, 1024usize), (16, 65536)] {
            let specs: Vec<_> = (0..n).map(|i| SlotSpec::new(format!("in{i}"), bytes, 4)).collect();
            let layout = Arc::new(ArenaLayout::new(&specs, &[], 256).unwrap());
            let host: Vec<Vec<u8>> = (0..n).map(|i| vec![i as u8; bytes]).collect();
            let dims = [(bytes / 4) as u64];
            let plans: Vec<PadPlan> = (0..n)
                .map(|i| {
                    PadPlan::new(TensorShape::new(&format!("in{i}"), DType::F32, &dims), false, Chunk::whole(1, 1))
                        .unwrap()
                })
                .collect();
            let sources: Vec<InputSource<'_>> =
                host.iter().zip(&plans).map(|(h, p)| InputSource::Host { data: h, plan: *p }).collect();
            let target = device.alloc(layout.input_span()).unwrap();
            let pinned = device.alloc_pinned(layout.input_span()).unwrap();
            for (label, gather) in [
                (
                    "7 helpers streaming",
                    GatherOptions { helpers: 7, stores: StagingStores::Streaming, ..GatherOptions::auto() },
                ),
                ("default", GatherOptions::auto()),
            ] {
                let pool = ArenaPool::<B>::new(
                    device.clone(),
                    layout.clone(),
                    PoolConfig { arena: ArenaOptions { gather, ..ArenaOptions::default() }, ..PoolConfig::default() },
                )
                .unwrap();
                let mut lease = pool.lease().unwrap();
                let s0 = lease.gather_stats();
                let mut samples = Vec::new();
                for _ in 0..2200 {
                    let t = Instant::now();
                    lease.stage_inputs(&stream, &sources).unwrap();
                    stream.synchronize().unwrap();
                    samples.push(t.elapsed());
                    let t = Instant::now();
                    // SAFETY: buffers outlive the synchronize.
                    unsafe { stream.copy_h2d_async(&pinned, 0, target.as_slice()).unwrap() };
                    stream.synchronize().unwrap();
                    samples.push(t.elapsed());
                }
                let s1 = lease.gather_stats();
                let t = Instant::now();
                samples.sort();
                let gap = t.elapsed();
                let t = Instant::now();
                for _ in 0..2200 {
                    lease.gather_host(&sources).unwrap();
                }
                let g = t.elapsed() / 2200;
                let s2 = lease.gather_stats();
                println!(
                    "{n}x{bytes} {label}: stage loop: {}; sort gap {gap:?}; gather-only {g:?}: {}",
                    d(s0, s1),
                    d(s1, s2)
                );
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
}
fn main() {
    visit_backend(resolve(BackendChoice::Auto).unwrap(), P).unwrap();
}
