//! Live re-bucketing: a background thread per session that, every interval of requests, fits new
//! buckets to the requests since the last fit (the adaptive policy, per axis), compiles the grid
//! cells it lacks through the compile cache off the hot path, and swaps the bucket table
//! atomically. Requests read the table once and keep what they read; program indices never
//! change meaning (`slab.rs`), so a request planned on the old table runs correctly while the new
//! one is published. Graphs of programs the new table no longer routes to are dropped at the swap
//! in every idle context, and by a context busy at that moment on its next run
//! (`Inner::retire_graphs`); either way their measured memory leaves the session's graph budget.

use std::sync::{Arc, Weak};
use std::time::Duration;

use saggar_shape::{BatchHistogram, BucketPolicy};

use crate::buckets::{BucketTable, Grid, Live, cell_spec};
use crate::compiler::ProgramCompiler;
use crate::error::{DispatchError, Result};
use crate::plan::Model;
use crate::programs::{self, Threads};
use crate::session::Inner;
use crate::stats::Stats;
use saggar_device::{Backend, Device};

/// How long the refit thread sleeps between checks when nobody wakes it (requests wake it when an
/// interval completes; the timeout only bounds how long it outlives its session).
const IDLE_CHECK: Duration = Duration::from_millis(50);

/// Starts the refit thread of a session with live buckets (nothing otherwise). The thread holds
/// the session weakly and ends once the session is dropped.
pub(crate) fn spawn<B: Backend, C: ProgramCompiler<B>>(inner: &Arc<Inner<B, C>>) -> Result<()> {
    let Model::Bucketed(grid) = &inner.model else { return Ok(()) };
    let Some(live) = &grid.live else { return Ok(()) };
    let weak = Arc::downgrade(inner);
    let handle = std::thread::Builder::new()
        .name("saggar-refit".into())
        .spawn(move || refit_loop(weak))
        .map_err(|e| DispatchError::Config(format!("cannot start the live re-bucketing thread: {e}")))?;
    let _ = live.refitter.set(handle.thread().clone());
    Ok(())
}

fn refit_loop<B: Backend, C: ProgramCompiler<B>>(weak: Weak<Inner<B, C>>) {
    loop {
        std::thread::park_timeout(IDLE_CHECK);
        let Some(inner) = weak.upgrade() else { return };
        let Model::Bucketed(grid) = &inner.model else { return };
        let Some(live) = &grid.live else { return };
        if live.due()
            && let Err(e) = inner.refit()
        {
            tracing::warn!(error = %e, "saggar-dispatch: live re-bucketing kept the current buckets");
            Stats::bump(&inner.stats.refit_failures);
        }
    }
}

impl<B: Backend, C: ProgramCompiler<B>> Inner<B, C> {
    /// Fits buckets to the requests since the last fit and, when they differ from the current
    /// ones, compiles the missing cells and swaps the table. Returns whether it swapped.
    pub(crate) fn refit(&self) -> Result<bool> {
        let Model::Bucketed(grid) = &self.model else { return Ok(false) };
        let Some(live) = &grid.live else { return Ok(false) };
        let (batch_window, axis_window) = live.take_window();
        let swapped = self.fit_window(grid, live, &batch_window, &axis_window);
        // Counted once the window's fit is over (swapped, kept or failed).
        Stats::bump(&self.stats.refit_windows);
        swapped
    }

    fn fit_window(
        &self,
        grid: &Grid,
        live: &Live,
        batch_window: &BatchHistogram,
        axis_window: &BatchHistogram,
    ) -> Result<bool> {
        if batch_window.total() == 0 {
            return Ok(false);
        }
        let current = grid.table.load_full();
        let batch = BucketPolicy::adaptive(batch_window, live.config.budget)?;
        let axis = match &current.axis {
            Some(_) if axis_window.total() > 0 => Some(BucketPolicy::adaptive(axis_window, live.config.budget)?),
            other => other.clone(),
        };
        let same_axis = axis.as_ref().map(BucketPolicy::buckets) == current.axis.as_ref().map(BucketPolicy::buckets);
        if batch.buckets() == current.batch.buckets() && same_axis {
            return Ok(false);
        }

        // One refit at a time (the thread is the only caller; the lock makes it a rule).
        let mut known = live.cells.lock();
        let cells = BucketTable::cells(&batch, axis.as_ref());
        let missing: Vec<(u64, Option<u64>)> = cells.iter().filter(|c| !known.contains_key(c)).copied().collect();
        if missing.len() > self.main.remaining() {
            return Err(DispatchError::Config(format!(
                "live re-bucketing needs {} more programs but the table has room for {}: raise \
                 LiveBuckets::with_max_programs",
                missing.len(),
                self.main.remaining()
            )));
        }
        let inputs = &self.compiler.model().inputs;
        let batch_symbol = self.signature.batch_layout().symbol();
        let axis_symbol = grid.axis.as_ref().map(|a| &*a.symbol);
        let specs: Vec<_> = missing.iter().map(|&cell| cell_spec(inputs, batch_symbol, axis_symbol, cell)).collect();
        let entries = {
            let _pin = self.device.pin()?;
            let cache = self.config.cache.as_deref();
            // The same path as session creation: a compiler's capabilities (parallel compiles, one
            // artifact per model) apply to the cells live re-bucketing adds.
            let threads = Threads { load: self.config.load_threads, compile: self.config.compile_threads };
            programs::precompile(&*self.compiler, &self.device, cache, &specs, threads, &self.stats, &|_| {})?
        };

        // Every new program must fit the arena and scratch the contexts were created with.
        let (ins, outs) = (live.layout.inputs(), live.layout.outputs());
        let span = |slots: &[saggar_arena::Slot], bytes: &[usize]| {
            slots.iter().zip(bytes).map(|(s, b)| s.offset + b).max().unwrap_or(0)
        };
        for (cell, e) in missing.iter().zip(&entries) {
            let fits = e.input_bytes.iter().zip(ins).all(|(b, s)| *b <= s.capacity)
                && e.output_bytes.iter().zip(outs).all(|(b, s)| *b <= s.capacity)
                && e.scratch_bytes <= live.scratch_bytes;
            if !fits {
                return Err(DispatchError::Config(format!(
                    "the program of bucket {cell:?} needs more arena or scratch memory than the largest bucket's"
                )));
            }
        }
        for (cell, e) in missing.into_iter().zip(entries) {
            let (up, down) = (span(ins, &e.input_bytes), span(outs, &e.output_bytes));
            // Only this (locked) refit pushes, so the three tables stay index-aligned.
            let k = self.upload_span.push(up).expect("room checked above");
            self.download_span.push(down).expect("room checked above");
            self.main.push(e).expect("room checked above");
            known.insert(cell, k);
        }
        let programs: Vec<usize> = cells.iter().map(|c| known[c]).collect();
        let ids = programs.iter().map(|&k| self.main[k].id).collect();
        let table = Arc::new(BucketTable::new(batch, axis, programs, ids, current.epoch + 1));
        grid.table.store(table.clone());
        // Idle contexts' graphs of retired programs go now, so their memory returns to the session's
        // graph budget; a context running at this moment drops its own on its next run.
        let retired = self.graph_memory.retain_programs(|id| table.routes(id));
        Stats::add(&self.stats.retired_graphs, retired as u64);
        Stats::bump(&self.stats.refits);
        Ok(true)
    }
}
