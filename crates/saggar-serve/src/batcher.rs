//! Dynamic batching: one bounded queue per model, and executor threads that take batches from it.
//!
//! A thread takes the oldest request, then every queued request with the same merge key (the same
//! extents besides the batch, a padded axis's extent counted by its bucket) while the rows fit
//! the model's largest batch, waiting for more until the first request has waited
//! `max_queue_delay` or the batch reaches a preferred size or the largest. The batch is handed to
//! the model's runner (merge, one session run, split; `merge.rs`), and each request's reply is
//! sent. Threads of every device take from the same queue, so a model's instances across GPUs
//! share its load. A full queue refuses a request at once; a closed queue refuses new requests
//! and its threads finish every request already queued before they exit.

use std::collections::VecDeque;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use saggar_dispatch::OwnedTensor;
use tokio::sync::oneshot;

use crate::error::{Result, ServeError};
use crate::tensor::InputTensor;

/// How a model's requests are batched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// The largest merged batch in rows; 0 runs every request alone.
    pub max_batch: u64,
    /// How long the first request of a batch may wait for others.
    pub max_queue_delay: Duration,
    /// Sizes at which a batch stops growing.
    pub preferred: Vec<u64>,
    /// The sessions' batch buckets, ascending. Without preferred sizes, a batch that would spill a
    /// few rows (at most an eighth) past a bucket leaves them at the head of the queue for the next
    /// batch when padding to the next bucket would waste more than a quarter of the batch (with
    /// powers of two, a run up to twice as long). Close buckets (`stepped`) pad instead: a row left
    /// behind waits a whole batch more, which is what a latency tail is made of.
    pub buckets: Vec<u64>,
    /// Most requests waiting in the queue.
    pub max_queue: usize,
}

/// What a request's run produced, with its timings.
#[derive(Debug)]
pub struct Done {
    /// The outputs the request asked for, in the order asked: its rows.
    pub outputs: Vec<OwnedTensor>,
    /// Time from submission to the start of its batch's run.
    pub queue: Duration,
    /// Time of its batch's run (merge, session run, split).
    pub compute: Duration,
}

/// A request waiting in the queue.
#[derive(Debug)]
pub struct Job {
    /// Its inputs, in the model's input order.
    pub inputs: Vec<InputTensor>,
    /// The outputs it asked for, by index in the model's order, in the order asked.
    pub outputs: Vec<usize>,
    /// Its rows on the batch axis (1 for a model without batching).
    pub rows: u64,
    /// Requests merge only with requests of the same key.
    pub key: u64,
    /// When it was queued.
    pub enqueued: Instant,
    /// Where its result goes.
    pub reply: oneshot::Sender<Result<Done>>,
}

/// Runs one batch of jobs, returning each job's outputs in order (or the error of the whole batch).
pub type Runner = dyn Fn(usize, &[Job]) -> Result<Vec<Vec<OwnedTensor>>> + Send + Sync;

struct Queue {
    jobs: VecDeque<Job>,
    closed: bool,
    /// Why new jobs are refused once `closed` (an unload, a shutdown, or every device lost).
    closed_because: &'static str,
    /// Devices lost (a batch on them failed with [`ServeError::DeviceLost`]): their threads stop.
    lost: Vec<usize>,
    /// Executor threads running.
    live: usize,
}

struct Shared {
    queue: Mutex<Queue>,
    ready: Condvar,
    policy: Policy,
}

/// A model's queue and its executor threads.
pub struct Batcher {
    shared: Arc<Shared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for Batcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batcher").field("policy", &self.shared.policy).finish_non_exhaustive()
    }
}

impl Batcher {
    /// Starts `threads` executor threads per device in `devices`, named after `model`, each
    /// running batches with `runner` on its device.
    pub fn start(model: &str, policy: Policy, devices: usize, threads: usize, runner: Arc<Runner>) -> Batcher {
        let batcher = Batcher::new(policy);
        batcher.spawn(model, devices, threads, runner);
        batcher
    }

    /// A queue without threads yet ([`Batcher::spawn`] adds them).
    pub fn new(policy: Policy) -> Batcher {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue {
                jobs: VecDeque::new(),
                closed: false,
                closed_because: UNLOADING,
                lost: Vec::new(),
                live: 0,
            }),
            ready: Condvar::new(),
            policy,
        });
        Batcher { shared, threads: Mutex::new(Vec::new()) }
    }

    /// Adds `threads` executor threads per device in `devices`.
    pub fn spawn(&self, model: &str, devices: usize, threads: usize, runner: Arc<Runner>) {
        let mut handles = self.threads.lock();
        self.shared.queue.lock().live += devices.max(1) * threads.max(1);
        for i in 0..devices.max(1) * threads.max(1) {
            let (shared, runner) = (self.shared.clone(), runner.clone());
            let device = i % devices.max(1);
            let handle = std::thread::Builder::new()
                .name(format!("serve-{model}-{i}"))
                .spawn(move || executor_loop(&shared, device, &*runner))
                .expect("spawn an executor thread");
            handles.push(handle);
        }
    }

    /// Queues a job; refuses it at once when the queue is full or closed.
    pub fn submit(&self, job: Job) -> Result<()> {
        let mut q = self.shared.queue.lock();
        if q.closed {
            return Err(ServeError::Unavailable(q.closed_because.into()));
        }
        if q.jobs.len() >= self.shared.policy.max_queue {
            return Err(ServeError::Unavailable(format!(
                "the model's queue is full ({} requests waiting; --max-queue)",
                q.jobs.len()
            )));
        }
        q.jobs.push_back(job);
        drop(q);
        self.shared.ready.notify_one();
        Ok(())
    }

    /// Requests waiting now.
    pub fn queued(&self) -> usize {
        self.shared.queue.lock().jobs.len()
    }

    /// Whether every device is lost (the queue closed for that reason).
    pub fn out_of_devices(&self) -> bool {
        let q = self.shared.queue.lock();
        q.closed && q.closed_because == ALL_LOST
    }

    /// Refuses new jobs; the threads finish the queued ones and exit.
    pub fn close(&self) {
        self.shared.queue.lock().closed = true;
        self.shared.ready.notify_all();
    }

    /// Closes the queue and waits for the threads to finish every queued job.
    pub fn close_and_join(&self) {
        self.close();
        let handles = std::mem::take(&mut *self.threads.lock());
        for h in handles {
            let _ = h.join();
        }
    }
}

impl Drop for Batcher {
    fn drop(&mut self) {
        self.close_and_join();
    }
}

const UNLOADING: &str = "the model is being unloaded or the server is shutting down";
const ALL_LOST: &str = "every device of the model is lost (see the server log); restart the server, leaving out the \
                        failed devices (--devices or instance_group gpus)";

fn executor_loop(shared: &Shared, device: usize, runner: &Runner) {
    while let Some(batch) = next_batch(shared, device) {
        let started = Instant::now();
        let result = runner(device, &batch);
        let compute = started.elapsed();
        match result {
            Ok(outputs) => {
                for (job, outputs) in batch.into_iter().zip(outputs) {
                    let queue = started.saturating_duration_since(job.enqueued);
                    let _ = job.reply.send(Ok(Done { outputs, queue, compute }));
                }
            }
            Err(e) => {
                if matches!(e, ServeError::DeviceLost(_)) {
                    lose(shared, device);
                }
                for job in batch {
                    let _ = job.reply.send(Err(e.clone()));
                }
            }
        }
    }
    retire(shared);
}

/// Marks `device` lost: its threads take no more batches (they wake up to stop).
fn lose(shared: &Shared, device: usize) {
    let mut q = shared.queue.lock();
    if !q.lost.contains(&device) {
        q.lost.push(device);
        tracing::error!(device, "device lost: its executor threads stop; the model's other devices keep serving");
    }
    drop(q);
    shared.ready.notify_all();
}

/// One executor thread stops. When the last one stops while the queue is open (every device lost),
/// the queue closes and every waiting job is answered: none waits for a thread that will not come.
fn retire(shared: &Shared) {
    let mut q = shared.queue.lock();
    q.live -= 1;
    if q.live > 0 || q.jobs.is_empty() && q.closed {
        return;
    }
    if !q.closed {
        q.closed = true;
        q.closed_because = ALL_LOST;
    }
    let reason = q.closed_because;
    for job in q.jobs.drain(..) {
        let _ = job.reply.send(Err(ServeError::Unavailable(reason.into())));
    }
}

/// The next batch for a thread of `device`, or `None` once the queue is closed and empty or the
/// device is lost.
fn next_batch(shared: &Shared, device: usize) -> Option<Vec<Job>> {
    let policy = &shared.policy;
    let mut q = shared.queue.lock();
    loop {
        if q.lost.contains(&device) || q.closed && q.jobs.is_empty() {
            return None;
        }
        if !q.jobs.is_empty() {
            break;
        }
        shared.ready.wait(&mut q);
    }
    let first = q.jobs.pop_front().expect("not empty");
    let (key, deadline) = (first.key, first.enqueued + policy.max_queue_delay);
    let mut rows = first.rows;
    let mut batch = vec![first];
    if policy.max_batch == 0 {
        return Some(batch);
    }
    let done = |rows: u64| rows >= policy.max_batch || policy.preferred.contains(&rows);
    loop {
        let mut i = 0;
        while i < q.jobs.len() && !done(rows) {
            let job = &q.jobs[i];
            if job.key == key && rows + job.rows <= policy.max_batch {
                rows += job.rows;
                batch.push(q.jobs.remove(i).expect("in range"));
            } else {
                i += 1;
            }
        }
        if done(rows) || q.closed || Instant::now() >= deadline {
            break;
        }
        shared.ready.wait_until(&mut q, deadline);
    }
    if policy.preferred.is_empty() {
        trim_to_bucket(&mut batch, rows, &policy.buckets, &mut q.jobs);
    }
    // Another thread may be waiting for what this one left in the queue.
    if !q.jobs.is_empty() {
        shared.ready.notify_one();
    }
    Some(batch)
}

/// Gives the last jobs of `batch` (of `rows` rows) back to the head of `queue` when they spill at
/// most an eighth of the largest bucket at or below `rows` past it and the next bucket would pad
/// the batch by more than a quarter of its rows (see [`Policy::buckets`]).
fn trim_to_bucket(batch: &mut Vec<Job>, mut rows: u64, buckets: &[u64], queue: &mut VecDeque<Job>) {
    let Some(&bucket) = buckets.iter().rev().find(|&&b| b <= rows) else { return };
    if rows == bucket || (rows - bucket) * 8 > bucket {
        return;
    }
    // Past the largest bucket a batch runs unpadded (or is split by the session): nothing to save.
    let Some(&next) = buckets.iter().find(|&&b| b >= rows) else { return };
    if (next - rows) * 4 <= rows {
        return;
    }
    let mut back = Vec::new();
    while rows > bucket && batch.len() > 1 {
        let job = batch.pop().expect("more than one");
        rows -= job.rows;
        back.push(job);
    }
    // `back` holds the spilled jobs last first: pushing each to the front restores their order.
    for job in back {
        queue.push_front(job);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(rows: u64, key: u64) -> (Job, oneshot::Receiver<Result<Done>>) {
        let (tx, rx) = oneshot::channel();
        (Job { inputs: Vec::new(), outputs: Vec::new(), rows, key, enqueued: Instant::now(), reply: tx }, rx)
    }

    fn policy(max_batch: u64, delay_ms: u64) -> Policy {
        Policy {
            max_batch,
            max_queue_delay: Duration::from_millis(delay_ms),
            preferred: Vec::new(),
            buckets: Vec::new(),
            max_queue: 100,
        }
    }

    /// The rows of each batch a runner ran.
    type Log = Arc<Mutex<Vec<Vec<u64>>>>;

    /// A runner that records the rows of each batch it ran.
    fn recorder() -> (Arc<Runner>, Log) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let runner: Arc<Runner> = Arc::new(move |_, jobs: &[Job]| {
            log.lock().push(jobs.iter().map(|j| j.rows).collect());
            Ok(jobs.iter().map(|_| Vec::new()).collect())
        });
        (runner, seen)
    }

    #[test]
    fn queued_jobs_of_one_key_merge_up_to_the_largest_batch() {
        let (runner, seen) = recorder();
        // Queue everything before the thread starts: one thread, a long delay.
        let b = Batcher::new(policy(8, 50));
        let mut rx = Vec::new();
        for (rows, key) in [(3, 1), (2, 2), (4, 1), (2, 1), (1, 2)] {
            let (j, r) = job(rows, key);
            b.submit(j).unwrap();
            rx.push(r);
        }
        b.spawn("t", 1, 1, runner);
        b.close_and_join();
        for r in rx {
            assert!(r.blocking_recv().unwrap().is_ok());
        }
        let seen = seen.lock().clone();
        assert_eq!(seen.iter().flatten().sum::<u64>(), 12);
        assert!(seen.iter().all(|b| b.iter().sum::<u64>() <= 8), "{seen:?}");
        assert!(seen.len() < 5, "some requests merged: {seen:?}");
    }

    #[test]
    fn a_full_or_closed_queue_refuses_at_once() {
        let (runner, _) = recorder();
        let b = Batcher::start("t", Policy { max_queue: 1, ..policy(4, 0) }, 1, 1, runner);
        b.close();
        let (j, _r) = job(1, 0);
        assert!(matches!(b.submit(j), Err(ServeError::Unavailable(_))));
        let blocked: Arc<Runner> = Arc::new(|_, jobs: &[Job]| {
            std::thread::sleep(Duration::from_millis(200));
            Ok(jobs.iter().map(|_| Vec::new()).collect())
        });
        let b = Batcher::start("t", Policy { max_queue: 1, ..policy(0, 0) }, 1, 1, blocked);
        let mut accepted = 0;
        let mut refused = 0;
        let mut keep = Vec::new();
        for _ in 0..4 {
            let (j, r) = job(1, 0);
            keep.push(r);
            match b.submit(j) {
                Ok(()) => accepted += 1,
                Err(ServeError::Unavailable(m)) => {
                    assert!(m.contains("full"));
                    refused += 1
                }
                Err(e) => panic!("{e}"),
            }
        }
        assert!(refused >= 2 && accepted >= 1, "{accepted} accepted, {refused} refused");
    }

    /// The rows of each batch one thread runs for `jobs` single-row requests queued before it
    /// starts, under `policy`.
    fn batches_of(policy: Policy, jobs: usize) -> Vec<Vec<u64>> {
        let (runner, seen) = recorder();
        let b = Batcher::new(policy);
        let rx: Vec<_> = (0..jobs)
            .map(|_| {
                let (j, r) = job(1, 0);
                b.submit(j).unwrap();
                r
            })
            .collect();
        b.spawn("t", 1, 1, runner);
        b.close_and_join();
        for r in rx {
            assert!(r.blocking_recv().unwrap().is_ok());
        }
        seen.lock().clone()
    }

    #[test]
    fn a_preferred_size_ends_a_batch() {
        assert_eq!(batches_of(Policy { preferred: vec![2], ..policy(8, 50) }, 4), vec![vec![1, 1], vec![1, 1]]);
    }

    #[test]
    fn a_batch_spilling_a_few_rows_past_a_bucket_leaves_them_for_the_next() {
        let buckets = vec![1, 2, 4, 8, 16];
        // 9 rows: one past the 8 bucket (an eighth of it), so 8 run now and 1 next.
        let spilled = batches_of(Policy { buckets: buckets.clone(), ..policy(16, 50) }, 9);
        assert_eq!(spilled, vec![vec![1; 8], vec![1]]);
        // 11 rows spill three past 8, more than an eighth: one batch, padded to 16.
        assert_eq!(batches_of(Policy { buckets, ..policy(16, 50) }, 11), vec![vec![1; 11]]);
    }

    #[test]
    fn close_buckets_pad_a_few_spilled_rows_rather_than_leave_them_behind() {
        let stepped = vec![1, 2, 4, 8, 16, 24, 32, 40];
        // 36 rows, four past 32: padding to 40 wastes 4 rows (under a quarter), so one batch.
        assert_eq!(batches_of(Policy { buckets: stepped.clone(), ..policy(40, 50) }, 36), vec![vec![1; 36]]);
        // 17 rows, one past 16: padding to 24 would waste 7 rows, more than a quarter of 17.
        assert_eq!(batches_of(Policy { buckets: stepped, ..policy(40, 50) }, 17), vec![vec![1; 16], vec![1]]);
        // With powers of two, 36 rows would pad to 64: four are left for the next batch.
        let pow2 = vec![1, 2, 4, 8, 16, 32, 64];
        assert_eq!(batches_of(Policy { buckets: pow2, ..policy(64, 50) }, 36), vec![vec![1; 32], vec![1; 4]]);
    }

    /// A runner whose device `lost` fails every batch with a lost device; the others serve.
    fn losing(lost: usize) -> (Arc<Runner>, Arc<Mutex<Vec<usize>>>) {
        let ran = Arc::new(Mutex::new(Vec::new()));
        let log = ran.clone();
        let runner: Arc<Runner> = Arc::new(move |device, jobs: &[Job]| {
            log.lock().push(device);
            if device == lost {
                return Err(ServeError::DeviceLost(format!("device {device} is lost")));
            }
            Ok(jobs.iter().map(|_| Vec::new()).collect())
        });
        (runner, ran)
    }

    #[test]
    fn a_lost_device_fails_one_batch_and_the_other_devices_serve_the_rest() {
        let (losing, ran) = losing(1);
        // Device 0 finishes a batch only once device 1 has failed one, so however the threads are
        // scheduled, device 1's threads take a batch while device 0's two hold theirs.
        let failed = Arc::new((Mutex::new(false), Condvar::new()));
        let seen = failed.clone();
        let runner: Arc<Runner> = Arc::new(move |device, jobs: &[Job]| {
            let result = losing(device, jobs);
            let (flag, changed) = &*seen;
            let mut failed = flag.lock();
            if device == 1 {
                *failed = true;
                changed.notify_all();
            } else if !*failed {
                changed.wait_for(&mut failed, Duration::from_secs(10));
            }
            result
        });
        // Two devices, two threads each: each of device 1's threads fails at most the batch it held.
        let b = Batcher::start("t", policy(0, 0), 2, 2, runner);
        let replies: Vec<_> = (0..40)
            .map(|_| {
                let (j, r) = job(1, 0);
                b.submit(j).unwrap();
                r
            })
            .collect();
        let (mut ok, mut lost) = (0, 0);
        for r in replies {
            match r.blocking_recv().unwrap() {
                Ok(_) => ok += 1,
                Err(ServeError::DeviceLost(_)) => lost += 1,
                Err(e) => panic!("{e}"),
            }
        }
        assert!((1..=2).contains(&lost) && ok + lost == 40, "{ok} served, {lost} lost");
        let ran = ran.lock().clone();
        let last_on_1 = ran.iter().rposition(|&d| d == 1).unwrap();
        assert!(ran.len() - last_on_1 > 30, "device 1 took no batch after its loss: {ran:?}");
        assert!(!b.out_of_devices());
    }

    #[test]
    fn when_every_device_is_lost_waiting_and_new_jobs_are_refused() {
        let (runner, _) = losing(0);
        let b = Batcher::new(policy(0, 0));
        let rx: Vec<_> = (0..5)
            .map(|_| {
                let (j, r) = job(1, 0);
                b.submit(j).unwrap();
                r
            })
            .collect();
        b.spawn("t", 1, 1, runner);
        let answers: Vec<_> = rx.into_iter().map(|r| r.blocking_recv().unwrap()).collect();
        assert!(matches!(answers[0], Err(ServeError::DeviceLost(_))));
        for a in &answers[1..] {
            assert!(matches!(a, Err(ServeError::Unavailable(m)) if m.contains("every device")), "{a:?}");
        }
        assert!(b.out_of_devices());
        let (j, _r) = job(1, 0);
        assert!(matches!(b.submit(j), Err(ServeError::Unavailable(m)) if m.contains("every device")));
    }
}
