//! `saggar serve`: a model repository over the KServe v2 / Open Inference Protocol (HTTP and gRPC),
//! with dynamic batching and Prometheus metrics. The server is saggar-serve's; this command maps
//! the flags onto [`ServeOptions`], sends its logs (one line per model state change and per
//! error) to stderr, and turns the outcome into an exit code: 0 once a SIGTERM or SIGINT shutdown
//! let every request in flight complete, 1 when `--shutdown-timeout` passed first.

use std::time::Duration;

use saggar_serve::{ModelControl, ServeOptions};

use crate::cli::{DeviceList, ModelControlArg, ServeArgs};
use crate::environment::Environment;
use crate::error::{CliError, Result};

/// Runs `saggar serve` until SIGTERM or SIGINT.
pub fn run(args: &ServeArgs, env: &Environment) -> Result<()> {
    if !args.shutdown_timeout.is_finite() || !(0.0..=86_400.0).contains(&args.shutdown_timeout) {
        return Err(CliError::usage(
            format!("--shutdown-timeout {}: not a number of seconds between 0 and 86400", args.shutdown_timeout),
            "pass a number of seconds, such as 30",
        ));
    }
    let mut options = ServeOptions::new(&args.model_repository, env.cache_dir(args.cache_dir.as_deref())?);
    options.host = args.host;
    options.http_port = args.http_port;
    options.grpc_port = args.grpc_port;
    options.metrics_port = args.metrics_port;
    options.backend = args.backend.choice();
    options.devices = match &args.devices {
        DeviceList::All => Vec::new(),
        DeviceList::Some(list) => list.clone(),
    };
    options.max_request_bytes = args.max_request_bytes;
    options.max_queue = args.max_queue;
    options.control = match args.model_control_mode {
        ModelControlArg::None => ModelControl::None,
        ModelControlArg::Explicit => ModelControl::Explicit,
    };
    options.load_models = args.load_model.clone();
    options.shutdown_timeout = Duration::from_secs_f64(args.shutdown_timeout);
    // Logs go to stderr, one line each; `saggar serve` is the only command that logs.
    let _ = tracing_subscriber::fmt().with_writer(std::io::stderr).with_target(false).with_ansi(false).try_init();
    let clean = saggar_serve::run(options).map_err(|e| {
        let hint = match &e {
            saggar_serve::ServeError::NotFound(_) => "give --model-repository a folder of <model>/<version>/model.onnx",
            _ => "check the ports are free, the backend has devices (`saggar devices`) and --cache-dir is writable",
        };
        CliError::failure(format!("saggar serve: {e}"), hint)
    })?;
    if clean {
        Ok(())
    } else {
        Err(CliError::failure(
            "saggar serve: --shutdown-timeout passed with requests still in flight",
            "raise --shutdown-timeout, or lower the load before stopping the server",
        ))
    }
}
