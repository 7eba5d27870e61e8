//! `saggar perf`: runs a batch-size trace through one session and reports what the runtime did.
//!
//! This module is the command: it picks the model source (`--onnx FILE`, or a built-in family), runs
//! the one pipeline over it ([`pipeline`]), prints the report and fails on wrong outputs. Below it,
//! modules import downward only: [`pipeline`] over [`session`], [`runners`] (over [`bench`]) and
//! [`report`] (over [`stages`]), all over the model sources (`crate::source`).

mod bench;
mod pipeline;
mod report;
mod runners;
mod session;
mod stages;

use crate::cli::PerfArgs;
use crate::environment::Environment;
use crate::error::{CliError, Result};
use crate::output;
use crate::source::builtin::Builtin;
use crate::source::onnx::Onnx;
use crate::source::{ModelSource, VERIFY_TOLERANCE};

/// Runs `saggar perf`.
pub fn run(args: &PerfArgs, env: &Environment) -> Result<()> {
    match &args.model.onnx {
        Some(path) => perf(&Onnx::for_perf(args, path)?, args, env),
        None => perf(&Builtin::for_perf(args)?, args, env),
    }
}

/// Runs the pipeline on `source`, prints the report (and writes the JSON and per-request times when
/// asked), and fails if `--check-outputs` or `--verify` found wrong outputs.
fn perf<S: ModelSource>(source: &S, args: &PerfArgs, env: &Environment) -> Result<()> {
    let (report, records) = pipeline::run(source, args, env)?;
    output::emit(args.json.as_deref(), &report, || match &report.profile {
        Some(profile) => format!("{}\n{}", report.table(), profile.table()),
        None => report.table(),
    })?;
    if let Some(path) = &args.export_times {
        bench::export_times(path, &records)?;
    }
    if let Some(check) = report.check.as_ref().filter(|c| !c.passed) {
        let bad: Vec<String> = check
            .outputs
            .iter()
            .filter(|o| o.mismatches > 0)
            .map(|o| match &o.problem {
                Some(problem) => format!("{} ({problem})", o.name),
                None => format!("{} ({} of {} elements)", o.name, o.mismatches, o.elements),
            })
            .collect();
        return Err(CliError::failure(
            format!(
                "--check-outputs: {} differ from {} (max abs error {:.3e}, max rel error {:.3e}, rtol {:e}, atol {:e})",
                bad.join(", "),
                check.dir,
                check.max_abs_error,
                check.max_rel_error,
                check.rtol,
                check.atol
            ),
            "compare with --backend host; loosen --rtol/--atol only if the expected outputs come from another precision",
        ));
    }
    let verify = &report.verify;
    if verify.mismatches > 0 {
        return Err(CliError::failure(
            format!(
                "{} of {} checked requests differ from {} (max relative error {:.3e}, tolerance {:e})",
                verify.mismatches,
                verify.checked,
                source.info().reference,
                verify.max_rel_error,
                VERIFY_TOLERANCE
            ),
            "the runtime computed wrong outputs; rerun with --graphs off and --backend host to narrow it down, and report it",
        ));
    }
    Ok(())
}
