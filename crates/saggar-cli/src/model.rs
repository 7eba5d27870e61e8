//! The model a command runs: `--model` (a family's default config) or `--model-config FILE`, and
//! the reference compiler built from it (weights from the config's seed or safetensors file).

use std::sync::Arc;

use saggar_models::{ModelConfig, ReferenceCompiler};

use crate::cli::{ModelArg, ModelArgs};
use crate::error::{CliError, Result};

/// A model config with its compiler.
#[derive(Debug, Clone)]
pub struct LoadedModel {
    /// The config.
    pub config: ModelConfig,
    /// The compiler (holds the weights).
    pub compiler: Arc<ReferenceCompiler>,
    /// Where the config came from, for reports: `recsys (default)` or the file path.
    pub source: String,
}

impl LoadedModel {
    /// The model's name.
    pub fn name(&self) -> &str {
        self.config.name()
    }

    /// How many inputs the model has.
    pub fn input_count(&self) -> usize {
        self.config.input_specs().len()
    }
}

/// Loads the model the arguments name. A missing, unreadable or malformed config, or a weights file
/// that does not match it, is a usage error naming the file, and so are the ONNX compiler's flags.
pub fn load(args: &ModelArgs) -> Result<LoadedModel> {
    crate::onnx::reject_onnx_options(args)?;
    let (config, source) = match &args.model_config {
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
    Ok(LoadedModel { config, compiler: Arc::new(compiler), source })
}
