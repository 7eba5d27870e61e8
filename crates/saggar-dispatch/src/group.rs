//! One session per device, compiled once for all of them.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use saggar_device::Backend;

use crate::compiler::ProgramCompiler;
use crate::config::SessionConfig;
use crate::error::{DispatchError, Result};
use crate::programs::Progress;
use crate::session::Session;
use crate::stats::StatsSnapshot;
use crate::tensors::{HostTensor, OwnedTensor, RunInfo};

/// How a [`SessionGroup`] picks the device for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Routing {
    /// Each device in turn.
    #[default]
    RoundRobin,
    /// The device with the fewest requests in flight.
    LeastLoaded,
}

/// One [`Session`] per device over one compiler and one compile cache. The first device compiles
/// every bucket (publishing to the cache); the others are created in parallel afterwards and load
/// what it published, so N devices cost one compile and N-1 loads per bucket. Each device's work is
/// pinned to it.
///
/// # A device that fails
/// A request that meets a lost device (a sticky fault: `saggar_device::Error::is_device_lost`) fails
/// with that typed error, and the group takes the device out of its routing: later requests go to
/// the devices left ([`SessionGroup::lost`] tells which are out). Once every device is lost, requests
/// fail with [`DispatchError::NoDeviceLeft`]. Other errors (a bad request, a full pool, an
/// out-of-memory) leave the device in.
///
/// # Thread safety
/// `Send + Sync`.
pub struct SessionGroup<B: Backend, C: ProgramCompiler<B>> {
    sessions: Vec<Session<B, C>>,
    in_flight: Vec<AtomicUsize>,
    lost: Vec<AtomicBool>,
    next: AtomicUsize,
    routing: Routing,
}

impl<B: Backend, C: ProgramCompiler<B>> std::fmt::Debug for SessionGroup<B, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionGroup")
            .field("sessions", &self.sessions)
            .field("routing", &self.routing)
            .finish_non_exhaustive()
    }
}

/// One request in flight on a device, counted while it lives; it takes the device out of the
/// group's routing when the request meets a lost device.
pub(crate) struct InFlight<'a> {
    count: &'a AtomicUsize,
    lost: &'a AtomicBool,
}

impl<'a> InFlight<'a> {
    fn new(count: &'a AtomicUsize, lost: &'a AtomicBool) -> InFlight<'a> {
        count.fetch_add(1, Ordering::Relaxed);
        InFlight { count, lost }
    }

    /// Passes `result` through, marking the device lost if its error says so.
    pub(crate) fn observe<T>(&self, result: Result<T>) -> Result<T> {
        if let Err(e) = &result
            && e.is_device_lost()
        {
            self.lost.store(true, Ordering::Relaxed);
        }
        result
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::Relaxed);
    }
}

impl<B: Backend, C: ProgramCompiler<B>> SessionGroup<B, C> {
    /// Creates one session per device. `config` must name a compile cache: it is how the devices share
    /// one compile. `progress` receives (device index, progress).
    pub fn new(
        devices: Vec<B::Device>,
        compiler: Arc<C>,
        config: SessionConfig,
        routing: Routing,
        progress: &(dyn Fn(usize, &Progress) + Sync),
    ) -> Result<Self> {
        if devices.is_empty() {
            return Err(DispatchError::Config("a session group needs at least one device".into()));
        }
        if config.cache.is_none() {
            return Err(DispatchError::Config("a session group needs a compile cache (SessionConfig::builder().cache(..)) so its devices compile once".into()));
        }
        let mut devices = devices.into_iter();
        let first = Session::new(devices.next().expect("checked non-empty"), compiler.clone(), config.clone(), &|p| {
            progress(0, p)
        })?;
        let rest: Vec<Result<Session<B, C>>> = std::thread::scope(|scope| {
            let handles: Vec<_> = devices
                .enumerate()
                .map(|(i, device)| {
                    let (compiler, config) = (compiler.clone(), config.clone());
                    scope.spawn(move || Session::new(device, compiler, config, &|p| progress(i + 1, p)))
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("session creation does not panic")).collect()
        });
        let mut sessions = vec![first];
        for session in rest {
            sessions.push(session?);
        }
        let in_flight = sessions.iter().map(|_| AtomicUsize::new(0)).collect();
        let lost = sessions.iter().map(|_| AtomicBool::new(false)).collect();
        Ok(SessionGroup { sessions, in_flight, lost, next: AtomicUsize::new(0), routing })
    }

    /// The sessions, one per device, in device order.
    pub fn sessions(&self) -> &[Session<B, C>] {
        &self.sessions
    }

    /// Which devices the group has taken out of its routing after they were lost, in device order.
    pub fn lost(&self) -> Vec<bool> {
        self.lost.iter().map(|l| l.load(Ordering::Relaxed)).collect()
    }

    /// The device for the next request, counted in flight there; only devices not lost.
    fn pick(&self) -> Result<(usize, InFlight<'_>)> {
        let n = self.sessions.len();
        let alive = |i: &usize| !self.lost[*i].load(Ordering::Relaxed);
        let i = match self.routing {
            Routing::RoundRobin => {
                let start = self.next.fetch_add(1, Ordering::Relaxed);
                (0..n).map(|k| (start + k) % n).find(alive)
            }
            Routing::LeastLoaded => (0..n).filter(alive).min_by_key(|&i| self.in_flight[i].load(Ordering::Relaxed)),
        };
        let i = i.ok_or(DispatchError::NoDeviceLeft { devices: n })?;
        Ok((i, InFlight::new(&self.in_flight[i], &self.lost[i])))
    }

    /// Runs a request on the device the router picks; returns the device index too.
    pub fn run(&self, inputs: &[HostTensor<'_>]) -> Result<(usize, Vec<OwnedTensor>)> {
        let (i, flight) = self.pick()?;
        Ok((i, flight.observe(self.sessions[i].run(inputs))?))
    }

    /// Runs a request into the caller's buffers on the device the router picks.
    pub fn run_into<T: AsMut<[u8]>>(&self, inputs: &[HostTensor<'_>], outputs: &mut [T]) -> Result<(usize, RunInfo)> {
        let (i, flight) = self.pick()?;
        Ok((i, flight.observe(self.sessions[i].run_into(inputs, outputs))?))
    }

    /// Leases a [`crate::Request`] of `batch` rows on the device the router picks; returns the
    /// device index too. The request counts as in flight on its device until it is dropped.
    pub fn request(&self, batch: u64) -> Result<(usize, crate::Request<'_, B, C>)> {
        let (i, flight) = self.pick()?;
        Ok((i, crate::Request::new(&self.sessions[i], crate::staged::RequestShape::Batch(batch), Some(flight))?))
    }

    /// [`SessionGroup::request`] by the inputs' dimensions ([`Session::request_shaped`]).
    pub fn request_shaped<S: AsRef<[u64]>>(&self, input_dims: &[S]) -> Result<(usize, crate::Request<'_, B, C>)> {
        let (i, flight) = self.pick()?;
        let dims = input_dims.iter().map(|d| d.as_ref().to_vec()).collect();
        Ok((i, crate::Request::new(&self.sessions[i], crate::staged::RequestShape::Dims(dims), Some(flight))?))
    }

    /// Each session's counters, in device order.
    pub fn stats(&self) -> Vec<StatsSnapshot> {
        self.sessions.iter().map(Session::stats).collect()
    }

    /// Every session's counters added up ([`StatsSnapshot::total`]).
    pub fn total_stats(&self) -> StatsSnapshot {
        StatsSnapshot::total(&self.stats()).expect("a group has at least one session")
    }
}
