//! One group's steps when no fusion of its own took it: a lone GEMM through BLAS-Lt, a host kernel
//! (one node's, or a fused group evaluating its nodes in order), a generated kernel for an
//! elementwise group (or a LayerNormalization with its input group, its half Cast or quantisation, or
//! both), or the launches a node's GPU form describes.

use std::collections::HashMap;

use saggar_shape::DType;

use crate::error::OnnxError;
use crate::fuse::elementwise::{self, FusedGroup, FusedNode, Wiring};
use crate::fuse::layer_norm::{self, NormCopy, NormGroup, QuantCopy};
use crate::graph::ir::{Graph, ValueId};
use crate::lower::blas::{BlasLowering, matmul_step};
use crate::lower::host::{self, FusedHostKernel, NodeKernel};
use crate::lower::unsupported;
use crate::ops::gpu::{GpuNode, Slot, Work, broadcast, broadcast_mode, ext, kernel_signature, numel};
use crate::ops::norm::gpu::{LayerNormKernel, NormStores};
use crate::plan::emitter::Emitter;
use crate::plan::launch::{host_config, launch_config};
use crate::plan::nodes::{NodeInfo, operand};
use crate::plan::{ArgSource, LaunchStep, PlanStep, Target};

/// A group being emitted: its members (graph order, the root last), the values it reads from
/// outside in order of first read, and how each member's inputs are wired.
struct Members<'a> {
    graph: &'a Graph,
    info: &'a [NodeInfo],
    members: &'a [usize],
    root: usize,
    externals: Vec<ValueId>,
    /// Per member, per input: `Ok(k)` external `k`, `Err(m)` the value of member `m`.
    wiring: Vec<Wiring>,
    location: &'a HashMap<ValueId, ArgSource>,
    target: Target,
}

/// Emits the launches of one group (`members` in graph order, the root last).
pub(crate) fn emit_group(
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
        && let Some(step) = matmul_step(graph, &info[root], root, location, blas.precision, None)
    {
        emit.steps.push(PlanStep::Matmul(step));
        return Ok(());
    }
    // Group inputs in order of first read, each once however many members of a fused group read
    // it; each member input is an external input or a member's value.
    let fused = members.len() > 1;
    let mut externals: Vec<ValueId> = Vec::new();
    let mut wiring = Vec::with_capacity(members.len());
    for &j in members {
        let mut operands = Vec::new();
        for input in &graph.nodes[j].inputs {
            operands.push(input.map(
                |id| match members.iter().position(|&m| graph.nodes[m].outputs.first() == Some(&id)) {
                    Some(k) if fused => Err(k),
                    // A single node keeps its own operands (its op's kernel takes each).
                    _ => Ok(externals.iter().position(|&e| fused && e == id).unwrap_or_else(|| {
                        externals.push(id);
                        externals.len() - 1
                    })),
                },
            ));
        }
        wiring.push(operands);
    }
    let group = Members { graph, info, members, root, externals, wiring, location, target };
    match target {
        Target::Host => group.emit_host(emit),
        Target::Gpu(_) => match layer_norm::norm_group(graph, info, members) {
            Some(norm) => group.emit_norm(norm, emit),
            None if info[root].elementwise().is_some() => group.emit_fused(emit),
            None => group.emit_launches(emit),
        },
    }
}

impl Members<'_> {
    fn at(&self, id: &ValueId) -> ArgSource {
        self.location[id]
    }

    fn kernel_of(&self, j: usize) -> NodeKernel {
        let n = &self.graph.nodes[j];
        NodeKernel {
            op_type: n.op_type.clone(),
            op: n.op.clone(),
            inputs: self.info[j].inputs.clone(),
            outputs: self.info[j].outputs.clone(),
        }
    }

    fn no_device_form(&self) -> OnnxError {
        unsupported(self.target, self.graph, self.root, "an element type has no device form".into())
    }

    /// One host kernel: the node's own, or the group's nodes evaluated in order, writing the root's
    /// value and every other member's value that has a location (a LayerNormalization's f32 result
    /// beside the half Cast ending its group, where something else reads it).
    fn emit_host(self, emit: &mut Emitter) -> Result<(), OnnxError> {
        let mut args: Vec<ArgSource> = self.externals.iter().map(|id| self.at(id)).collect();
        let signature = if self.members.len() == 1 {
            args.extend(self.graph.nodes[self.root].outputs.iter().map(|id| self.at(id)));
            let kernel = self.kernel_of(self.root);
            host::ensure_registered(&kernel)?;
            kernel.signature()
        } else {
            let value = |m: usize| self.graph.nodes[self.members[m]].outputs[0];
            let last = self.members.len() - 1;
            let outputs: Vec<usize> =
                (0..=last).filter(|&m| m == last || self.location.contains_key(&value(m))).collect();
            args.extend(outputs.iter().map(|&m| self.at(&value(m))));
            let fused = FusedHostKernel {
                nodes: self.members.iter().zip(&self.wiring).map(|(&j, w)| (self.kernel_of(j), w.clone())).collect(),
                externals: self.externals.len(),
                outputs,
            };
            host::ensure_fused_registered(&fused)?;
            fused.signature()
        };
        let name = emit.kernel(signature, None);
        emit.steps.push(PlanStep::Launch(LaunchStep { kernel: name, args, config: host_config() }));
        Ok(())
    }

    /// The first `count` members as one elementwise group.
    fn fused_group(&self, count: usize) -> Result<FusedGroup, OnnxError> {
        let (graph, info) = (self.graph, self.info);
        Ok(FusedGroup {
            inputs: self
                .externals
                .iter()
                .map(|id| graph.value(*id).ty.as_ref().map(|t| t.dtype))
                .collect::<Option<_>>()
                .ok_or_else(|| OnnxError::Graph { reason: "an untyped fused input".into() })?,
            nodes: self.members[..count]
                .iter()
                .zip(&self.wiring)
                .map(|(&j, operands)| FusedNode {
                    expr: info[j].elementwise().unwrap_or_default().to_string(),
                    operands: operands.clone(),
                    out: info[j].outputs[0].dtype,
                })
                .collect(),
        })
    }

    /// One generated kernel for an elementwise group.
    fn emit_fused(self, emit: &mut Emitter) -> Result<(), OnnxError> {
        let group = self.fused_group(self.members.len())?;
        let kernel = elementwise::fused_kernel(&group).ok_or_else(|| self.no_device_form())?;
        let out_dims = self.info[self.root].outputs[0].dims.clone();
        let work = Work::Elements(numel(&out_dims));
        let output = self.at(&self.graph.nodes[self.root].outputs[0]);
        self.launch_group(kernel, (Vec::new(), work), &out_dims, vec![output], emit)
    }

    /// A LayerNormalization group ([`layer_norm::norm_group`]): one kernel normalising the value of
    /// the elementwise members before the norm (the op's own kernel when there are none), storing
    /// the f32 result where it has a location (always without a node after the norm) and the half
    /// or quantised copy the node ending the group computes.
    fn emit_norm(self, norm: NormGroup, emit: &mut Emitter) -> Result<(), OnnxError> {
        let (graph, info) = (self.graph, self.info);
        let ln = self.members[norm.at];
        let Some(Ok(GpuNode::Launches(l))) = &info[ln].gpu else { return Err(self.no_device_form()) };
        let ([launch], Some(wiring)) = (l.as_slice(), self.wiring.get(norm.at)) else {
            return Err(self.no_device_form());
        };
        let Some(&kernel) = launch.kernel_as::<LayerNormKernel>() else { return Err(self.no_device_form()) };
        let y = graph.nodes[ln].outputs[0];
        let half = match norm.copy {
            Some(NormCopy::Half(h)) => Some(h),
            _ => None,
        };
        let stores = NormStores { f32: norm.copy.is_none() || self.location.contains_key(&y), half };
        let quant = match norm.copy {
            Some(NormCopy::Quantized(out)) => Some(self.quant_copy(out)?),
            _ => None,
        };
        let mut outputs = Vec::new();
        if stores.f32 {
            outputs.push(self.at(&y));
        }
        if norm.copy.is_some() {
            outputs.push(self.at(&graph.nodes[self.root].outputs[0]));
        }
        if norm.at == 0 && quant.is_none() {
            let mut pointers = Vec::new();
            for slot in &launch.slots {
                match *slot {
                    Slot::In(i) => match graph.nodes[ln].inputs.get(i).copied().flatten() {
                        Some(id) => pointers.push(self.at(&id)),
                        None => return Err(self.no_device_form()),
                    },
                    Slot::Out(0) => pointers.extend(outputs.iter().copied()),
                    Slot::Out(_) => return Err(self.no_device_form()),
                }
            }
            emit.gpu_launch(&LayerNormKernel { stores, ..kernel }, &launch.meta, launch.work, pointers);
            return Ok(());
        }
        let external = |slot: usize| match wiring.get(slot) {
            Some(Some(Ok(k))) => Ok(Some(*k)),
            None | Some(None) => Ok(None),
            Some(Some(Err(_))) => Err(self.no_device_form()),
        };
        let scale = external(1)?.ok_or_else(|| self.no_device_form())?;
        let group = self.fused_group(norm.at)?;
        let text =
            layer_norm::layer_norm_kernel(&group, scale, external(2)?, kernel.epsilon_bits, (stores, quant.as_ref()))
                .ok_or_else(|| self.no_device_form())?;
        let out_dims = info[self.members[norm.at - 1]].outputs[0].dims.clone();
        self.launch_group(text, (launch.meta.clone(), launch.work), &out_dims, outputs, emit)
    }

    /// The quantised copy the QuantizeLinear ending a norm group computes: its expression of the
    /// norm's value `$0`, its scale and zero point (scalar externals) read at their one element.
    fn quant_copy(&self, out: DType) -> Result<QuantCopy, OnnxError> {
        let expr = self.info[self.root].elementwise().ok_or_else(|| self.no_device_form())?;
        let wiring = self.wiring.last().ok_or_else(|| self.no_device_form())?;
        // The norm's value (the one member operand) stays `$0`, for each store to name.
        let expr = elementwise::substitute(expr, wiring, |operand| match operand {
            Ok(e) => format!("in{e}[0]"),
            Err(_) => "$0".to_string(),
        });
        Ok(QuantCopy { out, expr })
    }

    /// Launches the generated kernel `(name, text)` of a fused group computing a value of `out_dims`:
    /// `meta` is the kernel's own table (`head`, then the group's: extents, each external input's
    /// broadcast strides and mode, a 32-bit flag), then the externals and `outputs` are its pointers.
    fn launch_group(
        &self,
        (name, text): (String, String),
        (head, work): (Vec<i64>, Work),
        out_dims: &[usize],
        outputs: Vec<ArgSource>,
        emit: &mut Emitter,
    ) -> Result<(), OnnxError> {
        let graph = self.graph;
        let name = emit.kernel(kernel_signature(&name, self.externals.len() + outputs.len()), Some(text));
        let mut meta = head;
        meta.extend([ext(out_dims.len()), numel(out_dims) as i64]);
        meta.extend(out_dims.iter().map(|&d| ext(d)));
        for id in &self.externals {
            meta.extend(broadcast(&operand(graph, *id)?.dims, out_dims));
        }
        let n = numel(out_dims);
        let modes = self
            .externals
            .iter()
            .map(|id| Ok(broadcast_mode(&operand(graph, *id)?.dims, out_dims)))
            .collect::<Result<Vec<_>, OnnxError>>()?;
        meta.extend(modes.iter().flat_map(|&[mode, m, _]| [mode, m]));
        meta.push(i64::from(n <= u64::from(u32::MAX)));
        meta.extend(modes.iter().map(|&[_, _, count]| count));
        let mut args = vec![emit.meta(&meta)];
        args.extend(self.externals.iter().map(|id| self.at(id)));
        args.extend(outputs);
        emit.steps.push(PlanStep::Launch(LaunchStep { kernel: name, args, config: launch_config(work) }));
        Ok(())
    }

    /// The launches of a lone node's GPU form.
    fn emit_launches(self, emit: &mut Emitter) -> Result<(), OnnxError> {
        let (graph, target, root) = (self.graph, self.target, self.root);
        let launches = match &self.info[root].gpu {
            Some(Ok(GpuNode::Launches(launches))) => launches,
            Some(Ok(GpuNode::Elementwise(_))) => {
                return Err(unsupported(target, graph, root, "an elementwise node outside a group".into()));
            }
            Some(Err(e)) => return Err(unsupported(target, graph, root, e.to_string())),
            None => return Err(unsupported(target, graph, root, "the op has no GPU lowering".into())),
        };
        let root_node = &graph.nodes[root];
        for l in launches {
            let pointers = l
                .slots
                .iter()
                .map(|s| match *s {
                    Slot::In(i) => root_node.inputs.get(i).copied().flatten().map(|id| self.at(&id)),
                    Slot::Out(i) => root_node.outputs.get(i).map(|id| self.at(id)),
                })
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| unsupported(target, graph, root, "a launch names a missing operand".into()))?;
            emit.gpu_launch(&*l.kernel, &l.meta, l.work, pointers);
        }
        Ok(())
    }
}
