//! Times the host-side gather of 190 inputs of 1 KiB into an arena's staging buffer, against a bare
//! loop of the same copies (`cargo run --release -p saggar-arena --example gather_timing`).
use std::sync::Arc;
use std::time::Instant;

use saggar_arena::{
    ArenaLayout, ArenaOptions, ArenaPool, GatherOptions, InputSource, PoolConfig, SlotSpec, StagingStores,
};
use saggar_device::host::HostBackend;
use saggar_device::{Backend, Device, Stream};
use saggar_shape::{Chunk, DType, PadPlan, TensorShape};

fn main() {
    let device = HostBackend::open(0).unwrap();
    let stream = device.create_stream().unwrap();
    let specs: Vec<_> = (0..190).map(|i| SlotSpec::new(format!("in{i}"), 1024, 4)).collect();
    let layout = Arc::new(ArenaLayout::new(&specs, &[], 256).unwrap());
    let config = |gather| PoolConfig { arena: ArenaOptions::default().with_gather(gather), ..PoolConfig::default() };
    let inline = ArenaPool::<HostBackend>::new(
        device.clone(),
        layout.clone(),
        config(GatherOptions::INLINE.with_stores(StagingStores::Streaming)),
    )
    .unwrap();
    let plain = GatherOptions::INLINE.with_stores(StagingStores::Plain);
    let plain = ArenaPool::<HostBackend>::new(device.clone(), layout.clone(), config(plain)).unwrap();
    let helped = ArenaPool::<HostBackend>::new(device.clone(), layout, config(GatherOptions::auto())).unwrap();
    let host: Vec<Vec<f32>> = (0..190).map(|i| vec![i as f32; 256]).collect();
    let names: Vec<String> = (0..190).map(|i| format!("in{i}")).collect();
    let plans: Vec<PadPlan> = names
        .iter()
        .map(|n| PadPlan::new(TensorShape::new(n, DType::F32, &[256]), false, Chunk::whole(1, 1)).unwrap())
        .collect();
    let bytes: Vec<&[u8]> = host
        .iter()
        .map(|h| {
            // SAFETY: each vector holds 256 initialised f32s (1024 bytes); u8 has no alignment requirement.
            unsafe { std::slice::from_raw_parts(h.as_ptr().cast::<u8>(), 1024) }
        })
        .collect();
    let n: usize = std::env::var("GATHER_ITERS").ok().and_then(|v| v.parse().ok()).unwrap_or(2000);
    for (label, pool) in [
        ("one thread, streaming stores", &inline),
        ("one thread, plain stores", &plain),
        (&*format!("{:?}", GatherOptions::auto()), &helped),
    ] {
        let mut lease = pool.lease().unwrap();
        for _ in 0..100 {
            lease.gather_host_with(|i| InputSource::Host { data: bytes[i], plan: plans[i] }).unwrap();
        }
        let t = Instant::now();
        for _ in 0..n {
            lease.gather_host_with(|i| InputSource::Host { data: bytes[i], plan: plans[i] }).unwrap();
        }
        println!("gather_host_with, {label}: {:.2} us", t.elapsed().as_secs_f64() * 1e6 / n as f64);
    }
    let mut staging = vec![0u8; 190 * 1024];
    let t = Instant::now();
    for _ in 0..n {
        for (i, b) in bytes.iter().enumerate() {
            staging[i * 1024..(i + 1) * 1024].copy_from_slice(b);
        }
        std::hint::black_box(&staging);
    }
    println!("plain memcpy loop: {:.2} us", t.elapsed().as_secs_f64() * 1e6 / n as f64);
    stream.synchronize().unwrap();
}
