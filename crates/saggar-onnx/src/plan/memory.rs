//! The memory plan: where every value of a program lives. The model's constants are packed once per
//! device ([`WeightLayout`]); every other value gets an offset in the run's scratch memory
//! ([`MemoryPlan`]), reused by liveness: a value's block is free again after the last step that reads
//! it, and blocks are placed first-fit. A value may share another's location (a view reads the same
//! bytes under another shape): a shared block is freed when the last value using it dies.

use std::collections::HashMap;

use crate::error::OnnxError;
use crate::graph::ir::{Graph, ValueId};
use crate::plan::ArgSource;
use crate::plan::nodes::operand;

/// Alignment of every placed tensor, in bytes.
pub(crate) const ALIGN: usize = 64;

/// `n` rounded up to [`ALIGN`], `None` on overflow.
pub(crate) fn align(n: usize) -> Option<usize> {
    n.checked_add(ALIGN - 1).map(|v| v / ALIGN * ALIGN)
}

/// Appends `bytes` to `buffer` at an [`ALIGN`]ed offset, padding the end to the next one; returns
/// the offset.
pub(crate) fn pack(buffer: &mut Vec<u8>, bytes: &[u8]) -> usize {
    let offset = buffer.len();
    buffer.extend_from_slice(bytes);
    buffer.resize(align(buffer.len().max(offset + 1)).unwrap_or(buffer.len()), 0);
    offset
}

/// The constants of an imported model, packed for upload.
#[derive(Debug, Clone, Default)]
pub(crate) struct WeightLayout {
    pub(crate) offsets: HashMap<ValueId, usize>,
    pub(crate) bytes: Vec<u8>,
}

/// Packs every constant `graph` reads.
pub(crate) fn weight_layout(graph: &Graph) -> WeightLayout {
    let uses = graph.use_counts();
    let mut layout = WeightLayout::default();
    for (i, v) in graph.values.iter().enumerate() {
        if let (Some(t), true) = (&v.constant, uses[i] > 0) {
            let offset = pack(&mut layout.bytes, &t.to_le_bytes());
            layout.offsets.insert(ValueId(i), offset);
        }
    }
    layout
}

/// Bytes of value `id`, refused above `limit`.
pub(crate) fn bytes_of(graph: &Graph, id: ValueId, limit: u64) -> Result<usize, OnnxError> {
    let op = operand(graph, id)?;
    match op.bytes() {
        Some(n) if n as u64 <= limit => Ok(n),
        other => Err(OnnxError::TooLarge {
            what: format!("value `{}` of shape {:?}", graph.value(id).name, op.dims),
            size: other.map_or(u64::MAX, |n| n as u64),
            limit,
            field: "max_program_bytes",
        }),
    }
}

/// First-fit placement of blocks in scratch memory.
#[derive(Debug, Default)]
struct Arena {
    /// Live blocks `(offset, size)`, sorted by offset.
    live: Vec<(usize, usize)>,
    high_water: usize,
}

impl Arena {
    fn alloc(&mut self, size: usize) -> usize {
        let size = align(size.max(1)).unwrap_or(usize::MAX);
        let mut cursor = 0;
        let mut at = self.live.len();
        for (i, &(off, len)) in self.live.iter().enumerate() {
            if off.saturating_sub(cursor) >= size {
                at = i;
                break;
            }
            cursor = off + len;
        }
        self.live.insert(at, (cursor, size));
        self.high_water = self.high_water.max(cursor.saturating_add(size));
        cursor
    }

    fn free(&mut self, offset: usize) {
        if let Some(i) = self.live.iter().position(|&(o, _)| o == offset) {
            self.live.remove(i);
        }
    }
}

/// Where each value of one program lives, built step by step as the lowering walks the groups in
/// order (a group runs at its root, the last member).
#[derive(Debug)]
pub(crate) struct MemoryPlan {
    location: HashMap<ValueId, ArgSource>,
    arena: Arena,
    /// Values sharing each scratch block (a view and what it views).
    block_users: HashMap<usize, usize>,
    /// The values whose last reader is each step, freed after it.
    frees: Vec<Vec<ValueId>>,
    /// The last step reading each value (the output copies after every node read theirs last).
    last_use: HashMap<ValueId, usize>,
    /// Scratch bytes without reuse: every placed value in its own block.
    unshared_bytes: usize,
    limit: u64,
}

impl MemoryPlan {
    /// An empty plan for `graph` grouped as `root` (`root[i]`: the root of node `i`'s group), placing
    /// nothing above `limit` bytes.
    pub(crate) fn new(graph: &Graph, root: &[usize], limit: u64) -> MemoryPlan {
        let mut last_use: HashMap<ValueId, usize> = HashMap::new();
        for (step, node) in graph.nodes.iter().enumerate() {
            for id in node.inputs.iter().flatten() {
                let at = last_use.entry(*id).or_insert(0);
                *at = (*at).max(root[step]);
            }
        }
        MemoryPlan {
            location: HashMap::new(),
            arena: Arena::default(),
            block_users: HashMap::new(),
            frees: vec![Vec::new(); graph.nodes.len() + 1],
            last_use,
            unshared_bytes: 0,
            limit,
        }
    }

    /// Where `id` lives, once placed.
    pub(crate) fn location(&self, id: ValueId) -> Option<ArgSource> {
        self.location.get(&id).copied()
    }

    /// Every placed value's location.
    pub(crate) fn locations(&self) -> &HashMap<ValueId, ArgSource> {
        &self.location
    }

    /// Places `id` outside scratch (an input or output binding, a constant).
    pub(crate) fn bind(&mut self, id: ValueId, src: ArgSource) {
        self.location.insert(id, src);
    }

    /// Keeps `id` alive until after every node has run (an output copied at the end reads it).
    pub(crate) fn read_at_end(&mut self, id: ValueId) {
        self.last_use.insert(id, self.frees.len() - 1);
    }

    fn dies_at(&self, id: ValueId, step: usize) -> usize {
        self.last_use.get(&id).copied().unwrap_or(step).max(step)
    }

    /// Gives `id`, produced at `step`, the location `src` of another value (the same bytes). Nothing
    /// writes a value after the step that produced it, so sharing is safe.
    pub(crate) fn share(&mut self, id: ValueId, src: ArgSource, step: usize) {
        self.location.insert(id, src);
        if let ArgSource::Scratch(off) = src {
            *self.block_users.entry(off).or_insert(0) += 1;
            let dies = self.dies_at(id, step);
            self.frees[dies].push(id);
        }
    }

    /// Places `id`, produced at `step`, in a scratch block of its own.
    pub(crate) fn place(&mut self, graph: &Graph, id: ValueId, step: usize) -> Result<(), OnnxError> {
        let bytes = bytes_of(graph, id, self.limit)?;
        self.unshared_bytes = self.unshared_bytes.saturating_add(align(bytes).unwrap_or(bytes));
        let offset = self.arena.alloc(bytes);
        if self.arena.high_water as u64 > self.limit {
            return Err(OnnxError::TooLarge {
                what: "scratch memory".into(),
                size: self.arena.high_water as u64,
                limit: self.limit,
                field: "max_program_bytes",
            });
        }
        self.location.insert(id, ArgSource::Scratch(offset));
        self.block_users.insert(offset, 1);
        // A value nobody reads is freed right after the step that writes it.
        let dies = self.dies_at(id, step);
        self.frees[dies].push(id);
        Ok(())
    }

    /// Frees the scratch blocks of the values whose last reader was `step`, once no other value
    /// shares them.
    pub(crate) fn release(&mut self, step: usize) {
        for id in std::mem::take(&mut self.frees[step]) {
            if let Some(ArgSource::Scratch(off)) = self.location.get(&id)
                && let Some(users) = self.block_users.get_mut(off)
            {
                *users -= 1;
                if *users == 0 {
                    self.block_users.remove(off);
                    self.arena.free(*off);
                }
            }
        }
    }

    /// Scratch bytes the plan needs so far.
    pub(crate) fn high_water(&self) -> usize {
        self.arena.high_water
    }

    /// Scratch bytes without reuse.
    pub(crate) fn unshared_bytes(&self) -> usize {
        self.unshared_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arena_reuses_freed_blocks_first_fit() {
        let mut a = Arena::default();
        let x = a.alloc(100);
        let y = a.alloc(10);
        a.free(x);
        let z = a.alloc(64);
        assert_eq!(z, x, "the freed block is reused");
        assert!(y >= 128);
        assert_eq!(a.high_water, y + 64);
    }

    #[test]
    fn packed_constants_start_aligned() {
        let mut buffer = Vec::new();
        assert_eq!(pack(&mut buffer, &[1, 2, 3]), 0);
        assert_eq!(pack(&mut buffer, &[]), ALIGN);
        assert_eq!(pack(&mut buffer, &[4; 65]), 2 * ALIGN);
        assert_eq!(buffer.len(), 4 * ALIGN);
    }
}
