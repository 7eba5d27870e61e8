//! Lowering a specialised graph to a plan ([`crate::plan`]) for the host backend or for CUDA/HIP.
//!
//! Nodes are first grouped ([`crate::fuse`]): a group is one step of the plan, with one memory plan
//! for every target. On the host a step is one host kernel (a lone node's op, a fused group
//! evaluating its nodes in order, or an attention group's kernel); on CUDA and HIP a step is one
//! generated kernel per fused group (elementwise, LayerNormalization with its input group, an
//! embedding bag, or attention), or the launches the op describes ([`crate::ops::gpu`]), each with
//! its `meta` table placed in the program's own constants. GEMMs the BLAS-Lt libraries can express
//! become matmul steps ([`blas`]).
//!
//! A view (Reshape, Flatten, Squeeze, Unsqueeze: [`crate::ops::Op::is_view`]) launches nothing: its
//! output shares its input's location. A graph output produced by a node is computed straight into
//! the output binding; an output that reads an input, a constant or another output's value gets a
//! copy at the end.

pub(crate) mod blas;
mod group;
pub(crate) mod host;

use std::collections::{HashMap, HashSet};

use saggar_device::BackendKind;
use saggar_shape::DType;

use self::blas::{BlasLowering, matmul_step, reserve_workspace};
use crate::error::OnnxError;
use crate::fuse::attention::{self, AttentionKernel};
use crate::fuse::blas_epilogue::{EpilogueFusion, epilogue_fusions};
use crate::fuse::layer_norm::{self, NormGroup};
use crate::fuse::{self, Grouping, embedding_bag};
use crate::graph::ir::{Graph, ValueId};
use crate::graph::passes::precision;
use crate::ops::data_movement::gpu::copy_launch;
use crate::ops::gpu::{GpuNode, Slot};
use crate::plan::emitter::Emitter;
use crate::plan::labels::StepLabels;
use crate::plan::launch::host_config;
use crate::plan::memory::{MemoryPlan, WeightLayout, bytes_of};
use crate::plan::nodes::{NodeInfo, describe, operand};
use crate::plan::{ArgSource, LaunchStep, Lowered, PlanStep, PlanSummary, Target};

fn unsupported(target: Target, graph: &Graph, node: usize, reason: String) -> OnnxError {
    let n = &graph.nodes[node];
    let backend = match target {
        Target::Gpu(b) => b,
        Target::Host => BackendKind::Host,
    };
    OnnxError::UnsupportedOnBackend { backend, op: n.op_type.clone(), node: n.name.clone(), reason }
}

/// Every node of `graph` (specialised) with no GPU form for its operands on `backend`, as errors
/// naming each: what a GPU lowering refuses, listed at once.
pub(crate) fn gpu_refusals(graph: &Graph, backend: BackendKind) -> Result<Vec<OnnxError>, OnnxError> {
    let info = describe(graph)?;
    let reason = |gpu: &Option<Result<GpuNode, crate::error::OpError>>| match gpu {
        None => Some("the op has no GPU lowering".to_string()),
        Some(Err(e)) => Some(e.to_string()),
        Some(Ok(_)) => None,
    };
    Ok(info
        .iter()
        .enumerate()
        .filter_map(|(node, n)| reason(&n.gpu).map(|why| unsupported(Target::Gpu(backend), graph, node, why)))
        .collect())
}

/// How fused groups compute: the attention kernel choice for f32 attention, and the half type
/// (f16 or bf16, from the precision) attention groups compute in unless `keep_fp32` names one of
/// their nodes or its op type.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Fusion<'a> {
    pub(crate) attention: AttentionKernel,
    pub(crate) half: Option<DType>,
    pub(crate) keep_fp32: &'a [String],
}

/// Lowers `graph` (specialised: every shape fixed) against the device weights `weights` for
/// `target`, registering host kernels for the host. With `blas`, GEMMs the BLAS-Lt libraries can
/// express become matmul steps ([`blas`]) on every target, and the library's workspace is reserved
/// at the end of scratch. `fusion` is `None` for an unfused plan, else how fused groups compute.
/// Refuses programs whose scratch or any tensor exceeds `limit` bytes.
pub(crate) fn lower(
    graph: &Graph,
    weights: &WeightLayout,
    limit: u64,
    target: Target,
    blas: Option<BlasLowering>,
    fusion: Option<Fusion<'_>>,
) -> Result<Lowered, OnnxError> {
    let info = describe(graph)?;
    let grouping = fuse::group(graph, &info, fusion.is_some());
    let fusions = match blas {
        Some(b) if fusion.is_some() => epilogue_fusions(graph, &info, &grouping.root, b.precision),
        _ => HashMap::new(),
    };
    let absorbed = fusions.iter().map(|(&gemm, f)| (f.group, gemm)).collect();
    let memory = MemoryPlan::new(graph, &grouping.root, limit);
    let mut lowering = Lowering {
        graph,
        target,
        blas,
        fusion: fusion.unwrap_or_default(),
        info,
        grouping,
        fusions,
        absorbed,
        memory,
        emit: Emitter::default(),
        labels: StepLabels::default(),
        summary: PlanSummary::default(),
        gemm_group: HashMap::new(),
        uses: graph.use_counts(),
    };
    let input_bytes = lowering.bind_inputs_and_constants(weights, limit)?;
    let outputs = lowering.bind_outputs(limit)?;
    for step in 0..graph.nodes.len() {
        if lowering.grouping.root[step] == step {
            lowering.lower_group(step)?;
        }
        lowering.memory.release(step);
    }
    lowering.copy_outputs(&outputs)?;
    lowering.finish(input_bytes, outputs, limit)
}

/// The output bindings: bytes and dimensions of each, and the outputs copied at the end (output
/// index, value read).
struct Outputs {
    bytes: Vec<usize>,
    dims: Vec<Vec<u64>>,
    copies: Vec<(usize, ValueId)>,
}

/// One lowering in progress.
struct Lowering<'g> {
    graph: &'g Graph,
    target: Target,
    blas: Option<BlasLowering>,
    fusion: Fusion<'g>,
    info: Vec<NodeInfo>,
    grouping: Grouping,
    /// Groups a GEMM takes into its BLAS epilogue, by GEMM node.
    fusions: HashMap<usize, EpilogueFusion>,
    /// The GEMM node absorbing each such group, by the group's root.
    absorbed: HashMap<usize, usize>,
    memory: MemoryPlan,
    emit: Emitter,
    labels: StepLabels,
    summary: PlanSummary,
    /// The label group of each GEMM node's steps (so an absorbed group is labelled with it).
    gemm_group: HashMap<usize, usize>,
    /// How many node inputs and graph outputs read each value.
    uses: Vec<usize>,
}

impl Lowering<'_> {
    /// Binds the model inputs and places the constants read (the model's in the shared weights,
    /// per-shape ones in the program's own constants); returns each input's bytes.
    fn bind_inputs_and_constants(&mut self, weights: &WeightLayout, limit: u64) -> Result<Vec<usize>, OnnxError> {
        let graph = self.graph;
        let mut input_bytes = Vec::new();
        for (i, &id) in graph.inputs.iter().enumerate() {
            input_bytes.push(bytes_of(graph, id, limit)?);
            self.memory.bind(id, ArgSource::Input(i));
        }
        for (i, v) in graph.values.iter().enumerate() {
            let id = ValueId(i);
            if let (Some(t), true) = (&v.constant, self.uses[i] > 0) {
                let src = match weights.offsets.get(&id) {
                    Some(&off) => ArgSource::Weights(off),
                    None => self.emit.constant(&t.to_le_bytes()),
                };
                self.memory.bind(id, src);
            }
        }
        Ok(input_bytes)
    }

    /// Outputs produced by nodes go straight to their binding (the first output reading a value);
    /// the others are copied at the end.
    fn bind_outputs(&mut self, limit: u64) -> Result<Outputs, OnnxError> {
        let graph = self.graph;
        let produced: HashSet<ValueId> = graph.nodes.iter().flat_map(|n| n.outputs.iter().copied()).collect();
        let mut outputs = Outputs { bytes: Vec::new(), dims: Vec::new(), copies: Vec::new() };
        for (i, out) in graph.outputs.iter().enumerate() {
            let op = operand(graph, out.value)?;
            outputs.bytes.push(bytes_of(graph, out.value, limit)?);
            outputs.dims.push(op.dims.iter().map(|&d| d as u64).collect());
            if produced.contains(&out.value) && self.memory.location(out.value).is_none() {
                self.memory.bind(out.value, ArgSource::Output(i));
            } else {
                outputs.copies.push((i, out.value));
                self.memory.read_at_end(out.value);
            }
        }
        Ok(outputs)
    }

    /// The members of the group rooted at `step`, in graph order.
    fn members(&self, step: usize) -> Vec<usize> {
        (0..=step).filter(|&j| self.grouping.root[j] == step).collect()
    }

    /// Lowers the group rooted at `step`.
    fn lower_group(&mut self, step: usize) -> Result<(), OnnxError> {
        let graph = self.graph;
        let node = &graph.nodes[step];
        // A view (Reshape, Flatten, Squeeze, Unsqueeze) reads the same bytes under another shape:
        // its output takes its input's location and no kernel runs; graph outputs still get their
        // own binding.
        if let (true, [o], Some(Some(input))) = (node.op.is_view(), node.outputs.as_slice(), node.inputs.first())
            && !self.grouping.attention.contains_key(&step)
            && self.memory.location(*o).is_none()
            && let Some(src) = self.memory.location(*input)
        {
            self.memory.share(*o, src, step);
            self.labels.untimed(graph, &[step]);
            return Ok(());
        }
        if let Some(&gemm) = self.absorbed.get(&step) {
            self.absorb_into_gemm(step, gemm);
            return Ok(());
        }
        for &o in &node.outputs {
            if self.memory.location(o).is_none() {
                self.memory.place(graph, o, step)?;
            }
        }
        let members = self.members(step);
        // A LayerNormalization whose group ends with its half Cast or its quantisation stores its f32
        // result only where something besides that node reads it.
        if let Some(NormGroup { at, copy: Some(_) }) = layer_norm::norm_group(graph, &self.info, &members) {
            let y = graph.nodes[members[at]].outputs[0];
            if self.memory.location(y).is_none() && self.uses[y.0] > 1 {
                self.memory.place(graph, y, step)?;
            }
        }
        self.count_members(&members);
        let steps_before = self.emit.steps.len();
        self.emit_members(step, &members)?;
        if let Some(group) = self.labels.group(graph, &members, steps_before, self.emit.steps.len()) {
            self.gemm_group.insert(step, group);
        }
        Ok(())
    }

    /// A group a GEMM took into its epilogue launches nothing: its output is the GEMM's result
    /// (already in the output binding when the group's output is a graph output).
    fn absorb_into_gemm(&mut self, step: usize, gemm: usize) {
        let graph = self.graph;
        let members = self.members(step);
        self.summary.nodes += members.len();
        self.summary.launches_unfused += members.len();
        match self.gemm_group.get(&gemm) {
            Some(&group) => self.labels.absorb(group, graph, &members),
            None => self.labels.untimed(graph, &members),
        }
        let out = graph.nodes[step].outputs[0];
        if self.memory.location(out).is_none()
            && let Some(src) = self.memory.location(graph.nodes[gemm].outputs[0])
        {
            self.memory.share(out, src, step);
        }
    }

    /// Counts the computing members of a group in the summary.
    fn count_members(&mut self, members: &[usize]) {
        for &j in members {
            if self.graph.nodes[j].op.is_view() {
                continue;
            }
            self.summary.nodes += 1;
            self.summary.launches_unfused += match &self.info[j].gpu {
                Some(Ok(GpuNode::Launches(l))) => l.len(),
                _ => 1,
            };
        }
        if members.len() > 1 {
            self.summary.fused_groups += 1;
        }
    }

    /// Emits the steps of the group rooted at `step`: a GEMM with its epilogue group, an attention
    /// pattern, an embedding bag, or the group's own kernels.
    fn emit_members(&mut self, step: usize, members: &[usize]) -> Result<(), OnnxError> {
        let graph = self.graph;
        let location = self.memory.locations();
        if let (Some(blas), Some(fusion)) = (self.blas, self.fusions.get(&step)) {
            // The GEMM computes its reader group too, into the group's output binding when that is a
            // graph output, else into its own block, which the group's output then shares.
            let out = graph.nodes[fusion.group].outputs[0];
            let dest = location.get(&out).copied().unwrap_or(location[&graph.nodes[step].outputs[0]]);
            let fused = matmul_step(graph, &self.info[step], step, location, blas.precision, Some((fusion, dest)))
                .ok_or_else(|| OnnxError::Graph { reason: "a GEMM planned for BLAS has no BLAS form".into() })?;
            self.emit.steps.push(PlanStep::Matmul(fused));
            self.summary.fused_groups += 1;
        } else if let Some(a) = self.grouping.attention.get(&step) {
            self.summary.attention_groups += 1;
            let kept = a.members.iter().any(|&n| precision::kept(self.fusion.keep_fp32, &graph.nodes[n]));
            let half = self.fusion.half.filter(|_| !kept);
            attention::lower::emit(graph, a, location, self.target, (self.fusion.attention, half), &mut self.emit)?;
        } else if let (Some(bag), Target::Gpu(_)) = (self.grouping.bags.get(&step), self.target) {
            embedding_bag::emit(graph, bag, location, &mut self.emit)?;
        } else {
            group::emit_group(graph, &self.info, members, location, self.target, self.blas, &mut self.emit)?;
        }
        Ok(())
    }

    /// Copies the outputs no node computes into their bindings.
    fn copy_outputs(&mut self, outputs: &Outputs) -> Result<(), OnnxError> {
        for &(i, id) in &outputs.copies {
            let src = self
                .memory
                .location(id)
                .ok_or_else(|| OnnxError::Graph { reason: format!("output {i} reads a value never computed") })?;
            self.summary.nodes += 1;
            self.summary.launches_unfused += 1;
            let steps_before = self.emit.steps.len();
            match self.target {
                Target::Host => {
                    host::ensure_copy_registered()?;
                    let name = self.emit.kernel(host::copy_signature(), None);
                    let args = vec![ArgSource::Output(i), src, ArgSource::Bytes(outputs.bytes[i] as u64)];
                    self.emit.steps.push(PlanStep::Launch(LaunchStep { kernel: name, args, config: host_config() }));
                }
                Target::Gpu(_) => {
                    let l = copy_launch(1, &[outputs.bytes[i]], (Slot::In(0), 0, &[1]), (Slot::Out(0), 0, &[1]));
                    self.emit.gpu_launch(&*l.kernel, &l.meta, l.work, vec![src, ArgSource::Output(i)]);
                }
            }
            self.labels.output_copy(&self.graph.outputs[i].name, steps_before, self.emit.steps.len());
        }
        Ok(())
    }

    /// Reserves the BLAS workspace and completes the summary.
    fn finish(mut self, input_bytes: Vec<usize>, outputs: Outputs, limit: u64) -> Result<Lowered, OnnxError> {
        let high_water = self.memory.high_water();
        let scratch_bytes = reserve_workspace(&mut self.emit.steps, high_water, self.blas, limit)?;
        let constant_bytes = self.emit.constant_bytes();
        let (steps, kernels, definitions, local_constants) = self.emit.into_parts();
        let mut summary = self.summary;
        summary.launches = steps.len();
        summary.scratch_bytes = high_water;
        summary.unshared_scratch_bytes = self.memory.unshared_bytes();
        summary.matmuls = steps.iter().filter(|s| matches!(s, PlanStep::Matmul(_))).count();
        summary.matmul_flops = steps
            .iter()
            .filter_map(|s| match s {
                PlanStep::Matmul(m) => Some(2 * m.desc.m * m.desc.n * m.desc.k * m.desc.batch),
                _ => None,
            })
            .sum();
        summary.blas_workspace_bytes = scratch_bytes - high_water;
        summary.peak_bytes = [scratch_bytes, constant_bytes]
            .into_iter()
            .chain(input_bytes.iter().copied())
            .chain(outputs.bytes.iter().copied())
            .fold(0usize, usize::saturating_add);
        Ok(Lowered {
            steps,
            kernels,
            definitions,
            gpu: matches!(self.target, Target::Gpu(_)),
            scratch_bytes,
            local_constants,
            input_bytes,
            output_bytes: outputs.bytes,
            output_dims: outputs.dims,
            summary,
            labels: self.labels,
        })
    }
}

#[cfg(test)]
mod tests {
    use saggar_device::{BackendKind, MatmulPrecision};

    use super::*;
    use crate::graph::model::OnnxModel;
    use crate::graph::passes;
    use crate::plan::memory::weight_layout;

    /// Every node of the specialised graph is named by exactly one group or listed as untimed, and
    /// every step has a group: on the host and CUDA lowerings, fused and not, for every checked-in
    /// model.
    #[test]
    fn labels_name_every_specialised_node_once_on_every_target() {
        let models = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("models");
        for name in ["mlp", "cnn", "dlrm", "bert"] {
            let dir = models.join(name);
            let inputs: Vec<Vec<u64>> = (0..)
                .map(|i| dir.join(format!("test_data_set_0/input_{i}.pb")))
                .take_while(|p| p.is_file())
                .map(|p| crate::read_tensor_pb(&p).unwrap().tensor.dims().iter().map(|&d| d as u64).collect())
                .collect();
            let model = OnnxModel::load(dir.join("model.onnx")).unwrap();
            let weights = weight_layout(model.graph());
            let mut graph = passes::specialise(model.graph(), &inputs, &[], name).unwrap();
            // The nodes lowering sees: each Conv rewritten into im2col, matmul and bias steps.
            passes::conv_gemm::convs_as_gemms(&mut graph, crate::ConvEngine::Auto);
            let mut want: Vec<&str> = graph.nodes.iter().map(|n| n.name.as_str()).collect();
            want.sort_unstable();
            for fusion in [true, false] {
                for (backend, target) in
                    [(BackendKind::Host, Target::Host), (BackendKind::Cuda, Target::Gpu(BackendKind::Cuda))]
                {
                    let blas = BlasLowering { precision: MatmulPrecision::default(), workspace_bytes: 0 };
                    let fused = fusion.then_some(Fusion::default());
                    let lowered = lower(&graph, &weights, 8 << 30, target, Some(blas), fused).unwrap();
                    let labels = &lowered.labels;
                    assert_eq!(labels.step_group.len(), lowered.steps.len(), "{name} {backend:?}: a group per step");
                    assert!(labels.step_group.windows(2).all(|w| w[0] <= w[1]), "groups in program order");
                    let mut got: Vec<&str> = labels
                        .groups
                        .iter()
                        .filter(|g| g.ops != ["OutputCopy"])
                        .flat_map(|g| g.nodes.iter())
                        .chain(&labels.untimed)
                        .map(String::as_str)
                        .collect();
                    got.sort_unstable();
                    assert_eq!(got, want, "{name} {backend:?} fusion {fusion}: every node exactly once");
                    if fusion && name != "mlp" {
                        assert!(labels.groups.iter().any(|g| g.nodes.len() > 1), "{name}: fused groups labelled");
                    }
                }
            }
        }
    }
}
