//! Code loading kept apart from stream capture. CUDA loads a kernel's code at its first launch by
//! default (lazy module loading), and loading may synchronize the context, which the driver refuses
//! while a stream of the context is capturing, on any thread: the launching call fails (cuBLASLt
//! reports `CUBLAS_STATUS_EXECUTION_FAILED`) or the capture is invalidated. Sessions load programs
//! on some threads while capturing graphs on others, so loading a module, resolving its functions
//! (where lazy loading loads them) and a BLAS library's first launch of a kernel must not overlap
//! any capture. [`LoadGate`] is that rule: a capture holds it shared from begin to end, code loading
//! ([`LoadGate::load`], through `device::loading_code`) holds it alone, and a waiting load keeps new
//! captures from starting so a stream of captures cannot starve it.

use std::time::Duration;

use parking_lot::{Condvar, Mutex};

/// How long either side waits for the other before going ahead anyway: a capture left open by a
/// caller (never ended, stream never dropped) must not stop every later load for good.
const MAX_WAIT: Duration = Duration::from_secs(10);

#[derive(Debug, Default)]
struct State {
    /// Captures begun and not yet ended.
    captures: usize,
    /// Whether a load is running.
    loading: bool,
    /// Loads waiting for the captures to end.
    waiting: usize,
}

/// Captures (shared) against first launches of library code (exclusive), process-wide per backend.
#[derive(Debug, Default)]
pub(crate) struct LoadGate {
    state: Mutex<State>,
    changed: Condvar,
}

impl LoadGate {
    pub(crate) const fn new() -> LoadGate {
        LoadGate { state: Mutex::new(State { captures: 0, loading: false, waiting: 0 }), changed: Condvar::new() }
    }

    /// A capture is about to begin: waits while a load runs or waits (at most [`MAX_WAIT`]).
    pub(crate) fn capture_begins(&self) {
        let mut state = self.state.lock();
        let deadline = std::time::Instant::now() + MAX_WAIT;
        while (state.loading || state.waiting > 0) && !self.changed.wait_until(&mut state, deadline).timed_out() {}
        state.captures += 1;
    }

    /// A capture begun with [`LoadGate::capture_begins`] has ended (or failed to begin).
    pub(crate) fn capture_ends(&self) {
        let mut state = self.state.lock();
        state.captures = state.captures.saturating_sub(1);
        drop(state);
        self.changed.notify_all();
    }

    /// A capture the driver kept going after saggar had counted it ended: counted again, without
    /// waiting (it is already running).
    pub(crate) fn capture_resumes(&self) {
        self.state.lock().captures += 1;
    }

    /// Runs `load` (work that may launch library code for the first time) when no capture is active
    /// and no other load runs, waiting at most [`MAX_WAIT`] for the captures. The caller must not be
    /// capturing itself (it would wait for its own capture).
    pub(crate) fn load<T>(&self, load: impl FnOnce() -> T) -> T {
        let mut state = self.state.lock();
        state.waiting += 1;
        let deadline = std::time::Instant::now() + MAX_WAIT;
        while (state.loading || state.captures > 0) && !self.changed.wait_until(&mut state, deadline).timed_out() {}
        state.waiting -= 1;
        state.loading = true;
        drop(state);
        /// Lets the gate go even if `load` panics.
        struct Done<'a>(&'a LoadGate);
        impl Drop for Done<'_> {
            fn drop(&mut self) {
                self.0.state.lock().loading = false;
                self.0.changed.notify_all();
            }
        }
        let _done = Done(self);
        load()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    use super::*;

    /// A load never runs while a capture is open, and a capture never begins while a load runs: the
    /// overlap the driver refuses. Eight threads alternate captures and loads; each side checks the
    /// other is absent for its whole span.
    #[test]
    fn loads_and_captures_never_overlap() {
        let gate = Arc::new(LoadGate::new());
        let capturing = Arc::new(AtomicUsize::new(0));
        let loading = Arc::new(AtomicBool::new(false));
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let (gate, capturing, loading) = (gate.clone(), capturing.clone(), loading.clone());
                std::thread::spawn(move || {
                    for i in 0..200 {
                        if (t + i) % 3 == 0 {
                            gate.load(|| {
                                assert!(!loading.swap(true, Ordering::SeqCst), "two loads at once");
                                assert_eq!(capturing.load(Ordering::SeqCst), 0, "a load during a capture");
                                std::thread::yield_now();
                                loading.store(false, Ordering::SeqCst);
                            });
                        } else {
                            gate.capture_begins();
                            capturing.fetch_add(1, Ordering::SeqCst);
                            assert!(!loading.load(Ordering::SeqCst), "a capture during a load");
                            std::thread::yield_now();
                            capturing.fetch_sub(1, Ordering::SeqCst);
                            gate.capture_ends();
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let state = gate.state.lock();
        assert_eq!((state.captures, state.loading, state.waiting), (0, false, 0));
    }

    /// A load that panics lets the gate go: a later capture begins at once.
    #[test]
    fn a_panicking_load_releases_the_gate() {
        let gate = LoadGate::new();
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| gate.load(|| panic!("load failed"))));
        assert!(caught.is_err());
        let started = std::time::Instant::now();
        gate.capture_begins();
        assert!(started.elapsed() < MAX_WAIT / 2, "the capture waited for a load that had ended");
        gate.capture_ends();
    }
}
