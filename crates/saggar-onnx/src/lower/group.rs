//! One group's steps when no fusion of its own took it: a lone GEMM through BLAS-Lt, a host kernel
//! (one node's, or a fused group evaluating its nodes in order), a generated kernel for an
//! elementwise group (or a LayerNormalization with its input group), or the launches a node's GPU
//! form describes.

use std::collections::HashMap;

use crate::error::OnnxError;
use crate::fuse::elementwise::{self, FusedGroup, FusedNode, Wiring};
use crate::fuse::layer_norm;
use crate::graph::ir::{Graph, ValueId};
use crate::lower::blas::{BlasLowering, matmul_step};
use crate::lower::host::{self, FusedHostKernel, NodeKernel};
use crate::lower::unsupported;
use crate::ops::gpu::{GpuNode, Slot, Work, broadcast, broadcast_mode, ext, kernel_signature, numel};
use crate::ops::norm::gpu::LayerNormKernel;
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
    // Group inputs in order of first read; each member input is an external input or a member's value.
    let mut externals: Vec<ValueId> = Vec::new();
    let mut wiring = Vec::with_capacity(members.len());
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
        wiring.push(operands);
    }
    let group = Members { graph, info, members, root, externals, wiring, location, target };
    match target {
        Target::Host => group.emit_host(emit),
        Target::Gpu(_) => {
            let prologue = members.len() > 1 && layer_norm::is_plain_layer_norm(graph, info, root);
            if info[root].elementwise().is_some() || prologue {
                group.emit_fused(prologue, emit)
            } else {
                group.emit_launches(emit)
            }
        }
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

    /// One host kernel: the node's own, or the group's nodes evaluated in order.
    fn emit_host(self, emit: &mut Emitter) -> Result<(), OnnxError> {
        let mut args: Vec<ArgSource> = self.externals.iter().map(|id| self.at(id)).collect();
        args.extend(self.graph.nodes[self.root].outputs.iter().map(|id| self.at(id)));
        let signature = if self.members.len() == 1 {
            let kernel = self.kernel_of(self.root);
            host::ensure_registered(&kernel)?;
            kernel.signature()
        } else {
            let fused = FusedHostKernel {
                nodes: self.members.iter().zip(&self.wiring).map(|(&j, w)| (self.kernel_of(j), w.clone())).collect(),
                externals: self.externals.len(),
            };
            host::ensure_fused_registered(&fused)?;
            fused.signature()
        };
        let name = emit.kernel(signature, None);
        emit.steps.push(PlanStep::Launch(LaunchStep { kernel: name, args, config: host_config() }));
        Ok(())
    }

    /// One generated kernel for the elementwise members: all of them, or (`prologue`) all but a
    /// LayerNormalization root that normalises their result in the same kernel.
    fn emit_fused(self, prologue: bool, emit: &mut Emitter) -> Result<(), OnnxError> {
        let (graph, info, members) = (self.graph, self.info, self.members);
        let count = if prologue { members.len() - 1 } else { members.len() };
        let group = FusedGroup {
            inputs: self
                .externals
                .iter()
                .map(|id| graph.value(*id).ty.as_ref().map(|t| t.dtype))
                .collect::<Option<_>>()
                .ok_or_else(|| OnnxError::Graph { reason: "an untyped fused input".into() })?,
            nodes: members[..count]
                .iter()
                .zip(&self.wiring)
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
            let Some(Ok(GpuNode::Launches(l))) = &info[self.root].gpu else { return Err(self.no_device_form()) };
            let ([ln], Some(wiring)) = (l.as_slice(), self.wiring.get(count)) else {
                return Err(self.no_device_form());
            };
            let Some(&LayerNormKernel { epsilon_bits, .. }) = ln.kernel_as::<LayerNormKernel>() else {
                return Err(self.no_device_form());
            };
            let external = |slot: usize| match wiring.get(slot) {
                Some(Some(Ok(k))) => Ok(Some(*k)),
                None | Some(None) => Ok(None),
                Some(Some(Err(_))) => Err(self.no_device_form()),
            };
            let scale = external(1)?.ok_or_else(|| self.no_device_form())?;
            let (name, text) = layer_norm::layer_norm_kernel(&group, scale, external(2)?, epsilon_bits)
                .ok_or_else(|| self.no_device_form())?;
            meta.extend_from_slice(&ln.meta);
            (name, text, ln.work)
        } else {
            let (name, text) = elementwise::fused_kernel(&group).ok_or_else(|| self.no_device_form())?;
            (name, text, Work::Elements(numel(&out_dims)))
        };
        let name = emit.kernel(kernel_signature(&name, self.externals.len() + 1), Some(text));
        meta.extend([ext(out_dims.len()), numel(&out_dims) as i64]);
        meta.extend(out_dims.iter().map(|&d| ext(d)));
        for id in &self.externals {
            meta.extend(broadcast(&operand(graph, *id)?.dims, &out_dims));
        }
        let n = numel(&out_dims);
        let modes = self
            .externals
            .iter()
            .map(|id| Ok(broadcast_mode(&operand(graph, *id)?.dims, &out_dims)))
            .collect::<Result<Vec<_>, OnnxError>>()?;
        meta.extend(modes.iter().flat_map(|&[mode, m, _]| [mode, m]));
        meta.push(i64::from(n <= u64::from(u32::MAX)));
        meta.extend(modes.iter().map(|&[_, _, count]| count));
        let mut args = vec![emit.meta(&meta)];
        args.extend(self.externals.iter().map(|id| self.at(id)));
        args.push(self.at(&graph.nodes[self.root].outputs[0]));
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
