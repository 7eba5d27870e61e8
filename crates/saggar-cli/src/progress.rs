//! Progress on stderr, so stdout stays clean for the report: indicatif bars when stderr is a
//! terminal; when it is not (a pipe, a log file), plain lines: one when a phase starts, one every
//! few seconds while it runs, one when it ends; nothing at all with `--quiet`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use saggar_dispatch::{ProgramSource, Progress};

use crate::cli::ProgressArgs;

/// Seconds between two plain progress lines.
pub const PLAIN_INTERVAL: Duration = Duration::from_secs(5);

/// How progress is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgressMode {
    /// indicatif bars (stderr is a terminal).
    Bars,
    /// Plain lines every [`PLAIN_INTERVAL`] (stderr is not a terminal).
    Lines,
    /// Nothing (`--quiet`).
    Quiet,
}

impl ProgressMode {
    /// Bars on a terminal, lines otherwise, nothing with `--quiet`.
    pub fn new(stderr_is_terminal: bool, args: ProgressArgs) -> ProgressMode {
        match (args.quiet, stderr_is_terminal) {
            (true, _) => ProgressMode::Quiet,
            (false, true) => ProgressMode::Bars,
            (false, false) => ProgressMode::Lines,
        }
    }
}

/// The plain-line state: when the phase started and when the last line was printed (nanoseconds
/// after the start; an atomic, so per-request updates take no lock).
#[derive(Debug)]
struct Lines {
    started: Instant,
    last_ns: AtomicU64,
}

/// A progress bar, a plain-line printer, or nothing.
#[derive(Debug)]
pub struct Bar {
    bar: ProgressBar,
    prefix: &'static str,
    lines: Option<Lines>,
}

impl Bar {
    /// A bar of `len` steps labelled `prefix` (`len` 0: a phase of unknown length, such as a
    /// `--duration` run, shown by its count and elapsed time).
    pub fn new(mode: ProgressMode, prefix: &'static str, len: u64) -> Bar {
        let target =
            if mode == ProgressMode::Bars { ProgressDrawTarget::stderr() } else { ProgressDrawTarget::hidden() };
        let bar = ProgressBar::with_draw_target((len > 0).then_some(len), target).with_prefix(prefix);
        let template = if len > 0 {
            "{prefix:>8} [{bar:32}] {pos}/{len} {msg} ({elapsed})"
        } else {
            "{prefix:>8} {pos} {msg} ({elapsed})"
        };
        let style = ProgressStyle::with_template(template)
            .map(|s| s.progress_chars("=> "))
            .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        let lines =
            (mode == ProgressMode::Lines).then(|| Lines { started: Instant::now(), last_ns: AtomicU64::new(0) });
        let this = Bar { bar, prefix, lines };
        this.line("started");
        this
    }

    /// Whether anything is shown (callers skip per-request updates otherwise).
    pub fn is_visible(&self) -> bool {
        !self.bar.is_hidden() || self.lines.is_some()
    }

    /// Advances by `n` steps; in line mode prints a line when [`PLAIN_INTERVAL`] has passed.
    pub fn inc(&self, n: u64) {
        self.bar.inc(n);
        if let Some(lines) = &self.lines {
            let now = u64::try_from(lines.started.elapsed().as_nanos()).unwrap_or(u64::MAX);
            let last = lines.last_ns.load(Ordering::Relaxed);
            let interval = u64::try_from(PLAIN_INTERVAL.as_nanos()).unwrap_or(u64::MAX);
            // One thread wins the exchange and prints; the others see the new time.
            if now.saturating_sub(last) >= interval
                && lines.last_ns.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok()
            {
                self.line("running");
            }
        }
    }

    /// Reports one program made ready during session creation (a session's progress callback), on
    /// `device` when several sessions share the bar.
    pub fn program_ready(&self, device: Option<usize>, progress: &Progress) {
        let how = match progress.source {
            ProgramSource::Loaded => "loaded",
            ProgramSource::Compiled => "compiled",
        };
        let what = match progress.bucket {
            Some(bucket) => format!("bucket {bucket} {how}"),
            None => how.to_string(),
        };
        match device {
            Some(device) => self.bar.set_message(format!("device {device}: {what}")),
            None => self.bar.set_message(what),
        }
        self.inc(1);
    }

    /// Removes the bar from the terminal; in line mode prints the closing line.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
        self.line("done");
    }

    /// One plain line: `saggar: <prefix> <state>: <pos>[/<len>] (<elapsed> s)`.
    fn line(&self, state: &str) {
        let Some(lines) = &self.lines else { return };
        let count = match self.bar.length() {
            Some(len) => format!("{}/{len}", self.bar.position()),
            None => self.bar.position().to_string(),
        };
        eprintln!("saggar: {} {state}: {count} ({:.1} s)", self.prefix, lines.started.elapsed().as_secs_f64());
    }
}
