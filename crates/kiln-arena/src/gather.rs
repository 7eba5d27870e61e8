//! The host side of a gather, split across helper threads, and the stores it writes with.
//!
//! A gather of 190 inputs done by one thread costs a check and a copy per input, and takes longer
//! than the single DMA copy it feeds, so coalescing would save launches but not time. A [`Gatherer`]
//! runs the parts of a gather at once: helper threads take one part each (a contiguous range of
//! inputs, balanced by bytes) while the calling thread takes the last, and the call returns when
//! every part is done. Layouts with few small inputs stay on the calling thread: waking helpers
//! costs more than they save.
//!
//! Helpers spin for [`GatherOptions::spin`] after each gather (so back-to-back requests find them
//! awake; a wake then costs well under a microsecond), then park (a parked helper costs nothing and
//! takes microseconds to wake). A gather that finds a helper parked runs its parts on the calling
//! thread, and the helpers are woken once its copy is enqueued, for the gathers that follow; a gather that finds the helpers busy with another arena's gather
//! also runs its parts itself rather than wait.
//!
//! Staging memory is written with streaming (non-temporal) stores by default: bytes that sit dirty
//! in a core's cache must be snooped out line by line by the GPU's DMA read, which on an H200 host
//! made the copy of a freshly gathered buffer about twice as slow as the copy of one filled long ago.

use std::cell::UnsafeCell;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// How the host side of a gather is spread over threads, and how it stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GatherOptions {
    /// Helper threads (shared by every pool of the process with the same options) that each take a
    /// part of a large gather; 0 keeps every gather on the calling thread.
    pub helpers: usize,
    /// A layout whose input span has at least this many bytes is gathered in parts.
    pub parallel_min_bytes: usize,
    /// A layout with at least this many inputs is gathered in parts (the per-input checks add up).
    pub parallel_min_inputs: usize,
    /// How long an idle helper spins for the next gather before it parks.
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
    pub(crate) fn streaming_for(self, kind: kiln_device::BackendKind) -> bool {
        match self {
            StagingStores::Auto => kind != kiln_device::BackendKind::Host,
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
    /// (longer than a request that gathers alone takes, so a burst keeps them awake; under sparse
    /// traffic that is up to 250 us of CPU per helper and request: lower it, or set `helpers` to 0,
    /// where CPU matters more than latency); stores chosen by the backend ([`StagingStores::Auto`]).
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

/// A part's work, borrowed for the duration of one [`Gatherer::run_parts`] call.
type Task = dyn Fn(usize) + Sync;

/// What the calling thread and the helpers share. One call of `run_parts` at a time uses it (the
/// gatherer's `busy` lock).
struct Shared {
    /// Bumped once per parallel gather; a helper waits for it to move past the last one it did.
    epoch: AtomicU64,
    /// The current gather's task, valid while `remaining` is above zero.
    task: UnsafeCell<Option<*const Task>>,
    /// Parts of the current gather; helper `h` runs part `h` when `h + 1 < parts`.
    parts: AtomicUsize,
    /// Helpers still running their part of the current gather.
    remaining: AtomicUsize,
    /// A helper's part panicked.
    panicked: AtomicBool,
    /// Per helper: parked, so the caller must unpark it.
    parked: Box<[AtomicBool]>,
    shutdown: AtomicBool,
    spin: Duration,
    /// A gather found helpers parked and ran alone; [`Gatherer::wake_parked`] wakes them.
    wake_requested: AtomicBool,
}

// SAFETY: `task` is written only by the thread holding the gatherer's `busy` lock, before it bumps
// `epoch` (Release/SeqCst), and read by helpers only after they observe that bump (Acquire) and
// before they decrement `remaining`; the writer does not write it again until `remaining` is zero.
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
            epoch: AtomicU64::new(0),
            task: UnsafeCell::new(None),
            parts: AtomicUsize::new(0),
            remaining: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            parked: (0..n).map(|_| AtomicBool::new(false)).collect(),
            shutdown: AtomicBool::new(false),
            spin: options.spin,
            wake_requested: AtomicBool::new(false),
        });
        let mut gatherer = Gatherer { shared: shared.clone(), helpers: Vec::with_capacity(n), busy: Mutex::new(()) };
        for index in 0..n {
            let shared = shared.clone();
            let handle = std::thread::Builder::new()
                .name(format!("kiln-gather-{index}"))
                .spawn(move || helper(&shared, index))?;
            // On a spawn error, `gatherer`'s drop stops the helpers started so far.
            gatherer.helpers.push(handle);
        }
        Ok(gatherer)
    }

    /// Runs `task(p)` for every part `p` in `0..parts` (at most helpers + 1): the last part on the
    /// calling thread, the others on helpers at the same time, or every part on the calling thread,
    /// in order, when the helpers are busy with another gather. Returns when every part is done;
    /// fails only if a part panicked on a helper.
    pub(crate) fn run_parts(&self, parts: usize, task: &(dyn Fn(usize) + Sync + '_)) -> Result<(), String> {
        let helpers = parts.saturating_sub(1);
        let guard = if helpers > 0 && helpers <= self.helpers.len() { self.busy.try_lock() } else { None };
        let Some(_busy) = guard else {
            (0..parts).for_each(task);
            return Ok(());
        };
        let shared = &*self.shared;
        // Parked helpers (no gather for longer than the spin) take microseconds each to wake, more
        // than their parts are worth: run every part here, and leave the wake-up (a system call) to
        // `wake_parked`, which the arena calls once the copy is enqueued, off the critical path.
        if shared.parked[..helpers].iter().any(|p| p.load(Ordering::SeqCst)) {
            shared.wake_requested.store(true, Ordering::Relaxed);
            (0..parts).for_each(task);
            return Ok(());
        }
        // SAFETY: this thread holds `busy`, and the previous gather's helpers are done with the cell
        // (its caller waited for `remaining` to reach zero). Erasing the borrow's lifetime is sound
        // because `Wait` below keeps this call from returning, or unwinding, until every helper has
        // finished with the task.
        unsafe {
            *shared.task.get() = Some(std::mem::transmute::<
                *const (dyn Fn(usize) + Sync + '_),
                *const (dyn Fn(usize) + Sync + 'static),
            >(task))
        };
        shared.parts.store(parts, Ordering::Relaxed);
        shared.remaining.store(helpers, Ordering::Relaxed);
        // Publishes the task; SeqCst pairs with a helper's "parked, then re-check the epoch", so a
        // helper either sees this gather or is unparked below.
        shared.epoch.fetch_add(1, Ordering::SeqCst);
        for (flag, handle) in shared.parked.iter().zip(&self.helpers).take(helpers) {
            if flag.load(Ordering::SeqCst) {
                handle.thread().unpark();
            }
        }
        let wait = Wait(shared);
        task(parts - 1);
        drop(wait);
        if shared.panicked.swap(false, Ordering::Relaxed) {
            return Err("a gather helper thread panicked".into());
        }
        Ok(())
    }
}

impl Gatherer {
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

/// Waits, also while unwinding, until every helper has finished its part.
struct Wait<'a>(&'a Shared);

impl Drop for Wait<'_> {
    fn drop(&mut self) {
        let mut spins = 0u32;
        while self.0.remaining.load(Ordering::Acquire) != 0 {
            spins += 1;
            if spins < 4096 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }
}

fn helper(shared: &Shared, index: usize) {
    let mut done_epoch = 0u64;
    while let Some(epoch) = wait_for_gather(shared, index, done_epoch) {
        done_epoch = epoch;
        if index + 1 >= shared.parts.load(Ordering::Relaxed) {
            continue;
        }
        // SAFETY: the caller of `run_parts` stored the task before bumping the epoch (acquired by
        // `wait_for_gather`) and keeps it alive until `remaining` reaches zero, which happens only
        // after the decrement below.
        let task = unsafe { (*shared.task.get()).expect("a gather publishes its task") };
        // SAFETY: as above: the pointer is valid until this part is done.
        let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| unsafe { (*task)(index) }));
        if outcome.is_err() {
            shared.panicked.store(true, Ordering::Relaxed);
        }
        shared.remaining.fetch_sub(1, Ordering::Release);
    }
}

/// Waits until the epoch moves past `done`; `None` on shutdown. Spins for `shared.spin`, then parks.
fn wait_for_gather(shared: &Shared, index: usize, done: u64) -> Option<u64> {
    let mut spin_until = Instant::now() + shared.spin;
    let mut polls = 0u32;
    loop {
        let epoch = shared.epoch.load(Ordering::Acquire);
        if epoch != done {
            return Some(epoch);
        }
        if shared.shutdown.load(Ordering::Acquire) {
            return None;
        }
        polls = polls.wrapping_add(1);
        if !polls.is_multiple_of(64) || Instant::now() < spin_until {
            std::hint::spin_loop();
            continue;
        }
        shared.parked[index].store(true, Ordering::SeqCst);
        if shared.epoch.load(Ordering::SeqCst) == done && !shared.shutdown.load(Ordering::SeqCst) {
            // `unpark` before `park` makes `park` return at once, so no wake-up is lost.
            std::thread::park();
        }
        shared.parked[index].store(false, Ordering::SeqCst);
        spin_until = Instant::now() + shared.spin;
    }
}

impl Drop for Gatherer {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        for handle in self.helpers.drain(..) {
            handle.thread().unpark();
            if handle.join().is_err() {
                tracing::error!("kiln-arena: a gather helper thread panicked outside a gather");
            }
        }
    }
}

impl std::fmt::Debug for Gatherer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gatherer").field("helpers", &self.helpers.len()).finish_non_exhaustive()
    }
}

/// Copies `src` into `dst` (same length), with non-temporal stores for the 64-byte blocks of `dst`
/// that are 16-byte aligned when `streaming`, ordinary stores otherwise. Streaming stores must be
/// fenced ([`store_fence`]) before anything signals that the bytes are there.
pub(crate) fn copy_bytes(src: &[u8], dst: &mut [u8], streaming: bool) {
    #[cfg(target_arch = "x86_64")]
    if streaming {
        copy_streaming(src, dst);
        return;
    }
    let _ = streaming;
    dst.copy_from_slice(src);
}

#[cfg(target_arch = "x86_64")]
fn copy_streaming(src: &[u8], dst: &mut [u8]) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
    assert_eq!(src.len(), dst.len(), "copy_bytes needs equal lengths");
    let len = src.len();
    let head = dst.as_ptr().align_offset(16).min(len);
    let blocks = (len - head) / 64;
    dst[..head].copy_from_slice(&src[..head]);
    let body = head + blocks * 64;
    for block in 0..blocks {
        let at = head + block * 64;
        // SAFETY: `at + 64 <= body <= len`, so the four 16-byte loads stay inside `src` (unaligned
        // loads) and the four stores inside `dst`, at 16-byte aligned addresses (`dst + head` is
        // aligned and `at - head` is a multiple of 64). SSE2 is part of the x86-64 baseline.
        unsafe {
            let s = src.as_ptr().add(at).cast::<__m128i>();
            let d = dst.as_mut_ptr().add(at).cast::<__m128i>();
            let (a, b, c, e) =
                (_mm_loadu_si128(s), _mm_loadu_si128(s.add(1)), _mm_loadu_si128(s.add(2)), _mm_loadu_si128(s.add(3)));
            _mm_stream_si128(d, a);
            _mm_stream_si128(d.add(1), b);
            _mm_stream_si128(d.add(2), c);
            _mm_stream_si128(d.add(3), e);
        }
    }
    dst[body..].copy_from_slice(&src[body..]);
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
    use super::*;

    fn options(helpers: usize) -> GatherOptions {
        GatherOptions { helpers, spin: Duration::from_micros(10), ..GatherOptions::auto() }
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

    #[test]
    fn every_part_runs_exactly_once_also_with_fewer_parts_than_helpers() {
        let gatherer = Gatherer::new(options(3)).unwrap();
        for round in 0..500 {
            let parts = 1 + round % 4;
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
    }

    #[test]
    fn a_gather_started_while_the_helpers_are_busy_runs_on_the_calling_thread() {
        let gatherer = Gatherer::new(options(2)).unwrap();
        let inner_threads = Mutex::new(Vec::new());
        gatherer
            .run_parts(3, &|_| {
                gatherer
                    .run_parts(3, &|_| inner_threads.lock().push(std::thread::current().id()))
                    .expect("the nested gather runs inline");
            })
            .unwrap();
        let inner = inner_threads.into_inner();
        assert_eq!(inner.len(), 9);
        // Each nested gather ran its three parts on the thread that started it.
        for chunk in inner.chunks(3) {
            assert!(chunk.iter().all(|t| *t == chunk[0]));
        }
    }

    #[test]
    fn a_panicking_part_is_an_error_and_the_next_gather_works() {
        let gatherer = Gatherer::new(options(2)).unwrap();
        let err = gatherer
            .run_parts(3, &|p| {
                if p == 0 {
                    panic!("part 0 fails");
                }
            })
            .unwrap_err();
        assert!(err.contains("panicked"), "{err}");
        assert_eq!(count_parts(&gatherer, 3), 3);
    }

    /// The threads that ran each of `parts` parts.
    fn part_threads(gatherer: &Gatherer, parts: usize) -> Vec<std::thread::ThreadId> {
        let seen = Mutex::new(vec![None; parts]);
        gatherer.run_parts(parts, &|p| seen.lock()[p] = Some(std::thread::current().id())).unwrap();
        seen.into_inner().into_iter().map(|t| t.expect("every part ran")).collect()
    }

    #[test]
    fn a_gather_that_finds_helpers_parked_runs_alone_and_wakes_them_for_the_next() {
        let spin = Duration::from_millis(300);
        let gatherer = Gatherer::new(GatherOptions { helpers: 2, spin, ..GatherOptions::auto() }).unwrap();
        let me = std::thread::current().id();
        for round in 0..3 {
            // Longer than the spin: both helpers park.
            std::thread::sleep(spin + Duration::from_millis(200));
            assert!(gatherer.shared.parked.iter().all(|p| p.load(Ordering::SeqCst)), "round {round}");
            assert_eq!(part_threads(&gatherer, 3), vec![me; 3], "round {round}: parked helpers are not waited for");
            // Woken after the copy is enqueued, all at once.
            gatherer.wake_parked();
            let deadline = Instant::now() + Duration::from_secs(5);
            while gatherer.shared.parked.iter().any(|p| p.load(Ordering::SeqCst)) {
                assert!(Instant::now() < deadline, "round {round}: the helpers were not woken");
                std::thread::sleep(Duration::from_millis(1));
            }
            let threads = part_threads(&gatherer, 3);
            assert!(threads[0] != me && threads[1] != me && threads[0] != threads[1], "round {round}: {threads:?}");
            assert_eq!(threads[2], me);
        }
        drop(gatherer);
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
