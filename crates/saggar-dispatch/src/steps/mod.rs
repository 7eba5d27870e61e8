//! Programs that run as a list of steps: the runtime every compiler lowering a model to kernel
//! launches and BLAS-Lt matmuls shares (saggar-models' reference compiler, saggar-onnx).
//!
//! A compiler plans each request as a [`ProgramPlan`]: its [`PlanStep`]s in order (a
//! [`LaunchStep`]: a kernel, its launch shape and where each argument comes from, an
//! [`ArgSource`]; or a [`MatmulStep`]: a `MatmulDesc`, its operands and a workspace range of the
//! run's scratch), the kernels they launch and the sizes of the memory they touch. It compiles the
//! kernels into code objects and stores them in a [`StepArtifact`] (a checked container with the
//! compiler's own [`ArtifactFormat`]); a load parses the artifact, plans the request again and hands
//! both to its [`ProgramLoader`], which finds each kernel in the code object declaring it with the
//! same signature, loads the modules (once per GPU device and source), uploads the weights once
//! per device and makes the matmuls' BLAS-Lt handle ready.
//!
//! The result is a [`StepProgram`], which implements [`Program`](crate::Program) itself: a launch
//! checks the bindings against the plan's sizes, resolves every argument into one per-thread buffer
//! and enqueues the steps, so a run allocates nothing and calls back into no compiler.
//!
//! - `plan.rs`: the planned steps and [`ProgramPlan`];
//! - `program.rs`: [`StepProgram`] and [`LoadedStep`], the run path;
//! - `artifact.rs`: [`StepArtifact`], its byte layout and [`ArtifactError`];
//! - `compiler.rs`: [`StepCompiler`], the [`ProgramCompiler`](crate::ProgramCompiler) of such compilers;
//! - `load.rs`: [`ProgramLoader`] and [`LoadError`].

mod artifact;
mod compiler;
mod load;
mod plan;
mod program;

pub use artifact::{
    ArtifactError, ArtifactFormat, MAX_CODE_OBJECTS, MAX_FIELDS, MAX_INPUTS, MAX_RANK, StepArtifact, source_hash,
};
pub use compiler::StepCompiler;
pub use load::{LoadError, ProgramLoader};
pub use plan::{ArgSource, LaunchStep, MatmulStep, PlanStep, ProgramPlan};
pub use program::{LoadedStep, StepProgram};
