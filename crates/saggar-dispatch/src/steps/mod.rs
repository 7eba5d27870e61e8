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
//! - `load.rs`: [`ProgramLoader`] and [`LoadError`].
//!
//! [`check_bindings`] and [`enqueue_steps`] are the binding check and enqueue loop of programs that
//! resolve their own steps through a callback ([`StepWork`]).

use std::cell::RefCell;

use saggar_device::{Backend, Blas, DeviceSlice, KernelArg, LaunchConfig, MatmulDesc, MatmulOperands, Stream};

mod artifact;
mod load;
mod plan;
mod program;

pub use artifact::{
    ArtifactError, ArtifactFormat, MAX_CODE_OBJECTS, MAX_FIELDS, MAX_INPUTS, MAX_RANK, StepArtifact, source_hash,
};
pub use load::{LoadError, ProgramLoader};
pub use plan::{ArgSource, LaunchStep, MatmulStep, PlanStep, ProgramPlan};
pub use program::{LoadedStep, StepProgram};

thread_local! {
    /// Kernel arguments of the launch being enqueued on this thread, reused so launches do not allocate.
    static LAUNCH_ARGS: RefCell<Vec<KernelArg>> = const { RefCell::new(Vec::new()) };
}

/// Checks that the bound buffers hold what a plan reads and writes: one buffer per input and output,
/// each at least its size in `input_bytes` / `output_bytes`, and `scratch_bytes` of scratch.
/// `Err` says which binding is wrong, for the caller's error.
pub fn check_bindings(
    inputs: &[DeviceSlice],
    outputs: &[DeviceSlice],
    scratch: DeviceSlice,
    input_bytes: &[usize],
    output_bytes: &[usize],
    scratch_bytes: usize,
) -> Result<(), String> {
    for (what, slices, needed) in [("input", inputs, input_bytes), ("output", outputs, output_bytes)] {
        if slices.len() != needed.len() {
            return Err(format!("{} {what}s bound, the model has {}", slices.len(), needed.len()));
        }
        for (i, (slice, need)) in slices.iter().zip(needed).enumerate() {
            if slice.len() < *need {
                return Err(format!("{what} {i} holds {} bytes, {need} needed", slice.len()));
            }
        }
    }
    if scratch.len() < scratch_bytes {
        return Err(format!("scratch holds {} bytes, {scratch_bytes} needed", scratch.len()));
    }
    Ok(())
}

/// What one step enqueues, as the program resolved it.
#[derive(Debug)]
pub enum StepWork<'s, B: Backend> {
    /// A launch of `kernel` with `config`, its arguments written into the buffer the step was given.
    Launch {
        /// The kernel.
        kernel: &'s B::Kernel,
        /// Its launch configuration.
        config: &'s LaunchConfig,
    },
    /// A matmul through the program's BLAS-Lt handle (the argument buffer is not used).
    Matmul {
        /// The handle.
        blas: &'s B::Blas,
        /// What it computes.
        desc: &'s MatmulDesc,
        /// On which buffers, the workspace included.
        operands: MatmulOperands,
    },
}

/// Enqueues every step on `stream`: `step` resolves the step, writing a launch's arguments into
/// the buffer it is given (empty on entry), and says what to enqueue.
///
/// # Safety
/// As [`Program::launch`](crate::Program::launch): every argument and operand `step` resolves must
/// name device memory that is live, and large enough for what its kernel or matmul reads and writes,
/// until the stream has passed the work (the caller has checked the bindings against the plan that
/// placed them).
pub unsafe fn enqueue_steps<'s, B: Backend, S>(
    stream: &B::Stream,
    steps: &'s [S],
    mut step: impl FnMut(&'s S, &mut Vec<KernelArg>) -> StepWork<'s, B>,
) -> saggar_device::Result<()> {
    let mut run = |args: &mut Vec<KernelArg>| {
        for s in steps {
            args.clear();
            match step(s, args) {
                // SAFETY: forwarded from this function's contract: the arguments name live memory
                // sized for the kernel.
                StepWork::Launch { kernel, config } => unsafe { stream.launch(kernel, config, args)? },
                // SAFETY: forwarded from this function's contract: the operands name live memory
                // sized for the matmul, and the workspace is this run's own.
                StepWork::Matmul { blas, desc, operands } => unsafe { blas.matmul(stream, desc, &operands)? },
            }
        }
        Ok(())
    };
    LAUNCH_ARGS.with(|cell| match cell.try_borrow_mut() {
        Ok(mut args) => run(&mut args),
        // Only reachable if a launch re-enters itself on this thread; use a fresh buffer then.
        Err(_) => run(&mut Vec::new()),
    })
}
