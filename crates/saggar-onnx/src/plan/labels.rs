//! Which ONNX nodes each step of a lowered plan computes, for profiles: steps are grouped (a fused
//! group, an attention pattern or a GEMM with its epilogue may emit one or several steps) and each
//! group names its member nodes in graph order; [`kinds`] says what each step runs.

use crate::graph::ir::Graph;
use crate::plan::PlanStep;

/// The nodes one group of steps computes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GroupLabel {
    /// Op types of the members in graph order (a copy into an output binding: `"OutputCopy"`).
    pub(crate) ops: Vec<String>,
    /// Node names of the members in graph order (a copy into an output binding: empty).
    pub(crate) nodes: Vec<String>,
}

/// Labels collected while lowering.
#[derive(Debug, Clone, Default)]
pub(crate) struct StepLabels {
    /// The group of each step, by step index.
    pub(crate) step_group: Vec<usize>,
    pub(crate) groups: Vec<GroupLabel>,
    /// Nodes that launch nothing (views sharing their input's bytes).
    pub(crate) untimed: Vec<String>,
}

impl StepLabels {
    /// Records that `members` (node indices in graph order) were lowered to the steps after the
    /// first `steps_before` of `steps_now`; returns the group, or `None` (the members then count as
    /// untimed) when they emitted no step.
    pub(crate) fn group(
        &mut self,
        graph: &Graph,
        members: &[usize],
        steps_before: usize,
        steps_now: usize,
    ) -> Option<usize> {
        if steps_now <= steps_before {
            self.untimed(graph, members);
            return None;
        }
        let id = self.groups.len();
        self.groups.push(GroupLabel {
            ops: members.iter().map(|&j| graph.nodes[j].op_type.clone()).collect(),
            nodes: members.iter().map(|&j| graph.nodes[j].name.clone()).collect(),
        });
        self.step_group.resize(steps_now, id);
        Some(id)
    }

    /// Adds `members` to `group` (a group a GEMM took into its epilogue).
    pub(crate) fn absorb(&mut self, group: usize, graph: &Graph, members: &[usize]) {
        let label = &mut self.groups[group];
        label.ops.extend(members.iter().map(|&j| graph.nodes[j].op_type.clone()));
        label.nodes.extend(members.iter().map(|&j| graph.nodes[j].name.clone()));
    }

    /// Records a copy of a computed value into output `output` (`name`) as the steps after the
    /// first `steps_before`.
    pub(crate) fn output_copy(&mut self, name: &str, steps_before: usize, steps_now: usize) {
        let id = self.groups.len();
        self.groups.push(GroupLabel { ops: vec!["OutputCopy".into()], nodes: vec![format!("output `{name}`")] });
        self.step_group.resize(steps_now.max(steps_before), id);
    }

    /// Nodes launching nothing (views, groups that emitted no step).
    pub(crate) fn untimed(&mut self, graph: &Graph, members: &[usize]) {
        self.untimed.extend(members.iter().map(|&j| graph.nodes[j].name.clone()));
    }
}

/// What each step runs: the kernel's name, or `matmul M×N×K×BATCH` for a BLAS-Lt matmul.
pub(crate) fn kinds(steps: &[PlanStep]) -> Vec<String> {
    steps
        .iter()
        .map(|s| match s {
            PlanStep::Launch(s) => s.kernel.clone(),
            PlanStep::Matmul(m) => {
                let d = &m.desc;
                format!("matmul {}×{}×{}×{}", d.m, d.n, d.k, d.batch)
            }
        })
        .collect()
}
