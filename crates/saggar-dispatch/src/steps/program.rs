//! A loaded step program and its run path: the binding check, argument resolution, and the
//! launches and matmuls, enqueued with one per-thread argument buffer so a run allocates nothing.

use std::cell::RefCell;
use std::ops::Range;
use std::sync::Arc;

use saggar_device::{
    Backend, Blas as _, DeviceBuffer as _, DevicePtr, DeviceSlice, KernelArg, LaunchConfig, MatmulOperands, Stream as _,
};

use super::plan::{ArgSource, MatmulStep};
use crate::compiler::Program;
use crate::resident::ResidentBuffer;

thread_local! {
    /// Kernel arguments of the launch being enqueued on this thread, reused so launches do not allocate.
    static LAUNCH_ARGS: RefCell<Vec<KernelArg>> = const { RefCell::new(Vec::new()) };
}

/// One step of a loaded program.
#[derive(Debug)]
pub enum LoadedStep<B: Backend> {
    /// A launch of `kernel` with `config`, its arguments resolved per run.
    Launch {
        /// The kernel, from one of the program's modules.
        kernel: B::Kernel,
        /// Where each argument comes from.
        args: Vec<ArgSource>,
        /// The launch shape.
        config: LaunchConfig,
    },
    /// A matmul through the program's BLAS-Lt handle.
    Matmul(MatmulStep),
}

/// A loaded step program: one compiled model at one input shape on one device. Made by
/// [`super::ProgramLoader::load`].
///
/// It holds the device's weight buffer and modules (shared with the device's other programs), its
/// own constants and the BLAS-Lt handle of its matmuls; drop a program only after the work it
/// enqueued has run.
///
/// # Thread safety
/// `Send + Sync` and stateless between runs: concurrent launches on different streams, with their
/// own bindings and scratch, do not interfere (each thread resolves arguments into its own buffer).
#[derive(Debug)]
pub struct StepProgram<B: Backend> {
    pub(super) label: String,
    pub(super) output_dims: Vec<Vec<u64>>,
    pub(super) input_bytes: Vec<usize>,
    pub(super) output_bytes: Vec<usize>,
    pub(super) scratch_bytes: usize,
    /// Declared before `_modules`, so the kernels are dropped before the modules they come from.
    pub(super) steps: Vec<LoadedStep<B>>,
    pub(super) weights: Arc<ResidentBuffer<B>>,
    pub(super) local: Option<B::DeviceBuffer>,
    pub(super) blas: Option<Arc<B::Blas>>,
    /// Kept alive for the kernels of `steps`.
    pub(super) _modules: Vec<Arc<B::Module>>,
}

/// The memory one run is given.
#[derive(Clone, Copy)]
struct Bindings<'r> {
    inputs: &'r [DeviceSlice],
    outputs: &'r [DeviceSlice],
    scratch: DeviceSlice,
}

impl<B: Backend> StepProgram<B> {
    /// Kernel launches and matmuls per run.
    pub fn launches(&self) -> usize {
        self.steps.len()
    }

    /// Matmuls per run that go through the BLAS-Lt library.
    pub fn matmuls(&self) -> usize {
        self.steps.iter().filter(|s| matches!(s, LoadedStep::Matmul(_))).count()
    }

    /// The steps, in run order.
    pub fn steps(&self) -> &[LoadedStep<B>] {
        &self.steps
    }

    /// Bytes each input binding must hold, in binding order.
    pub fn input_bytes(&self) -> &[usize] {
        &self.input_bytes
    }

    /// Bytes each output binding must hold, in binding order.
    pub fn output_bytes(&self) -> &[usize] {
        &self.output_bytes
    }

    /// Enqueues the steps in `range` (of `0..launches()`; a range past the end enqueues nothing) on
    /// `stream`, after checking the bindings against the sizes the plan placed its tensors in.
    ///
    /// # Safety
    /// As [`Program::launch`].
    pub unsafe fn enqueue(
        &self,
        stream: &B::Stream,
        range: Range<usize>,
        inputs: &[DeviceSlice],
        outputs: &[DeviceSlice],
        scratch: DeviceSlice,
    ) -> saggar_device::Result<()> {
        // A dispatcher has checked these sizes already; the check stays because a program is also
        // launched on its own (tests, benches, profiles, downstream code), where it is all that turns
        // a short buffer into a typed error instead of kernels writing past it. It costs one length
        // comparison per binding.
        self.check_bindings(inputs, outputs, scratch)?;
        let steps = self.steps.get(range).unwrap_or(&[]);
        let bindings = Bindings { inputs, outputs, scratch };
        let run = |args: &mut Vec<KernelArg>| {
            for step in steps {
                // SAFETY: forwarded from this function's contract; `check_bindings` verified each
                // binding holds what the plan reads and writes (the plan placed every tensor inside
                // those lengths), and `self` keeps the weight and local constant buffers alive.
                unsafe { self.enqueue_step(stream, step, bindings, args)? };
            }
            Ok(())
        };
        LAUNCH_ARGS.with(|cell| match cell.try_borrow_mut() {
            Ok(mut args) => run(&mut args),
            // Only reachable if a launch re-enters itself on this thread; use a fresh buffer then.
            Err(_) => run(&mut Vec::new()),
        })
    }

    /// Enqueues one step, resolving a launch's arguments into `args`.
    ///
    /// # Safety
    /// As [`StepProgram::enqueue`], with the bindings checked.
    unsafe fn enqueue_step(
        &self,
        stream: &B::Stream,
        step: &LoadedStep<B>,
        bindings: Bindings<'_>,
        args: &mut Vec<KernelArg>,
    ) -> saggar_device::Result<()> {
        match step {
            LoadedStep::Launch { kernel, args: sources, config } => {
                args.clear();
                args.extend(sources.iter().map(|a| self.resolve(*a, bindings)));
                // SAFETY: forwarded from this function's contract: the arguments name live memory
                // sized for the kernel.
                unsafe { stream.launch(kernel, config, args) }
            }
            LoadedStep::Matmul(m) => {
                let blas =
                    self.blas.as_deref().ok_or_else(|| self.binding_error("a matmul step without a BLAS handle"))?;
                let operands = self.operands(m, blas.workspace_bytes(), bindings);
                // SAFETY: forwarded from this function's contract: the operands name live memory sized
                // for the matmul, and the workspace is a range of this run's own scratch.
                unsafe { blas.matmul(stream, &m.desc, &operands) }
            }
        }
    }

    fn binding_error(&self, reason: impl Into<String>) -> saggar_device::Error {
        saggar_device::Error::InvalidLaunchConfig { kernel: self.label.clone(), reason: reason.into() }
    }

    /// Checks one buffer per input and output, each at least the plan's size, and the scratch.
    fn check_bindings(
        &self,
        inputs: &[DeviceSlice],
        outputs: &[DeviceSlice],
        scratch: DeviceSlice,
    ) -> saggar_device::Result<()> {
        for (what, slices, needed) in [("input", inputs, &self.input_bytes), ("output", outputs, &self.output_bytes)] {
            if slices.len() != needed.len() {
                return Err(self.binding_error(format!(
                    "{} {what}s bound, the model has {}",
                    slices.len(),
                    needed.len()
                )));
            }
            for (i, (slice, need)) in slices.iter().zip(needed).enumerate() {
                if slice.len() < *need {
                    return Err(self.binding_error(format!("{what} {i} holds {} bytes, {need} needed", slice.len())));
                }
            }
        }
        if scratch.len() < self.scratch_bytes {
            return Err(self.binding_error(format!(
                "scratch holds {} bytes, {} needed",
                scratch.len(),
                self.scratch_bytes
            )));
        }
        Ok(())
    }

    fn resolve(&self, arg: ArgSource, bindings: Bindings<'_>) -> KernelArg {
        let at = |base: DevicePtr, offset: usize| KernelArg::Ptr(DevicePtr(base.0 + offset as u64));
        match arg {
            ArgSource::Input(i) => KernelArg::Ptr(bindings.inputs[i].ptr()),
            ArgSource::Output(i) => KernelArg::Ptr(bindings.outputs[i].ptr()),
            ArgSource::Scratch(offset) => at(bindings.scratch.ptr(), offset),
            ArgSource::Weights(offset) => at(self.weights.data_ptr(), offset),
            ArgSource::Local(offset) => at(self.local.as_ref().map_or(DevicePtr::NULL, |b| b.ptr()), offset),
            ArgSource::Bytes(n) => KernelArg::U64(n),
            ArgSource::U32(v) => KernelArg::U32(v),
        }
    }

    /// The buffers of matmul `m`: each operand spans what its description touches over every batch.
    fn operands(&self, m: &MatmulStep, workspace_bytes: usize, bindings: Bindings<'_>) -> MatmulOperands {
        let slice = |src: ArgSource, bytes: u64| {
            let ptr = self.resolve(src, bindings).as_ptr().unwrap_or(DevicePtr::NULL);
            DeviceSlice::from_raw(ptr, bytes as usize)
        };
        let d = &m.desc;
        let span = |stride: u64, elements: u64| (d.batch.saturating_sub(1) * stride + elements) * 4;
        MatmulOperands {
            a: slice(m.a, span(d.stride_a, d.m * d.k)),
            b: slice(m.b, span(d.stride_b, d.k * d.n)),
            c: slice(m.c, span(d.stride_c, d.m * d.n)),
            bias: m.bias.map(|b| slice(b, d.n * 4)),
            workspace: DeviceSlice::from_raw(DevicePtr(bindings.scratch.ptr().0 + m.workspace as u64), workspace_bytes),
        }
    }
}

impl<B: Backend> Program<B> for StepProgram<B> {
    fn output_dims(&self) -> &[Vec<u64>] {
        &self.output_dims
    }

    fn scratch_bytes(&self) -> usize {
        self.scratch_bytes
    }

    unsafe fn launch(
        &self,
        stream: &B::Stream,
        inputs: &[DeviceSlice],
        outputs: &[DeviceSlice],
        scratch: DeviceSlice,
    ) -> saggar_device::Result<()> {
        // SAFETY: forwarded from this function's contract.
        unsafe { self.enqueue(stream, 0..self.steps.len(), inputs, outputs, scratch) }
    }
}
