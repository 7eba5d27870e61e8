//! The CLI's one error type: a message, a hint, and the exit code they stand for.
//!
//! Every command returns [`CliError`]; `main` prints it as exactly two lines on stderr,
//!
//! ```text
//! error: <what went wrong, one line>
//! hint: <what to do about it, one line>
//! ```
//!
//! and exits with [`CliError::exit_code`]: 2 when the caller can fix the command line or a file it
//! names (a bad flag value, a malformed model config, a weights file of the wrong shapes, a device
//! that does not exist), 1 when the command was fine but something failed (a missing driver, an
//! unusable cache directory, a failed run, corrupt cache entries found by `saggar cache verify`).
//!
//! The conversions from the library errors below decide that class and the hint once, so commands
//! can use `?` and still say something a user can act on.

use std::error::Error as StdError;
use std::fmt;
use std::path::Path;

use saggar_cache::CacheError;
use saggar_dispatch::DispatchError;
use saggar_models::ModelError;
use saggar_onnx::OnnxError;

/// Exit code for success.
pub const EXIT_OK: u8 = 0;
/// Exit code for a failure of the work itself.
pub const EXIT_FAILURE: u8 = 1;
/// Exit code for bad arguments or bad input files.
pub const EXIT_USAGE: u8 = 2;

/// A failed command: what happened, what to do, and the exit code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CliError {
    exit_code: u8,
    message: String,
    hint: String,
}

/// Result with [`CliError`].
pub type Result<T, E = CliError> = std::result::Result<T, E>;

impl CliError {
    /// A bad argument or bad input file (exit code 2).
    pub fn usage(message: impl Into<String>, hint: impl Into<String>) -> CliError {
        CliError::new(EXIT_USAGE, message, hint)
    }

    /// A failure of the work itself (exit code 1).
    pub fn failure(message: impl Into<String>, hint: impl Into<String>) -> CliError {
        CliError::new(EXIT_FAILURE, message, hint)
    }

    fn new(exit_code: u8, message: impl Into<String>, hint: impl Into<String>) -> CliError {
        CliError { exit_code, message: one_line(&message.into()), hint: one_line(&hint.into()) }
    }

    /// The process exit code this error stands for (1 or 2).
    pub fn exit_code(&self) -> u8 {
        self.exit_code
    }

    /// The one-line message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The one-line hint.
    pub fn hint(&self) -> &str {
        &self.hint
    }

    /// The same error with `context` in front of the message (`"<context>: <message>"`).
    pub fn context(mut self, context: impl fmt::Display) -> CliError {
        self.message = one_line(&format!("{context}: {}", self.message));
        self
    }

    /// The same error (exit code and hint) with another message.
    fn with_message(mut self, message: String) -> CliError {
        self.message = one_line(&message);
        self
    }

    /// The same error with another hint.
    pub fn with_hint(mut self, hint: impl Into<String>) -> CliError {
        self.hint = one_line(&hint.into());
        self
    }

    /// Writes the two lines to stderr. Failing to write stderr is ignored: there is nowhere left to
    /// report it.
    pub fn print(&self) {
        use std::io::Write as _;
        let mut stderr = std::io::stderr().lock();
        let _ = writeln!(stderr, "error: {}", self.message);
        let _ = writeln!(stderr, "hint: {}", self.hint);
    }

    /// The error of a model config file that could not be used.
    pub fn model_config(path: &Path, error: ModelError) -> CliError {
        CliError::from(error).context(format_args!("model config {}", path.display()))
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.hint)
    }
}

/// Collapses a possibly multi-line text (a compiler log, a pretty error) into one line.
pub fn one_line(text: &str) -> String {
    let parts: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    parts.join("; ")
}

/// An error's message followed by those of its sources that the message does not already include
/// (thiserror messages often embed their source; some do not).
pub fn describe(error: &(dyn StdError + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(s) = source {
        let more = s.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = s.source();
    }
    text
}

const HINT_DEVICES: &str =
    "run `saggar devices` to see the backends and devices of this machine, or pass --backend host";
const HINT_REFUSED_NODE: &str = "the model holds a node saggar does not run here: `saggar check --onnx FILE` lists every \
                                 one and why; serve the model on a backend that runs it, or re-export it without it";
const HINT_BUG: &str = "this looks like a bug in saggar; please report it with the command line that triggered it";
const HINT_CACHE_DIR: &str =
    "pass --cache-dir DIR with a local directory you own (the default is $XDG_CACHE_HOME/saggar or ~/.cache/saggar)";
const HINT_CACHE_ENTRIES: &str =
    "run `saggar cache verify` to find bad entries and `saggar cache gc` to remove them (they are recompiled)";

impl From<saggar_device::Error> for CliError {
    fn from(error: saggar_device::Error) -> CliError {
        let message = describe(&error);
        match error.root() {
            saggar_device::Error::NoSuchDevice { .. } => {
                CliError::usage(message, "run `saggar devices` to list the device ordinals of each backend")
            }
            saggar_device::Error::BackendUnavailable { .. } => CliError::failure(message, HINT_DEVICES),
            saggar_device::Error::OutOfMemory { .. } => {
                CliError::failure(message, "use a smaller model, smaller buckets (--max-batch) or less --concurrency")
            }
            saggar_device::Error::Compile { .. } => CliError::failure(
                message,
                "the device's runtime compiler rejected the generated code; try --backend host and report the failure",
            ),
            _ => CliError::failure(
                message,
                "a device operation failed; try --backend host to tell a device problem from a saggar problem",
            ),
        }
    }
}

impl From<ModelError> for CliError {
    fn from(error: ModelError) -> CliError {
        let message = describe(&error);
        match &error {
            ModelError::ConfigJson { .. } => CliError::usage(
                message,
                "a model config is a JSON object with \"model\": \"recsys\" or \"mlp\" and optional fields; see docs/models.md",
            ),
            ModelError::InvalidConfig { .. } => {
                CliError::usage(message, "docs/models.md lists every config field with its limits")
            }
            ModelError::Io(_) => CliError::usage(message, "check that the file exists and is readable"),
            ModelError::Safetensors { .. }
            | ModelError::MissingTensor { .. }
            | ModelError::TensorShape { .. }
            | ModelError::TensorDtype { .. }
            | ModelError::UnexpectedTensor { .. } => CliError::usage(
                message,
                "the safetensors file must hold exactly the f32 tensors the config implies (names and shapes in docs/models.md)",
            ),
            ModelError::Artifact(_) => CliError::failure(message, HINT_CACHE_ENTRIES),
            ModelError::Device(device) => CliError::from(device.clone()),
            _ => CliError::failure(message, HINT_BUG),
        }
    }
}

impl From<CacheError> for CliError {
    fn from(error: CacheError) -> CliError {
        let message = describe(&error);
        match &error {
            CacheError::CreateDir { .. } | CacheError::NotADirectory { .. } | CacheError::Io { .. } => {
                CliError::failure(message, HINT_CACHE_DIR)
            }
            CacheError::UntrustedDirectory { path, .. } => CliError::failure(
                message,
                format!("run `chmod go-w {}` or pass --cache-dir with a directory only you can write", path.display()),
            ),
            CacheError::LockingUnsupported { .. } | CacheError::Lock { .. } => {
                CliError::failure(message, "put the cache on a local filesystem that supports flock (--cache-dir)")
            }
            CacheError::UntrustedEntry { .. } | CacheError::ImportRejected { .. } => {
                CliError::failure(message, HINT_CACHE_ENTRIES)
            }
            CacheError::Publish { .. } => {
                CliError::failure(message, "check free space and that the cache directory is writable")
            }
            CacheError::Compile { source, .. } => compile_error(message, source.as_ref()),
            _ => CliError::failure(message, HINT_BUG),
        }
    }
}

/// A compile failure: classified by the compiler's own error where it is one of saggar-models' or
/// a node of an ONNX model that saggar does not run (the model's, not a bug).
fn compile_error(message: String, source: &(dyn StdError + Send + Sync + 'static)) -> CliError {
    if let Some(ModelError::Device(device)) = source.downcast_ref::<ModelError>() {
        return CliError::from(device.clone()).with_message(message);
    }
    match source.downcast_ref::<OnnxError>() {
        Some(onnx) if onnx.refuses_nodes() || matches!(onnx, OnnxError::ShapeDependsOnData { .. }) => {
            CliError::failure(message, HINT_REFUSED_NODE)
        }
        _ => CliError::failure(message, HINT_BUG),
    }
}

impl From<DispatchError> for CliError {
    fn from(error: DispatchError) -> CliError {
        let message = describe(&error);
        match error {
            DispatchError::Device(device) => CliError::from(device).with_message(message),
            DispatchError::Cache(cache) => CliError::from(cache).with_message(message),
            DispatchError::Compile { source, .. } => compile_error(message, source.as_ref()),
            DispatchError::Load { .. } => CliError::failure(message, HINT_CACHE_ENTRIES),
            DispatchError::Config(_) => CliError::usage(message, "check --buckets, --max-batch and --concurrency"),
            DispatchError::RequestNeedsBuckets | DispatchError::PaddedAxisNeedsHostTensors { .. } => CliError::usage(
                message,
                "--binding request serves a padded axis at its buckets only (make the request's extent a bucket \
                 with --pad-axis) and no per-shape axis: use --binding pinned (the default) otherwise",
            ),
            _ => CliError::failure(message, HINT_BUG),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_and_hints_are_single_lines() {
        let e = CliError::failure("compiling failed:\n  line 1\n\n  line 2\n", "first\nsecond");
        assert_eq!(e.message(), "compiling failed:; line 1; line 2");
        assert_eq!(e.hint(), "first; second");
        assert_eq!(e.exit_code(), EXIT_FAILURE);
        assert_eq!(e.context("perf").message(), "perf: compiling failed:; line 1; line 2");
    }

    #[test]
    fn a_request_on_a_padded_model_is_a_usage_error_saying_what_to_use() {
        let between = DispatchError::PaddedAxisNeedsHostTensors { symbol: "seq".into(), extent: 13, bucket: 16 };
        for error in [DispatchError::RequestNeedsBuckets, between] {
            let e = CliError::from(error);
            assert_eq!(e.exit_code(), EXIT_USAGE);
            assert!(e.hint().contains("--binding pinned"), "{}", e.hint());
        }
    }

    #[test]
    fn library_errors_map_to_exit_codes() {
        let missing =
            saggar_device::Error::NoSuchDevice { backend: saggar_device::BackendKind::Host, ordinal: 9, count: 4 };
        assert_eq!(CliError::from(missing).exit_code(), EXIT_USAGE);
        let absent = saggar_device::Error::BackendUnavailable {
            backend: saggar_device::BackendKind::Cuda,
            reason: "no CUDA driver found".into(),
        };
        let e = CliError::from(absent);
        assert_eq!(e.exit_code(), EXIT_FAILURE);
        assert!(e.message().contains("no CUDA driver found"), "{e}");
        let bad_json = saggar_models::ModelConfig::from_json("{").unwrap_err();
        assert_eq!(CliError::from(bad_json).exit_code(), EXIT_USAGE);
        let not_dir = CacheError::NotADirectory { path: "/etc/hostname".into() };
        assert_eq!(CliError::from(not_dir).exit_code(), EXIT_FAILURE);
    }

    #[test]
    fn a_compile_failure_on_a_refused_node_points_at_saggar_check_and_a_malformed_graph_at_a_bug() {
        let compile = |source: OnnxError| DispatchError::Compile {
            model: "while".into(),
            shapes: "[[4]]".into(),
            source: Box::new(source),
        };
        let node = OnnxError::UnsupportedOp {
            node: "Loop_0".into(),
            op: "Loop".into(),
            domain: String::new(),
            opset: 17,
            supported: "opsets 1 to 24".into(),
        };
        let e = CliError::from(compile(node));
        assert!(e.hint().contains("saggar check --onnx"), "{}", e.hint());
        assert!(e.message().contains("Loop_0"), "{}", e.message());
        let graph = OnnxError::Graph { reason: "a cycle".into() };
        assert_eq!(CliError::from(compile(graph)).hint(), HINT_BUG);
    }

    #[test]
    fn describe_appends_sources_not_already_in_the_message() {
        #[derive(Debug)]
        struct Outer(std::io::Error);
        impl fmt::Display for Outer {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("reading failed")
            }
        }
        impl StdError for Outer {
            fn source(&self) -> Option<&(dyn StdError + 'static)> {
                Some(&self.0)
            }
        }
        let e = Outer(std::io::Error::other("disk on fire"));
        assert_eq!(describe(&e), "reading failed: disk on fire");
    }
}
