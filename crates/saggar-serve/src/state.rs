//! The server's state both transports share: the repository, every model's state (loading, ready,
//! failed, unloaded), readiness, and loading and unloading (the repository extension).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::RwLock;

use crate::error::{Result, ServeError};
use crate::load::{LoadSettings, load};
use crate::model::LoadedModel;
use crate::repository::Repository;

/// `--model-control-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ModelControl {
    /// Every model of the repository is loaded at start; the repository API refuses load and unload.
    #[default]
    None,
    /// Models are loaded and unloaded through the repository API (and `--load-model` at start).
    Explicit,
}

/// A model's state.
#[derive(Debug, Clone)]
pub enum ModelState {
    /// Its sessions are being created (buckets compiled or loaded).
    Loading,
    /// Serving.
    Ready(Arc<LoadedModel>),
    /// Its load failed, for this reason.
    Failed(String),
    /// Unloaded through the repository API.
    Unloaded,
}

impl ModelState {
    /// Triton's name of the state (`READY`, `LOADING`, `UNAVAILABLE`).
    pub fn name(&self) -> &'static str {
        match self {
            ModelState::Loading => "LOADING",
            ModelState::Ready(_) => "READY",
            ModelState::Failed(_) | ModelState::Unloaded => "UNAVAILABLE",
        }
    }
}

/// One line of the repository index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexEntry {
    /// The model's name.
    pub name: String,
    /// The version served or to be served.
    pub version: String,
    /// Its state's name.
    pub state: String,
    /// Why it is unavailable.
    pub reason: String,
}

/// What the handlers of both transports share.
#[derive(Debug)]
pub struct State {
    /// The repository.
    pub repository: Repository,
    /// The settings of every load.
    pub settings: LoadSettings,
    /// `--max-request-bytes`.
    pub max_request_bytes: usize,
    /// `--model-control-mode`.
    pub control: ModelControl,
    models: RwLock<BTreeMap<String, ModelState>>,
    shutting_down: AtomicBool,
}

impl State {
    /// The state of a server over `repository` with no model yet.
    pub fn new(
        repository: Repository,
        settings: LoadSettings,
        max_request_bytes: usize,
        control: ModelControl,
    ) -> State {
        State {
            repository,
            settings,
            max_request_bytes,
            control,
            models: RwLock::new(BTreeMap::new()),
            shutting_down: AtomicBool::new(false),
        }
    }

    /// Ready: not shutting down, and every model asked for is loaded (none loading or failed).
    pub fn ready(&self) -> bool {
        !self.shutting_down.load(Ordering::Acquire)
            && self.models.read().values().all(|s| matches!(s, ModelState::Ready(_) | ModelState::Unloaded))
    }

    /// Whether the server is shutting down.
    pub fn shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::Acquire)
    }

    /// Readiness goes false; requests already accepted still complete.
    pub fn begin_shutdown(&self) {
        if !self.shutting_down.swap(true, Ordering::AcqRel) {
            tracing::info!("shutting down: readiness false, no new connections");
        }
    }

    /// The ready model `name`, at `version` if given (only the served version is).
    pub fn model(&self, name: &str, version: Option<&str>) -> Result<Arc<LoadedModel>> {
        let state = self.models.read().get(name).cloned();
        let model = match state {
            Some(ModelState::Ready(m)) if m.out_of_devices() => {
                return Err(ServeError::Unavailable(format!(
                    "model `{name}`: every device is lost; restart the server without the failed devices"
                )));
            }
            Some(ModelState::Ready(m)) => m,
            Some(ModelState::Loading) => return Err(ServeError::Unavailable(format!("model `{name}` is loading"))),
            Some(ModelState::Failed(why)) => {
                return Err(ServeError::Unavailable(format!("model `{name}` failed to load: {why}")));
            }
            Some(ModelState::Unloaded) | None => return Err(ServeError::NotFound(format!("unknown model `{name}`"))),
        };
        match version {
            Some(v) if !v.is_empty() && v != model.version.to_string() => Err(ServeError::NotFound(format!(
                "model `{name}` has no ready version `{v}` (version {} is served)",
                model.version
            ))),
            _ => Ok(model),
        }
    }

    /// Marks `names` as loading, so readiness is false until each has loaded (or failed).
    pub fn expect(&self, names: &[String]) {
        let mut models = self.models.write();
        for name in names {
            models.entry(name.clone()).or_insert(ModelState::Loading);
        }
    }

    /// Every ready model.
    pub fn loaded(&self) -> Vec<Arc<LoadedModel>> {
        self.models
            .read()
            .values()
            .filter_map(|s| match s {
                ModelState::Ready(m) => Some(m.clone()),
                _ => None,
            })
            .collect()
    }

    /// The repository index: every model folder with its state (`ready_only`: the ready ones).
    pub fn index(&self, ready_only: bool) -> Result<Vec<IndexEntry>> {
        let entries = self.repository.scan()?;
        let models = self.models.read();
        Ok(entries
            .into_iter()
            .filter_map(|e| {
                let state = models.get(&e.name);
                if ready_only && !matches!(state, Some(ModelState::Ready(_))) {
                    return None;
                }
                let (state, reason) = match state {
                    Some(ModelState::Failed(why)) => ("UNAVAILABLE".to_string(), why.clone()),
                    Some(ModelState::Unloaded) => ("UNAVAILABLE".to_string(), "unloaded".to_string()),
                    Some(s) => (s.name().to_string(), String::new()),
                    None => (String::new(), String::new()),
                };
                let version = e.latest().map(|v| v.0.to_string()).unwrap_or_default();
                Some(IndexEntry { name: e.name, version, state, reason })
            })
            .collect())
    }

    /// Loads (or reloads) model `name` on a blocking thread; the model serves once every bucket is
    /// ready. A reload swaps the new model in and drains the old one.
    pub async fn load(self: &Arc<Self>, name: &str) -> Result<()> {
        if self.shutting_down() {
            return Err(ServeError::Unavailable("the server is shutting down".into()));
        }
        let entry = self.repository.entry(name)?;
        self.models.write().entry(name.to_string()).or_insert(ModelState::Loading);
        tracing::info!(model = %name, state = "LOADING", "loading model");
        let state = self.clone();
        let loaded = tokio::task::spawn_blocking(move || load(&entry, &state.settings))
            .await
            .unwrap_or_else(|e| Err(format!("the load panicked: {e}")));
        let (next, result) = match loaded {
            Ok(model) => {
                tracing::info!(
                    model = %name, version = model.version, state = "READY",
                    buckets = ?model.executor().buckets(), devices = model.executor().devices(), "model ready"
                );
                (ModelState::Ready(Arc::new(model)), Ok(()))
            }
            Err(why) => {
                tracing::error!(model = %name, state = "UNAVAILABLE", error = %why, "model failed to load");
                (
                    ModelState::Failed(why.clone()),
                    Err(ServeError::Internal(format!("model `{name}` failed to load: {why}"))),
                )
            }
        };
        let old = self.models.write().insert(name.to_string(), next);
        if let Some(ModelState::Ready(old)) = old {
            tokio::task::spawn_blocking(move || old.drain()).await.ok();
        }
        result
    }

    /// Unloads model `name`: it stops taking requests, and those queued complete.
    pub async fn unload(self: &Arc<Self>, name: &str) -> Result<()> {
        let old = {
            let mut models = self.models.write();
            match models.get(name) {
                None | Some(ModelState::Unloaded) => {
                    return Err(ServeError::NotFound(format!("model `{name}` is not loaded")));
                }
                Some(_) => models.insert(name.to_string(), ModelState::Unloaded),
            }
        };
        tracing::info!(model = %name, state = "UNAVAILABLE", "unloading model");
        if let Some(ModelState::Ready(old)) = old {
            tokio::task::spawn_blocking(move || old.drain()).await.ok();
        }
        Ok(())
    }

    /// Drains every model (at shutdown, once no connection is left).
    pub fn drain_all(&self) {
        for model in self.loaded() {
            model.drain();
        }
    }
}
