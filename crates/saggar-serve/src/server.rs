//! The server: its options, its three listeners (inference over HTTP, gRPC, metrics), the models
//! loaded at start, and the shutdown sequence.
//!
//! Shutdown (SIGTERM, SIGINT, or [`ServerHandle::shutdown`]): readiness goes false; the listeners
//! stop accepting; requests in flight on open connections complete (idle connections close); then
//! every model's queue drains and its executor threads exit. [`ServerHandle::join`] says whether
//! all of it finished within the shutdown timeout.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::graceful::GracefulShutdown;
use saggar_cache::{CacheConfig, CompileCache};
use saggar_device::BackendChoice;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::error::{Result, ServeError};
use crate::load::LoadSettings;
use crate::repository::Repository;
use crate::state::{ModelControl, State};

/// `saggar serve`'s options.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// `--model-repository`.
    pub repository: PathBuf,
    /// `--host`.
    pub host: IpAddr,
    /// `--http-port` (0 picks a free port).
    pub http_port: u16,
    /// `--grpc-port`.
    pub grpc_port: u16,
    /// `--metrics-port`.
    pub metrics_port: u16,
    /// `--backend`.
    pub backend: BackendChoice,
    /// `--devices`; empty for all.
    pub devices: Vec<usize>,
    /// `--cache-dir`.
    pub cache_dir: PathBuf,
    /// `--max-request-bytes`.
    pub max_request_bytes: usize,
    /// `--max-queue`, per model.
    pub max_queue: usize,
    /// `--model-control-mode`.
    pub control: ModelControl,
    /// `--load-model`: models loaded at start in explicit mode.
    pub load_models: Vec<String>,
    /// `--shutdown-timeout`.
    pub shutdown_timeout: Duration,
}

impl ServeOptions {
    /// The defaults of `saggar serve` for `repository` and `cache_dir`: ports 8000, 8001, 8002 on
    /// 127.0.0.1, the best backend, every device, 64 MiB requests, 1024 queued per model.
    pub fn new(repository: impl Into<PathBuf>, cache_dir: impl Into<PathBuf>) -> ServeOptions {
        ServeOptions {
            repository: repository.into(),
            host: IpAddr::from([127, 0, 0, 1]),
            http_port: 8000,
            grpc_port: 8001,
            metrics_port: 8002,
            backend: BackendChoice::Auto,
            devices: Vec::new(),
            cache_dir: cache_dir.into(),
            max_request_bytes: 64 << 20,
            max_queue: 1024,
            control: ModelControl::None,
            load_models: Vec::new(),
            shutdown_timeout: Duration::from_secs(30),
        }
    }
}

/// A running server.
#[derive(Debug)]
pub struct ServerHandle {
    /// Where the inference HTTP port listens.
    pub http: SocketAddr,
    /// Where the gRPC port listens.
    pub grpc: SocketAddr,
    /// Where the metrics port listens.
    pub metrics: SocketAddr,
    state: Arc<State>,
    stop: watch::Sender<bool>,
    thread: Option<std::thread::JoinHandle<bool>>,
}

impl ServerHandle {
    /// Binds the ports and starts serving on a thread of its own; models load in the background
    /// (readiness is false until every one is loaded). A port that cannot be bound, a missing
    /// repository or an unusable backend or cache are errors here.
    pub fn start(options: ServeOptions) -> Result<ServerHandle> {
        let repository = Repository::open(&options.repository)?;
        let backend = saggar_device::resolve(options.backend).map_err(|e| ServeError::Internal(e.to_string()))?;
        let cache = CompileCache::open(CacheConfig::builder(&options.cache_dir).build())
            .map_err(|e| ServeError::Internal(format!("compile cache {}: {e}", options.cache_dir.display())))?;
        let settings = LoadSettings {
            backend,
            devices: options.devices.clone(),
            cache: Arc::new(cache),
            max_queue: options.max_queue.max(1),
        };
        let state = Arc::new(State::new(repository, settings, options.max_request_bytes, options.control));
        // Readiness is false from the first moment until every model asked for has loaded.
        let names = match options.control {
            ModelControl::None => state.repository.scan()?.into_iter().map(|e| e.name).collect(),
            ModelControl::Explicit => options.load_models.clone(),
        };
        state.expect(&names);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(std::thread::available_parallelism().map_or(2, |n| n.get()).clamp(2, 16))
            .thread_name("serve-io")
            .enable_all()
            .build()
            .map_err(|e| ServeError::Internal(format!("cannot start the runtime: {e}")))?;
        let bind = |port: u16| {
            let addr = SocketAddr::new(options.host, port);
            runtime
                .block_on(TcpListener::bind(addr))
                .map_err(|e| ServeError::Internal(format!("cannot listen on {addr}: {e}")))
        };
        let (http, grpc, metrics) = (bind(options.http_port)?, bind(options.grpc_port)?, bind(options.metrics_port)?);
        let addrs = [&http, &grpc, &metrics].map(|l| l.local_addr().expect("bound"));
        tracing::info!(http = %addrs[0], grpc = %addrs[1], metrics = %addrs[2], backend = backend.name(), "listening");
        let (stop, stopped) = watch::channel(false);
        let thread_state = state.clone();
        let thread = std::thread::Builder::new()
            .name("serve".into())
            .spawn(move || runtime.block_on(serve(thread_state, options, names, [http, grpc, metrics], stopped)))
            .map_err(|e| ServeError::Internal(format!("cannot start the server thread: {e}")))?;
        Ok(ServerHandle { http: addrs[0], grpc: addrs[1], metrics: addrs[2], state, stop, thread: Some(thread) })
    }

    /// The shared state (readiness, models).
    pub fn state(&self) -> &Arc<State> {
        &self.state
    }

    /// Starts the shutdown: readiness false, no new connections.
    pub fn shutdown(&self) {
        self.state.begin_shutdown();
        let _ = self.stop.send(true);
    }

    /// Waits for the server to finish; true when everything in flight completed within the
    /// shutdown timeout.
    pub fn join(mut self) -> bool {
        self.thread.take().is_some_and(|t| t.join().unwrap_or(false))
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            self.shutdown();
            let _ = t.join();
        }
    }
}

/// Runs the server until SIGTERM or SIGINT, then shuts down; true when the shutdown completed in
/// time.
pub fn run(options: ServeOptions) -> Result<bool> {
    let handle = ServerHandle::start(options)?;
    let signals = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ServeError::Internal(format!("cannot start the signal runtime: {e}")))?;
    signals.block_on(async {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).map_err(|e| ServeError::Internal(format!("SIGTERM: {e}")))?;
        let mut int = signal(SignalKind::interrupt()).map_err(|e| ServeError::Internal(format!("SIGINT: {e}")))?;
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM"),
            _ = int.recv() => tracing::info!("SIGINT"),
        }
        Ok::<(), ServeError>(())
    })?;
    handle.shutdown();
    Ok(handle.join())
}

/// Small answers go out at once: without `TCP_NODELAY`, Nagle's algorithm holds a reply's last
/// segment until the client's delayed acknowledgement (40 ms on Linux) for every request.
fn no_delay(stream: &tokio::net::TcpStream) {
    if let Err(e) = stream.set_nodelay(true) {
        tracing::warn!(error = %e, "cannot set TCP_NODELAY");
    }
}

async fn serve(
    state: Arc<State>,
    options: ServeOptions,
    names: Vec<String>,
    listeners: [TcpListener; 3],
    stopped: watch::Receiver<bool>,
) -> bool {
    for name in names {
        let state = state.clone();
        // A failed load is logged and leaves readiness false; the server keeps serving the rest.
        tokio::spawn(async move { state.load(&name).await });
    }
    let [http, grpc, metrics] = listeners;
    let graceful = GracefulShutdown::new();
    let s = state.clone();
    let http_service = move || {
        let s = s.clone();
        service_fn(move |r| crate::http::handle(s.clone(), r))
    };
    let s = state.clone();
    let grpc_service = move || {
        let s = s.clone();
        service_fn(move |r| {
            let s = s.clone();
            async move { Ok::<_, std::convert::Infallible>(crate::grpc::handle(s, r).await) }
        })
    };
    let s = state.clone();
    let metrics_service = move || {
        let s = s.clone();
        service_fn(move |r| crate::http::handle_metrics(s.clone(), r))
    };
    let mut stop = stopped.clone();
    loop {
        tokio::select! {
            accepted = http.accept() => if let Ok((io, _)) = accepted {
                no_delay(&io);
                let conn = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(io), http_service());
                let conn = graceful.watch(conn);
                tokio::spawn(conn);
            },
            accepted = metrics.accept() => if let Ok((io, _)) = accepted {
                no_delay(&io);
                let conn = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(io), metrics_service());
                tokio::spawn(graceful.watch(conn));
            },
            accepted = grpc.accept() => if let Ok((io, _)) = accepted {
                no_delay(&io);
                let conn = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(io), grpc_service());
                tokio::spawn(graceful.watch(conn));
            },
            _ = stop.changed() => break,
        }
    }
    drop((http, grpc, metrics));
    let started = Instant::now();
    let deadline = options.shutdown_timeout;
    let connections_done = tokio::time::timeout(deadline, graceful.shutdown()).await.is_ok();
    let left = deadline.saturating_sub(started.elapsed());
    let drain = tokio::task::spawn_blocking(move || state.drain_all());
    let drained = tokio::time::timeout(left, drain).await.is_ok();
    let clean = connections_done && drained;
    if clean {
        tracing::info!(seconds = started.elapsed().as_secs_f64(), "shut down: every request in flight completed");
    } else {
        tracing::error!(
            timeout_s = deadline.as_secs_f64(),
            "shutdown timeout: requests still in flight were abandoned"
        );
    }
    clean
}
