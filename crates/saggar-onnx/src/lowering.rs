//! Lowering a specialised graph to a plan of host kernel launches with a memory plan.
//!
//! Locations: model inputs and outputs are the caller's bindings; the constants of the imported
//! model live in one weight buffer per device ([`WeightLayout`], shared by every program); constants
//! that appear only for one shape (folded shape vectors) live in the program's own small buffer;
//! every other value gets an offset in the run's scratch memory. Scratch offsets are reused by
//! liveness: a value's block is free again after the last step that reads it, and blocks are placed
//! first-fit. A view (Reshape, Flatten, Squeeze, Unsqueeze: [`crate::ops::Op::is_view`]) launches
//! nothing: its output shares its input's location, and a shared block is freed when the last value
//! using it dies. A graph output produced by a node is computed straight into the output binding;
//! an output that reads an input, a constant or another output's value gets a copy at the end.

use std::collections::HashMap;

use saggar_device::KernelSignature;

use crate::error::OnnxError;
use crate::host_kernels::{self, NodeKernel, Operand};
use crate::ir::{Graph, ValueId};

/// Alignment of every placed tensor, in bytes.
pub(crate) const ALIGN: usize = 64;

fn align(n: usize) -> Option<usize> {
    n.checked_add(ALIGN - 1).map(|v| v / ALIGN * ALIGN)
}

/// Where a kernel argument points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ArgSource {
    /// The caller's input binding `i`.
    Input(usize),
    /// The caller's output binding `i`.
    Output(usize),
    /// Scratch memory at this offset.
    Scratch(usize),
    /// The device's shared weight buffer at this offset.
    Weights(usize),
    /// The program's own constants at this offset.
    Local(usize),
    /// A byte count (the copy kernel's length).
    Bytes(u64),
}

/// One launch.
#[derive(Debug, Clone)]
pub(crate) struct Step {
    pub(crate) kernel: String,
    pub(crate) args: Vec<ArgSource>,
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
            pack(&mut layout.bytes, &mut layout.offsets, ValueId(i), &t.to_le_bytes());
        }
    }
    layout
}

fn pack(buffer: &mut Vec<u8>, offsets: &mut HashMap<ValueId, usize>, id: ValueId, bytes: &[u8]) {
    let offset = buffer.len();
    buffer.extend_from_slice(bytes);
    buffer.resize(align(buffer.len().max(offset + 1)).unwrap_or(buffer.len()), 0);
    offsets.insert(id, offset);
}

/// A lowered program for one concrete input shape.
#[derive(Debug, Clone)]
pub(crate) struct Lowered {
    pub(crate) steps: Vec<Step>,
    pub(crate) kernels: Vec<KernelSignature>,
    pub(crate) scratch_bytes: usize,
    pub(crate) local_constants: Vec<u8>,
    pub(crate) input_bytes: Vec<usize>,
    pub(crate) output_bytes: Vec<usize>,
    pub(crate) output_dims: Vec<Vec<u64>>,
}

fn operand(graph: &Graph, id: ValueId) -> Result<Operand, OnnxError> {
    let v = graph.value(id);
    let ty = v.ty.as_ref().ok_or_else(|| OnnxError::Graph { reason: format!("value `{}` has no type", v.name) })?;
    let dims = ty
        .fixed_dims()
        .ok_or_else(|| OnnxError::Graph { reason: format!("value `{}` has shape {ty}, not fixed", v.name) })?;
    Ok(Operand { dtype: ty.dtype, dims })
}

fn bytes_of(graph: &Graph, id: ValueId, limit: u64) -> Result<usize, OnnxError> {
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

/// Frees the scratch blocks of the values in `dying` whose last user they were.
fn release(
    dying: &mut Vec<ValueId>,
    location: &HashMap<ValueId, ArgSource>,
    block_users: &mut HashMap<usize, usize>,
    arena: &mut Arena,
) {
    for id in dying.drain(..) {
        if let Some(ArgSource::Scratch(off)) = location.get(&id)
            && let Some(users) = block_users.get_mut(off)
        {
            *users -= 1;
            if *users == 0 {
                block_users.remove(off);
                arena.free(*off);
            }
        }
    }
}

/// Lowers `graph` (specialised: every shape fixed) against the device weights `weights`,
/// registering its kernels. Refuses programs whose scratch or any tensor exceeds `limit` bytes.
pub(crate) fn lower(graph: &Graph, weights: &WeightLayout, limit: u64) -> Result<Lowered, OnnxError> {
    let mut location: HashMap<ValueId, ArgSource> = HashMap::new();
    let mut local_offsets = HashMap::new();
    let mut local_constants = Vec::new();
    let mut input_bytes = Vec::new();
    for (i, &id) in graph.inputs.iter().enumerate() {
        input_bytes.push(bytes_of(graph, id, limit)?);
        location.insert(id, ArgSource::Input(i));
    }
    let uses = graph.use_counts();
    for (i, v) in graph.values.iter().enumerate() {
        let id = ValueId(i);
        if let (Some(t), true) = (&v.constant, uses[i] > 0) {
            let src = match weights.offsets.get(&id) {
                Some(&off) => ArgSource::Weights(off),
                None => {
                    pack(&mut local_constants, &mut local_offsets, id, &t.to_le_bytes());
                    ArgSource::Local(local_offsets[&id])
                }
            };
            location.insert(id, src);
        }
    }
    // Outputs produced by nodes go straight to their binding (the first output reading a value).
    let mut output_bytes = Vec::new();
    let mut output_dims = Vec::new();
    let produced: std::collections::HashSet<ValueId> =
        graph.nodes.iter().flat_map(|n| n.outputs.iter().copied()).collect();
    let mut copies = Vec::new();
    for (i, out) in graph.outputs.iter().enumerate() {
        let op = operand(graph, out.value)?;
        output_bytes.push(bytes_of(graph, out.value, limit)?);
        output_dims.push(op.dims.iter().map(|&d| d as u64).collect());
        if produced.contains(&out.value) && !location.contains_key(&out.value) {
            location.insert(out.value, ArgSource::Output(i));
        } else {
            copies.push((i, out.value));
        }
    }
    // Liveness: the last step reading each value (copies at the end read theirs last of all).
    let end = graph.nodes.len();
    let mut last_use: HashMap<ValueId, usize> = HashMap::new();
    for (step, node) in graph.nodes.iter().enumerate() {
        for id in node.inputs.iter().flatten() {
            last_use.insert(*id, step);
        }
    }
    for &(_, id) in &copies {
        last_use.insert(id, end);
    }
    let mut frees: Vec<Vec<ValueId>> = vec![Vec::new(); end + 1];
    let mut arena = Arena::default();
    let mut steps = Vec::with_capacity(end + copies.len());
    let mut kernels: Vec<KernelSignature> = Vec::new();
    // Values sharing a scratch block (a view and what it views) free it when the last one dies.
    let mut block_users: HashMap<usize, usize> = HashMap::new();
    for (step, node) in graph.nodes.iter().enumerate() {
        let dies_at = |o: ValueId| last_use.get(&o).copied().unwrap_or(step).max(step);
        // A view (Reshape, Flatten, Squeeze, Unsqueeze) reads the same bytes under another shape:
        // its output takes its input's location and no kernel runs. Nothing writes a value after
        // the step that produced it, so sharing is safe; graph outputs still get their own binding.
        if let (true, [o], Some(Some(input))) = (node.op.is_view(), node.outputs.as_slice(), node.inputs.first())
            && !location.contains_key(o)
            && let Some(&src) = location.get(input)
        {
            location.insert(*o, src);
            if let ArgSource::Scratch(off) = src {
                *block_users.entry(off).or_insert(0) += 1;
                frees[dies_at(*o)].push(*o);
            }
            release(&mut frees[step], &location, &mut block_users, &mut arena);
            continue;
        }
        for &o in &node.outputs {
            if location.contains_key(&o) {
                continue;
            }
            let offset = arena.alloc(bytes_of(graph, o, limit)?);
            if arena.high_water as u64 > limit {
                return Err(OnnxError::TooLarge {
                    what: "scratch memory".into(),
                    size: arena.high_water as u64,
                    limit,
                    field: "max_program_bytes",
                });
            }
            location.insert(o, ArgSource::Scratch(offset));
            block_users.insert(offset, 1);
            // A value nobody reads is freed right after the step that writes it.
            frees[dies_at(o)].push(o);
        }
        let kernel = NodeKernel {
            op_type: node.op_type.clone(),
            op: node.op.clone(),
            inputs: node.inputs.iter().map(|i| i.map(|id| operand(graph, id)).transpose()).collect::<Result<_, _>>()?,
            outputs: node.outputs.iter().map(|&id| operand(graph, id)).collect::<Result<_, _>>()?,
        };
        host_kernels::ensure_registered(&kernel)?;
        let signature = kernel.signature();
        let args = node.inputs.iter().flatten().chain(&node.outputs).map(|id| location[id]).collect();
        steps.push(Step { kernel: signature.name.clone(), args });
        if !kernels.iter().any(|k| k.name == signature.name) {
            kernels.push(signature);
        }
        release(&mut frees[step], &location, &mut block_users, &mut arena);
    }
    if !copies.is_empty() {
        host_kernels::ensure_copy_registered()?;
        kernels.push(host_kernels::copy_signature());
    }
    for (i, id) in copies {
        let src = *location
            .get(&id)
            .ok_or_else(|| OnnxError::Graph { reason: format!("output {i} reads a value never computed") })?;
        steps.push(Step {
            kernel: host_kernels::COPY.to_string(),
            args: vec![ArgSource::Output(i), src, ArgSource::Bytes(output_bytes[i] as u64)],
        });
    }
    Ok(Lowered {
        steps,
        kernels,
        scratch_bytes: arena.high_water,
        local_constants,
        input_bytes,
        output_bytes,
        output_dims,
    })
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
}
