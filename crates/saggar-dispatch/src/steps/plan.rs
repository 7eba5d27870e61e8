//! The planned form of a step program: what each step runs and where each of its arguments comes
//! from, independent of the backend and of the memory a run is given.

use saggar_device::{KernelSignature, LaunchConfig, MatmulDesc};

/// Where one kernel argument or matmul operand comes from. A [`super::StepProgram`] resolves it on
/// every launch against that run's bindings, its scratch and the program's own buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ArgSource {
    /// The start of input binding `i`.
    Input(usize),
    /// The start of output binding `i`.
    Output(usize),
    /// The run's scratch memory at this byte offset.
    Scratch(usize),
    /// The device's shared weight buffer at this byte offset, counted from where the compiler's
    /// bytes start (see [`super::ProgramLoader::new`]).
    Weights(usize),
    /// The program's own constants ([`ProgramPlan::local_constants`]) at this byte offset.
    Local(usize),
    /// A byte count, passed as a `u64` (a copy kernel's length).
    Bytes(u64),
    /// A `u32` scalar.
    U32(u32),
}

/// One planned kernel launch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchStep {
    /// The kernel's name, as a code object of the program declares it.
    pub kernel: String,
    /// Its arguments, in the kernel's parameter order.
    pub args: Vec<ArgSource>,
    /// Its launch shape.
    pub config: LaunchConfig,
}

/// One planned matmul through the backend's BLAS-Lt handle. Operands are `f32`; each spans what
/// `desc` reads or writes of it over every batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MatmulStep {
    /// What it computes.
    pub desc: MatmulDesc,
    /// `A`.
    pub a: ArgSource,
    /// `B`.
    pub b: ArgSource,
    /// `C`, the result.
    pub c: ArgSource,
    /// The bias vector, when `desc` adds one.
    pub bias: Option<ArgSource>,
    /// Byte offset of the library's workspace in scratch: a range of the run's own scratch, so
    /// concurrent runs never share one and nothing is allocated during a capture.
    pub workspace: usize,
}

/// One step of a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanStep {
    /// A kernel launch.
    Launch(LaunchStep),
    /// A matmul through the backend's BLAS-Lt handle.
    Matmul(MatmulStep),
}

/// Everything a compiler planned for one request that the loaded program needs: its steps in
/// order, the kernels they launch, and the sizes of the memory they touch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProgramPlan {
    /// Names the program in the errors of its launches, e.g. ``saggar-onnx program `bert` ``.
    pub label: String,
    /// The steps, in run order.
    pub steps: Vec<PlanStep>,
    /// Every kernel the launch steps name, with its signature; a load finds each in the code
    /// object that declares it with exactly this signature.
    pub kernels: Vec<KernelSignature>,
    /// Concrete output dimensions, in binding order.
    pub output_dims: Vec<Vec<u64>>,
    /// Bytes each input binding must hold, in binding order.
    pub input_bytes: Vec<usize>,
    /// Bytes each output binding must hold, in binding order.
    pub output_bytes: Vec<usize>,
    /// Bytes of scratch one run needs (a matmul's workspace included).
    pub scratch_bytes: usize,
    /// Constants of this program alone ([`ArgSource::Local`]), uploaded with it.
    pub local_constants: Vec<u8>,
}
