//! A pool of arenas leased per request, so concurrent runs never share staging or device slots.

use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crossbeam::queue::ArrayQueue;
use kiln_device::Backend;
use parking_lot::{Condvar, Mutex};

use crate::arena::{Arena, ArenaContext, ArenaOptions};
use crate::error::{ArenaError, Result};
use crate::layout::ArenaLayout;

/// What a lease does when every arena is taken and the pool is at its bound.
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
    /// The most arenas the pool creates (at least 1).
    pub max_arenas: usize,
    /// What a lease does at the bound.
    pub when_exhausted: WhenExhausted,
    /// How each arena is built.
    pub arena: ArenaOptions,
}

impl Default for PoolConfig {
    fn default() -> PoolConfig {
        PoolConfig { max_arenas: 64, when_exhausted: WhenExhausted::Wait { timeout: None }, arena: ArenaOptions::default() }
    }
}

struct PoolShared<B: Backend> {
    ctx: Arc<ArenaContext<B>>,
    idle: ArrayQueue<Arena<B>>,
    created: AtomicUsize,
    config: PoolConfig,
    returned: Mutex<()>,
    returned_cv: Condvar,
}

/// A pool of arenas of one layout on one device. Leasing takes an idle arena (lock-free), creates one
/// while under the bound, or waits or fails at the bound. A lease returns its arena on drop, errors
/// included.
///
/// # Thread safety
/// `Send + Sync`; clone it to share.
pub struct ArenaPool<B: Backend> {
    shared: Arc<PoolShared<B>>,
}

impl<B: Backend> Clone for ArenaPool<B> {
    fn clone(&self) -> Self {
        ArenaPool { shared: self.shared.clone() }
    }
}

impl<B: Backend> std::fmt::Debug for ArenaPool<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArenaPool").field("created", &self.created()).field("idle", &self.idle()).finish_non_exhaustive()
    }
}

impl<B: Backend> ArenaPool<B> {
    /// A pool of arenas with `layout` on `device`. No arena is created until leased or
    /// [`ArenaPool::prewarm`]ed.
    pub fn new(device: B::Device, layout: Arc<ArenaLayout>, config: PoolConfig) -> Result<ArenaPool<B>> {
        if config.max_arenas == 0 {
            return Err(ArenaError::Layout { reason: "a pool needs max_arenas of at least 1".into() });
        }
        Ok(ArenaPool {
            shared: Arc::new(PoolShared {
                ctx: Arc::new(ArenaContext::new(device, layout, config.arena)),
                idle: ArrayQueue::new(config.max_arenas),
                created: AtomicUsize::new(0),
                config,
                returned: Mutex::new(()),
                returned_cv: Condvar::new(),
            }),
        })
    }

    /// Creates arenas until `count` exist (bounded by the pool's maximum), so leases on the hot path
    /// (or during a capture, where allocation is illegal) never allocate.
    pub fn prewarm(&self, count: usize) -> Result<()> {
        while self.created() < count.min(self.shared.config.max_arenas) {
            if let Some(arena) = self.try_create()? {
                self.give_back(arena);
            }
        }
        Ok(())
    }

    /// Arenas created so far.
    pub fn created(&self) -> usize {
        self.shared.created.load(Ordering::Acquire)
    }

    /// Arenas idle in the pool.
    pub fn idle(&self) -> usize {
        self.shared.idle.len()
    }

    /// The layout of every arena.
    pub fn layout(&self) -> &ArenaLayout {
        &self.shared.ctx.layout
    }

    /// Creates an arena if the bound allows; `None` at the bound.
    fn try_create(&self) -> Result<Option<Arena<B>>> {
        let max = self.shared.config.max_arenas;
        let reserved = self.shared.created.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max).then_some(n + 1));
        if reserved.is_err() {
            return Ok(None);
        }
        match Arena::new(self.shared.ctx.clone()) {
            Ok(arena) => Ok(Some(arena)),
            Err(e) => {
                self.shared.created.fetch_sub(1, Ordering::AcqRel);
                Err(e)
            }
        }
    }

    fn give_back(&self, arena: Arena<B>) {
        // The queue holds `max_arenas` and never more arenas than were created exist.
        if self.shared.idle.push(arena).is_err() {
            unreachable!("an arena pool holds at most max_arenas arenas");
        }
        let _guard = self.shared.returned.lock();
        self.shared.returned_cv.notify_one();
    }

    /// Leases an arena for one request.
    pub fn lease(&self) -> Result<ArenaLease<B>> {
        let started = Instant::now();
        loop {
            if let Some(arena) = self.shared.idle.pop() {
                return Ok(ArenaLease { arena: Some(arena), pool: self.clone() });
            }
            if let Some(arena) = self.try_create()? {
                return Ok(ArenaLease { arena: Some(arena), pool: self.clone() });
            }
            let max = self.shared.config.max_arenas;
            match self.shared.config.when_exhausted {
                WhenExhausted::Fail => return Err(ArenaError::PoolExhausted { max }),
                WhenExhausted::Wait { timeout } => {
                    let mut guard = self.shared.returned.lock();
                    if !self.shared.idle.is_empty() {
                        continue;
                    }
                    match timeout {
                        None => self.shared.returned_cv.wait(&mut guard),
                        Some(limit) => {
                            let Some(left) = limit.checked_sub(started.elapsed()) else {
                                return Err(ArenaError::PoolTimeout { max, waited_ms: started.elapsed().as_millis() as u64 });
                            };
                            self.shared.returned_cv.wait_for(&mut guard, left);
                        }
                    }
                }
            }
        }
    }
}

/// An arena leased for one request; it returns to its pool on drop.
pub struct ArenaLease<B: Backend> {
    arena: Option<Arena<B>>,
    pool: ArenaPool<B>,
}

impl<B: Backend> std::fmt::Debug for ArenaLease<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArenaLease").field("arena", &self.arena).finish()
    }
}

impl<B: Backend> Deref for ArenaLease<B> {
    type Target = Arena<B>;
    fn deref(&self) -> &Arena<B> {
        self.arena.as_ref().expect("present until drop")
    }
}

impl<B: Backend> DerefMut for ArenaLease<B> {
    fn deref_mut(&mut self) -> &mut Arena<B> {
        self.arena.as_mut().expect("present until drop")
    }
}

impl<B: Backend> Drop for ArenaLease<B> {
    fn drop(&mut self) {
        if let Some(arena) = self.arena.take() {
            self.pool.give_back(arena);
        }
    }
}
