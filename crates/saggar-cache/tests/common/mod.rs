//! Helpers shared by the integration tests: keys, artifacts, fault hooks, log capture and
//! child processes (the test binary re-run with a role).
#![allow(dead_code)]

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use saggar_cache::{CacheConfig, CacheConfigBuilder, CacheKey, FaultInjector, FaultPoint};

/// Environment variable that selects a child role.
pub const CHILD_ENV: &str = "SAGGAR_CACHE_TEST_CHILD";

/// A key that differs per `name`.
pub fn key(name: &str) -> CacheKey {
    CacheKey::builder()
        .model_hash(CacheKey::hash_model_bytes(name.as_bytes()))
        .shape(format!("bucket={name}"))
        .backend("host")
        .arch("x86_64-test")
        .compiler("saggar-test-compiler")
        .compiler_version("1.0.0")
        .option("opt_level", "3")
        .build()
        .expect("valid test key")
}

/// The deterministic artifact the test compiler produces for `key`, `len` bytes long.
pub fn artifact_for(key: &CacheKey, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    let mut counter = 0u64;
    while out.len() < len {
        let block = blake3::hash(format!("{}:{counter}", key.canonical_text()).as_bytes());
        out.extend_from_slice(block.as_bytes());
        counter += 1;
    }
    out.truncate(len);
    out
}

/// A config for `dir` with the test defaults (no stale-temp grace period).
pub fn config(dir: &Path) -> CacheConfigBuilder {
    CacheConfig::builder(dir).stale_temp_age(std::time::Duration::ZERO)
}

/// The closure behind a [`Hook`].
type HookFn = dyn Fn(FaultPoint, &Path) -> io::Result<()> + Send + Sync;

/// A fault injector built from a closure.
pub struct Hook(Box<HookFn>);

impl Hook {
    pub fn new(f: impl Fn(FaultPoint, &Path) -> io::Result<()> + Send + Sync + 'static) -> Arc<Self> {
        Arc::new(Hook(Box::new(f)))
    }
}

impl fmt::Debug for Hook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Hook")
    }
}

impl FaultInjector for Hook {
    fn inject(&self, point: FaultPoint, path: &Path) -> io::Result<()> {
        (self.0)(point, path)
    }
}

/// Names of the files in `dir`, sorted.
pub fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    v.sort();
    v
}

/// Names of temp files (anything starting with `.saggar-tmp.`) in `dir`.
pub fn temp_files(dir: &Path) -> Vec<String> {
    names(dir).into_iter().filter(|n| n.starts_with(".saggar-tmp.")).collect()
}

/// Starts this test binary again, running only the test `role_test` with `CHILD_ENV=role`.
pub fn spawn_child(role_test: &str, role: &str, envs: &[(&str, String)]) -> Child {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", role_test, "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, role)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.spawn().expect("spawn child test process")
}

/// The child role this process was started for, if any.
pub fn child_role() -> Option<String> {
    std::env::var(CHILD_ENV).ok()
}

/// A required variable of a child process.
pub fn child_var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("child process needs {name}"))
}

pub fn child_path(name: &str) -> PathBuf {
    PathBuf::from(child_var(name))
}

/// Kills this process with SIGKILL: no destructors, no flushing, no unlocking.
pub fn sigkill_self() -> ! {
    // SAFETY: kill(2) with our own pid and a valid signal number has no memory-safety
    // preconditions.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGKILL);
    }
    unreachable!("SIGKILL is not catchable")
}

/// Appends one line to `path` with O_APPEND (atomic for short writes across processes).
pub fn append_line(path: &Path, line: &str) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path).unwrap();
    f.write_all(format!("{line}\n").as_bytes()).unwrap();
}

/// Log events captured by [`capture_logs`].
#[derive(Debug, Clone, Default)]
pub struct Logs(Arc<Mutex<Vec<(tracing::Level, String)>>>);

impl Logs {
    pub fn warnings(&self) -> Vec<String> {
        self.0.lock().unwrap().iter().filter(|(l, _)| *l == tracing::Level::WARN).map(|(_, m)| m.clone()).collect()
    }
}

struct Collector(Logs);

struct Fields(String);

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn fmt::Debug) {
        use fmt::Write;
        let _ = write!(self.0, "{}={:?} ", field.name(), value);
    }
}

impl tracing::Subscriber for Collector {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut fields = Fields(String::new());
        event.record(&mut fields);
        (self.0).0.lock().unwrap().push((*event.metadata().level(), fields.0));
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// Runs `f` with a subscriber that records this thread's log events.
pub fn capture_logs<R>(f: impl FnOnce() -> R) -> (R, Logs) {
    let logs = Logs::default();
    let r = tracing::subscriber::with_default(Collector(logs.clone()), f);
    (r, logs)
}
