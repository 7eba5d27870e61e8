//! temporary timing
use kiln_device::host::HostBackend;
use kiln_device::{Backend, Device, DeviceBuffer, Stream};
use kiln_dispatch::{CompileRequest, Program, ProgramCompiler};
use kiln_models::*;
fn main() {
    let config = ModelKind::Recsys.default_config();
    let compiler = ReferenceCompiler::from_config(config.clone()).unwrap();
    let device = HostBackend::open(0).unwrap();
    for batch in [1usize, 8, 64] {
        let dims = config.input_dims(batch as u64);
        let art = ProgramCompiler::<HostBackend>::compile(
            &compiler,
            &device,
            &CompileRequest { input_dims: &dims, bucket: Some(batch as u64) },
        )
        .unwrap();
        let p = ProgramCompiler::<HostBackend>::load(&compiler, &device, &art).unwrap();
        let inputs = generate_inputs(&config, batch, 1);
        let ins: Vec<_> = inputs
            .iter()
            .map(|i| {
                let b = device.alloc(i.len()).unwrap();
                b
            })
            .collect();
        let outs: Vec<_> = config.output_row_bytes().iter().map(|r| device.alloc(r * batch).unwrap()).collect();
        let scratch = device.alloc(p.scratch_bytes()).unwrap();
        let stream = device.create_stream().unwrap();
        for (b, d) in ins.iter().zip(&inputs) {
            stream.upload(d, b.as_slice()).unwrap();
        }
        let is: Vec<_> = ins.iter().map(|b| b.as_slice()).collect();
        let os: Vec<_> = outs.iter().map(|b| b.as_slice()).collect();
        let n = 2000 / batch.max(1) + 200;
        for _ in 0..20 {
            unsafe { p.launch(&stream, &is, &os, scratch.as_slice()).unwrap() };
            stream.synchronize().unwrap();
        }
        let mut times = Vec::new();
        for _ in 0..n {
            let t = std::time::Instant::now();
            unsafe { p.launch(&stream, &is, &os, scratch.as_slice()).unwrap() };
            stream.synchronize().unwrap();
            times.push(t.elapsed().as_secs_f64() * 1e6);
        }
        times.sort_by(|a, b| a.partial_cmp(b).unwrap());
        println!(
            "batch {batch}: min {:.1} us, p10 {:.1}, median {:.1} us per run",
            times[0],
            times[n / 10],
            times[n / 2]
        );
    }
}

fn cpu() -> f64 {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap();
    let f: Vec<&str> = s.rsplit(')').next().unwrap().split_whitespace().collect();
    (f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap()) / 100.0
}
