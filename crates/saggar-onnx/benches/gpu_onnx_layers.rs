//! Fusion per BERT layer on the best backend present (CUDA on the GPU machine): kernel launches and
//! GPU time of one encoder layer with fusion on and off, side by side in one run, for a BERT-shaped
//! encoder (hidden 256, 4 heads, feed-forward 1024, sequence 128, the exporter's op patterns:
//! `saggar_onnx::synthetic::bert_like_encoder`). A layer's figures are the difference between the
//! 4-layer and the 1-layer model divided by 3, so embeddings and the output copy cancel out. GPU time is
//! the replay of a CUDA/HIP graph of one program launch, timed with device events over many replays
//! (launch overhead excluded, inter-kernel gaps included). Also: the checked-in BERT (2 layers, hidden
//! 64, sequence 16) whole, and the peak device memory per batch bucket from the liveness memory plan.
//!
//! Prints a markdown table and one JSON line; `--json PATH` also writes the JSON. On the host backend
//! (no GPU) the sizes shrink so the run stays short; its times are not GPU figures.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use saggar_device::{
    Backend, BackendChoice, BackendKind, BackendVisitor, CaptureMode, Device, DeviceBuffer, Event, Stream, resolve,
    visit_backend,
};
use saggar_dispatch::{CompileRequest, Program, ProgramCompiler};
use saggar_onnx::synthetic::{EncoderConfig, bert_like_encoder};
use saggar_onnx::{AttentionKernel, ImportLimits, OnnxCompiler, OnnxModel, OnnxOptions, Tensor, TensorData};

/// One program measured.
#[derive(Debug, Clone, Copy)]
struct Measured {
    launches: usize,
    gpu_us: f64,
}

fn ids_and_mask(batch: usize, seq: usize, vocab: usize) -> Vec<Tensor> {
    let ids = (0..batch * seq).map(|i| ((i * 7 + 3) % vocab) as i64).collect();
    // Row r keeps all but its last r % 4 positions.
    let mask = (0..batch * seq).map(|i| i64::from(i % seq + (i / seq) % 4 < seq)).collect();
    vec![
        Tensor::new(vec![batch, seq], TensorData::I64(ids)).expect("ids"),
        Tensor::new(vec![batch, seq], TensorData::I64(mask)).expect("mask"),
    ]
}

/// Compiles `model` for `inputs` with `options`, captures one launch in a graph and times
/// `iterations` replays.
fn measure<B: Backend>(
    device: &B::Device,
    model: &OnnxModel,
    options: OnnxOptions,
    inputs: &[Tensor],
    iterations: usize,
) -> Result<Measured, String> {
    let e = |x: &dyn std::fmt::Display| x.to_string();
    let compiler = OnnxCompiler::new(model.clone(), options);
    let dims: Vec<Vec<u64>> = inputs.iter().map(|t| t.dims().iter().map(|&d| d as u64).collect()).collect();
    let launches = compiler.plan_summary(&dims, B::KIND).map_err(|x| e(&x))?.launches;
    let request = CompileRequest::new(&dims, None);
    let artifact = <OnnxCompiler as ProgramCompiler<B>>::compile(&compiler, device, &request).map_err(|x| e(&x))?;
    let program =
        <OnnxCompiler as ProgramCompiler<B>>::load(&compiler, device, &request, &artifact).map_err(|x| e(&x))?;
    let stream = device.create_stream().map_err(|x| e(&x))?;
    let mut input_buffers = Vec::new();
    for t in inputs {
        let bytes = t.to_le_bytes();
        let buffer = device.alloc(bytes.len()).map_err(|x| e(&x))?;
        stream.upload(&bytes, buffer.as_slice()).map_err(|x| e(&x))?;
        input_buffers.push(buffer);
    }
    let output_buffers = model
        .outputs()
        .iter()
        .zip(program.output_dims())
        .map(|(spec, d)| device.alloc(d.iter().product::<u64>() as usize * spec.dtype().size_bytes()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|x| e(&x))?;
    let scratch = device.alloc(program.scratch_bytes().max(1)).map_err(|x| e(&x))?;
    let ins: Vec<_> = input_buffers.iter().map(|b| b.as_slice()).collect();
    let outs: Vec<_> = output_buffers.iter().map(|b| b.as_slice()).collect();
    // SAFETY: the bindings are live allocations of the sizes the program reports (inputs from the
    // tensors it was compiled for, outputs from its output dims, scratch from its scratch bytes), kept
    // alive until after the last synchronize below; nothing else uses them.
    unsafe { program.launch(&stream, &ins, &outs, scratch.as_slice()) }.map_err(|x| e(&x))?;
    stream.synchronize().map_err(|x| e(&x))?;
    stream.begin_capture(CaptureMode::ThreadLocal).map_err(|x| e(&x))?;
    // SAFETY: as above; the captured graph replays the same live bindings.
    let captured = unsafe { program.launch(&stream, &ins, &outs, scratch.as_slice()) };
    let graph = stream.end_capture().map_err(|x| e(&x))?;
    captured.map_err(|x| e(&x))?;
    let exec = device.instantiate(&graph).map_err(|x| e(&x))?;
    let (start, end) = (device.create_event().map_err(|x| e(&x))?, device.create_event().map_err(|x| e(&x))?);
    let mut times = Vec::new();
    for _ in 0..5 {
        stream.record(&start).map_err(|x| e(&x))?;
        for _ in 0..iterations {
            // SAFETY: the graph's bindings are alive (see above).
            unsafe { stream.launch_graph(&exec) }.map_err(|x| e(&x))?;
        }
        stream.record(&end).map_err(|x| e(&x))?;
        end.synchronize().map_err(|x| e(&x))?;
        times.push(end.elapsed_since(&start).map_err(|x| e(&x))?);
    }
    stream.synchronize().map_err(|x| e(&x))?;
    times.sort();
    let median: Duration = times[times.len() / 2];
    Ok(Measured { launches, gpu_us: median.as_secs_f64() * 1e6 / iterations as f64 })
}

struct Bench;

struct Report {
    markdown: String,
    json: String,
}

impl BackendVisitor for Bench {
    type Output = Result<Report, String>;

    fn visit<B: Backend>(self) -> Self::Output {
        let e = |x: &dyn std::fmt::Display| x.to_string();
        let device = B::open(0).map_err(|x| e(&x))?;
        let _pin = device.pin().map_err(|x| e(&x))?;
        let gpu = B::KIND != BackendKind::Host;
        let (hidden, intermediate, seq, batches, iterations) =
            if gpu { (256, 1024, 128, vec![1, 8, 64], 50) } else { (64, 128, 16, vec![1], 2) };
        let encoder = |layers: usize| {
            let cfg = EncoderConfig {
                layers,
                hidden,
                heads: 4,
                intermediate,
                vocab: 1000,
                max_positions: seq.max(128),
                seq: None,
            };
            OnnxModel::from_bytes(
                &bert_like_encoder(cfg).to_bytes(),
                &format!("encoder{layers}"),
                &ImportLimits::default(),
            )
            .map_err(|x| e(&x))
        };
        let (one, four) = (encoder(1)?, encoder(4)?);
        let mut md = format!(
            "## gpu_onnx_layers on {} ({:?})\n\nOne encoder layer (hidden {hidden}, 4 heads, feed-forward {intermediate}, sequence {seq}): (4 layers - 1 layer) / 3. Fused: the attention kernel `auto` picks; the last two columns force the row and the tiled attention kernel.\n\n| batch | launches unfused | launches fused | GPU time unfused (us) | GPU time fused (us) | speed-up | 4-layer model unfused (us) | 4-layer model fused (us) | fused, row attention (us) | fused, tiled attention (us) |\n|---|---|---|---|---|---|---|---|---|---|\n",
            device.info().name,
            B::KIND
        );
        let mut json = format!("{{\"backend\":\"{:?}\",\"device\":{:?},\"layers\":[", B::KIND, device.info().name);
        for (i, &batch) in batches.iter().enumerate() {
            let inputs = ids_and_mask(batch, seq, 1000);
            let mut per = Vec::new();
            let fused = OnnxOptions::default();
            for options in [
                fused.clone().with_fusion(false),
                fused.clone(),
                fused.clone().with_attention(AttentionKernel::Rows),
                fused.clone().with_attention(AttentionKernel::Tiled),
            ] {
                let m1 = measure::<B>(&device, &one, options.clone(), &inputs, iterations)?;
                let m4 = measure::<B>(&device, &four, options, &inputs, iterations)?;
                per.push(((m4.launches - m1.launches) as f64 / 3.0, (m4.gpu_us - m1.gpu_us) / 3.0, m4.gpu_us));
            }
            let [(lu, tu, wu), (lf, tf, wf), (_, tr, _), (_, tt, _)] = [per[0], per[1], per[2], per[3]];
            let _ = writeln!(
                md,
                "| {batch} | {lu:.0} | {lf:.0} | {tu:.1} | {tf:.1} | {:.2}x | {wu:.1} | {wf:.1} | {tr:.1} | {tt:.1} |",
                tu / tf
            );
            let _ = write!(
                json,
                "{}{{\"batch\":{batch},\"layer_launches_unfused\":{lu},\"layer_launches_fused\":{lf},\"layer_gpu_us_unfused\":{tu:.3},\"layer_gpu_us_fused\":{tf:.3},\"model4_gpu_us_unfused\":{wu:.3},\"model4_gpu_us_fused\":{wf:.3},\"layer_gpu_us_fused_row_attention\":{tr:.3},\"layer_gpu_us_fused_tiled_attention\":{tt:.3}}}",
                if i > 0 { "," } else { "" }
            );
        }
        json.push(']');
        // The checked-in BERT, whole.
        let bert =
            OnnxModel::load(Path::new(env!("CARGO_MANIFEST_DIR")).join("models/bert/model.onnx")).map_err(|x| e(&x))?;
        let inputs = ids_and_mask(1, 16, 1000);
        let (u, f) = (
            measure::<B>(&device, &bert, OnnxOptions::default().with_fusion(false), &inputs, iterations)?,
            measure::<B>(&device, &bert, OnnxOptions::default(), &inputs, iterations)?,
        );
        let _ = write!(
            md,
            "\nChecked-in BERT (2 layers, hidden 64), batch 1, sequence 16: {} launches / {:.1} us unfused, {} launches / {:.1} us fused.\n",
            u.launches, u.gpu_us, f.launches, f.gpu_us
        );
        let _ = write!(
            json,
            ",\"bert\":{{\"launches_unfused\":{},\"launches_fused\":{},\"gpu_us_unfused\":{:.3},\"gpu_us_fused\":{:.3}}}",
            u.launches, f.launches, u.gpu_us, f.gpu_us
        );
        // Peak memory per bucket (plan only).
        let _ = write!(
            md,
            "\nMemory per batch bucket, 4-layer encoder, sequence {seq} (liveness plan; weights shared by every bucket: {} bytes):\n\n| bucket | scratch (bytes) | scratch without reuse (bytes) | peak (bytes) |\n|---|---|---|---|\n",
            OnnxCompiler::new(four.clone(), OnnxOptions::default()).weight_bytes()
        );
        json.push_str(",\"buckets\":[");
        let planner = OnnxCompiler::new(four, OnnxOptions::default());
        for (i, bucket) in [1u64, 2, 4, 8, 16, 32, 64].into_iter().enumerate() {
            let s = planner
                .plan_summary(&[vec![bucket, seq as u64], vec![bucket, seq as u64]], B::KIND)
                .map_err(|x| e(&x))?;
            let _ =
                writeln!(md, "| {bucket} | {} | {} | {} |", s.scratch_bytes, s.unshared_scratch_bytes, s.peak_bytes);
            let _ = write!(
                json,
                "{}{{\"bucket\":{bucket},\"scratch_bytes\":{},\"unshared_scratch_bytes\":{},\"peak_bytes\":{}}}",
                if i > 0 { "," } else { "" },
                s.scratch_bytes,
                s.unshared_scratch_bytes,
                s.peak_bytes
            );
        }
        json.push_str("]}");
        Ok(Report { markdown: md, json })
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let json_path = args.iter().position(|a| a == "--json").and_then(|i| args.get(i + 1));
    let kind = match resolve(BackendChoice::Auto) {
        Ok(kind) => kind,
        Err(err) => {
            println!("SKIPPED gpu_onnx_layers: {err}");
            return;
        }
    };
    match visit_backend(kind, Bench) {
        Ok(Ok(report)) => {
            println!("{}", report.markdown);
            println!("{}", report.json);
            if let Some(path) = json_path
                && let Err(err) = std::fs::write(path, &report.json)
            {
                eprintln!("gpu_onnx_layers: writing {path}: {err}");
                std::process::exit(1);
            }
        }
        Ok(Err(err)) => {
            eprintln!("gpu_onnx_layers FAILED: {err}");
            std::process::exit(1);
        }
        Err(err) => {
            eprintln!("gpu_onnx_layers FAILED: {err}");
            std::process::exit(1);
        }
    }
}
