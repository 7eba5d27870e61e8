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

#[cfg(test)]
mod tests {
    use saggar_device::BackendKind;

    use crate::compiler::{OnnxCompiler, OnnxOptions};
    use crate::graph::model::OnnxModel;

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
            for fusion in [true, false] {
                let model = OnnxModel::load(dir.join("model.onnx")).unwrap();
                let compiler = OnnxCompiler::new(model, OnnxOptions::default().with_fusion(fusion));
                let mut graph = crate::graph::passes::specialise(compiler.onnx_model().graph(), &inputs, name).unwrap();
                // The nodes lowering sees: each Conv rewritten into im2col, matmul and bias steps.
                crate::graph::passes::conv_gemm::convs_as_gemms(&mut graph);
                let mut want: Vec<&str> = graph.nodes.iter().map(|n| n.name.as_str()).collect();
                want.sort_unstable();
                for backend in [BackendKind::Host, BackendKind::Cuda] {
                    let lowered = compiler.lower(&inputs, backend).unwrap();
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
