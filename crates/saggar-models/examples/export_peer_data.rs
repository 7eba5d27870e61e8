//! Exports what the PyTorch peers of the benchmarks (`benches/peers/`) need to build and check the
//! same model as saggar: the weights, the config, timing inputs, and a verification set computed by
//! saggar's CPU reference.
//!
//! ```sh
//! cargo run --release -p saggar-models --example export_peer_data -- --model recsys --out /tmp/peers/recsys
//! cargo run --release -p saggar-models --example export_peer_data -- --model-config my.json --out DIR
//! ```
//!
//! Flags: `--model recsys|mlp` (a family's default config) or `--model-config FILE` (a config JSON,
//! `docs/models.md`; its weights are generated or loaded as it says), `--out DIR` (created),
//! `--seed S` (seed of the generated inputs, default 1: the default `--seed` of `saggar perf`),
//! `--max-batch M` (rows of the timing inputs, default 64: the default largest bucket of `saggar perf`).
//!
//! Writes into `DIR`:
//!
//! | file | contents |
//! |---|---|
//! | `weights.safetensors` | [`Weights::to_safetensors`]: `emb.{j}.weight` `[rows, dim]`, `mlp.{l}.weight` `[in, out]` (the transpose of `nn.Linear.weight`), `mlp.{l}.bias` |
//! | `config.json` | the config with `"weights": {"safetensors": "weights.safetensors"}`, so `saggar perf --model-config DIR/config.json` runs on exactly these weights |
//! | `inputs.safetensors` | [`generate_inputs`]`(config, max_batch, seed)`: one tensor per input, named as the input (`dense_0`, `sparse_0`, `x`), `[max_batch, width]`, F32 or I32: the data `saggar perf --seed S` feeds its requests (a request of `b` rows uses the first `b` rows) |
//! | `verify.safetensors` | for each batch `b` in 1 and 8: `input.{b}.{name}` (the same generator, `b` rows) and `output.{b}.{name}` ([`reference_forward`], saggar's eager CPU reference) |
//!
//! The metadata of `inputs.safetensors` and `verify.safetensors` records the config's canonical JSON
//! (`saggar_models.config`), the seed, the batches, and the input and output names in binding order
//! (comma-separated).

use std::collections::HashMap;
use std::error::Error;
use std::path::{Path, PathBuf};

use safetensors::Dtype;
use safetensors::tensor::TensorView;
use saggar_models::{ModelConfig, ModelKind, WeightSource, Weights, generate_inputs, reference_forward};
use saggar_shape::DType;

/// The batches of the verification set.
const VERIFY_BATCHES: [usize; 2] = [1, 8];

const USAGE: &str =
    "usage: export_peer_data (--model recsys|mlp | --model-config FILE) --out DIR [--seed S] [--max-batch M]";

struct Args {
    config: ModelConfig,
    out: PathBuf,
    seed: u64,
    max_batch: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut model = None;
    let mut config_file = None;
    let mut out = None;
    let mut seed = 1u64;
    let mut max_batch = 64usize;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        if flag == "--help" || flag == "-h" {
            return Err(String::new());
        }
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--model" => model = Some(value.parse::<ModelKind>()?),
            "--model-config" => config_file = Some(PathBuf::from(value)),
            "--out" => out = Some(PathBuf::from(value)),
            "--seed" => seed = value.parse().map_err(|_| format!("--seed {value}: not an unsigned integer"))?,
            "--max-batch" => {
                max_batch = value.parse().map_err(|_| format!("--max-batch {value}: not a whole number"))?;
                if !(1..=saggar_models::MAX_BATCH as usize).contains(&max_batch) {
                    return Err(format!("--max-batch {value}: outside 1..={}", saggar_models::MAX_BATCH));
                }
            }
            other => return Err(format!("unknown flag {other}")),
        }
    }
    let config = match (model, config_file) {
        (Some(_), Some(_)) => return Err("--model and --model-config exclude each other".into()),
        (Some(kind), None) => kind.default_config(),
        (None, Some(file)) => ModelConfig::from_file(&file).map_err(|e| format!("{}: {e}", file.display()))?,
        (None, None) => ModelKind::Recsys.default_config(),
    };
    let out = out.ok_or("--out DIR is required")?;
    Ok(Args { config, out, seed, max_batch })
}

/// One tensor to serialise: name, dtype, shape, little-endian bytes.
struct Entry {
    name: String,
    dtype: Dtype,
    shape: Vec<usize>,
    bytes: Vec<u8>,
}

fn write_safetensors(path: &Path, entries: &[Entry], metadata: HashMap<String, String>) -> Result<(), Box<dyn Error>> {
    let views = entries
        .iter()
        .map(|e| Ok((e.name.clone(), TensorView::new(e.dtype, e.shape.clone(), &e.bytes)?)))
        .collect::<Result<Vec<_>, safetensors::SafeTensorError>>()?;
    let bytes = safetensors::serialize(views, Some(metadata))?;
    std::fs::write(path, bytes).map_err(|e| format!("writing {}: {e}", path.display()))?;
    Ok(())
}

fn dtype_of(dtype: DType) -> Result<Dtype, String> {
    match dtype {
        DType::F32 => Ok(Dtype::F32),
        DType::I32 => Ok(Dtype::I32),
        other => Err(format!("no safetensors dtype for {other:?}")),
    }
}

/// The inputs of `batch` rows as safetensors entries named `prefix` + input name.
fn input_entries(config: &ModelConfig, inputs: Vec<Vec<u8>>, batch: usize, prefix: &str) -> Result<Vec<Entry>, String> {
    config
        .input_specs()
        .iter()
        .zip(config.input_dims(batch as u64))
        .zip(inputs)
        .map(|((spec, dims), bytes)| {
            Ok(Entry {
                name: format!("{prefix}{}", spec.name()),
                dtype: dtype_of(spec.dtype())?,
                shape: dims.iter().map(|&d| d as usize).collect(),
                bytes,
            })
        })
        .collect()
}

fn run(args: Args) -> Result<(), Box<dyn Error>> {
    let Args { mut config, out, seed, max_batch } = args;
    let weights = Weights::for_config(&config)?;
    std::fs::create_dir_all(&out).map_err(|e| format!("creating {}: {e}", out.display()))?;
    weights.save_safetensors(&config, &out.join("weights.safetensors"))?;
    *config.weights_mut() = WeightSource::Safetensors(PathBuf::from("weights.safetensors"));
    let config_path = out.join("config.json");
    std::fs::write(&config_path, config.to_json_pretty() + "\n")
        .map_err(|e| format!("writing {}: {e}", config_path.display()))?;

    let names = |specs: Vec<saggar_shape::TensorSpec>| specs.iter().map(|s| s.name().to_string()).collect::<Vec<_>>();
    let input_names = names(config.input_specs());
    let output_names = names(config.output_specs());
    let metadata = |batches: String| {
        HashMap::from([
            (saggar_models::METADATA_CONFIG.to_string(), config.canonical_json()),
            ("seed".to_string(), seed.to_string()),
            ("batches".to_string(), batches),
            ("inputs".to_string(), input_names.join(",")),
            ("outputs".to_string(), output_names.join(",")),
        ])
    };

    let timing = input_entries(&config, generate_inputs(&config, max_batch, seed), max_batch, "")?;
    write_safetensors(&out.join("inputs.safetensors"), &timing, metadata(max_batch.to_string()))?;

    let mut verify = Vec::new();
    for batch in VERIFY_BATCHES {
        let inputs = generate_inputs(&config, batch, seed);
        let outputs = reference_forward(&config, &weights, &inputs, batch)?;
        verify.extend(input_entries(&config, inputs, batch, &format!("input.{batch}."))?);
        for ((name, dims), values) in output_names.iter().zip(config.output_dims(batch as u64)).zip(outputs) {
            verify.push(Entry {
                name: format!("output.{batch}.{name}"),
                dtype: Dtype::F32,
                shape: dims.iter().map(|&d| d as usize).collect(),
                bytes: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            });
        }
    }
    let mut verify_metadata = metadata(VERIFY_BATCHES.map(|b| b.to_string()).join(","));
    verify_metadata.insert(
        "reference".to_string(),
        "saggar_models::reference_forward: CPU, f32 embedding sums in index order, f64 GEMM accumulation".to_string(),
    );
    write_safetensors(&out.join("verify.safetensors"), &verify, verify_metadata)?;

    println!(
        "export_peer_data: {} `{}` ({} inputs, {} weight tensors, model hash {}) -> {} (config.json, weights.safetensors, \
         inputs.safetensors [{max_batch} rows, seed {seed}], verify.safetensors [batches {:?}])",
        config.kind(),
        config.name(),
        input_names.len(),
        weights.tensors().len(),
        &weights.model_hash(&config)[..16],
        out.display(),
        VERIFY_BATCHES,
    );
    Ok(())
}

fn main() -> std::process::ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            if !message.is_empty() {
                eprintln!("export_peer_data: {message}");
            }
            eprintln!("{USAGE}");
            return std::process::ExitCode::from(2);
        }
    };
    match run(args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("export_peer_data: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
