//! The built-in model families of saggar-models: `--model` (a family's default config) or
//! `--model-config FILE`, served by the reference compiler built from it (weights from the config's
//! seed or safetensors file). Inputs come from `saggar_models::generate_inputs`, once for the
//! trace's largest batch (a smaller batch reads its first rows, which `generate_inputs` makes
//! identical to a smaller generation); `--verify` compares with `saggar_models::reference_forward`.

use std::sync::Arc;
use std::time::Instant;

use saggar_device::Backend;
use saggar_dispatch::ProgramCompiler;
use saggar_models::{ModelConfig, ReferenceCompiler, compare_outputs, generate_inputs, reference_forward};

use super::inputs::{InputSets, InputView};
use super::{KeptRun, ModelInfo, ModelSource, VERIFY_TOLERANCE, Verify};
use crate::cli::{AttentionArg, ConvArg, DEFAULT_BLAS_WORKSPACE_MIB, ModelArg, ModelArgs, PerfArgs};
use crate::error::{CliError, Result};

/// A model config with its compiler.
#[derive(Debug, Clone)]
pub struct Builtin {
    /// The config.
    pub config: ModelConfig,
    /// The compiler (holds the weights).
    pub compiler: Arc<ReferenceCompiler>,
    info: ModelInfo,
}

impl Builtin {
    /// Loads the model the arguments name. A missing, unreadable or malformed config, or a weights
    /// file that does not match it, is a usage error naming the file, and so are the ONNX compiler's
    /// flags.
    pub fn load(args: &ModelArgs) -> Result<Builtin> {
        let imported = Instant::now();
        reject_onnx_options(args)?;
        let (config, origin) = match &args.model_config {
            Some(path) => {
                let config = ModelConfig::from_file(path).map_err(|e| CliError::model_config(path, e))?;
                (config, path.display().to_string())
            }
            None => {
                let kind = match args.model {
                    ModelArg::Recsys => saggar_models::ModelKind::Recsys,
                    ModelArg::Mlp => saggar_models::ModelKind::Mlp,
                };
                (kind.default_config(), format!("{kind} (default config)"))
            }
        };
        let compiler = ReferenceCompiler::from_config(config.clone()).map_err(|e| match &args.model_config {
            Some(path) => CliError::model_config(path, e),
            None => CliError::from(e),
        })?;
        let info = ModelInfo {
            name: config.name().to_string(),
            origin,
            inputs: config.input_specs().len(),
            import_s: imported.elapsed().as_secs_f64(),
            reference: "the eager reference",
            precision: "fp32",
        };
        Ok(Builtin { config, compiler: Arc::new(compiler), info })
    }

    /// The model of `saggar perf`, refusing the flags only ONNX models take.
    pub fn for_perf(args: &PerfArgs) -> Result<Builtin> {
        if args.dump_profile {
            return Err(CliError::usage(
                "--dump-profile needs --onnx",
                "the per-step profile is of ONNX programs; export the model to ONNX and pass --onnx FILE",
            ));
        }
        if !args.shapes.is_empty() || args.pad_axis.is_some() {
            let flag = if args.shapes.is_empty() { "--pad-axis" } else { "--shapes" };
            return Err(CliError::usage(
                format!("{flag} needs --onnx"),
                "the built-in models have no symbolic dimensions besides the batch",
            ));
        }
        Builtin::load(&args.model)
    }
}

/// Refuses `--attention`, `--conv`, `--blas-tune` and `--blas-workspace` (they set the ONNX compiler's
/// options).
fn reject_onnx_options(args: &ModelArgs) -> Result<()> {
    let flag = if args.attention != AttentionArg::Auto {
        "--attention"
    } else if args.conv != ConvArg::Auto {
        "--conv"
    } else if args.blas_tune != 1 {
        "--blas-tune"
    } else if args.blas_workspace != DEFAULT_BLAS_WORKSPACE_MIB {
        "--blas-workspace"
    } else if args.calibration_inputs.is_some() {
        "--calibration-inputs"
    } else {
        return Ok(());
    };
    Err(CliError::usage(
        format!("{flag} needs --onnx"),
        "the built-in models run saggar-models' reference kernels, which have no attention or BLAS-Lt steps",
    ))
}

impl ModelSource for Builtin {
    fn info(&self) -> &ModelInfo {
        &self.info
    }

    fn compiler<B: Backend>(&self) -> Arc<impl ProgramCompiler<B>> {
        self.compiler.clone()
    }

    fn inputs(&self, batches: &[u64], seed: u64) -> Result<InputSets> {
        let config = &self.config;
        let largest = batches.last().copied().unwrap_or(1);
        let mut sets = InputSets::new(config.input_specs());
        let buffers: Vec<usize> =
            generate_inputs(config, largest as usize, seed).iter().map(|bytes| sets.add_buffer(bytes)).collect();
        let rows = config.input_row_bytes();
        for &batch in batches {
            let inputs = config
                .input_dims(batch)
                .into_iter()
                .enumerate()
                .map(|(i, dims)| InputView { buffer: buffers[i], len: rows[i] * batch as usize, dims })
                .collect();
            sets.add_set(batch, inputs, Some(config.output_dims(batch)));
        }
        Ok(sets)
    }

    /// Runs the reference once, for the largest kept batch: a smaller batch's reference is its first
    /// rows, since its inputs are.
    fn verify(&self, inputs: &InputSets, kept: &[KeptRun<'_>]) -> Result<Verify> {
        let mut verify = Verify::default();
        let Some(largest) = kept.iter().map(|k| k.set).max_by_key(|&set| inputs.batch(set)) else {
            return Ok(verify);
        };
        let data: Vec<&[u8]> = (0..inputs.specs().len()).map(|i| inputs.bytes(largest, i)).collect();
        let reference =
            reference_forward(&self.config, self.compiler.weights(), &data, inputs.batch(largest) as usize)?;
        let rows = self.config.output_row_bytes();
        for k in kept {
            let batch = inputs.batch(k.set) as usize;
            let expected: Vec<Vec<f32>> =
                reference.iter().zip(&rows).map(|(r, row)| r[..batch * row / 4].to_vec()).collect();
            let comparison = compare_outputs(&expected, k.outputs, VERIFY_TOLERANCE)?;
            verify.add(comparison.checked as u64, comparison.mismatches as u64, comparison.max_rel_error);
        }
        Ok(verify)
    }
}
