//! [`SessionBuilder`]: creates a [`Session`] from a device and a compiler, with optional
//! configuration and a progress callback. The backend is the device's, so no turbofish is needed.

use std::sync::Arc;

use saggar_device::Device;

use crate::compiler::ProgramCompiler;
use crate::config::SessionConfig;
use crate::error::Result;
use crate::programs::Progress;
use crate::session::Session;

/// A progress callback: called once per program made ready while a session is created.
type ProgressFn<'a> = Box<dyn Fn(&Progress) + Sync + 'a>;

/// Builds a [`Session`]; made by [`Session::builder`].
///
/// The backend is the device's, so code generic over devices needs no turbofish:
///
/// ```
/// use std::sync::Arc;
///
/// use saggar_device::Device;
/// use saggar_dispatch::{BucketSpec, ProgramCompiler, Result, Session, SessionConfig};
///
/// fn serve<D: Device, C: ProgramCompiler<D::Backend>>(device: D, compiler: Arc<C>) -> Result<Session<D::Backend, C>> {
///     Session::builder(device, compiler)
///         .config(SessionConfig::builder().buckets(BucketSpec::Stepped { max: 64 }).build()?)
///         .on_progress(|p| eprintln!("{}/{} programs ready", p.done, p.total))
///         .build()
/// }
/// ```
///
/// The crate documentation runs a whole session, compiler included.
#[must_use = "a builder does nothing until `build` is called"]
pub struct SessionBuilder<'a, D: Device, C: ProgramCompiler<D::Backend>> {
    device: D,
    compiler: Arc<C>,
    config: Option<SessionConfig>,
    progress: Option<ProgressFn<'a>>,
}

impl<D: Device, C: ProgramCompiler<D::Backend>> std::fmt::Debug for SessionBuilder<'_, D, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionBuilder")
            .field("device", &self.device.info().name)
            .field("model", &self.compiler.model().name)
            .field("config", &self.config)
            .field("progress", &self.progress.is_some())
            .finish()
    }
}

impl<'a, D: Device, C: ProgramCompiler<D::Backend>> SessionBuilder<'a, D, C> {
    pub(crate) fn new(device: D, compiler: Arc<C>) -> Self {
        SessionBuilder { device, compiler, config: None, progress: None }
    }

    /// The session's configuration (default: [`SessionConfig::builder`]'s defaults).
    pub fn config(mut self, config: SessionConfig) -> Self {
        self.config = Some(config);
        self
    }

    /// Called once per program made ready while the session is created (loaded from the cache or
    /// compiled), from the loading threads.
    pub fn on_progress(mut self, progress: impl Fn(&Progress) + Sync + 'a) -> Self {
        self.progress = Some(Box::new(progress));
        self
    }

    /// Creates the session: detects the batch axis, chooses buckets and precompiles every bucket,
    /// pinned to the device (see [`Session::new`]).
    pub fn build(self) -> Result<Session<D::Backend, C>> {
        let config = match self.config {
            Some(config) => config,
            None => SessionConfig::builder().build()?,
        };
        let progress: &(dyn Fn(&Progress) + Sync) = match &self.progress {
            Some(progress) => progress,
            None => &|_: &Progress| {},
        };
        Session::new(self.device, self.compiler, config, progress)
    }
}

impl<B: saggar_device::Backend, C: ProgramCompiler<B>> Session<B, C> {
    /// Starts building a session of `compiler`'s model on `device`. The backend is `device`'s.
    pub fn builder<'a, D: Device<Backend = B>>(device: D, compiler: Arc<C>) -> SessionBuilder<'a, D, C> {
        SessionBuilder::new(device, compiler)
    }
}
