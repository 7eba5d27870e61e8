//! The host side of a gather, split across helper threads, and the stores it writes with.
//!
//! A [`Gatherer`] runs the parts of a gather (contiguous input ranges, balanced by bytes) at once:
//! the calling thread and each awake helper take their home part, then whatever part is left; idle
//! helpers spin, then park. Staging memory is written with streaming stores on GPU backends. Why it
//! is built this way (home parts, parking and waking, streaming stores): `docs/ARCHITECTURE.md`,
//! "The gather".

use std::cell::UnsafeCell;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam::utils::CachePadded;
use parking_lot::Mutex;

/// How the host side of a gather is spread over threads, and how it stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct GatherOptions {
    /// Helper threads (shared by every pool of the process with the same options) that each take a
    /// part of a large gather; 0 keeps every gather on the calling thread.
    pub helpers: usize,
    /// A layout whose input span has at least this many bytes is gathered in parts.
    pub parallel_min_bytes: usize,
    /// A layout with at least this many inputs is gathered in parts (the per-input checks add up).
    pub parallel_min_inputs: usize,
    /// How long an idle helper spins for the next gather before it parks. Also what tells sparse
    /// traffic from sustained load: a gather that finds every helper parked runs on the calling
    /// thread, and wakes the helpers for the next one only if it came within `spin` of the
    /// previous gather.
    pub spin: Duration,
    /// How the staging buffer is written.
    pub stores: StagingStores,
}

/// How a gather writes the staging buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StagingStores {
    /// Streaming stores on GPU backends, plain stores on the host backend (whose "copies" are CPU
    /// memcpys that want the bytes in cache).
    Auto,
    /// Ordinary stores.
    Plain,
    /// Non-temporal (streaming) stores where the CPU has them (x86-64), so the bytes go to memory
    /// instead of sitting dirty in a core's cache, where the GPU's DMA read would have to snoop
    /// them out.
    Streaming,
}

impl StagingStores {
    /// Whether a gather for a backend of `kind` uses streaming stores.
    pub(crate) fn streaming_for(self, kind: saggar_device::BackendKind) -> bool {
        match self {
            StagingStores::Auto => kind != saggar_device::BackendKind::Host,
            StagingStores::Plain => false,
            StagingStores::Streaming => true,
        }
    }
}

impl GatherOptions {
    /// Every gather on the calling thread; no helper threads; stores chosen by the backend.
    pub const INLINE: GatherOptions = GatherOptions {
        helpers: 0,
        parallel_min_bytes: usize::MAX,
        parallel_min_inputs: usize::MAX,
        spin: Duration::ZERO,
        stores: StagingStores::Auto,
    };

    /// The most helpers a gatherer runs.
    pub const MAX_HELPERS: usize = 15;

    /// One helper per two hardware threads beyond the first two, at most seven (none on a machine
    /// with fewer than four: the driver's and the application's threads need those cores); layouts
    /// of 64 KiB or 64 inputs and more gathered in parts; helpers spinning 250 us after each gather
    /// (longer than a request that gathers alone takes, so a burst keeps them awake; requests
    /// further apart than that find them parked and gather alone, without waking them, so sparse
    /// traffic costs no spinning and no wake-ups; under sustained load that is up to 250 us of CPU
    /// per helper and request, counted in [`GatherStats::helper_spin_ns`]: lower it, or set
    /// `helpers` to 0, where CPU matters more than latency); stores chosen by the backend
    /// ([`StagingStores::Auto`]).
    pub fn auto() -> GatherOptions {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        GatherOptions {
            helpers: (threads / 2).saturating_sub(1).min(7),
            parallel_min_bytes: 64 * 1024,
            parallel_min_inputs: 64,
            spin: Duration::from_micros(250),
            stores: StagingStores::Auto,
        }
    }

    /// These options with `helpers` helper threads (0: every gather on the calling thread).
    pub fn with_helpers(mut self, helpers: usize) -> GatherOptions {
        self.helpers = helpers;
        self
    }

    /// These options with layouts of at least `bytes` gathered in parts.
    pub fn with_parallel_min_bytes(mut self, bytes: usize) -> GatherOptions {
        self.parallel_min_bytes = bytes;
        self
    }

    /// These options with layouts of at least `inputs` inputs gathered in parts.
    pub fn with_parallel_min_inputs(mut self, inputs: usize) -> GatherOptions {
        self.parallel_min_inputs = inputs;
        self
    }

    /// These options with idle helpers spinning for `spin` before they park.
    pub fn with_spin(mut self, spin: Duration) -> GatherOptions {
        self.spin = spin;
        self
    }

    /// These options with the staging buffer written by `stores`.
    pub fn with_stores(mut self, stores: StagingStores) -> GatherOptions {
        self.stores = stores;
        self
    }

    /// How many parts a layout of `inputs` inputs spanning `span` bytes is gathered in.
    pub(crate) fn parts_for(&self, inputs: usize, span: usize) -> usize {
        let helpers = self.helpers.min(Self::MAX_HELPERS);
        if helpers == 0 || (span < self.parallel_min_bytes && inputs < self.parallel_min_inputs) {
            1
        } else {
            (helpers + 1).min(inputs.max(1))
        }
    }
}

impl Default for GatherOptions {
    fn default() -> GatherOptions {
        GatherOptions::auto()
    }
}

/// How the split gathers of one gatherer ran, counted since it started. Pools with the same
/// [`GatherOptions`] share a gatherer, so these are the counts of all of them. Layouts gathered in
/// one part (below [`GatherOptions::parallel_min_bytes`] and `parallel_min_inputs`) are not counted.
///
/// Tells whether the helpers help: many `alone_parked` mean requests come further apart than
/// [`GatherOptions::spin`] (the helpers sleep and cost nothing; those gathers ran as fast as with
/// no helpers); many `alone_busy` mean several threads gather at once (more pools or threads than
/// one set of helpers serves); `helper_spin_ns` is the CPU time the helpers spent waiting for
/// gathers, what keeping them awake costs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct GatherStats {
    /// Gathers whose parts were offered to the helpers.
    pub split: u64,
    /// Parts of those gathers, in all.
    pub parts: u64,
    /// Parts of those gathers that helpers ran (the calling threads ran the rest).
    pub parts_on_helpers: u64,
    /// Split gathers that found a helper parked (it is woken after the copy is enqueued).
    pub found_parked: u64,
    /// Gathers that ran every part on the calling thread because the helpers were busy with another
    /// gather.
    pub alone_busy: u64,
    /// Time the calling threads of split gathers waited for helpers after the last part was
    /// claimed, summed, in nanoseconds.
    pub helper_wait_ns: u64,
    /// Gathers that ran every part on the calling thread because every helper was parked (waking
    /// one costs more than its part saves).
    pub alone_parked: u64,
    /// Gathers among `alone_parked` that came within [`GatherOptions::spin`] of the previous
    /// gather and so woke the helpers (after the copy was enqueued) for the next one.
    pub woke_helpers: u64,
    /// CPU time the helpers spent spinning for the next gather, summed, in nanoseconds.
    pub helper_spin_ns: u64,
}

impl GatherStats {
    /// The counts of the gathers that ran after `earlier` (an earlier snapshot of the same
    /// gatherer), saturating at zero.
    pub fn since(&self, earlier: &GatherStats) -> GatherStats {
        GatherStats {
            split: self.split.saturating_sub(earlier.split),
            parts: self.parts.saturating_sub(earlier.parts),
            parts_on_helpers: self.parts_on_helpers.saturating_sub(earlier.parts_on_helpers),
            found_parked: self.found_parked.saturating_sub(earlier.found_parked),
            alone_busy: self.alone_busy.saturating_sub(earlier.alone_busy),
            helper_wait_ns: self.helper_wait_ns.saturating_sub(earlier.helper_wait_ns),
            alone_parked: self.alone_parked.saturating_sub(earlier.alone_parked),
            woke_helpers: self.woke_helpers.saturating_sub(earlier.woke_helpers),
            helper_spin_ns: self.helper_spin_ns.saturating_sub(earlier.helper_spin_ns),
        }
    }
}

/// The counters behind [`GatherStats`], written by calling threads only (helpers never touch
/// them, so counting adds no contention to a gather; each helper counts its spinning on its own
/// line, [`Shared::spin_ns`]).
#[derive(Default)]
struct Counters {
    split: AtomicU64,
    parts: AtomicU64,
    parts_on_helpers: AtomicU64,
    found_parked: AtomicU64,
    alone_busy: AtomicU64,
    helper_wait_ns: AtomicU64,
    alone_parked: AtomicU64,
    woke_helpers: AtomicU64,
    /// When the latest gather started, in nanoseconds since `Shared::started` (0: none yet).
    last_gather_ns: AtomicU64,
}

/// The publication word of a gather: its epoch in the high bits, its part count in the low
/// [`PARTS_BITS`].
fn publication_word(epoch: u64, parts: usize) -> u64 {
    (epoch << PARTS_BITS) | parts as u64
}

/// `(epoch, parts)` of a publication word.
fn unpack_publication(word: u64) -> (u64, usize) {
    (word >> PARTS_BITS, (word & ((1 << PARTS_BITS) - 1)) as usize)
}

const PARTS_BITS: u32 = 8;

// A gather has at most `MAX_HELPERS + 1` parts: they must fit the publication word's part count and
// the calling thread's claim mask (`Claims::mine`).
const _: () = assert!(GatherOptions::MAX_HELPERS < 31 && GatherOptions::MAX_HELPERS < (1 << PARTS_BITS) - 1);

/// A part's state word: the epoch of the gather that last claimed it, and how far it got there.
fn part_state(epoch: u64, phase: u64) -> u64 {
    (epoch << 2) | phase
}

const CLAIMED: u64 = 1;
const DONE: u64 = 2;

/// Claims part state `slot` for the gather of `epoch`; false when someone else claimed it (for this
/// gather) first, or when that gather is over (every one of its parts then has a state of `epoch` or
/// later, so a helper that arrives late claims nothing).
fn try_claim(slot: &AtomicU64, epoch: u64) -> bool {
    let current = slot.load(Ordering::Relaxed);
    current < part_state(epoch, 0)
        && slot.compare_exchange(current, part_state(epoch, CLAIMED), Ordering::AcqRel, Ordering::Relaxed).is_ok()
}

/// A part's work, borrowed for the duration of one [`Gatherer::run_split`] call.
type Task = dyn Fn(usize) + Sync;

/// What the calling thread writes to start a gather, on one cache line, so a helper that notices
/// the gather has what it needs to run a part with that one transfer.
struct Publication {
    /// [`publication_word`] of the latest gather; an idle helper waits for it to change.
    word: AtomicU64,
    /// The latest gather's task, valid while one of its parts can still be claimed or runs.
    task: UnsafeCell<Option<*const Task>>,
}

/// What the calling thread and the helpers share. One call of `run_split` at a time uses it (the
/// gatherer's `busy` lock). Each field that one side writes while the other polls sits on its own
/// cache lines.
struct Shared {
    publication: CachePadded<Publication>,
    /// Per part index, its [`part_state`]. Helper `h` claims part `h + 1` first (its home part) and
    /// the calling thread part 0, so while every helper is awake each claim finds its line in the
    /// claiming core's cache (nobody else wrote it) and a part runs on the same core from one gather
    /// to the next, with the part's inputs and bindings still in that core's caches. Then each
    /// thread claims whatever part is left, so nobody waits for a helper that is slow to wake,
    /// descheduled or parked.
    parts: Box<[CachePadded<AtomicU64>]>,
    /// A helper's part panicked.
    panicked: AtomicBool,
    /// Per helper: parked, so it must be unparked.
    parked: Box<[AtomicBool]>,
    shutdown: AtomicBool,
    spin: Duration,
    /// A gather found helpers parked; [`Gatherer::wake_parked`] wakes them.
    wake_requested: AtomicBool,
    counters: CachePadded<Counters>,
    /// Per helper: nanoseconds spent spinning for a gather, written by that helper only.
    spin_ns: Box<[CachePadded<AtomicU64>]>,
    /// The gatherer's start, the origin of `Counters::last_gather_ns`.
    started: Instant,
}

// SAFETY: `publication.task` is written only by the thread holding the gatherer's `busy` lock,
// before its Release store of `publication.word` that announces the gather, and read by a helper
// only after it loaded that word (Acquire) and then claimed a part of that gather. The writer
// writes `task` again only after every part of its gather was claimed and every part claimed by a
// helper is done (the helper's Release store of the part's state, which the writer loads with
// Acquire, comes after the helper's last use of `task`): a part's task is never read after that.
// Every other field is atomic or immutable.
unsafe impl Sync for Shared {}
// SAFETY: as above; the raw task pointer is only dereferenced under that protocol.
unsafe impl Send for Shared {}

/// Runs the parts of gathers, alone or with helper threads.
pub(crate) struct Gatherer {
    shared: Arc<Shared>,
    helpers: Vec<JoinHandle<()>>,
    busy: Mutex<()>,
}

/// Gatherers alive in this process, by options: pools with the same options share one set of
/// helpers, so a process with many pools (one per shape program, say) does not start helpers per pool.
static SHARED: Mutex<Vec<(GatherOptions, Weak<Gatherer>)>> = Mutex::new(Vec::new());

impl Gatherer {
    /// The process's gatherer for `options`, started on first use and stopped when the last pool
    /// using it is dropped.
    pub(crate) fn shared(options: GatherOptions) -> std::io::Result<Arc<Gatherer>> {
        let mut shared = SHARED.lock();
        shared.retain(|(_, weak)| weak.strong_count() > 0);
        if let Some(existing) = shared.iter().find(|(o, _)| *o == options).and_then(|(_, weak)| weak.upgrade()) {
            return Ok(existing);
        }
        let gatherer = Arc::new(Gatherer::new(options)?);
        shared.push((options, Arc::downgrade(&gatherer)));
        Ok(gatherer)
    }

    fn new(options: GatherOptions) -> std::io::Result<Gatherer> {
        let n = options.helpers.min(GatherOptions::MAX_HELPERS);
        let shared = Arc::new(Shared {
            publication: CachePadded::new(Publication {
                word: AtomicU64::new(publication_word(0, 0)),
                task: UnsafeCell::new(None),
            }),
            parts: (0..=n).map(|_| CachePadded::new(AtomicU64::new(part_state(0, DONE)))).collect(),
            panicked: AtomicBool::new(false),
            parked: (0..n).map(|_| AtomicBool::new(false)).collect(),
            shutdown: AtomicBool::new(false),
            spin: options.spin,
            wake_requested: AtomicBool::new(false),
            counters: CachePadded::default(),
            spin_ns: (0..n).map(|_| CachePadded::new(AtomicU64::new(0))).collect(),
            started: Instant::now(),
        });
        let mut gatherer = Gatherer { shared: shared.clone(), helpers: Vec::with_capacity(n), busy: Mutex::new(()) };
        for index in 0..n {
            let shared = shared.clone();
            let handle = std::thread::Builder::new()
                .name(format!("saggar-gather-{index}"))
                .spawn(move || helper(&shared, index))?;
            // On a spawn error, `gatherer`'s drop stops the helpers started so far.
            gatherer.helpers.push(handle);
        }
        Ok(gatherer)
    }

    /// Runs `task(p)` once for every part `p` in `0..parts` (at most helpers + 1), on the calling
    /// thread and the awake helpers at once, or every part on the calling thread, in order, when the
    /// helpers are busy with another gather or all parked. Returns when every part is done; fails
    /// only if a part panicked on a helper (a part that panics on the calling thread unwinds from
    /// here, once the helpers' parts are done).
    #[cfg(test)]
    pub(crate) fn run_parts(&self, parts: usize, task: &(dyn Fn(usize) + Sync + '_)) -> Result<(), String> {
        match self.plan(parts) {
            Plan::Alone => {
                (0..parts).for_each(task);
                Ok(())
            }
            Plan::Split(busy) => self.run_split(parts, task, busy),
        }
    }

    /// How a gather of `parts` parts runs: [`Plan::Alone`] when it cannot be split (one part, no
    /// helpers, the helpers busy with another gather) or every helper is parked, else
    /// [`Plan::Split`], which holds the helpers for it. Counts the gathers that run alone.
    pub(crate) fn plan(&self, parts: usize) -> Plan<'_> {
        let shared = &*self.shared;
        let splittable = parts > 1 && !self.helpers.is_empty() && parts <= shared.parts.len();
        let guard = if splittable { self.busy.try_lock() } else { None };
        let Some(busy) = guard else {
            if splittable {
                shared.counters.alone_busy.fetch_add(1, Ordering::Relaxed);
            }
            return Plan::Alone;
        };
        // The previous gather found helpers parked and nobody woke them (its caller never fenced a
        // copy: a gather without an upload, say): wake them now, or every later gather would run
        // alone. This gather pays the system calls; the next finds the helpers awake.
        if shared.wake_requested.load(Ordering::Relaxed) {
            self.wake_parked();
        }
        if self.alone_when_parked() {
            return Plan::Alone;
        }
        Plan::Split(busy)
    }

    /// Runs `task(p)` for every part `p` in `0..parts` on the calling thread and the awake helpers
    /// at once, holding `_busy` (from [`Gatherer::plan`]) until every part is done.
    fn run_split(
        &self,
        parts: usize,
        task: &(dyn Fn(usize) + Sync + '_),
        _busy: parking_lot::MutexGuard<'_, ()>,
    ) -> Result<(), String> {
        let shared = &*self.shared;
        let epoch = unpack_publication(shared.publication.word.load(Ordering::Relaxed)).0 + 1;
        // SAFETY: this thread holds `busy`, and no helper reads the cell: the previous gather left no
        // part to claim and waited for the helpers' parts. Erasing the borrow's lifetime is sound
        // because `Claims` below keeps this call from returning, or unwinding, until no helper can
        // claim a part of this gather and every part a helper claimed is done.
        unsafe {
            *shared.publication.task.get() = Some(std::mem::transmute::<
                *const (dyn Fn(usize) + Sync + '_),
                *const (dyn Fn(usize) + Sync + 'static),
            >(task))
        };
        // Announces the gather (Release: with its task). SeqCst pairs with a helper's "parked, then
        // re-check the word", so a helper either sees this gather or is seen parked below.
        shared.publication.word.store(publication_word(epoch, parts), Ordering::SeqCst);
        let mut claims = Claims { shared, epoch, parts, mine: 0, own_parts_done: Instant::now() };
        // Part 0 first (the calling thread's home part), then whatever the helpers left.
        for (p, state) in shared.parts[..parts].iter().enumerate() {
            if try_claim(state, epoch) {
                claims.mine |= 1 << p;
                task(p);
                state.store(part_state(epoch, DONE), Ordering::Release);
            }
        }
        claims.own_parts_done = Instant::now();
        // Parked helpers took no part; waking them here (a system call each) would delay this
        // gather, so `wake_parked` does it once the copy is enqueued.
        let found_parked = shared.parked.iter().any(|p| p.load(Ordering::SeqCst));
        if found_parked {
            shared.wake_requested.store(true, Ordering::Relaxed);
        }
        let by_caller = claims.mine.count_ones() as usize;
        let waited = claims.finish();
        let c = &shared.counters;
        c.split.fetch_add(1, Ordering::Relaxed);
        c.parts.fetch_add(parts as u64, Ordering::Relaxed);
        c.parts_on_helpers.fetch_add((parts - by_caller) as u64, Ordering::Relaxed);
        c.found_parked.fetch_add(u64::from(found_parked), Ordering::Relaxed);
        c.helper_wait_ns.fetch_add(u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
        if shared.panicked.swap(false, Ordering::Relaxed) {
            return Err("a gather helper thread panicked".into());
        }
        Ok(())
    }

    /// Whether every helper is parked, so this gather runs alone: a parked helper takes a system
    /// call to wake and tens of microseconds to run, longer than its part of a gather takes the
    /// calling thread. Then, if this gather came within the spin time of the previous one (the
    /// load is sustained), asks for the helpers to be woken once the copy is enqueued
    /// ([`Gatherer::wake_parked`]), so the next gather finds them spinning; under sparse traffic
    /// they stay parked and cost nothing.
    fn alone_when_parked(&self) -> bool {
        let shared = &*self.shared;
        let c = &shared.counters;
        let now = u64::try_from(shared.started.elapsed().as_nanos()).unwrap_or(u64::MAX).max(1);
        let previous = c.last_gather_ns.swap(now, Ordering::Relaxed);
        if !shared.parked.iter().all(|p| p.load(Ordering::SeqCst)) {
            return false;
        }
        c.alone_parked.fetch_add(1, Ordering::Relaxed);
        let spin = u64::try_from(shared.spin.as_nanos()).unwrap_or(u64::MAX);
        if previous != 0 && now - previous.min(now) <= spin {
            c.woke_helpers.fetch_add(1, Ordering::Relaxed);
            shared.wake_requested.store(true, Ordering::Relaxed);
        }
        true
    }

    /// A gather [`Gatherer::plan`] split: `task` gets each of `parts`, mutably, exactly once, on
    /// whichever thread claims it.
    pub(crate) fn run_split_mut<P: Send>(
        &self,
        parts: &mut [P],
        task: &(dyn Fn(&mut P) + Sync),
        busy: parking_lot::MutexGuard<'_, ()>,
    ) -> Result<(), String> {
        let parts_at = PartsPtr(parts.as_mut_ptr());
        let count = parts.len();
        // `move`: the closure holds the pointer and the task reference themselves, so a helper
        // reaches a part through one line of the calling thread's stack, not a chain of them.
        self.run_split(
            count,
            &move |p| {
                // SAFETY: `run_split` calls this once per `p` in `0..count`, so no two calls alias,
                // and `parts` stays mutably borrowed (by this function) until every call has returned.
                task(unsafe { parts_at.part(p) })
            },
            busy,
        )
    }
}

/// How one gather runs ([`Gatherer::plan`]).
pub(crate) enum Plan<'g> {
    /// Every part on the calling thread, in order.
    Alone,
    /// Split among the calling thread and the awake helpers, which the guard holds for this gather.
    Split(parking_lot::MutexGuard<'g, ()>),
}

/// The parts of a [`Gatherer::run_split_mut`] call, shared with the threads that run them.
struct PartsPtr<P>(*mut P);

impl<P> Clone for PartsPtr<P> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<P> Copy for PartsPtr<P> {}

impl<P> PartsPtr<P> {
    /// # Safety
    /// `p` is in bounds and no other reference to part `p` is alive.
    #[allow(clippy::mut_from_ref)]
    unsafe fn part(&self, p: usize) -> &mut P {
        // SAFETY: per this function's contract.
        unsafe { &mut *self.0.add(p) }
    }
}

// SAFETY: each part is handed to one thread at a time (see `run_split_mut`), so sharing the pointer
// only moves parts between threads, which `P: Send` allows.
unsafe impl<P: Send> Sync for PartsPtr<P> {}
// SAFETY: as above.
unsafe impl<P: Send> Send for PartsPtr<P> {}

impl Gatherer {
    /// How this gatherer's split gathers ran so far.
    pub(crate) fn stats(&self) -> GatherStats {
        let c = &self.shared.counters;
        GatherStats {
            split: c.split.load(Ordering::Relaxed),
            parts: c.parts.load(Ordering::Relaxed),
            parts_on_helpers: c.parts_on_helpers.load(Ordering::Relaxed),
            found_parked: c.found_parked.load(Ordering::Relaxed),
            alone_busy: c.alone_busy.load(Ordering::Relaxed),
            helper_wait_ns: c.helper_wait_ns.load(Ordering::Relaxed),
            alone_parked: c.alone_parked.load(Ordering::Relaxed),
            woke_helpers: c.woke_helpers.load(Ordering::Relaxed),
            helper_spin_ns: self.shared.spin_ns.iter().map(|n| n.load(Ordering::Relaxed)).sum(),
        }
    }

    /// Wakes every parked helper if a gather found them parked, so the gathers that follow find them
    /// all spinning at once (woken one after another, the first would park again before the last
    /// woke). Cheap when nothing is pending.
    pub(crate) fn wake_parked(&self) {
        if !self.shared.wake_requested.swap(false, Ordering::Relaxed) {
            return;
        }
        for (flag, handle) in self.shared.parked.iter().zip(&self.helpers) {
            if flag.load(Ordering::SeqCst) {
                handle.thread().unpark();
            }
        }
    }
}

/// The calling thread's side of one split gather. Dropped (also while unwinding), it claims every
/// part still unclaimed, so no helper starts one, and waits until every part a helper claimed is
/// done.
struct Claims<'a> {
    shared: &'a Shared,
    epoch: u64,
    parts: usize,
    /// Bit `p`: the calling thread claimed part `p` (also one that panicked).
    mine: u32,
    /// When the calling thread found no part left to claim.
    own_parts_done: Instant,
}

impl Claims<'_> {
    /// Waits for the helpers' parts; returns how long that took.
    fn finish(self) -> Duration {
        let started = self.own_parts_done;
        drop(self);
        started.elapsed()
    }
}

impl Drop for Claims<'_> {
    fn drop(&mut self) {
        let states = &self.shared.parts[..self.parts];
        for (p, state) in states.iter().enumerate() {
            if try_claim(state, self.epoch) {
                self.mine |= 1 << p;
            }
        }
        let done = part_state(self.epoch, DONE);
        let mut spins = 0u32;
        loop {
            // Every state is loaded on every pass (no early exit), so the loads overlap.
            let pending = states
                .iter()
                .enumerate()
                .filter(|(p, state)| self.mine & (1 << p) == 0 && state.load(Ordering::Acquire) != done)
                .count();
            if pending == 0 {
                break;
            }
            spins += 1;
            if spins < 4096 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }
}

thread_local! {
    /// Whether this thread is a gather helper.
    static ON_HELPER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the calling thread is a gather helper (so the part it runs was written by another core).
#[inline]
pub(crate) fn on_helper_thread() -> bool {
    ON_HELPER.with(std::cell::Cell::get)
}

fn helper(shared: &Shared, index: usize) {
    ON_HELPER.with(|h| h.set(true));
    let mut seen = publication_word(0, 0);
    while let Some(word) = wait_for_gather(shared, index, seen) {
        seen = word;
        let (epoch, parts) = unpack_publication(word);
        // The home part first, then any part left, starting from the next one.
        for k in 0..parts {
            let p = (index + 1 + k) % parts;
            let state = &shared.parts[p];
            if !try_claim(state, epoch) {
                continue;
            }
            // SAFETY: the claim succeeded, so the gather of `epoch` (announced with its task before
            // the word this helper loaded) is still running and cannot end, nor its caller write the
            // next task, before this part is marked done below.
            let task = unsafe { (*shared.publication.task.get()).expect("a gather publishes its task") };
            // SAFETY: as above: the pointer is valid until this part is marked done.
            let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| unsafe { (*task)(p) }));
            if outcome.is_err() {
                shared.panicked.store(true, Ordering::Relaxed);
            }
            state.store(part_state(epoch, DONE), Ordering::Release);
        }
    }
}

/// Waits until the publication word moves past `seen`; `None` on shutdown. Spins for
/// `shared.spin`, then parks; counts the time spun in `shared.spin_ns`.
fn wait_for_gather(shared: &Shared, index: usize, seen: u64) -> Option<u64> {
    let word = &shared.publication.word;
    let mut spin_started = Instant::now();
    let mut spin_until = spin_started + shared.spin;
    let spun = |since: Instant| {
        let ns = u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX);
        shared.spin_ns[index].fetch_add(ns, Ordering::Relaxed);
    };
    let mut polls = 0u32;
    loop {
        let current = word.load(Ordering::Acquire);
        if current != seen {
            spun(spin_started);
            return Some(current);
        }
        if shared.shutdown.load(Ordering::Acquire) {
            return None;
        }
        polls = polls.wrapping_add(1);
        if !polls.is_multiple_of(64) || Instant::now() < spin_until {
            std::hint::spin_loop();
            continue;
        }
        spun(spin_started);
        shared.parked[index].store(true, Ordering::SeqCst);
        if word.load(Ordering::SeqCst) == seen && !shared.shutdown.load(Ordering::SeqCst) {
            // `unpark` before `park` makes `park` return at once, so no wake-up is lost.
            std::thread::park();
        }
        shared.parked[index].store(false, Ordering::SeqCst);
        spin_started = Instant::now();
        spin_until = spin_started + shared.spin;
    }
}

impl Drop for Gatherer {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        for handle in self.helpers.drain(..) {
            handle.thread().unpark();
            if handle.join().is_err() {
                tracing::error!("saggar-arena: a gather helper thread panicked outside a gather");
            }
        }
    }
}

impl std::fmt::Debug for Gatherer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gatherer").field("helpers", &self.helpers.len()).finish_non_exhaustive()
    }
}

/// Copies `src` into `dst[..src.len()]`, with non-temporal stores for the whole cache lines of
/// `dst` when `streaming` (a streaming store to part of a line costs a partial write-combining
/// flush), ordinary stores otherwise. With streaming stores, a last partial line is streamed whole
/// when `dst` reaches to its end (its bytes past `src.len()` are zeroed), so a small input leaves no
/// dirty line behind either; callers hand in as `dst` the room up to the next slot. Streaming stores
/// must be fenced ([`store_fence`]) before anything signals that the bytes are there.
///
/// A copy of [`PARALLEL_COPY_BYTES`] or more (a batch of images) is split into line-aligned chunks
/// of at least [`PARALLEL_CHUNK_BYTES`], copied at once on scoped threads (each fencing its own
/// streaming stores before it ends), the calling thread taking the first: one core's memcpy
/// bandwidth (ResNet-50's 19 MB batch of 32 took 1.4 ms into pinned staging on an H200 host) is a
/// fraction of what the memory delivers, and a thread costs tens of microseconds to start.
pub(crate) fn copy_bytes(src: &[u8], dst: &mut [u8], streaming: bool) {
    assert!(src.len() <= dst.len(), "copy_bytes needs room for the source");
    let threads = (src.len() / PARALLEL_CHUNK_BYTES).min(copy_threads());
    if src.len() >= PARALLEL_COPY_BYTES && threads > 1 {
        copy_split(src, dst, streaming, threads);
        return;
    }
    copy_serial(src, dst, streaming);
}

/// [`copy_bytes`] in `threads` line-aligned chunks at once, the calling thread taking the first.
fn copy_split(src: &[u8], dst: &mut [u8], streaming: bool, threads: usize) {
    let chunk = src.len().div_ceil(threads.max(1)).next_multiple_of(64);
    if chunk >= src.len() {
        copy_serial(src, dst, streaming);
        return;
    }
    let (first_src, rest_src) = src.split_at(chunk);
    let (first_dst, mut rest_dst) = dst.split_at_mut(chunk);
    std::thread::scope(|scope| {
        let mut pieces = rest_src.chunks(chunk).peekable();
        while let Some(piece) = pieces.next() {
            // The last piece takes the rest of `dst` (its room past the source).
            let take = if pieces.peek().is_some() { piece.len() } else { rest_dst.len() };
            let (d, rest) = std::mem::take(&mut rest_dst).split_at_mut(take);
            rest_dst = rest;
            scope.spawn(move || {
                copy_serial(piece, d, streaming);
                store_fence();
            });
        }
        copy_serial(first_src, first_dst, streaming);
    });
}

/// A copy at least this large is split across threads ([`copy_bytes`]).
pub(crate) const PARALLEL_COPY_BYTES: usize = 8 << 20;

/// The least a thread of a split copy copies.
const PARALLEL_CHUNK_BYTES: usize = 2 << 20;

/// Threads a split copy uses at most: half the machine's, at most 8.
fn copy_threads() -> usize {
    static THREADS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *THREADS.get_or_init(|| (std::thread::available_parallelism().map_or(1, |n| n.get()) / 2).clamp(1, 8))
}

/// [`copy_bytes`] on the calling thread.
fn copy_serial(src: &[u8], dst: &mut [u8], streaming: bool) {
    #[cfg(target_arch = "x86_64")]
    if streaming {
        copy_streaming(src, dst);
        return;
    }
    let _ = streaming;
    dst[..src.len()].copy_from_slice(src);
}

#[cfg(target_arch = "x86_64")]
fn copy_streaming(src: &[u8], dst: &mut [u8]) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
    let len = src.len();
    let head = dst.as_ptr().align_offset(64).min(len);
    let blocks = (len - head) / 64;
    dst[..head].copy_from_slice(&src[..head]);
    let body = head + blocks * 64;
    let stream_line = |dst: &mut [u8], at: usize, line: *const u8| {
        // SAFETY: the caller passes `at + 64 <= dst.len()` with `dst + at` 64-byte aligned (`dst +
        // head` is, and `at - head` is a multiple of 64), and `line` valid for 64 bytes of reads
        // (unaligned loads); SSE2 is part of the x86-64 baseline.
        unsafe {
            let s = line.cast::<__m128i>();
            let d = dst.as_mut_ptr().add(at).cast::<__m128i>();
            let (a, b, c, e) =
                (_mm_loadu_si128(s), _mm_loadu_si128(s.add(1)), _mm_loadu_si128(s.add(2)), _mm_loadu_si128(s.add(3)));
            _mm_stream_si128(d, a);
            _mm_stream_si128(d.add(1), b);
            _mm_stream_si128(d.add(2), c);
            _mm_stream_si128(d.add(3), e);
        }
    };
    for block in 0..blocks {
        let at = head + block * 64;
        // `at + 64 <= body <= len`: the 64 bytes of `src` at `at` exist.
        stream_line(dst, at, src[at..at + 64].as_ptr());
    }
    if body < len && body + 64 <= dst.len() && head == dst.as_ptr().align_offset(64) {
        // The last partial line, whole: the source's tail, then zeros up to the line's end.
        let mut line = [0u8; 64];
        line[..len - body].copy_from_slice(&src[body..]);
        stream_line(dst, body, line.as_ptr());
    } else {
        dst[body..len].copy_from_slice(&src[body..]);
    }
}

/// Asks the CPU to bring `data` into this core's L2 cache (a hint: no effect on results). L2, not
/// L1: the L2 tracks many more misses at once, and that is what a burst of short inputs needs.
pub(crate) fn prefetch_to_l2(data: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    for offset in (0..data.len()).step_by(64) {
        // SAFETY: a prefetch never faults, and the address is inside `data`; SSE is part of the
        // x86-64 baseline.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T1 }>(data.as_ptr().add(offset).cast())
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = data;
}

/// Orders this thread's streaming stores before its later stores (a no-op off x86-64).
pub(crate) fn store_fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `sfence` has no preconditions; SSE is part of the x86-64 baseline.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    /// Helpers that stay awake through each test (a gather that finds them all parked runs alone).
    fn options(helpers: usize) -> GatherOptions {
        GatherOptions { helpers, spin: Duration::from_millis(200), ..GatherOptions::auto() }
    }

    /// Runs a gather of `parts` parts that only counts them; returns the count.
    fn count_parts(gatherer: &Gatherer, parts: usize) -> usize {
        let ran = AtomicUsize::new(0);
        gatherer
            .run_parts(parts, &|_| {
                ran.fetch_add(1, Ordering::Relaxed);
            })
            .unwrap();
        ran.into_inner()
    }

    /// Runs a gather of `parts` (at most 4) parts and checks that each ran exactly once.
    fn assert_each_part_runs_once(gatherer: &Gatherer, parts: usize, round: usize) {
        let counts: Vec<AtomicUsize> = (0..4).map(|_| AtomicUsize::new(0)).collect();
        gatherer
            .run_parts(parts, &|p| {
                counts[p].fetch_add(1, Ordering::Relaxed);
            })
            .unwrap();
        let counts: Vec<usize> = counts.iter().map(|c| c.load(Ordering::Relaxed)).collect();
        let want: Vec<usize> = (0..4).map(|p| usize::from(p < parts)).collect();
        assert_eq!(counts, want, "round {round}");
    }

    #[test]
    fn every_part_runs_exactly_once_also_with_fewer_parts_than_helpers() {
        let gatherer = Gatherer::new(options(3)).unwrap();
        for round in 0..500 {
            assert_each_part_runs_once(&gatherer, 1 + round % 4, round);
        }
    }

    #[test]
    fn late_helpers_never_run_a_part_twice_or_a_part_of_a_finished_gather() {
        // No spin: helpers park after every gather and are woken between gathers (as a sustained
        // load would), so they keep arriving late, while the next gather is already running or after
        // it finished.
        let gatherer =
            Gatherer::new(GatherOptions { helpers: 3, spin: Duration::ZERO, ..GatherOptions::auto() }).unwrap();
        for round in 0..2000 {
            assert_each_part_runs_once(&gatherer, 2 + round % 3, round);
            if round % 2 == 0 {
                gatherer.shared.wake_requested.store(true, Ordering::Relaxed);
                gatherer.wake_parked();
            }
        }
    }

    #[test]
    fn awake_helpers_take_their_home_parts() {
        // Part p >= 1 belongs to helper p - 1: gather after gather it runs on the same core, whose
        // caches still hold its inputs. Parts sleep long enough that a helper gets a core in time to
        // claim its own even where other tests' helpers spin on every core.
        let gatherer =
            Gatherer::new(GatherOptions { helpers: 2, spin: Duration::from_secs(1), ..GatherOptions::auto() }).unwrap();
        let gathers = 10;
        let at_home: Vec<AtomicUsize> = (0..3).map(|_| AtomicUsize::new(0)).collect();
        for _ in 0..gathers {
            gatherer
                .run_parts(3, &|p| {
                    let home = if p == 0 { None } else { Some(format!("saggar-gather-{}", p - 1)) };
                    if std::thread::current().name().map(str::to_string) == home {
                        at_home[p].fetch_add(1, Ordering::Relaxed);
                    }
                    std::thread::sleep(Duration::from_millis(30));
                })
                .unwrap();
        }
        let at_home: Vec<usize> = at_home.iter().map(|c| c.load(Ordering::Relaxed)).collect();
        assert!(at_home[1] >= gathers * 3 / 4 && at_home[2] >= gathers * 3 / 4, "{at_home:?} of {gathers}");
    }

    #[test]
    fn a_gather_started_while_the_helpers_are_busy_runs_on_the_calling_thread() {
        let gatherer = Gatherer::new(options(2)).unwrap();
        let inner_threads = Mutex::new(Vec::new());
        gatherer
            .run_parts(3, &|outer| {
                let starter = std::thread::current().id();
                gatherer
                    .run_parts(3, &|_| inner_threads.lock().push((outer, starter, std::thread::current().id())))
                    .expect("the nested gather runs inline");
            })
            .unwrap();
        let inner = inner_threads.into_inner();
        assert_eq!(inner.len(), 9);
        // Each nested gather ran its three parts on the thread that started it (the outer parts run
        // at once, so their records interleave).
        for outer in 0..3 {
            let parts: Vec<_> = inner.iter().filter(|r| r.0 == outer).collect();
            assert_eq!(parts.len(), 3, "{inner:?}");
            assert!(parts.iter().all(|r| r.2 == r.1), "{inner:?}");
        }
        let stats = gatherer.stats();
        assert_eq!((stats.split, stats.parts, stats.alone_busy), (1, 3, 3), "{stats:?}");
    }

    #[test]
    fn stats_count_split_gathers_helper_parts_and_the_wait_for_helpers() {
        let gatherer = Gatherer::new(options(3)).unwrap();
        let me = std::thread::current().id();
        let (helper_parts, gathers_with_helper_parts) = (AtomicUsize::new(0), AtomicUsize::new(0));
        for _ in 0..50 {
            let before = helper_parts.load(Ordering::Relaxed);
            gatherer
                .run_parts(4, &|_| {
                    if std::thread::current().id() != me {
                        helper_parts.fetch_add(1, Ordering::Relaxed);
                        std::thread::sleep(Duration::from_micros(200));
                    }
                })
                .unwrap();
            if helper_parts.load(Ordering::Relaxed) > before {
                gathers_with_helper_parts.fetch_add(1, Ordering::Relaxed);
            }
        }
        let stats = gatherer.stats();
        assert_eq!((stats.split, stats.parts, stats.alone_busy), (50, 200, 0), "{stats:?}");
        assert_eq!(stats.parts_on_helpers, helper_parts.load(Ordering::Relaxed) as u64, "{stats:?}");
        // A helper's part sleeps 200 us and the calling thread's parts take no time, so the calling
        // thread waits for it.
        let waits = gathers_with_helper_parts.load(Ordering::Relaxed) as u64;
        assert!(stats.helper_wait_ns >= waits * 150_000, "{stats:?} ({waits} gathers with helper parts)");
        // A single part is not a split gather and is not counted.
        count_parts(&gatherer, 1);
        assert_eq!(gatherer.stats().split, 50);
    }

    #[test]
    fn a_panicking_part_is_an_error_and_the_next_gather_works() {
        let gatherer = Gatherer::new(options(2)).unwrap();
        let me = std::thread::current().id();
        // A part that panics on a helper is reported as an error.
        let mut reported = false;
        for _ in 0..200 {
            let result = gatherer.run_parts(3, &|_| {
                std::thread::sleep(Duration::from_micros(100));
                if std::thread::current().id() != me {
                    panic!("a helper's part fails");
                }
            });
            if let Err(err) = result {
                assert!(err.contains("panicked"), "{err}");
                reported = true;
                break;
            }
        }
        assert!(reported, "no part ever ran on a helper");
        assert_eq!(count_parts(&gatherer, 3), 3);
        // A part that panics on the calling thread unwinds from `run_parts` once the helpers' parts
        // are done, and the next gather works.
        let helper_parts_done = AtomicUsize::new(0);
        let unwound = std::panic::catch_unwind(AssertUnwindSafe(|| {
            gatherer.run_parts(3, &|_| {
                if std::thread::current().id() == me {
                    panic!("the caller's part fails");
                }
                std::thread::sleep(Duration::from_millis(2));
                helper_parts_done.fetch_add(1, Ordering::SeqCst);
            })
        }));
        assert!(unwound.is_err());
        let done_at_unwind = helper_parts_done.load(Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(helper_parts_done.load(Ordering::SeqCst), done_at_unwind, "a helper part outlived the gather");
        assert_eq!(count_parts(&gatherer, 3), 3);
    }

    /// The threads that ran each of `parts` parts; each part takes 2 ms, so awake helpers claim parts
    /// while the calling thread runs its first.
    fn part_threads(gatherer: &Gatherer, parts: usize) -> Vec<std::thread::ThreadId> {
        let seen = Mutex::new(vec![None; parts]);
        gatherer
            .run_parts(parts, &|p| {
                seen.lock()[p] = Some(std::thread::current().id());
                std::thread::sleep(Duration::from_millis(2));
            })
            .unwrap();
        seen.into_inner().into_iter().map(|t| t.expect("every part ran")).collect()
    }

    /// Waits until every helper of `gatherer` is parked (`parked`) or awake.
    fn wait_until_parked(gatherer: &Gatherer, parked: bool) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while gatherer.shared.parked.iter().any(|p| p.load(Ordering::SeqCst) != parked) {
            assert!(Instant::now() < deadline, "the helpers never became {}", if parked { "parked" } else { "awake" });
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn under_sparse_load_gathers_run_alone_and_parked_helpers_stay_asleep() {
        let spin = Duration::from_millis(40);
        let gatherer = Gatherer::new(GatherOptions { helpers: 2, spin, ..GatherOptions::auto() }).unwrap();
        let me = std::thread::current().id();
        // Started helpers spin for `spin`, then park; the spinning is counted.
        wait_until_parked(&gatherer, true);
        assert!(gatherer.stats().helper_spin_ns >= 2 * 30_000_000, "{:?}", gatherer.stats());
        let spun = gatherer.stats().helper_spin_ns;
        for round in 0..3 {
            // Requests further apart than the spin.
            std::thread::sleep(spin + Duration::from_millis(60));
            assert_eq!(part_threads(&gatherer, 3), vec![me; 3], "round {round}: parked helpers are not used");
            // What a fence does after the copy: nothing to wake under sparse load.
            gatherer.wake_parked();
            std::thread::sleep(Duration::from_millis(10));
            assert!(gatherer.shared.parked.iter().all(|p| p.load(Ordering::SeqCst)), "round {round}: woken");
        }
        let stats = gatherer.stats();
        assert_eq!((stats.split, stats.alone_parked, stats.woke_helpers), (0, 3, 0), "{stats:?}");
        assert_eq!(stats.helper_spin_ns, spun, "parked helpers spin no more");
    }

    #[test]
    fn under_sustained_load_parked_helpers_are_woken_and_awake_helpers_take_parts() {
        let spin = Duration::from_millis(300);
        let gatherer = Gatherer::new(GatherOptions { helpers: 2, spin, ..GatherOptions::auto() }).unwrap();
        let me = std::thread::current().id();
        for round in 0..2 {
            wait_until_parked(&gatherer, true);
            // The first gather after a pause runs alone and wakes nobody.
            assert_eq!(part_threads(&gatherer, 3), vec![me; 3], "round {round}: parked helpers are not used");
            // The next, within the spin of it, runs alone too, and asks for the helpers for the next.
            assert_eq!(part_threads(&gatherer, 3), vec![me; 3], "round {round}: parked helpers are not used");
            // Woken after the copy is enqueued, all at once.
            gatherer.wake_parked();
            wait_until_parked(&gatherer, false);
            let threads = part_threads(&gatherer, 3);
            assert!(threads.iter().any(|t| *t != me), "round {round}: awake helpers took no part: {threads:?}");
        }
        let stats = gatherer.stats();
        assert_eq!((stats.split, stats.alone_parked, stats.woke_helpers), (2, 4, 2), "{stats:?}");
        assert!(stats.parts_on_helpers >= 2, "{stats:?}");
        assert!(stats.helper_spin_ns > 0, "{stats:?}");
    }

    #[test]
    fn parked_helpers_are_woken_by_the_next_gather_when_nobody_else_wakes_them() {
        // Gathers without an upload never reach `wake_parked` through a fence: the next gather must
        // wake the helpers the previous one found parked, or every gather from then on runs alone.
        let spin = Duration::from_millis(50);
        let gatherer = Gatherer::new(GatherOptions { helpers: 2, spin, ..GatherOptions::auto() }).unwrap();
        let me = std::thread::current().id();
        std::thread::sleep(spin + Duration::from_millis(200));
        assert!(gatherer.shared.parked.iter().all(|p| p.load(Ordering::SeqCst)));
        assert_eq!(part_threads(&gatherer, 3), vec![me; 3], "parked helpers are not waited for");
        let helped = (0..20).any(|_| part_threads(&gatherer, 3).iter().any(|t| *t != me));
        assert!(helped, "the helpers stayed parked through 20 gathers");
    }

    #[test]
    fn streaming_copies_match_plain_copies_at_every_offset_and_length() {
        let src: Vec<u8> = (0..600u32).map(|i| (i * 7 % 251) as u8).collect();
        for offset in 0..20 {
            for len in [0, 1, 15, 16, 63, 64, 65, 127, 128, 300, 511] {
                let mut dst = vec![0u8; 600];
                copy_bytes(&src[offset..offset + len], &mut dst[offset + 3..offset + 3 + len], true);
                store_fence();
                assert_eq!(&dst[offset + 3..offset + 3 + len], &src[offset..offset + len], "offset {offset} len {len}");
                assert!(dst[..offset + 3].iter().all(|b| *b == 0));
                assert!(dst[offset + 3 + len..].iter().all(|b| *b == 0));
            }
        }
    }

    #[test]
    fn split_copies_match_the_source_and_leave_the_room_as_one_copy_does() {
        let src: Vec<u8> = (0..100_003u32).map(|i| (i * 13 % 251) as u8).collect();
        for (threads, streaming) in [(2, true), (3, false), (7, true), (64, false)] {
            let mut buffer = vec![0xAAu8; 100_200];
            let at = buffer.as_ptr().align_offset(64) + 5;
            let end = buffer.len();
            copy_split(&src, &mut buffer[at..end], streaming, threads);
            store_fence();
            assert_eq!(&buffer[at..at + src.len()], &src[..], "{threads} threads");
            // Streamed: the last partial line whole (zeros past the source); plain: nothing more.
            let r = buffer.as_ptr() as usize % 64;
            let line_end = (at + src.len() + r).next_multiple_of(64) - r;
            let tail = &buffer[at + src.len()..];
            let zeros = if streaming { line_end.saturating_sub(at + src.len()).min(tail.len()) } else { 0 };
            assert!(tail[..zeros].iter().all(|b| *b == 0) && tail[zeros..].iter().all(|b| *b == 0xAA));
            assert!(buffer[..at].iter().all(|b| *b == 0xAA));
        }
    }

    #[test]
    fn a_streamed_last_partial_line_is_written_whole_only_into_room_the_caller_gave() {
        let src: Vec<u8> = (1..=40u8).collect();
        let mut buffer = vec![0xAAu8; 256];
        let at = buffer.as_ptr().align_offset(64);
        // Room for the whole line: the source, then zeros to the line's end; nothing past it.
        copy_bytes(&src, &mut buffer[at..at + 128], true);
        store_fence();
        assert_eq!(&buffer[at..at + 40], &src[..]);
        assert!(buffer[at + 40..at + 64].iter().all(|b| *b == 0));
        assert!(buffer[at + 64..].iter().all(|b| *b == 0xAA) && buffer[..at].iter().all(|b| *b == 0xAA));
        // Room short of the line's end: plain stores of the source alone.
        buffer.fill(0xAA);
        copy_bytes(&src, &mut buffer[at..at + 50], true);
        assert_eq!(&buffer[at..at + 40], &src[..]);
        assert!(buffer[at + 40..].iter().all(|b| *b == 0xAA));
        // Plain stores never write past the source.
        buffer.fill(0xAA);
        copy_bytes(&src, &mut buffer[at..at + 128], false);
        assert!(buffer[at + 40..].iter().all(|b| *b == 0xAA));
    }

    #[test]
    fn parts_follow_the_layout_thresholds() {
        let o =
            GatherOptions { helpers: 3, parallel_min_bytes: 1000, parallel_min_inputs: 10, ..GatherOptions::auto() };
        assert_eq!(o.parts_for(5, 999), 1);
        assert_eq!(o.parts_for(5, 1000), 4);
        assert_eq!(o.parts_for(10, 0), 4);
        assert_eq!(o.parts_for(2, 5000), 2);
        assert_eq!(GatherOptions::INLINE.parts_for(1000, usize::MAX - 1), 1);
    }
}
