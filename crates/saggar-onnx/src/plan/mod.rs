//! The plan a lowering produces for one concrete input shape: its steps (kernel launches and BLAS-Lt
//! matmuls, saggar-dispatch's [`PlanStep`], the one step-program form every compiler shares) with
//! where each argument lives ([`ArgSource`]), the kernels they need, and the memory plan.
//!
//! Locations: model inputs and outputs are the caller's bindings; the constants of the imported
//! model live in one weight buffer per device ([`memory::WeightLayout`], shared by every program);
//! constants that appear only for one shape (folded shape vectors) and the kernels' `meta` tables live
//! in the program's own small buffer ([`emitter::Emitter::meta`]); every other value gets an offset in
//! the run's scratch memory ([`memory::MemoryPlan`]).
//!
//! **Architecture Invariant:** the plan layer describes programs; it decides nothing about fusion or
//! lowering and imports only the graph, the ops and the layers below them.

pub(crate) mod emitter;
pub(crate) mod host;
pub(crate) mod labels;
pub(crate) mod launch;
pub(crate) mod memory;
pub(crate) mod nodes;

use saggar_device::{BackendKind, KernelSignature};
pub(crate) use saggar_dispatch::steps::{ArgSource, LaunchStep, MatmulStep, PlanStep};

use self::labels::StepLabels;

/// What the plan is lowered for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// Host kernels.
    Host,
    /// Generated CUDA/HIP C++ (the backend only names errors).
    Gpu(BackendKind),
}

/// Kernel counts of one lowered program.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
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
    /// Floating-point operations of the matmul steps (`2 m n k` per product): the model FLOPs
    /// `saggar perf` divides by the measured time.
    pub matmul_flops: u64,
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
