//! Planning a checked request: which kind of model serves it ([`Model`]), which main program and
//! chunk a request that needs no split runs as, the constant-memory walk over the chunks of a split
//! request, and the pad and slice plans of each chunk.

use saggar_device::Backend;
use std::sync::Arc;

use saggar_shape::{Bindings, Chunk, PadPlan, SlicePlan, SplitPlan, TensorShape};

use crate::buckets::{BucketTable, Grid};
use crate::compiler::ProgramCompiler;
use crate::context::Slots;
use crate::error::Result;
use crate::session::Inner;
use crate::stats::Stats;
use crate::tensors::BindingMode;

/// How a session serves its model, decided once at creation from the model's dimensions.
pub(crate) enum Model {
    /// The batch is the only dynamic dimension, or the other is a declared padded axis: one
    /// precompiled program per cell of the bucket grid.
    Bucketed(Box<Grid>),
    /// No dynamic dimension: one precompiled program.
    Static,
    /// Other symbolic dimensions: a program per concrete shape, compiled on first use.
    PerShape,
}

/// The single main program and chunk of a request that needs no split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Single {
    pub(crate) k: usize,
    pub(crate) chunk: Chunk,
}

/// How a checked device request that needs no split runs: main program `k` on `chunk`, in `mode`
/// (direct bind at an exact bucket, stabilized otherwise).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DeviceRoute {
    pub(crate) k: usize,
    pub(crate) chunk: Chunk,
    pub(crate) mode: BindingMode,
    pub(crate) batch: Option<u64>,
}

/// The chunks a request runs as, walked without collecting them: a split plan stores a count of
/// full chunks and a short tail, so even an absurd batch takes constant memory.
pub(crate) enum Chunks {
    /// A bucketed model's plan, on the bucket table it was made from and the padded axis's bucket.
    Planned { plan: SplitPlan, table: Arc<BucketTable>, axis_index: usize },
    /// A static model's program: one launch.
    Whole,
}

impl Chunks {
    /// How many chunks (program launches).
    pub(crate) fn count(&self) -> u64 {
        match self {
            Chunks::Planned { plan, .. } => plan.chunk_count(),
            Chunks::Whole => 1,
        }
    }

    /// Whether the request is split into several launches.
    pub(crate) fn is_split(&self) -> bool {
        self.count() > 1
    }

    /// The chunks in row order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = Chunk> + '_ {
        let (plan, whole) = match self {
            Chunks::Planned { plan, .. } => (Some(plan), None),
            Chunks::Whole => (None, Some(Chunk::whole(1, 1))),
        };
        plan.into_iter().flat_map(SplitPlan::chunks).chain(whole)
    }

    /// The main program that runs `chunk`, on the table the chunks were planned on.
    pub(crate) fn program(&self, chunk: Chunk) -> Result<usize> {
        match self {
            Chunks::Planned { table, axis_index, .. } => {
                Ok(table.program(table.batch.bucket_index_for(chunk.bucket)?, *axis_index))
            }
            Chunks::Whole => Ok(0),
        }
    }
}

impl<B: Backend, C: ProgramCompiler<B>> Inner<B, C> {
    /// The single main program a request runs as, if it needs no split.
    pub(crate) fn single(&self, bindings: &Bindings<'_>) -> Option<Single> {
        match &self.model {
            Model::Static => Some(Single { k: 0, chunk: Chunk::whole(1, 1) }),
            Model::Bucketed(grid) => grid.single(bindings),
            Model::PerShape => None,
        }
    }

    /// The single program a device request runs as, if it needs no split: exact buckets are
    /// direct-bound, padded ones stabilized.
    pub(crate) fn device_route(&self, bindings: &Bindings<'_>) -> Option<DeviceRoute> {
        let Single { k, chunk } = self.single(bindings)?;
        let mode = if chunk.rows == chunk.bucket { BindingMode::DirectBind } else { BindingMode::Stabilized };
        Some(DeviceRoute { k, chunk, mode, batch: bindings.batch() })
    }

    /// The chunks a request on a main program runs as: one, or several when its batch exceeds the
    /// largest bucket and splitting is on. A batch no bucket serves (splitting off) is refused here.
    pub(crate) fn chunks(&self, bindings: &Bindings<'_>) -> Result<Chunks> {
        match (&self.model, bindings.batch()) {
            (Model::Bucketed(grid), Some(batch)) => grid.chunks(bindings, batch, self.config.splitting),
            // A static model (every request of a bucketed model binds its batch symbol).
            _ => Ok(Chunks::Whole),
        }
    }

    pub(crate) fn pad_plan(&self, index: usize, dims: &[u64], chunk: Chunk) -> Result<PadPlan> {
        if let Model::Bucketed(_) = self.model {
            return Ok(self.signature.pad_plan(index, dims, chunk)?);
        }
        let spec = &self.signature.inputs()[index];
        Ok(PadPlan::new(TensorShape::new(spec.name(), spec.dtype(), dims), false, Chunk::whole(1, 1))?)
    }

    pub(crate) fn slice_plan(&self, index: usize, program_dims: &[u64], chunk: Chunk) -> Result<SlicePlan> {
        if let Model::Bucketed(_) = self.model {
            return Ok(self.signature.slice_plan(index, program_dims, chunk)?);
        }
        let spec = &self.signature.outputs()[index];
        Ok(SlicePlan::new(TensorShape::new(spec.name(), spec.dtype(), program_dims), false, Chunk::whole(1, 1))?)
    }

    /// Fills the context's pad and slice plans for `chunk` of a request run by main program `k`, and
    /// switches the arena to program `k`'s layout.
    pub(crate) fn plan_chunk<T: AsRef<[u64]>>(
        &self,
        slots: &mut Slots<B>,
        inputs: &[T],
        k: usize,
        chunk: Chunk,
    ) -> Result<()> {
        slots.arena.use_layout(self.layout_of(k))?;
        slots.pad_plans.clear();
        for (i, t) in inputs.iter().enumerate() {
            let plan = self.pad_plan(i, t.as_ref(), chunk)?;
            slots.pad_plans.push(plan);
        }
        slots.slice_plans.clear();
        for (o, dims) in self.main[k].output_dims.iter().enumerate() {
            let plan = self.slice_plan(o, dims, chunk)?;
            slots.slice_plans.push(plan);
        }
        Ok(())
    }

    /// Counts a chunk's useful and padded rows.
    pub(crate) fn count_chunk(&self, chunk: Chunk) {
        if let Model::Bucketed(_) = self.model {
            Stats::add(&self.stats.useful_rows, chunk.rows);
            Stats::add(&self.stats.padded_rows, chunk.bucket - chunk.rows);
        }
    }

    /// Counts a request that succeeded split into several chunks.
    pub(crate) fn count_split(&self, chunks: &Chunks) {
        if chunks.is_split() {
            Stats::bump(&self.stats.split_requests);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_of_an_absurd_batch_are_walked_lazily() {
        let policy = saggar_shape::BucketPolicy::powers_of_two(4).unwrap();
        let plan = policy.plan(1 << 40, saggar_shape::Splitting::Allowed).unwrap();
        let table = Arc::new(BucketTable::new(policy, None, vec![0, 1, 2], vec![7, 8, 9], 0));
        let chunks = Chunks::Planned { plan, table, axis_index: 0 };
        assert_eq!(chunks.count(), 1 << 38);
        assert!(chunks.is_split());
        assert_eq!(chunks.program(Chunk { offset: 0, rows: 3, bucket: 4 }).unwrap(), 2);
        let first: Vec<Chunk> = chunks.iter().take(2).collect();
        assert_eq!(first, vec![Chunk { offset: 0, rows: 4, bucket: 4 }, Chunk { offset: 4, rows: 4, bucket: 4 }]);
        assert_eq!(Chunks::Whole.iter().collect::<Vec<_>>(), vec![Chunk::whole(1, 1)]);
    }
}
