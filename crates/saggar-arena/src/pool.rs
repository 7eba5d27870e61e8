//! Pools of per-request resources: a generic [`Pool`] of leased values, and [`ArenaPool`], a pool of
//! arenas, so concurrent runs never share staging or device slots.

use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crossbeam::queue::ArrayQueue;
use parking_lot::{Condvar, Mutex};
use saggar_device::Backend;

use crate::arena::{Arena, ArenaContext, ArenaOptions};
use crate::error::{ArenaError, Result};
use crate::layout::ArenaLayout;

/// What a lease does when every value is taken and the pool is at its bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhenExhausted {
    /// Wait for a lease to come back, for at most `timeout` (forever with `None`).
    Wait {
        /// The longest wait.
        timeout: Option<Duration>,
    },
    /// Fail at once with [`ArenaError::PoolExhausted`].
    Fail,
}

/// How a pool behaves. Built once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolConfig {
    /// The most values the pool creates (at least 1).
    pub max_arenas: usize,
    /// What a lease does at the bound.
    pub when_exhausted: WhenExhausted,
    /// How each arena is built (used by [`ArenaPool`]).
    pub arena: ArenaOptions,
}

impl Default for PoolConfig {
    fn default() -> PoolConfig {
        PoolConfig {
            max_arenas: 64,
            when_exhausted: WhenExhausted::Wait { timeout: None },
            arena: ArenaOptions::default(),
        }
    }
}

type Factory<T> = dyn Fn() -> Result<T> + Send + Sync;

struct PoolShared<T> {
    factory: Box<Factory<T>>,
    idle: ArrayQueue<T>,
    created: AtomicUsize,
    max: usize,
    when_exhausted: WhenExhausted,
    /// Leases waiting for a value to come back; a return takes `returned` only when there are some.
    waiters: AtomicUsize,
    returned: Mutex<()>,
    returned_cv: Condvar,
}

/// A bounded pool of values made on demand by a factory. Leasing takes an idle value, creates one
/// while under the bound, or waits or fails at the bound. A lease returns its value on drop, errors
/// included. Leasing an idle value and returning one are lock-free (a crossbeam `ArrayQueue` and
/// atomics); only a lease that waits at the bound, and the return that wakes it, take a lock.
///
/// It is a general utility, not tied to arenas: saggar-dispatch pools its per-request run contexts
/// (stream, arena, scratch, graphs) with it.
///
/// ```
/// use saggar_arena::{ArenaError, Pool, WhenExhausted};
///
/// let pool = Pool::new(2, WhenExhausted::Fail, || Ok(Vec::<u8>::with_capacity(1024)))?;
/// let mut a = pool.lease()?;
/// a.push(1);
/// let b = pool.lease()?;
/// assert!(matches!(pool.lease(), Err(ArenaError::PoolExhausted { .. })), "at the bound");
/// drop(b);
/// assert_eq!(pool.created(), 2);
/// let again = pool.lease()?; // the value `b` held, reused
/// assert!(again.capacity() >= 1024);
/// # Ok::<(), ArenaError>(())
/// ```
///
/// # Thread safety
/// `Send + Sync` when `T: Send`; clone it to share.
pub struct Pool<T> {
    shared: Arc<PoolShared<T>>,
}

impl<T> Clone for Pool<T> {
    fn clone(&self) -> Self {
        Pool { shared: self.shared.clone() }
    }
}

impl<T> std::fmt::Debug for Pool<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("created", &self.created())
            .field("idle", &self.idle())
            .field("max", &self.shared.max)
            .finish()
    }
}

impl<T> Pool<T> {
    /// A pool of at most `max` values made by `factory`.
    pub fn new(
        max: usize,
        when_exhausted: WhenExhausted,
        factory: impl Fn() -> Result<T> + Send + Sync + 'static,
    ) -> Result<Pool<T>> {
        if max == 0 {
            return Err(ArenaError::Layout { reason: "a pool needs a bound of at least 1".into() });
        }
        Ok(Pool {
            shared: Arc::new(PoolShared {
                factory: Box::new(factory),
                idle: ArrayQueue::new(max),
                created: AtomicUsize::new(0),
                max,
                when_exhausted,
                waiters: AtomicUsize::new(0),
                returned: Mutex::new(()),
                returned_cv: Condvar::new(),
            }),
        })
    }

    /// Creates values until `count` exist (bounded by the pool's maximum), so leases on the hot path
    /// (or during a capture, where allocation is illegal) never create.
    pub fn prewarm(&self, count: usize) -> Result<()> {
        while self.created() < count.min(self.shared.max) {
            if let Some(value) = self.try_create()? {
                self.give_back(value);
            }
        }
        Ok(())
    }

    /// Values created so far.
    pub fn created(&self) -> usize {
        self.shared.created.load(Ordering::Acquire)
    }

    /// Values idle in the pool.
    pub fn idle(&self) -> usize {
        self.shared.idle.len()
    }

    /// The bound.
    pub fn max(&self) -> usize {
        self.shared.max
    }

    /// Takes every idle value out of the pool and gives it to `visit` (for maintenance such as
    /// evicting cached state), then returns them.
    pub fn for_each_idle(&self, mut visit: impl FnMut(&mut T)) {
        let mut taken = Vec::with_capacity(self.shared.idle.len());
        while let Some(mut value) = self.shared.idle.pop() {
            visit(&mut value);
            taken.push(value);
        }
        for value in taken {
            self.give_back(value);
        }
    }

    fn try_create(&self) -> Result<Option<T>> {
        let max = self.shared.max;
        let reserved =
            self.shared.created.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max).then_some(n + 1));
        if reserved.is_err() {
            return Ok(None);
        }
        match (self.shared.factory)() {
            Ok(value) => Ok(Some(value)),
            Err(e) => {
                self.shared.created.fetch_sub(1, Ordering::AcqRel);
                Err(e)
            }
        }
    }

    fn give_back(&self, value: T) {
        // The queue holds `max` values and never more values than were created exist.
        if self.shared.idle.push(value).is_err() {
            unreachable!("a pool holds at most its bound");
        }
        // Lock-free unless a lease waits. A waiter counts itself, then checks the queue (under the
        // lock, before it sleeps); this return pushes, then reads the count. With a full fence on
        // both sides, either the waiter sees the value or this return sees the waiter and wakes it
        // under the lock (which the waiter holds until it sleeps), so no wake-up is lost.
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.shared.waiters.load(Ordering::SeqCst) > 0 {
            let _guard = self.shared.returned.lock();
            self.shared.returned_cv.notify_one();
        }
    }

    /// Leases a value.
    pub fn lease(&self) -> Result<Lease<T>> {
        let started = Instant::now();
        loop {
            if let Some(value) = self.shared.idle.pop() {
                return Ok(Lease { value: Some(value), pool: self.clone() });
            }
            if let Some(value) = self.try_create()? {
                return Ok(Lease { value: Some(value), pool: self.clone() });
            }
            let max = self.shared.max;
            match self.shared.when_exhausted {
                WhenExhausted::Fail => return Err(ArenaError::PoolExhausted { max }),
                WhenExhausted::Wait { timeout } => {
                    let mut guard = self.shared.returned.lock();
                    self.shared.waiters.fetch_add(1, Ordering::SeqCst);
                    std::sync::atomic::fence(Ordering::SeqCst);
                    let waited = if !self.shared.idle.is_empty() {
                        Ok(())
                    } else {
                        match timeout {
                            None => {
                                self.shared.returned_cv.wait(&mut guard);
                                Ok(())
                            }
                            Some(limit) => match limit.checked_sub(started.elapsed()) {
                                Some(left) => {
                                    self.shared.returned_cv.wait_for(&mut guard, left);
                                    Ok(())
                                }
                                None => Err(ArenaError::PoolTimeout {
                                    max,
                                    waited_ms: started.elapsed().as_millis() as u64,
                                }),
                            },
                        }
                    };
                    self.shared.waiters.fetch_sub(1, Ordering::SeqCst);
                    waited?;
                }
            }
        }
    }
}

/// A value leased from a [`Pool`]; it returns to the pool on drop.
pub struct Lease<T> {
    value: Option<T>,
    pool: Pool<T>,
}

impl<T: std::fmt::Debug> std::fmt::Debug for Lease<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease").field("value", &self.value).finish()
    }
}

impl<T> Deref for Lease<T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.value.as_ref().expect("present until drop")
    }
}

impl<T> DerefMut for Lease<T> {
    fn deref_mut(&mut self) -> &mut T {
        self.value.as_mut().expect("present until drop")
    }
}

impl<T> Drop for Lease<T> {
    fn drop(&mut self) {
        if let Some(value) = self.value.take() {
            self.pool.give_back(value);
        }
    }
}

/// An arena leased for one request; it returns to its pool on drop.
pub type ArenaLease<B> = Lease<Arena<B>>;

/// A pool of arenas on one device, each with one layout or several ([`ArenaPool::with_layouts`]).
///
/// # Thread safety
/// `Send + Sync`; clone it to share.
pub struct ArenaPool<B: Backend> {
    pool: Pool<Arena<B>>,
    ctx: Arc<ArenaContext<B>>,
}

impl<B: Backend> Clone for ArenaPool<B> {
    fn clone(&self) -> Self {
        ArenaPool { pool: self.pool.clone(), ctx: self.ctx.clone() }
    }
}

impl<B: Backend> std::fmt::Debug for ArenaPool<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArenaPool").field("pool", &self.pool).finish()
    }
}

impl<B: Backend> ArenaPool<B> {
    /// A pool of arenas with `layout` on `device`. No arena is created until leased or
    /// [`ArenaPool::prewarm`]ed.
    pub fn new(device: B::Device, layout: Arc<ArenaLayout>, config: PoolConfig) -> Result<ArenaPool<B>> {
        Self::with_layouts(device, vec![layout], config)
    }

    /// A pool of arenas that each hold every layout of `layouts` in the same memory, one in use at a
    /// time ([`Arena::use_layout`]; the first when leased for the first time). The layouts place the
    /// same inputs and outputs (same counts) at their own offsets: one per program of a session, say,
    /// each packed for that program's sizes, so a program's one copy sends only its own bytes instead
    /// of a span laid out for the largest program. The arena is sized for the largest layout.
    pub fn with_layouts(device: B::Device, layouts: Vec<Arc<ArenaLayout>>, config: PoolConfig) -> Result<ArenaPool<B>> {
        Self::with_builtins(device, layouts, config, None)
    }

    /// [`ArenaPool::with_layouts`] with saggar-device's built-in kernels already compiled for
    /// `device` (`builtins`, from a compile cache, say: [`saggar_device::builtin::source`] compiled
    /// by [`saggar_device::Device::compile`]), so the pool need not compile them (a runtime compile
    /// costs tens of milliseconds on a GPU backend). `None`: the pool compiles them when it needs
    /// them; so does a code object that does not load.
    pub fn with_builtins(
        device: B::Device,
        layouts: Vec<Arc<ArenaLayout>>,
        config: PoolConfig,
        builtins: Option<saggar_device::CodeObject>,
    ) -> Result<ArenaPool<B>> {
        let ctx = Arc::new(ArenaContext::new(device, layouts, config.arena, builtins)?);
        let factory_ctx = ctx.clone();
        let pool = Pool::new(config.max_arenas, config.when_exhausted, move || Arena::new(factory_ctx.clone()))?;
        Ok(ArenaPool { pool, ctx })
    }

    /// Creates arenas until `count` exist.
    pub fn prewarm(&self, count: usize) -> Result<()> {
        self.pool.prewarm(count)
    }

    /// Arenas created so far.
    pub fn created(&self) -> usize {
        self.pool.created()
    }

    /// Arenas idle in the pool.
    pub fn idle(&self) -> usize {
        self.pool.idle()
    }

    /// How the split gathers of this pool's gatherer ran so far (shared by every pool of the
    /// process with the same [`crate::GatherOptions`]), as [`Arena::gather_stats`].
    pub fn gather_stats(&self) -> crate::GatherStats {
        self.ctx.gather_stats()
    }

    /// The first layout of every arena (the only one of a pool made by [`ArenaPool::new`]).
    pub fn layout(&self) -> &ArenaLayout {
        &self.ctx.layouts[0]
    }

    /// Every layout of the arenas, in the order [`Arena::use_layout`] indexes them.
    pub fn layouts(&self) -> &[Arc<ArenaLayout>] {
        &self.ctx.layouts
    }

    /// Leases an arena for one request.
    pub fn lease(&self) -> Result<ArenaLease<B>> {
        self.pool.lease()
    }
}
