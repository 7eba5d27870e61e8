//! Lowering a specialised graph to a plan of kernel launches with a memory plan, for the host
//! backend or for CUDA/HIP.
//!
//! Nodes are first grouped ([`crate::fusion`]): a group is one step of the plan, with one memory
//! plan for every target. On the host a step is one host kernel (a lone node's op, a fused group
//! evaluating its nodes in order, or an attention group's kernel); on CUDA and HIP a step is one
//! generated kernel per fused group (elementwise, LayerNormalization with its input group, an
//! embedding bag, or attention), or the launches the op describes ([`crate::ops::gpu`]), each with its `meta` table placed in the
//! program's own constants.
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

use saggar_device::{BackendKind, Dim3, KernelSignature, LaunchConfig};
pub(crate) use saggar_dispatch::steps::{ArgSource, LaunchStep as Step, PlanStep};

use crate::attention;
use crate::compiler::AttentionKernel;
use crate::embedding_bag;
use crate::error::OnnxError;
use crate::fusion::{self, NodeInfo, operand};
use crate::gpu_codegen::{self, BLOCK, ROW_LANES, TILE};
use crate::gpu_fused::{self, FusedGroup, FusedNode};
use crate::gpu_prologue;
use crate::host_kernels::{self, FusedHostKernel, NodeKernel};
use crate::ir::{Graph, ValueId};
use crate::lowering_blas::{self, BlasLowering};
use crate::ops::gpu::{GpuKind, GpuNode, Slot, Work, broadcast, broadcast_mode, copy_launch, ext, numel};
use crate::step_labels::StepLabels;

/// Alignment of every placed tensor, in bytes.
pub(crate) const ALIGN: usize = 64;

fn align(n: usize) -> Option<usize> {
    n.checked_add(ALIGN - 1).map(|v| v / ALIGN * ALIGN)
}

/// What the plan is lowered for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// Host kernels.
    Host,
    /// Generated CUDA/HIP C++ (the backend only names errors).
    Gpu(BackendKind),
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

/// Kernel counts of one lowered program.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanSummary {
    /// Nodes that compute (views and folded nodes excluded).
    pub nodes: usize,
    /// Launches without fusion: one per computing node, or as many as its GPU form has.
    pub launches_unfused: usize,
    /// Launches of the plan as lowered (fused groups one each).
    pub launches: usize,
    /// Fused groups of two or more nodes (attention groups included).
    pub fused_groups: usize,
    /// Attention patterns fused into one kernel each.
    pub attention_groups: usize,
    /// Scratch bytes one run needs (activations placed by liveness), without the BLAS-Lt workspace.
    pub scratch_bytes: usize,
    /// Scratch bytes without reuse: every placed activation in its own block.
    pub unshared_scratch_bytes: usize,
    /// Device memory one run of this shape (bucket) needs besides the shared weights: scratch (BLAS-Lt
    /// workspace included), input and output bindings, and the program's own constants.
    pub peak_bytes: usize,
    /// Matmul steps that run through the backend's BLAS-Lt handle (counted in `launches`).
    pub matmuls: usize,
    /// Scratch reserved past the memory plan for the BLAS-Lt workspace.
    pub blas_workspace_bytes: usize,
}

/// A lowered program for one concrete input shape.
#[derive(Debug, Clone)]
pub(crate) struct Lowered {
    pub(crate) steps: Vec<PlanStep>,
    pub(crate) kernels: Vec<KernelSignature>,
    /// GPU targets: the C++ definition of each kernel in `kernels`, in the same order.
    pub(crate) definitions: Vec<String>,
    /// Lowered for CUDA or HIP (generated source), not for the host backend.
    pub(crate) gpu: bool,
    pub(crate) scratch_bytes: usize,
    pub(crate) local_constants: Vec<u8>,
    pub(crate) input_bytes: Vec<usize>,
    pub(crate) output_bytes: Vec<usize>,
    pub(crate) output_dims: Vec<Vec<u64>>,
    pub(crate) summary: PlanSummary,
    /// The nodes each step computes.
    pub(crate) labels: StepLabels,
}

/// Rows from which row-group kernels take a warp a row (2048 warps: about 16 on each SM of an H100).
const ROW_GROUP_MIN_ROWS: u64 = 2048;

/// Blocks of an elementwise launch at most. Its threads stride over the elements, so each thread's
/// setup (reading `meta`, testing the vector path) is paid once for many elements rather than once
/// for a few; 2048 blocks of [`BLOCK`] threads fill an H100's 132 SMs twice over. Measured on an
/// H100 (GELU over 25M f32): 175 us with a block per 256 elements, 100 us with 2048 blocks.
const ELEMENT_BLOCKS: u64 = 2048;

/// The launch shape of `work`.
pub(crate) fn launch_config(work: Work) -> LaunchConfig {
    const MAX_BLOCKS: u64 = 65_535;
    let blocks = |n: u64| n.clamp(1, MAX_BLOCKS) as u32;
    match work {
        Work::Elements(n) => LaunchConfig::for_elements(n.clamp(1, ELEMENT_BLOCKS * BLOCK as u64), BLOCK),
        Work::Rows(r) => LaunchConfig { grid: Dim3::x(blocks(r)), block: Dim3::x(BLOCK), shared_mem_bytes: 0 },
        // A warp a row while that makes enough warps to fill the GPU; below, a block a row, of
        // up to one thread per 8 columns. The block's rows stay in dynamic shared memory while they
        // fit (the kernel tests the same bound).
        Work::RowGroups { rows, cols } if rows >= ROW_GROUP_MIN_ROWS => {
            let groups = BLOCK / ROW_LANES;
            LaunchConfig {
                grid: Dim3::x(blocks(rows.div_ceil(u64::from(groups)))),
                block: Dim3 { x: ROW_LANES, y: groups, z: 1 },
                shared_mem_bytes: row_cache_bytes(groups, cols),
            }
        }
        Work::RowGroups { rows, cols } => {
            let lanes = cols.div_ceil(8).next_power_of_two().clamp(u64::from(ROW_LANES), u64::from(BLOCK));
            LaunchConfig {
                grid: Dim3::x(blocks(rows)),
                block: Dim3::x(lanes as u32),
                shared_mem_bytes: row_cache_bytes(1, cols),
            }
        }
        // Threads over a row's columns up to a block, the rest of the block over rows (no more rows
        // a block than there are).
        Work::Columns { rows, cols } => {
            let x = cols.clamp(1, u64::from(BLOCK)).next_power_of_two();
            let y = (u64::from(BLOCK) / x).min(rows.clamp(1, u64::from(BLOCK)).next_power_of_two());
            LaunchConfig {
                grid: Dim3::x(blocks(rows.div_ceil(y))),
                block: Dim3 { x: x as u32, y: y as u32, z: 1 },
                shared_mem_bytes: 0,
            }
        }
        Work::Tiles { m, n, batch } => {
            let t = TILE as u64;
            LaunchConfig {
                grid: Dim3 { x: blocks(n.div_ceil(t)), y: blocks(m.div_ceil(t)), z: blocks(batch) },
                block: Dim3 { x: TILE, y: TILE, z: 1 },
                shared_mem_bytes: 0,
            }
        }
    }
}

/// Dynamic shared memory of a row-group launch of `groups` rows of `cols` a block: the rows, when
/// they fit [`gpu_codegen::ROW_CACHE_BYTES`] (the bound the kernels test to use it), else none.
fn row_cache_bytes(groups: u32, cols: u64) -> u32 {
    let bytes = u64::from(groups).saturating_mul(cols).saturating_mul(4);
    if bytes <= gpu_codegen::ROW_CACHE_BYTES { bytes as u32 } else { 0 }
}

/// Kernels and launches being collected.
#[derive(Default)]
pub(crate) struct Emitter {
    pub(crate) steps: Vec<PlanStep>,
    kernels: Vec<KernelSignature>,
    definitions: Vec<String>,
    local_constants: Vec<u8>,
}

impl Emitter {
    /// Adds `signature` (with its C++ `definition` on GPUs) unless a kernel of that name is there;
    /// returns the name.
    pub(crate) fn kernel(&mut self, signature: KernelSignature, definition: Option<String>) -> String {
        let name = signature.name.clone();
        if !self.kernels.iter().any(|k| k.name == name) {
            self.kernels.push(signature);
            self.definitions.push(definition.unwrap_or_default());
        }
        name
    }

    /// Places a meta table in the program's constants.
    pub(crate) fn meta(&mut self, meta: &[i64]) -> ArgSource {
        let offset = self.local_constants.len();
        self.local_constants.extend(meta.iter().flat_map(|v| v.to_le_bytes()));
        self.local_constants.resize(align(self.local_constants.len().max(offset + 1)).unwrap_or(offset), 0);
        ArgSource::Local(offset)
    }

    fn gpu_launch(&mut self, kind: &GpuKind, meta: &[i64], work: Work, pointers: Vec<ArgSource>) {
        let (name, text) = gpu_codegen::kind_kernel(kind);
        let name = self.kernel(gpu_codegen::signature(&name, pointers.len()), Some(text));
        let mut args = vec![self.meta(meta)];
        args.extend(pointers);
        self.steps.push(PlanStep::Launch(Step { kernel: name, args, config: launch_config(work) }));
    }
}

fn unsupported(target: Target, graph: &Graph, node: usize, reason: String) -> OnnxError {
    let n = &graph.nodes[node];
    let backend = match target {
        Target::Gpu(b) => b,
        Target::Host => BackendKind::Host,
    };
    OnnxError::UnsupportedOnBackend { backend, op: n.op_type.clone(), node: n.name.clone(), reason }
}

fn gpu_form<'a>(graph: &Graph, info: &'a NodeInfo, node: usize, target: Target) -> Result<&'a GpuNode, OnnxError> {
    match &info.gpu {
        Some(Ok(form)) => Ok(form),
        Some(Err(e)) => Err(unsupported(target, graph, node, e.to_string())),
        None => Err(unsupported(target, graph, node, "the op has no GPU lowering".into())),
    }
}

/// Lowers `graph` (specialised: every shape fixed) against the device weights `weights` for
/// `target`, registering host kernels for the host. With `blas`, GEMMs the BLAS-Lt libraries can
/// express become matmul steps ([`crate::lowering_blas`]) on every target, and the library's
/// workspace is reserved at the end of scratch. `fusion` is `None` for an unfused plan, else the
/// attention kernel choice. Refuses programs whose scratch or any tensor exceeds `limit` bytes.
pub(crate) fn lower(
    graph: &Graph,
    weights: &WeightLayout,
    limit: u64,
    target: Target,
    blas: Option<BlasLowering>,
    fusion: Option<AttentionKernel>,
) -> Result<Lowered, OnnxError> {
    let fuse = fusion.is_some();
    let info = fusion::describe(graph)?;
    let grouping = fusion::plan(graph, &info, fuse);
    let root = &grouping.root;
    let mut location: HashMap<ValueId, ArgSource> = HashMap::new();
    let mut local_offsets = HashMap::new();
    let mut emit = Emitter::default();
    let mut labels = StepLabels::default();
    let mut gemm_group: HashMap<usize, usize> = HashMap::new();
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
                    pack(&mut emit.local_constants, &mut local_offsets, id, &t.to_le_bytes());
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
    // Liveness: the last step (a group runs at its root) reading each value; the copies at the end
    // read theirs last of all.
    let end = graph.nodes.len();
    let mut last_use: HashMap<ValueId, usize> = HashMap::new();
    for (step, node) in graph.nodes.iter().enumerate() {
        for id in node.inputs.iter().flatten() {
            let at = last_use.entry(*id).or_insert(0);
            *at = (*at).max(root[step]);
        }
    }
    for &(_, id) in &copies {
        last_use.insert(id, end);
    }
    let mut frees: Vec<Vec<ValueId>> = vec![Vec::new(); end + 1];
    let mut arena = Arena::default();
    // Values sharing a scratch block (a view and what it views) free it when the last one dies.
    let mut block_users: HashMap<usize, usize> = HashMap::new();
    let fusions = match blas {
        Some(b) if fuse => lowering_blas::epilogue_fusions(graph, &info, root, b.precision),
        _ => HashMap::new(),
    };
    let absorbed: HashMap<usize, usize> = fusions.iter().map(|(&gemm, f)| (f.group, gemm)).collect();
    let mut summary = PlanSummary {
        nodes: 0,
        launches_unfused: 0,
        launches: 0,
        fused_groups: 0,
        attention_groups: 0,
        scratch_bytes: 0,
        unshared_scratch_bytes: 0,
        peak_bytes: 0,
        matmuls: 0,
        blas_workspace_bytes: 0,
    };
    for (step, node) in graph.nodes.iter().enumerate() {
        if root[step] != step {
            continue;
        }
        let dies_at = |o: ValueId| last_use.get(&o).copied().unwrap_or(step).max(step);
        // A view (Reshape, Flatten, Squeeze, Unsqueeze) reads the same bytes under another shape:
        // its output takes its input's location and no kernel runs. Nothing writes a value after
        // the step that produced it, so sharing is safe; graph outputs still get their own binding.
        if let (true, [o], Some(Some(input))) = (node.op.is_view(), node.outputs.as_slice(), node.inputs.first())
            && !grouping.attention.contains_key(&step)
            && !location.contains_key(o)
            && let Some(&src) = location.get(input)
        {
            location.insert(*o, src);
            if let ArgSource::Scratch(off) = src {
                *block_users.entry(off).or_insert(0) += 1;
                frees[dies_at(*o)].push(*o);
            }
            labels.untimed(graph, &[step]);
            release(&mut frees[step], &location, &mut block_users, &mut arena);
            continue;
        }
        // A group a GEMM took into its epilogue launches nothing: its output is the GEMM's result
        // (already in the output binding when the group's output is a graph output).
        if let Some(&gemm) = absorbed.get(&step) {
            let members: Vec<usize> = (0..=step).filter(|&j| root[j] == step).collect();
            summary.nodes += members.len();
            summary.launches_unfused += members.len();
            match gemm_group.get(&gemm) {
                Some(&group) => labels.absorb(group, graph, &members),
                None => labels.untimed(graph, &members),
            }
            let out = node.outputs[0];
            if !location.contains_key(&out) {
                let src = location[&graph.nodes[gemm].outputs[0]];
                location.insert(out, src);
                if let ArgSource::Scratch(off) = src {
                    *block_users.entry(off).or_insert(0) += 1;
                    frees[dies_at(out)].push(out);
                }
            }
            release(&mut frees[step], &location, &mut block_users, &mut arena);
            continue;
        }
        for &o in &node.outputs {
            if location.contains_key(&o) {
                continue;
            }
            let bytes = bytes_of(graph, o, limit)?;
            summary.unshared_scratch_bytes =
                summary.unshared_scratch_bytes.saturating_add(align(bytes).unwrap_or(bytes));
            let offset = arena.alloc(bytes);
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
        let members: Vec<usize> = (0..=step).filter(|&j| root[j] == step).collect();
        for &j in &members {
            if graph.nodes[j].op.is_view() {
                continue;
            }
            summary.nodes += 1;
            summary.launches_unfused += match &info[j].gpu {
                Some(Ok(GpuNode::Launches(l))) => l.len(),
                _ => 1,
            };
        }
        if members.len() > 1 {
            summary.fused_groups += 1;
        }
        let steps_before = emit.steps.len();
        if let (Some(blas), Some(fusion)) = (blas, fusions.get(&step)) {
            // The GEMM computes its reader group too, into the group's output binding when that is a
            // graph output, else into its own block, which the group's output then shares.
            let out = graph.nodes[fusion.group].outputs[0];
            let dest = location.get(&out).copied().unwrap_or(location[&node.outputs[0]]);
            let fused =
                lowering_blas::matmul_step(graph, &info[step], step, &location, blas.precision, Some((fusion, dest)))
                    .ok_or_else(|| OnnxError::Graph { reason: "a GEMM planned for BLAS has no BLAS form".into() })?;
            emit.steps.push(PlanStep::Matmul(fused));
            summary.fused_groups += 1;
        } else if let Some(a) = grouping.attention.get(&step) {
            summary.attention_groups += 1;
            attention::lower::emit(graph, a, &location, target, fusion.unwrap_or_default(), &mut emit)?;
        } else if let (Some(bag), Target::Gpu(_)) = (grouping.bags.get(&step), target) {
            embedding_bag::emit(graph, bag, &location, &mut emit)?;
        } else {
            emit_group(graph, &info, &members, &location, target, blas, &mut emit)?;
        }
        if let Some(group) = labels.group(graph, &members, steps_before, emit.steps.len()) {
            gemm_group.insert(step, group);
        }
        release(&mut frees[step], &location, &mut block_users, &mut arena);
    }
    for (i, id) in copies {
        let src = *location
            .get(&id)
            .ok_or_else(|| OnnxError::Graph { reason: format!("output {i} reads a value never computed") })?;
        summary.nodes += 1;
        summary.launches_unfused += 1;
        let steps_before = emit.steps.len();
        match target {
            Target::Host => {
                host_kernels::ensure_copy_registered()?;
                let name = emit.kernel(host_kernels::copy_signature(), None);
                let args = vec![ArgSource::Output(i), src, ArgSource::Bytes(output_bytes[i] as u64)];
                emit.steps.push(PlanStep::Launch(Step { kernel: name, args, config: host_config() }));
            }
            Target::Gpu(_) => {
                let l = copy_launch(1, &[output_bytes[i]], (Slot::In(0), 0, &[1]), (Slot::Out(0), 0, &[1]));
                emit.gpu_launch(&l.kind, &l.meta, l.work, vec![src, ArgSource::Output(i)]);
            }
        }
        labels.output_copy(&graph.outputs[i].name, steps_before, emit.steps.len());
    }
    let scratch_bytes = lowering_blas::reserve_workspace(&mut emit.steps, arena.high_water, blas, limit)?;
    summary.launches = emit.steps.len();
    summary.scratch_bytes = arena.high_water;
    summary.matmuls = emit.steps.iter().filter(|s| matches!(s, PlanStep::Matmul(_))).count();
    summary.blas_workspace_bytes = scratch_bytes - arena.high_water;
    summary.peak_bytes = [scratch_bytes, emit.local_constants.len()]
        .into_iter()
        .chain(input_bytes.iter().copied())
        .chain(output_bytes.iter().copied())
        .fold(0usize, usize::saturating_add);
    Ok(Lowered {
        steps: emit.steps,
        kernels: emit.kernels,
        definitions: emit.definitions,
        gpu: matches!(target, Target::Gpu(_)),
        scratch_bytes,
        local_constants: emit.local_constants,
        input_bytes,
        output_bytes,
        output_dims,
        summary,
        labels,
    })
}

/// The launch shape of every host kernel (it runs once per launch).
pub(crate) fn host_config() -> LaunchConfig {
    LaunchConfig::for_elements(1, 1)
}

/// Emits the launches of one group (`members` in graph order, the root last).
fn emit_group(
    graph: &Graph,
    info: &[NodeInfo],
    members: &[usize],
    location: &HashMap<ValueId, ArgSource>,
    target: Target,
    blas: Option<BlasLowering>,
    emit: &mut Emitter,
) -> Result<(), OnnxError> {
    let root = *members.last().expect("a group has its root");
    if let ([_], Some(blas)) = (members, blas)
        && let Some(step) = lowering_blas::matmul_step(graph, &info[root], root, location, blas.precision, None)
    {
        emit.steps.push(PlanStep::Matmul(step));
        return Ok(());
    }
    let at = |id: &ValueId| location[id];
    let kernel_of = |j: usize| {
        let n = &graph.nodes[j];
        NodeKernel {
            op_type: n.op_type.clone(),
            op: n.op.clone(),
            inputs: info[j].inputs.clone(),
            outputs: info[j].outputs.clone(),
        }
    };
    // Group inputs in order of first read; each member input is an external input or a member's value.
    let mut externals: Vec<ValueId> = Vec::new();
    let mut nodes = Vec::with_capacity(members.len());
    for &j in members {
        let mut operands = Vec::new();
        for input in &graph.nodes[j].inputs {
            operands.push(input.map(
                |id| match members.iter().position(|&m| graph.nodes[m].outputs.first() == Some(&id)) {
                    Some(k) if members.len() > 1 => Err(k),
                    _ => {
                        externals.push(id);
                        Ok(externals.len() - 1)
                    }
                },
            ));
        }
        nodes.push(operands);
    }
    let root_node = &graph.nodes[root];
    match target {
        Target::Host => {
            let mut args: Vec<ArgSource> = externals.iter().map(at).collect();
            args.extend(root_node.outputs.iter().map(at));
            let signature = if members.len() == 1 {
                let kernel = kernel_of(root);
                host_kernels::ensure_registered(&kernel)?;
                kernel.signature()
            } else {
                let fused = FusedHostKernel {
                    nodes: members.iter().zip(nodes).map(|(&j, operands)| (kernel_of(j), operands)).collect(),
                    externals: externals.len(),
                };
                host_kernels::ensure_fused_registered(&fused)?;
                fused.signature()
            };
            let name = emit.kernel(signature, None);
            emit.steps.push(PlanStep::Launch(Step { kernel: name, args, config: host_config() }));
        }
        Target::Gpu(_) => {
            let prologue = members.len() > 1 && fusion::is_plain_layer_norm(graph, info, root);
            if info[root].elementwise().is_some() || prologue {
                // The elementwise members (all of them, or all but a LayerNormalization root) as one group.
                let count = if prologue { members.len() - 1 } else { members.len() };
                let no_device_form = || unsupported(target, graph, root, "an element type has no device form".into());
                let group = FusedGroup {
                    inputs: externals
                        .iter()
                        .map(|id| graph.value(*id).ty.as_ref().map(|t| t.dtype))
                        .collect::<Option<_>>()
                        .ok_or_else(|| OnnxError::Graph { reason: "an untyped fused input".into() })?,
                    nodes: members[..count]
                        .iter()
                        .zip(&nodes)
                        .map(|(&j, operands)| FusedNode {
                            expr: info[j].elementwise().unwrap_or_default().to_string(),
                            operands: operands.clone(),
                            out: info[j].outputs[0].dtype,
                        })
                        .collect(),
                };
                let out_dims = info[members[count - 1]].outputs[0].dims.clone();
                let mut meta = Vec::new();
                let (name, text, work) = if prologue {
                    let Some(Ok(GpuNode::Launches(l))) = &info[root].gpu else { return Err(no_device_form()) };
                    let ([ln], Some(wiring)) = (l.as_slice(), nodes.get(count)) else { return Err(no_device_form()) };
                    let GpuKind::LayerNorm { epsilon_bits, .. } = ln.kind else { return Err(no_device_form()) };
                    let external = |slot: usize| match wiring.get(slot) {
                        Some(Some(Ok(k))) => Ok(Some(*k)),
                        None | Some(None) => Ok(None),
                        Some(Some(Err(_))) => Err(no_device_form()),
                    };
                    let scale = external(1)?.ok_or_else(no_device_form)?;
                    let (name, text) = gpu_prologue::layer_norm_kernel(&group, scale, external(2)?, epsilon_bits)
                        .ok_or_else(no_device_form)?;
                    meta.extend_from_slice(&ln.meta);
                    (name, text, ln.work)
                } else {
                    let (name, text) = gpu_fused::fused_kernel(&group).ok_or_else(no_device_form)?;
                    (name, text, Work::Elements(numel(&out_dims)))
                };
                let name = emit.kernel(gpu_codegen::signature(&name, externals.len() + 1), Some(text));
                meta.extend([ext(out_dims.len()), numel(&out_dims) as i64]);
                meta.extend(out_dims.iter().map(|&d| ext(d)));
                for id in &externals {
                    meta.extend(broadcast(&operand(graph, *id)?.dims, &out_dims));
                }
                let n = numel(&out_dims);
                for id in &externals {
                    meta.extend(broadcast_mode(&operand(graph, *id)?.dims, &out_dims));
                }
                meta.push(i64::from(n <= u64::from(u32::MAX)));
                let mut args = vec![emit.meta(&meta)];
                args.extend(externals.iter().map(at));
                args.push(at(&root_node.outputs[0]));
                emit.steps.push(PlanStep::Launch(Step { kernel: name, args, config: launch_config(work) }));
            } else {
                let GpuNode::Launches(launches) = gpu_form(graph, &info[root], root, target)? else {
                    return Err(unsupported(target, graph, root, "an elementwise node outside a group".into()));
                };
                for l in launches {
                    let pointers = l
                        .slots
                        .iter()
                        .map(|s| match *s {
                            Slot::In(i) => root_node.inputs.get(i).copied().flatten().map(|id| at(&id)),
                            Slot::Out(i) => root_node.outputs.get(i).map(at),
                        })
                        .collect::<Option<Vec<_>>>()
                        .ok_or_else(|| unsupported(target, graph, root, "a launch names a missing operand".into()))?;
                    emit.gpu_launch(&l.kind, &l.meta, l.work, pointers);
                }
            }
        }
    }
    Ok(())
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

    /// A row-group launch reserves its rows' shared memory exactly when the kernels' own test
    /// (`cols * blockDim.y * 4 <= ONNX_ROW_CACHE_BYTES`) says they keep rows there.
    #[test]
    fn row_group_launches_reserve_the_rows_the_kernels_cache() {
        let prelude_bound = format!("#define ONNX_ROW_CACHE_BYTES {}", gpu_codegen::ROW_CACHE_BYTES);
        assert!(gpu_codegen::ONNX_PRELUDE.contains(&prelude_bound));
        for (rows, cols) in [(12, 5), (12, 12_288), (12, 12_289), (4096, 768), (4096, 1536), (4096, 1537), (1, 0)] {
            let config = launch_config(Work::RowGroups { rows, cols });
            let cached = cols * u64::from(config.block.y) * 4 <= gpu_codegen::ROW_CACHE_BYTES;
            let expected = if cached { cols * u64::from(config.block.y) * 4 } else { 0 };
            assert_eq!(u64::from(config.shared_mem_bytes), expected, "{rows} rows of {cols}");
        }
    }
}
