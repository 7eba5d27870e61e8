//! Choosing a plan's algorithm: the heuristic's first choice, or (when
//! [`Blas::prepare`](crate::blas::Blas::prepare) tunes a problem in the timed range) the fastest of
//! its candidates, timed once per process on scratch operands; and launching the chosen kernels once
//! outside any capture, so no capture loads library code.

use std::collections::{HashMap, HashSet};
use std::ffi::c_void;
use std::sync::LazyLock;

use parking_lot::Mutex;

use super::Shared;
use super::library::{Handle, check};
use super::plan::Plan;
use crate::api::{Device as _, DeviceBuffer as _, Event as _, Stream as _};
use crate::blas::{MatmulDesc, MatmulType, TUNE_MAX_FLOP, TUNE_MIN_FLOP};
use crate::error::Result;
use crate::gpu::Device;
use crate::gpu::device;
use crate::gpu::driver::Driver;

/// Room for either library's heuristic result (cuBLASLt: 96 bytes; hipBLASLt: 56), 8-byte aligned.
pub(super) type HeuristicResult = [u64; 16];

/// Most candidates asked of the heuristic when tuning.
pub(super) const MAX_TUNE_CANDIDATES: usize = 16;

/// Timed runs of each candidate (after one untimed run).
const TUNE_RUNS: u32 = 3;

/// What a tuned choice depends on: the library, the device, the workspace, the description and
/// the alignment it was planned for.
type TunedKey = (&'static str, usize, usize, MatmulDesc, u32);

/// The heuristic result kept for each tuned problem, process-wide: run contexts and sessions have
/// their own handles, and a problem is timed once per process.
static TUNED: LazyLock<Mutex<HashMap<TunedKey, HeuristicResult>>> = LazyLock::new(|| Mutex::new(HashMap::new()));

/// What decides which kernels of the library a plan launches: the library, the device, the
/// description, the operand alignment and the algorithm (its configuration words). The size is part
/// of it: the libraries launch other kernel instances (and reductions) for other sizes with the same
/// configuration.
type KernelKey = (&'static str, usize, MatmulDesc, u32, [u64; 8]);

/// The kernels [`Blas::prepare`](crate::blas::Blas::prepare) has launched once in this process
/// (through [`LoadGate`]), so a launch during a capture never loads code.
static LOADED_KERNELS: LazyLock<Mutex<HashSet<KernelKey>>> = LazyLock::new(|| Mutex::new(HashSet::new()));

/// Held by the one thread timing candidates, process-wide: sessions load their buckets on several
/// threads, and candidates timed side by side would measure each other's kernels.
static TIMING: Mutex<()> = Mutex::new(());

/// Floating-point operations of one call of `desc`.
fn flop(desc: &MatmulDesc) -> u64 {
    2u64.saturating_mul(desc.m).saturating_mul(desc.n).saturating_mul(desc.k).saturating_mul(desc.batch.max(1))
}

/// The most workspace the heuristic may plan for below [`TUNE_MIN_FLOP`]: with more offered, its
/// choices for problems this small ran slower (the BERT test model at batch 1 on an H100, GEMMs of
/// 1 to 4 MFLOP: 180 us a request with 32 MiB, 146 us with 4 MiB), where larger problems at a few
/// hundred rows need it for their split-K kernels (BERT-base at batch 1: 1.95 ms against 2.89 ms).
const SMALL_PROBLEM_WORKSPACE: usize = 4 << 20;

/// The workspace the heuristic is offered for `desc` by a handle with `workspace` bytes.
pub(super) fn preferred_workspace(desc: &MatmulDesc, workspace: usize) -> usize {
    if flop(desc) < TUNE_MIN_FLOP { workspace.min(SMALL_PROBLEM_WORKSPACE) } else { workspace }
}

/// Elements a strided-batched operand of `rows x cols` spans.
fn span(desc: &MatmulDesc, rows: u64, cols: u64, stride: u64) -> u64 {
    (desc.batch.max(1) - 1).saturating_mul(stride).saturating_add(rows.saturating_mul(cols))
}

impl<D: Driver> Shared<D> {
    /// Sets `plan.algo` for `desc` under the preference `pref`: the heuristic's first choice, or,
    /// when `prepare` ([`Blas::prepare`](crate::blas::Blas::prepare)) and the problem is in the
    /// timed range, the fastest of up to [`crate::BlasConfig::tune_candidates`] candidates, timed
    /// once per process ([`TUNED`]). With `prepare`, the chosen kernels are then launched once
    /// ([`Shared::load_kernels`]).
    pub(super) fn choose_algorithm(
        &self,
        plan: &mut Plan,
        desc: &MatmulDesc,
        align: u32,
        prepare: bool,
        pref: Handle,
    ) -> Result<()> {
        let size = D::BLAS_LT.heuristic_result_bytes;
        let key: TunedKey = (D::BLAS_LT.library, self.device.ordinal(), self.workspace_bytes, *desc, align);
        let tune = prepare && self.tune_candidates > 1 && (TUNE_MIN_FLOP..=TUNE_MAX_FLOP).contains(&flop(desc));
        // Taken before looking the problem up, so a problem another thread is timing is timed once.
        let _timing = tune.then(|| TIMING.lock());
        if tune && let Some(found) = TUNED.lock().get(&key) {
            *plan.algo = *found;
            return Ok(());
        }
        let wanted = if tune { self.tune_candidates } else { 1 };
        let (results, count) = self.heuristic(plan, desc, pref, wanted)?;
        // A candidate that cannot be timed leaves the heuristic's first choice. Timing launches
        // every candidate, so it loads their code: kept apart from captures.
        let chosen = if count > 1 {
            device::loading_code::<D, _>(|| self.run_candidates(plan, desc, &results, count, TUNE_RUNS)).unwrap_or(0)
        } else {
            0
        };
        // Results are a multiple of 8 bytes long, so each starts on a word of `results`.
        let mut algo: HeuristicResult = [0; 16];
        let words = size.div_ceil(8);
        algo[..words].copy_from_slice(&results[chosen * size / 8..][..words]);
        *plan.algo = algo;
        if tune {
            TUNED.lock().insert(key, algo);
        }
        if prepare {
            self.load_kernels(plan, desc, align, count > 1);
        }
        Ok(())
    }

    /// Launches `plan`'s algorithm once, outside any capture ([`LoadGate`]), unless this process
    /// has launched the same kernels before (`ran`: tuning just launched it): the library loads a
    /// kernel's code at its first launch, which must not happen while a capture is open. A launch
    /// that fails leaves the kernels unmarked, to be tried by the next plan that needs them.
    fn load_kernels(&self, plan: &Plan, desc: &MatmulDesc, align: u32, ran: bool) {
        let words = D::BLAS_LT.algo_bytes / 8;
        let mut algo = [0u64; 8];
        algo[..words].copy_from_slice(&plan.algo[..words]);
        let key: KernelKey = (D::BLAS_LT.library, self.device.ordinal(), *desc, align, algo);
        {
            let mut loaded = LOADED_KERNELS.lock();
            if ran {
                loaded.insert(key);
            }
            if loaded.contains(&key) {
                return;
            }
        }
        let launched = device::loading_code::<D, _>(|| self.run_candidates(plan, desc, &plan.algo[..], 1, 0));
        if launched.is_ok() {
            LOADED_KERNELS.lock().insert(key);
        }
    }

    /// Runs each of the first `count` heuristic results in `results` (each
    /// [`LtSpec::heuristic_result_bytes`] long, a multiple of 8) for `plan` once untimed, then
    /// `timed_runs` times between two events, on a private stream, on zeroed scratch operands of
    /// `desc`'s sizes and a workspace of this handle's size, all freed afterwards; returns the
    /// index of the fastest (0 when none is timed). A candidate the library refuses is skipped.
    fn run_candidates(
        &self,
        plan: &Plan,
        desc: &MatmulDesc,
        results: &[u64],
        count: usize,
        timed_runs: u32,
    ) -> Result<usize> {
        let op = "blas.tune";
        device::forbid_during_capture::<D>(op)?;
        let device = Device { shared: self.device.clone() };
        let bytes = |elements: u64, ty: MatmulType| {
            usize::try_from(elements.saturating_mul(ty.bytes() as u64).max(4)).unwrap_or(usize::MAX)
        };
        let (rows_a, cols_a) = if desc.trans_a { (desc.k, desc.m) } else { (desc.m, desc.k) };
        let (rows_b, cols_b) = if desc.trans_b { (desc.n, desc.k) } else { (desc.k, desc.n) };
        // Zeroed bytes are zeros in every element type.
        let a = device.alloc(bytes(span(desc, rows_a, cols_a, desc.stride_a), desc.inputs))?;
        let b = device.alloc(bytes(span(desc, rows_b, cols_b, desc.stride_b), desc.inputs))?;
        let c = device.alloc(bytes(span(desc, desc.m, desc.n, desc.stride_c), desc.output))?;
        let bias = device.alloc(bytes(desc.n, desc.output))?;
        let workspace = device.alloc(self.workspace_bytes.max(4))?;
        let stream = device.create_stream()?;
        for buffer in [&a, &b, &c, &bias] {
            stream.memset(buffer.as_slice(), 0)?;
        }
        if desc.bias {
            let ptr = bias.as_slice().ptr().0 as *const c_void;
            // SAFETY: the descriptor is live and not shared yet (the plan is being made).
            unsafe { self.set(op, self.api.desc_set, plan.desc, D::BLAS_LT.desc_attrs[3], &ptr)? };
        }
        let [la, lb, lc] = plan.layouts;
        let size = D::BLAS_LT.heuristic_result_bytes;
        let run = |index: usize| -> Result<()> {
            let algo = results[index * size / 8..].as_ptr();
            stream.enqueue_library(op, |raw| {
                // SAFETY: every handle is live; the scratch operands are live allocations of the
                // sizes `desc` spans, kept until this function returns (after the last synchronize);
                // the algorithm is one the heuristic returned for this descriptor and layouts.
                check::<D>(op, unsafe {
                    (self.api.matmul)(
                        self.handle,
                        plan.desc,
                        (&plan.alpha as *const u32).cast(),
                        b.as_slice().ptr().0 as *const c_void,
                        la,
                        a.as_slice().ptr().0 as *const c_void,
                        lb,
                        (&plan.beta as *const u32).cast(),
                        c.as_slice().ptr().0 as *const c_void,
                        lc,
                        c.as_slice().ptr().0 as *mut c_void,
                        lc,
                        algo.cast(),
                        workspace.as_slice().ptr().0 as *mut c_void,
                        self.workspace_bytes,
                        D::blas_stream(raw),
                    )
                })
            })
        };
        let (start, end) = (device.create_event()?, device.create_event()?);
        let mut best: Option<(std::time::Duration, usize)> = None;
        for index in 0..count {
            let untimed = run(index);
            if timed_runs == 0 {
                untimed?;
                continue;
            }
            if untimed.is_err() {
                continue;
            }
            stream.record(&start)?;
            let timed = (0..timed_runs).try_for_each(|_| run(index));
            stream.record(&end)?;
            end.synchronize()?;
            if timed.is_err() {
                continue;
            }
            let took = end.elapsed_since(&start)?;
            if best.is_none_or(|(t, _)| took < t) {
                best = Some((took, index));
            }
        }
        stream.synchronize()?;
        Ok(best.map_or(0, |(_, index)| index))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_problems_are_offered_at_most_4_mib_of_workspace() {
        let small = MatmulDesc::gemm(128, 256, 64);
        let large = MatmulDesc::gemm(128, 768, 768);
        assert_eq!(preferred_workspace(&small, 32 << 20), 4 << 20);
        assert_eq!(preferred_workspace(&small, 1 << 20), 1 << 20, "never more than the handle has");
        assert_eq!(preferred_workspace(&large, 32 << 20), 32 << 20);
    }

    #[test]
    fn flop_and_spans_of_a_strided_batch() {
        let desc = MatmulDesc { batch: 3, stride_a: 100, ..MatmulDesc::gemm(4, 5, 6) };
        assert_eq!(flop(&desc), 2 * 4 * 5 * 6 * 3);
        assert_eq!(span(&desc, 4, 6, desc.stride_a), 2 * 100 + 24);
        assert_eq!(span(&MatmulDesc::gemm(4, 5, 6), 4, 6, 0), 24);
    }

    #[test]
    fn a_conformance_case_is_in_the_timed_range() {
        let timed = crate::conformance_blas::cases()
            .iter()
            .filter(|(_, desc)| (TUNE_MIN_FLOP..=TUNE_MAX_FLOP).contains(&flop(desc)))
            .count();
        assert!(timed >= 1, "the GPU conformance run must exercise timed candidates");
    }

    /// Tuning copies results out of a `u64` buffer by words and keeps one in a [`HeuristicResult`].
    fn result_size_fits<D: Driver>() {
        let size = D::BLAS_LT.heuristic_result_bytes;
        assert!(size % 8 == 0 && size <= std::mem::size_of::<HeuristicResult>(), "{size}");
    }

    #[cfg(feature = "cuda")]
    #[test]
    fn cublaslt_results_fit() {
        result_size_fits::<crate::cuda::CudaDriver>();
    }

    #[cfg(feature = "hip")]
    #[test]
    fn hipblaslt_results_fit() {
        result_size_fits::<crate::hip::HipDriver>();
    }
}
