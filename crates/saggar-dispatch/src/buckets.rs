//! The bucket grid of a bucketed model: batch buckets, and optionally buckets of one padded axis
//! (a sequence), each cell served by one main program. The table mapping cells to programs is
//! swapped atomically by live re-bucketing (`refit.rs`), so a request reads it once and keeps
//! what it read; the histogram that live re-bucketing fits is recorded here with relaxed atomics.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use saggar_arena::ArenaLayout;
use saggar_shape::{BatchHistogram, Bindings, BucketPolicy, Chunk, Dim, Signature, Splitting, TensorSpec};

use crate::config::{LiveBuckets, PaddedAxis};
use crate::error::{DispatchError, Result};
use crate::plan::{Chunks, Single};
use crate::programs::ProgramSpec;

/// Which program serves each cell of the grid, as one immutable snapshot.
pub(crate) struct BucketTable {
    pub(crate) batch: BucketPolicy,
    /// The padded axis's buckets, when the model has one.
    pub(crate) axis: Option<BucketPolicy>,
    /// Main-program indices, row-major: batch bucket, then axis bucket.
    programs: Box<[usize]>,
    /// Ids of the programs this table routes to, sorted: graphs of any other program are retired.
    ids: Box<[usize]>,
    /// Advanced by every swap.
    pub(crate) epoch: u64,
}

impl BucketTable {
    pub(crate) fn new(
        batch: BucketPolicy,
        axis: Option<BucketPolicy>,
        programs: Vec<usize>,
        mut ids: Vec<usize>,
        epoch: u64,
    ) -> BucketTable {
        ids.sort_unstable();
        BucketTable { batch, axis, programs: programs.into(), ids: ids.into(), epoch }
    }

    fn axis_len(&self) -> usize {
        self.axis.as_ref().map_or(1, |p| p.buckets().len())
    }

    /// The main program of batch bucket `b` and axis bucket `a` (0 without an axis).
    pub(crate) fn program(&self, b: usize, a: usize) -> usize {
        self.programs[b * self.axis_len() + a]
    }

    /// Whether this table routes any request to the program with `id`.
    pub(crate) fn routes(&self, id: usize) -> bool {
        self.ids.binary_search(&id).is_ok()
    }

    /// The grid's cells, row-major: (batch bucket, axis bucket).
    pub(crate) fn cells(batch: &BucketPolicy, axis: Option<&BucketPolicy>) -> Vec<(u64, Option<u64>)> {
        let axis: Vec<Option<u64>> = axis.map_or(vec![None], |p| p.buckets().iter().copied().map(Some).collect());
        batch.buckets().iter().flat_map(|&b| axis.iter().map(move |&a| (b, a))).collect()
    }
}

/// Where an input carries the padded axis, and the element it is padded with.
#[derive(Debug, Clone, Copy)]
pub(crate) struct InputAxis {
    pub(crate) axis: usize,
    pad: [u8; 8],
    pad_len: usize,
}

impl InputAxis {
    /// One element of the input's type holding the pad value.
    pub(crate) fn pad(&self) -> &[u8] {
        &self.pad[..self.pad_len]
    }
}

/// The padded axis of a model: its symbol and where each input and output carries it.
#[derive(Debug)]
pub(crate) struct AxisLayout {
    pub(crate) symbol: Box<str>,
    pub(crate) symbol_id: usize,
    pub(crate) inputs: Vec<Option<InputAxis>>,
    pub(crate) outputs: Vec<Option<usize>>,
}

/// The one axis of `spec` that carries `symbol`, if any; a tensor carrying it twice is refused
/// (padding one of two equal extents would break the model's shape contract).
fn axis_of(spec: &TensorSpec, symbol: &str) -> Result<Option<usize>> {
    let mut axes = spec.dims().iter().enumerate().filter(|(_, d)| d.symbol() == Some(symbol)).map(|(a, _)| a);
    let first = axes.next();
    if axes.next().is_some() {
        return Err(DispatchError::Config(format!(
            "`{}` carries the padded axis `{symbol}` twice; only one axis of a tensor may be padded",
            spec.name()
        )));
    }
    Ok(first)
}

impl AxisLayout {
    /// The layout of `axis` in a model of `signature`, with every pad value checked.
    pub(crate) fn new(signature: &Signature, axis: &PaddedAxis) -> Result<AxisLayout> {
        let symbol = axis.symbol.as_str();
        let symbol_id = signature.symbols().position(|s| s == symbol).ok_or_else(|| {
            DispatchError::Config(format!("the padded axis `{symbol}` is not a symbolic dimension of any input"))
        })?;
        if signature.batch_layout().symbol() == Some(symbol) {
            return Err(DispatchError::Config(format!("`{symbol}` is the batch; declare another axis as padded")));
        }
        for (name, _) in &axis.pad_values {
            if signature.input_index(name).is_none() {
                return Err(DispatchError::Config(format!("a pad value for `{name}`, which the model does not take")));
            }
        }
        let inputs = signature
            .inputs()
            .iter()
            .map(|spec| {
                let Some(at) = axis_of(spec, symbol)? else { return Ok(None) };
                let value =
                    axis.pad_values.iter().find(|(n, _)| n == spec.name()).map(|(_, v)| *v).ok_or_else(|| {
                        DispatchError::Config(format!(
                            "input `{}` carries the padded axis `{symbol}` but has no pad value: declare one with \
                         PaddedAxis::pad",
                            spec.name()
                        ))
                    })?;
                let pad = value.encode(spec.dtype()).ok_or_else(|| {
                    DispatchError::Config(format!(
                        "the pad value {value:?} of `{}` is not a {}",
                        spec.name(),
                        spec.dtype()
                    ))
                })?;
                Ok(Some(InputAxis { axis: at, pad, pad_len: spec.dtype().size_bytes() }))
            })
            .collect::<Result<Vec<_>>>()?;
        let outputs = signature.outputs().iter().map(|spec| axis_of(spec, symbol)).collect::<Result<Vec<_>>>()?;
        Ok(AxisLayout { symbol: symbol.into(), symbol_id, inputs, outputs })
    }
}

/// The concrete dimensions of an input of a bucketed or static model, each symbol given its value
/// in `values`.
pub(crate) fn concrete_dims(spec: &TensorSpec, values: &[(&str, u64)]) -> Vec<u64> {
    spec.dims()
        .iter()
        .map(|d| match (d.as_fixed(), d.symbol()) {
            (Some(v), _) => v,
            (None, Some(s)) => values.iter().find(|(name, _)| *name == s).map_or(0, |(_, v)| *v),
            (None, None) => unreachable!("a dimension is fixed or symbolic"),
        })
        .collect()
}

/// The program spec of one grid cell: batch bucket `batch`, padded-axis bucket `axis`.
pub(crate) fn cell_spec(
    inputs: &[TensorSpec],
    batch_symbol: Option<&str>,
    axis_symbol: Option<&str>,
    (batch, axis): (u64, Option<u64>),
) -> ProgramSpec {
    let mut values: Vec<(&str, u64)> = batch_symbol.map(|s| (s, batch)).into_iter().collect();
    values.extend(axis_symbol.zip(axis));
    ProgramSpec::new(Some(batch), inputs.iter().map(|s| concrete_dims(s, &values)).collect())
}

/// Whether a model of `signature` is served by a grid of the batch and `axis`: its only symbols are
/// the batch, at the leading axis of the inputs that carry it, and the padded axis.
pub(crate) fn grid_serves(signature: &Signature, axis: &str) -> bool {
    let Some(batch) = signature.batch_layout().symbol() else { return false };
    signature.inputs().iter().all(|spec| {
        spec.dims().iter().enumerate().all(|(at, d)| match d {
            Dim::Fixed(_) => true,
            Dim::Symbolic(name) => (at == 0 && &**name == batch) || &**name == axis,
        })
    })
}

/// A bucketed model's grid: the current table, the padded axis and the live histogram.
pub(crate) struct Grid {
    pub(crate) table: ArcSwap<BucketTable>,
    pub(crate) axis: Option<AxisLayout>,
    pub(crate) live: Option<Live>,
}

impl Grid {
    /// The request's extent along the padded axis, when the model has one.
    pub(crate) fn axis_extent(&self, bindings: &Bindings<'_>) -> Option<u64> {
        self.axis.as_ref().map(|a| bindings.values()[a.symbol_id])
    }

    /// The axis bucket index of a request whose padded-axis extent is exactly a bucket (requests
    /// padded on the host always are); `None` otherwise.
    fn exact_axis_index(&self, table: &BucketTable, bindings: &Bindings<'_>) -> Option<usize> {
        match (self.axis_extent(bindings), &table.axis) {
            (Some(extent), Some(policy)) => {
                let index = policy.bucket_index_for(extent).ok()?;
                (policy.buckets()[index] == extent).then_some(index)
            }
            _ => Some(0),
        }
    }

    /// The one program and chunk of a request that needs no split, from one read of the table.
    pub(crate) fn single(&self, bindings: &Bindings<'_>) -> Option<Single> {
        let table = self.table.load();
        let batch = bindings.batch()?;
        let b = table.batch.bucket_index_for(batch).ok()?;
        let a = self.exact_axis_index(&table, bindings)?;
        Some(Single { k: table.program(b, a), chunk: Chunk::whole(batch, table.batch.buckets()[b]) })
    }

    /// The chunks of a request, with the table they were planned on.
    pub(crate) fn chunks(&self, bindings: &Bindings<'_>, batch: u64, splitting: Splitting) -> Result<Chunks> {
        let table = self.table.load_full();
        let axis_index = self.exact_axis_index(&table, bindings).ok_or_else(|| self.axis_error(&table, bindings))?;
        let plan = table.batch.plan(batch, splitting)?;
        Ok(Chunks::Planned { plan, table, axis_index })
    }

    /// Why a request whose batch a bucket serves has no single program: its padded-axis extent is
    /// not a bucket, or is above the largest.
    #[cold]
    pub(crate) fn axis_error_of(&self, bindings: &Bindings<'_>) -> DispatchError {
        self.axis_error(&self.table.load(), bindings)
    }

    #[cold]
    fn axis_error(&self, table: &BucketTable, bindings: &Bindings<'_>) -> DispatchError {
        let (Some(axis), Some(extent), Some(policy)) = (&self.axis, self.axis_extent(bindings), &table.axis) else {
            return DispatchError::Config("a padded axis without buckets".into());
        };
        match policy.bucket_for(extent) {
            Ok(bucket) => DispatchError::PaddedAxisNeedsHostTensors { symbol: axis.symbol.to_string(), extent, bucket },
            Err(_) => DispatchError::PaddedAxisAboveLargest {
                symbol: axis.symbol.to_string(),
                extent,
                largest: policy.largest(),
            },
        }
    }

    /// The axis bucket a host request of `extent` is padded to.
    pub(crate) fn axis_bucket(&self, extent: u64) -> Result<u64> {
        let table = self.table.load();
        let (Some(axis), Some(policy)) = (&self.axis, &table.axis) else {
            return Err(DispatchError::Config("a padded axis without buckets".into()));
        };
        policy.bucket_for(extent).map_err(|_| DispatchError::PaddedAxisAboveLargest {
            symbol: axis.symbol.to_string(),
            extent,
            largest: policy.largest(),
        })
    }

    /// Records a request for live re-bucketing: relaxed counters, and a wake-up of the refit
    /// thread once per interval.
    #[inline]
    pub(crate) fn observe(&self, bindings: &Bindings<'_>) {
        if let (Some(live), Some(batch)) = (&self.live, bindings.batch()) {
            live.record(batch, self.axis_extent(bindings));
        }
    }

    /// [`Grid::observe`] for a request known by its batch and padded-axis extent.
    #[inline]
    pub(crate) fn observe_request(&self, batch: u64, axis_extent: Option<u64>) {
        if let Some(live) = &self.live {
            live.record(batch, axis_extent);
        }
    }
}

/// The state of live re-bucketing: per-axis request counts since the last fit, and the programs
/// compiled for grid cells so far.
pub(crate) struct Live {
    pub(crate) config: LiveBuckets,
    batch_counts: Box<[AtomicU64]>,
    axis_counts: Box<[AtomicU64]>,
    since: AtomicU64,
    pub(crate) refitter: OnceLock<std::thread::Thread>,
    /// Held by the one refit in progress: the main program of every cell compiled so far.
    pub(crate) cells: Mutex<HashMap<(u64, Option<u64>), usize>>,
    /// The arena every program must fit, and the scratch every context has.
    pub(crate) layout: Arc<ArenaLayout>,
    pub(crate) scratch_bytes: usize,
}

impl Live {
    pub(crate) fn new(
        config: LiveBuckets,
        table: &BucketTable,
        cells: HashMap<(u64, Option<u64>), usize>,
        layout: Arc<ArenaLayout>,
        scratch_bytes: usize,
    ) -> Live {
        let counts = |n: u64| (0..=n).map(|_| AtomicU64::new(0)).collect();
        Live {
            config,
            batch_counts: counts(table.batch.largest()),
            axis_counts: counts(table.axis.as_ref().map_or(0, BucketPolicy::largest)),
            since: AtomicU64::new(0),
            refitter: OnceLock::new(),
            cells: Mutex::new(cells),
            layout,
            scratch_bytes,
        }
    }

    #[inline]
    fn record(&self, batch: u64, axis: Option<u64>) {
        // Sizes above the largest bucket count as the largest (split, or refused, either way served
        // by it); the largest bucket always stays.
        let at = |counts: &[AtomicU64], v: u64| counts[(v as usize).min(counts.len() - 1)].fetch_add(1, Relaxed);
        at(&self.batch_counts, batch);
        if let Some(extent) = axis {
            at(&self.axis_counts, extent);
        }
        if self.since.fetch_add(1, Relaxed) + 1 == self.config.every
            && let Some(thread) = self.refitter.get()
        {
            thread.unpark();
        }
    }

    /// Whether an interval's worth of requests arrived since the last fit.
    pub(crate) fn due(&self) -> bool {
        self.since.load(Relaxed) >= self.config.every
    }

    /// The counts since the last fit, reset: (batch, padded axis). The largest size is always
    /// present (with a count of zero if unseen), so a fit keeps it as a bucket.
    pub(crate) fn take_window(&self) -> (BatchHistogram, BatchHistogram) {
        // Windows stay one interval long on average: requests that arrived after the interval closed
        // count towards the next one (their sizes are in this window's histogram, which is as fresh).
        let _ = self.since.fetch_update(Relaxed, Relaxed, |n| Some(n.saturating_sub(self.config.every)));
        let take = |counts: &[AtomicU64]| {
            let mut histogram = BatchHistogram::new();
            for (size, count) in counts.iter().enumerate().skip(1) {
                let n = count.swap(0, Relaxed);
                if n > 0 || size == counts.len() - 1 {
                    // Cannot overflow: sizes are at most the largest bucket and counts are u64.
                    let _ = histogram.record_n(size as u64, n);
                }
            }
            histogram
        };
        (take(&self.batch_counts), take(&self.axis_counts))
    }
}
