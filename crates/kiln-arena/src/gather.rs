//! The host side of a gather, split across helper threads.
//!
//! A gather of 190 KiB done by one thread is a memcpy-bound loop that takes longer than the single
//! DMA copy it feeds, so coalescing would save launches but not time. [`Gatherer`] splits a large
//! gather into byte-balanced parts: helper threads copy one part each while the calling thread
//! copies the last, and the call returns when every part is done. Small gathers stay on the calling
//! thread: waking helpers costs more than they save.
//!
//! Helpers spin for [`GatherOptions::spin`] after each gather (so back-to-back requests find them
//! awake, a wake costing well under a microsecond), then park (a parked helper costs nothing and
//! takes a few microseconds to wake). A gather that finds the helpers busy with another arena's
//! gather does its copies alone rather than wait.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kiln_shape::{PadPlan, ShapeError, pad_rows_into};
use parking_lot::Mutex;

/// How the host side of a gather is spread over threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GatherOptions {
    /// Helper threads (per arena pool) that copy a share of large gathers; 0 keeps every gather on
    /// the calling thread.
    pub helpers: usize,
    /// Gathers of fewer bytes than this stay on the calling thread.
    pub parallel_min_bytes: usize,
    /// How long an idle helper spins for the next gather before it parks.
    pub spin: Duration,
    /// Write the staging buffer with non-temporal (streaming) stores where the CPU has them (x86-64),
    /// so the bytes go to memory instead of sitting dirty in this core's cache, where the GPU's DMA
    /// read of them would have to snoop them out line by line.
    pub streaming_stores: bool,
}

impl GatherOptions {
    /// Every gather on the calling thread; no helper threads.
    pub const INLINE: GatherOptions =
        GatherOptions { helpers: 0, parallel_min_bytes: usize::MAX, spin: Duration::ZERO, streaming_stores: true };

    /// One helper per two hardware threads beyond the first two, at most three (none on a machine
    /// with fewer than four: the driver's and the application's threads need those cores), gathers
    /// of 64 KiB and more split, helpers spinning 50 us after each gather, streaming stores.
    pub fn auto() -> GatherOptions {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        GatherOptions {
            helpers: (threads / 2).saturating_sub(1).min(3),
            parallel_min_bytes: 64 * 1024,
            spin: DEFAULT_SPIN,
            streaming_stores: true,
        }
    }
}

const DEFAULT_SPIN: Duration = Duration::from_micros(50);

impl Default for GatherOptions {
    fn default() -> GatherOptions {
        GatherOptions::auto()
    }
}

/// One validated copy into the staging buffer: plain, or padded per a plan.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CopyJob {
    src: *const u8,
    src_len: usize,
    dst: *mut u8,
    dst_len: usize,
    /// `None`: copy `dst_len` bytes. `Some`: `src` is the request's whole tensor and the plan picks
    /// its rows and pads them into `dst`.
    pad: Option<PadPlan>,
}

// SAFETY: a job's pointers are only dereferenced by `Gatherer::run`, which the arena calls while the
// borrows they were made from (the request's inputs, the arena's staging buffer) are live, and which
// returns only after every thread has finished with them.
unsafe impl Send for CopyJob {}
// SAFETY: as above; a job is never written through a shared reference.
unsafe impl Sync for CopyJob {}

impl CopyJob {
    /// Plain copies longer than this are cut into pieces of this size, so one large input spreads
    /// over every thread.
    pub(crate) const PIECE_BYTES: usize = 32 * 1024;

    /// Appends the jobs that move `src` into `dst` (`plan.dst_len()` bytes) per `plan`: pieces of a
    /// plain copy when the plan pads nothing, one padding job otherwise. The caller has checked that
    /// `src` holds the plan's rows and `dst` its padded length.
    pub(crate) fn push(jobs: &mut Vec<CopyJob>, src: &[u8], dst: *mut u8, plan: &PadPlan) {
        let range = plan.src_range();
        let dst_len = plan.dst_len();
        if range.len() != dst_len {
            jobs.push(CopyJob { src: src.as_ptr(), src_len: src.len(), dst, dst_len, pad: Some(*plan) });
            return;
        }
        let src = &src[range];
        let mut done = 0;
        while done < dst_len {
            let len = Self::PIECE_BYTES.min(dst_len - done);
            // `dst` is valid for `dst_len` bytes (the caller's check), so `dst + done` stays inside it.
            jobs.push(CopyJob {
                src: src[done..].as_ptr(),
                src_len: len,
                dst: dst.wrapping_add(done),
                dst_len: len,
                pad: None,
            });
            done += len;
        }
    }

    /// # Safety
    /// `src` must be valid for reads of `src_len` bytes and `dst` for writes of `dst_len` bytes for
    /// the whole call, `dst` must not overlap `src`, and nothing else may access `dst` meanwhile.
    unsafe fn run(&self, streaming: bool) -> Result<(), ShapeError> {
        // SAFETY: per this function's contract.
        let (src, dst) = unsafe {
            (std::slice::from_raw_parts(self.src, self.src_len), std::slice::from_raw_parts_mut(self.dst, self.dst_len))
        };
        match &self.pad {
            None if streaming => {
                copy_streaming(src, dst);
                Ok(())
            }
            None => {
                dst.copy_from_slice(src);
                Ok(())
            }
            Some(plan) => pad_rows_into(src, dst, plan),
        }
    }
}

/// What the calling thread and the helpers share. One gather at a time uses it (`busy`).
struct Shared {
    /// Bumped once per parallel gather; a helper waits for it to move past the last one it did.
    epoch: AtomicU64,
    jobs: AtomicPtr<CopyJob>,
    /// Part `p` is `jobs[bounds[p]..bounds[p + 1]]`; helper `h` does part `h`, the caller the last.
    bounds: Box<[AtomicUsize]>,
    /// Helpers still copying their part of the current gather.
    remaining: AtomicUsize,
    /// A helper's job failed (a plan that validation should have refused) or panicked.
    failure: Mutex<Option<String>>,
    /// Per helper: parked, so the caller must unpark it.
    parked: Box<[AtomicBool]>,
    shutdown: AtomicBool,
    spin: Duration,
    streaming_stores: bool,
}

/// Copies gathers' jobs, alone or with helper threads. One per arena pool.
pub(crate) struct Gatherer {
    shared: Arc<Shared>,
    helpers: Vec<JoinHandle<()>>,
    parallel_min_bytes: usize,
    streaming_stores: bool,
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

    /// Starts `options.helpers` helper threads.
    fn new(options: GatherOptions) -> std::io::Result<Gatherer> {
        let n = options.helpers;
        let shared = Arc::new(Shared {
            epoch: AtomicU64::new(0),
            jobs: AtomicPtr::new(std::ptr::null_mut()),
            bounds: (0..n + 2).map(|_| AtomicUsize::new(0)).collect(),
            remaining: AtomicUsize::new(0),
            failure: Mutex::new(None),
            parked: (0..n).map(|_| AtomicBool::new(false)).collect(),
            shutdown: AtomicBool::new(false),
            spin: options.spin,
            streaming_stores: options.streaming_stores,
        });
        let mut gatherer = Gatherer {
            shared: shared.clone(),
            helpers: Vec::with_capacity(n),
            parallel_min_bytes: options.parallel_min_bytes,
            streaming_stores: options.streaming_stores,
            busy: Mutex::new(()),
        };
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

    /// Runs every job, split across the helpers when the gather is large enough and they are free.
    /// Returns after every job is done.
    ///
    /// # Safety
    /// Every job must satisfy [`CopyJob::run`]'s contract for the whole call, and no two jobs may
    /// write overlapping bytes.
    pub(crate) unsafe fn run(&self, jobs: &[CopyJob]) -> Result<(), String> {
        let total: usize = jobs.iter().map(|j| j.dst_len).sum();
        let helpers = self.helpers.len();
        let busy = if helpers > 0 && total >= self.parallel_min_bytes { self.busy.try_lock() } else { None };
        let Some(_busy) = busy else {
            // SAFETY: per this function's contract.
            return unsafe { run_all(jobs, self.streaming_stores) };
        };
        let shared = &*self.shared;
        // Byte-balanced parts: part p starts at the first job that begins at or after p/parts of the bytes.
        let parts = helpers + 1;
        let mut part = 1;
        let mut before = 0usize;
        shared.bounds[0].store(0, Ordering::Relaxed);
        for (index, job) in jobs.iter().enumerate() {
            while part < parts && before >= total / parts * part {
                shared.bounds[part].store(index, Ordering::Relaxed);
                part += 1;
            }
            before += job.dst_len;
        }
        for bound in &shared.bounds[part..] {
            bound.store(jobs.len(), Ordering::Relaxed);
        }
        shared.jobs.store(jobs.as_ptr().cast_mut(), Ordering::Relaxed);
        shared.remaining.store(helpers, Ordering::Relaxed);
        // Publishes the jobs and bounds; SeqCst pairs with a helper's "parked, then re-check the
        // epoch" so a helper either sees this gather or is unparked below.
        shared.epoch.fetch_add(1, Ordering::SeqCst);
        for (flag, handle) in shared.parked.iter().zip(&self.helpers) {
            if flag.load(Ordering::SeqCst) {
                handle.thread().unpark();
            }
        }
        let mine = shared.bounds[helpers].load(Ordering::Relaxed)..jobs.len();
        // SAFETY: per this function's contract; the helpers' parts are disjoint from this one.
        let own = unsafe { run_all(&jobs[mine], self.streaming_stores) };
        let mut spins = 0u32;
        while shared.remaining.load(Ordering::Acquire) != 0 {
            spins += 1;
            if spins < 4096 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        own?;
        match shared.failure.lock().take() {
            Some(reason) => Err(reason),
            None => Ok(()),
        }
    }
}

/// Runs `jobs` in order on this thread; stops at the first failure. Streaming stores are fenced
/// before it returns, so whoever this thread signals next (the caller, the DMA engine) sees them.
///
/// # Safety
/// As [`Gatherer::run`].
unsafe fn run_all(jobs: &[CopyJob], streaming: bool) -> Result<(), String> {
    let mut result = Ok(());
    for job in jobs {
        // SAFETY: per this function's contract.
        if let Err(e) = unsafe { job.run(streaming) } {
            result = Err(e.to_string());
            break;
        }
    }
    if streaming {
        store_fence();
    }
    result
}

/// Copies `src` into `dst` (same length) with non-temporal stores for the 64-byte blocks of `dst`
/// that are 16-byte aligned, ordinary copies for the rest.
#[cfg(target_arch = "x86_64")]
fn copy_streaming(src: &[u8], dst: &mut [u8]) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
    debug_assert_eq!(src.len(), dst.len());
    let len = src.len().min(dst.len());
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
    dst[body..len].copy_from_slice(&src[body..len]);
}

#[cfg(not(target_arch = "x86_64"))]
fn copy_streaming(src: &[u8], dst: &mut [u8]) {
    dst.copy_from_slice(src);
}

/// Orders this thread's streaming stores before its later stores.
fn store_fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `sfence` has no preconditions; SSE is part of the x86-64 baseline.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
}

fn helper(shared: &Shared, index: usize) {
    let mut done_epoch = 0u64;
    while let Some(epoch) = wait_for_gather(shared, index, done_epoch) {
        done_epoch = epoch;
        let start = shared.bounds[index].load(Ordering::Relaxed);
        let end = shared.bounds[index + 1].load(Ordering::Relaxed);
        let jobs = shared.jobs.load(Ordering::Relaxed);
        let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| {
            // SAFETY: the caller of `Gatherer::run` published `jobs` and these bounds before bumping
            // the epoch (acquired by `wait_for_gather`), and keeps the jobs and everything they point
            // to alive until `remaining` reaches zero, which happens only after this part is done.
            unsafe { run_all(std::slice::from_raw_parts(jobs.add(start), end - start), shared.streaming_stores) }
        }));
        let failure = match outcome {
            Ok(Ok(())) => None,
            Ok(Err(reason)) => Some(reason),
            Err(_) => Some(format!("gather helper {index} panicked")),
        };
        if let Some(reason) = failure {
            shared.failure.lock().get_or_insert(reason);
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
        if polls % 64 != 0 || Instant::now() < spin_until {
            std::hint::spin_loop();
            continue;
        }
        shared.parked[index].store(true, Ordering::SeqCst);
        if shared.epoch.load(Ordering::SeqCst) == done && !shared.shutdown.load(Ordering::SeqCst) {
            // `unpark` before `park` makes `park` return at once, so no wake-up is lost.
            std::thread::park();
        }
        shared.parked[index].store(false, Ordering::Relaxed);
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
        f.debug_struct("Gatherer")
            .field("helpers", &self.helpers.len())
            .field("parallel_min_bytes", &self.parallel_min_bytes)
            .finish()
    }
}
