//! Progress bars on stderr (indicatif), drawn only when stderr is a terminal, so scripts and logs
//! never see control sequences and stdout stays clean for the report.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use saggar_dispatch::{ProgramSource, Progress};

/// A progress bar, or nothing when stderr is not a terminal.
#[derive(Debug, Clone)]
pub struct Bar {
    bar: ProgressBar,
}

impl Bar {
    /// A bar of `len` steps labelled `prefix`; hidden unless `visible`.
    pub fn new(visible: bool, prefix: &'static str, len: u64) -> Bar {
        let target = if visible { ProgressDrawTarget::stderr() } else { ProgressDrawTarget::hidden() };
        let bar = ProgressBar::with_draw_target(Some(len), target).with_prefix(prefix);
        let style = ProgressStyle::with_template("{prefix:>8} [{bar:32}] {pos}/{len} {msg} ({elapsed})")
            .map(|s| s.progress_chars("=> "))
            .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        Bar { bar }
    }

    /// Whether anything is drawn (callers skip per-request updates otherwise).
    pub fn is_visible(&self) -> bool {
        !self.bar.is_hidden()
    }

    /// Advances by `n` steps.
    pub fn inc(&self, n: u64) {
        self.bar.inc(n);
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
        self.bar.inc(1);
    }

    /// Removes the bar from the terminal.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
