//! Prints the CUDA/HIP C++ a model compiles to, for reading it or for compiling it with `nvcc
//! -Xptxas -v` to see each kernel's registers and spills.
//!
//! `cargo run -p saggar-onnx --example gpu_source -- [MODEL.onnx | --bert-base] [--precision P]
//! [--batch N] [--seq S]`: a model file (its symbolic axes: the first at `--batch`, the others at
//! `--seq`), or the synthetic BERT-base encoder (12 layers, hidden 768, sequence `--seq`).
//! `--units DIR` writes the translation units the source is compiled as into `DIR` instead (one
//! file each, to compile and time on its own); `--write-model FILE` writes the synthetic encoder's
//! ONNX file (to quantise it, for one).

use saggar_onnx::synthetic::{EncoderConfig, bert_like_encoder};
use saggar_onnx::{ImportLimits, OnnxCompiler, OnnxModel, OnnxOptions, Precision};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    let batch: u64 = value("--batch").map_or(Ok(32), |v| v.parse())?;
    let seq: u64 = value("--seq").map_or(Ok(128), |v| v.parse())?;
    let precision: Precision = value("--precision").unwrap_or_else(|| "fp32".into()).parse()?;
    let model = match args.first().map(String::as_str) {
        Some("--bert-base") | None => {
            let bytes = bert_like_encoder(EncoderConfig::bert_base(seq as usize)).to_bytes();
            if let Some(path) = value("--write-model") {
                std::fs::write(path, &bytes)?;
            }
            OnnxModel::from_bytes(&bytes, "bert-base", &ImportLimits::default())?
        }
        Some(path) => OnnxModel::load(path)?,
    };
    let compiler = OnnxCompiler::new(model, OnnxOptions::default().with_precision(precision));
    let dims: Vec<Vec<u64>> = compiler
        .onnx_model()
        .inputs()
        .iter()
        .map(|spec| {
            let fixed = |(i, d): (usize, &saggar_shape::Dim)| d.as_fixed().unwrap_or(if i == 0 { batch } else { seq });
            spec.dims().iter().enumerate().map(fixed).collect()
        })
        .collect();
    if let Some(dir) = value("--units") {
        std::fs::create_dir_all(&dir)?;
        for (name, code) in compiler.gpu_units(&dims)? {
            std::fs::write(std::path::Path::new(&dir).join(&name), code)?;
        }
        return Ok(());
    }
    print!("{}", compiler.gpu_source(&dims)?);
    Ok(())
}
