//! The `saggar` command line: run, warm and inspect saggar sessions from the shell.
#![doc = include_str!("../README.md")]
//!
//! # Implementation
//!
//! This library is the implementation of the `saggar` binary and has no other public API than
//! [`main`]; depend on the saggar crates themselves (`saggar-dispatch`, `saggar-cache`, ...) to use
//! saggar from Rust.
//!
//! | command | module | what it does |
//! |---|---|---|
//! | `saggar devices` | `devices` | every backend with its devices, or why it has none |
//! | `saggar ops` | `ops` | the declared ONNX op set: opset ranges and how each backend runs each op |
//! | `saggar check --onnx FILE` | `check` | whether a model is supported on each backend, every refused node listed, without running it |
//! | `saggar perf` | `perf` | a batch-size trace through one session: latency percentiles, throughput, run paths, padding, compiles and loads, graph counters, outputs checked against the eager reference |
//! | `saggar warmup` | `warmup` | precompile buckets into a cache directory for one or more devices |
//! | `saggar serve --model-repository DIR` | `serve` | the KServe v2 / Open Inference Protocol over HTTP and gRPC with dynamic batching and metrics (saggar-serve) |
//! | `saggar cache ls\|verify\|gc\|key` | `cache` | list, verify and clean a compile cache; print the key a model, bucket and device would use |
//!
//! Modules import downward only, in three layers:
//! - the commands (`perf`, `warmup`, `serve`, `cache`, `devices`, `check`, `ops`), which import no other command;
//! - the model sources (`source`): the `ModelSource` trait, implemented by the built-in families
//!   (`source::builtin`) and ONNX files (`source::onnx`), which `saggar perf` runs through one
//!   pipeline (`perf::pipeline`) and `saggar warmup` precompiles;
//! - the foundations: flags (`cli`), traces (`trace`), bucket policies (`buckets`), progress
//!   (`progress`), tables and JSON (`output`), errors (`error`), and the process environment,
//!   read once (`environment`).
//!
//! # Errors and exit codes
//! Every failure ends as one `error: ...` line and one `hint: ...` line on stderr, with exit code 2
//! for bad arguments and bad input files and 1 for failures (`error::CliError`). clap's own usage
//! errors are rewritten into the same two lines. A panic (a bug) is reported the same way by a
//! panic hook, with exit code 1 and no backtrace, whatever `RUST_BACKTRACE` says.
//!
//! The reference for users, with the JSON schemas, is `docs/cli.md`.
#![cfg_attr(docsrs, feature(doc_cfg))]

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

use clap::Parser as _;
use clap::error::ErrorKind;

mod buckets;
mod cache;
mod check;
mod cli;
mod devices;
mod environment;
mod error;
mod ops;
mod output;
mod perf;
mod progress;
mod serve;
mod source;
mod trace;
mod warmup;

use crate::cli::{Cli, Command};
use crate::environment::Environment;
use crate::error::{CliError, EXIT_FAILURE, EXIT_OK, EXIT_USAGE};

/// Runs the `saggar` process: parses the command line, runs the command, prints any error, and
/// returns the exit code.
pub fn main() -> ExitCode {
    install_panic_hook();
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) => return ExitCode::from(report_clap_error(&e, &command_path(&args))),
    };
    let env = Environment::from_process();
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&cli.command, &env))) {
        Ok(Ok(())) => ExitCode::from(EXIT_OK),
        Ok(Err(e)) => {
            e.print();
            ExitCode::from(e.exit_code())
        }
        // The panic hook has printed the error and hint lines.
        Err(_) => ExitCode::from(EXIT_FAILURE),
    }
}

/// Runs one command.
pub fn run(command: &Command, env: &Environment) -> Result<(), CliError> {
    match command {
        Command::Devices(args) => devices::run(args),
        Command::Perf(args) => perf::run(args, env),
        Command::Warmup(args) => warmup::run(args, env),
        Command::Check(args) => check::run(args),
        Command::Ops(args) => ops::run(args),
        Command::Serve(args) => serve::run(args, env),
        Command::Cache(command) => cache::run(command, env),
        Command::InternalPanic => panic!("`saggar internal-panic` panics on purpose"),
    }
}

/// Replaces the default panic message (and backtrace) with one error line and one hint line. Only
/// the first panic is reported: a panicking worker thread makes its scope panic again on join.
fn install_panic_hook() {
    static REPORTED: AtomicBool = AtomicBool::new(false);
    std::panic::set_hook(Box::new(|info| {
        if REPORTED.swap(true, Ordering::SeqCst) {
            return;
        }
        let what = info.payload_as_str().unwrap_or("a panic without a message");
        let at = info.location().map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
        CliError::failure(
            format!("internal error: {what}{at}"),
            "this is a bug in saggar; please report it with the command line that triggered it",
        )
        .print();
    }));
}

/// Prints a clap error as one error line and one hint line (help and version go to stdout as
/// usual) and returns the exit code.
fn report_clap_error(error: &clap::Error, command: &str) -> u8 {
    match error.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = error.print();
            EXIT_OK
        }
        _ => {
            let (message, hint) = summarize_clap_error(error, command);
            CliError::usage(message, hint).print();
            EXIT_USAGE
        }
    }
}

/// The command a command line names, such as `saggar cache key`: the program followed by the
/// arguments that name (sub)commands, so hints can point at the right `--help`.
pub fn command_path(args: &[std::ffi::OsString]) -> String {
    let mut command = <Cli as clap::CommandFactory>::command();
    let mut path = vec!["saggar".to_string()];
    for arg in args.iter().skip(1).filter_map(|a| a.to_str()) {
        let Some(sub) = command.find_subcommand(arg).cloned() else { continue };
        path.push(sub.get_name().to_string());
        command = sub;
    }
    path.join(" ")
}

/// The message and hint of a clap usage error of `command` (see [`command_path`]), from its
/// rendered text: the `error:` line, then the indented detail and `tip:` lines.
pub fn summarize_clap_error(error: &clap::Error, command: &str) -> (String, String) {
    let text = error.render().to_string();
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let see_help = format!("see `{command} --help`");
    if error.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        return (format!("`{command}` needs a command"), see_help);
    }
    let start = lines.iter().position(|l| l.starts_with("error: "));
    let message = start
        .and_then(|i| lines[i].strip_prefix("error: "))
        .map_or_else(|| "invalid arguments".to_string(), str::to_string);
    let details: Vec<&str> = start
        .map(|i| {
            lines[i + 1..]
                .iter()
                .take_while(|l| !l.starts_with("Usage: ") && !l.starts_with("For more information"))
                .filter(|l| !l.is_empty())
                .map(|l| l.strip_prefix("tip: ").unwrap_or(l))
                .collect()
        })
        .unwrap_or_default();
    let hint = if details.is_empty() { see_help } else { format!("{}; {see_help}", details.join("; ")) };
    (message, hint)
}
