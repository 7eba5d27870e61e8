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
        let n = 500;
        for _ in 0..20 {
            unsafe { p.launch(&stream, &is, &os, scratch.as_slice()).unwrap() };
            stream.synchronize().unwrap();
        }
        let t = std::time::Instant::now();
        for _ in 0..n {
            unsafe { p.launch(&stream, &is, &os, scratch.as_slice()).unwrap() };
            stream.synchronize().unwrap();
        }
        println!("batch {batch}: {:.1} us per run (launch+sync)", t.elapsed().as_secs_f64() * 1e6 / n as f64);
    }
}
