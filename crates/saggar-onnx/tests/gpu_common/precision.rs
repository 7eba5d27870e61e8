//! The checked-in models at `--precision` tf32, fp16 and bf16 through sessions with graphs on: the
//! GPU against the host backend at the same precision (the host computes the same roundings; only
//! the accumulation order differs, which may flip a half rounding of an activation), and both
//! against strict f32 within docs/precision.md's tolerance. Prints one PASS line per model and
//! precision with the largest errors.

use std::sync::Arc;

use saggar_device::Backend;
use saggar_onnx::{OnnxCompiler, OnnxOptions, Precision, Tensor, run_on_host};

use super::support::{MODELS, Request, owned_to_tensor};

/// `max |got - want|` and that over `max |want|`.
fn errors(got: &Tensor, want: &Tensor) -> (f32, f32) {
    let (g, w) = (got.to_f32s().unwrap(), want.to_f32s().unwrap());
    let abs = g.iter().zip(&w).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
    let scale = w.iter().fold(0f32, |m, x| m.max(x.abs()));
    (abs, abs / scale.max(1e-30))
}

/// See the module docs.
pub fn check_precisions<B: Backend>(device: B::Device) {
    for name in MODELS {
        let (model, inputs) = super::with_largest_set(name);
        let names: Vec<&str> = model.inputs().iter().map(|s| s.name()).collect();
        let request = Request::new(&names, &inputs);
        let strict = run_on_host(&OnnxCompiler::new(model.clone(), OnnxOptions::default()), &inputs).unwrap();
        // (precision, largest error relative to the output's magnitude: against the host at the same
        // precision, against strict f32)
        for (precision, same, f32_bound) in
            [(Precision::Tf32, 1e-2, 1e-2), (Precision::Fp16, 1e-2, 3e-2), (Precision::Bf16, 6e-2, 1.5e-1)]
        {
            let options = OnnxOptions::default().with_precision(precision);
            let compiler = Arc::new(OnnxCompiler::new(model.clone(), options));
            let host = run_on_host(&compiler, &inputs).unwrap();
            let s = super::session::<B>(&device, compiler, name);
            let (mut vs_host, mut vs_f32) = (0f32, 0f32);
            for run in 0..2 {
                let outputs =
                    s.run(&request.host()).unwrap_or_else(|e| panic!("FAIL {name} {precision} run {run}: {e}"));
                for (k, o) in outputs.iter().enumerate() {
                    let got = owned_to_tensor(o);
                    let (_, rel_host) = errors(&got, &host[k]);
                    let (_, rel_f32) = errors(&got, &strict[k]);
                    assert!(
                        rel_host <= same,
                        "FAIL {name} {precision} output {k} on {:?}: {rel_host} from the host",
                        B::KIND
                    );
                    assert!(rel_f32 <= f32_bound, "FAIL {name} {precision} output {k}: {rel_f32} from strict f32");
                    (vs_host, vs_f32) = (vs_host.max(rel_host), vs_f32.max(rel_f32));
                }
            }
            assert!(s.stats().replays > 0, "FAIL {name} {precision}: the second run replays a graph");
            println!(
                "PASS {name} {precision} on {:?}: max error rel. to the output's magnitude {vs_host:.2e} vs the host at {precision}, {vs_f32:.2e} vs strict f32",
                B::KIND
            );
        }
    }
}
