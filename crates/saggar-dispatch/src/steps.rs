//! Programs that run as a list of kernel launches: the binding check and the launch loop every
//! compiler lowering a model to steps shares (saggar-models' reference compiler, saggar-onnx).
//!
//! A [`Program`](crate::Program) of that kind holds, per step, a kernel, its launch configuration
//! and where each argument comes from (an input, an output, an offset in scratch or in the weights).
//! [`check_bindings`] checks the buffers a launch was given against the sizes the plan needs, and
//! [`enqueue_steps`] resolves each step's arguments into one per-thread buffer and launches it, so a
//! run allocates nothing.

use std::cell::RefCell;

use saggar_device::{Backend, DeviceSlice, KernelArg, LaunchConfig, Stream};

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

/// Enqueues every step on `stream`: `step` writes the step's resolved arguments into the buffer it
/// is given (empty on entry) and returns the step's kernel and launch configuration.
///
/// # Safety
/// As [`Program::launch`](crate::Program::launch): every argument `step` resolves must name device
/// memory that is live, and large enough for what its kernel reads and writes, until the stream has
/// passed the work (the caller has checked the bindings against the plan that placed them).
pub unsafe fn enqueue_steps<'s, B: Backend, S>(
    stream: &B::Stream,
    steps: &'s [S],
    mut step: impl FnMut(&'s S, &mut Vec<KernelArg>) -> (&'s B::Kernel, &'s LaunchConfig),
) -> saggar_device::Result<()> {
    let mut run = |args: &mut Vec<KernelArg>| {
        for s in steps {
            args.clear();
            let (kernel, config) = step(s, args);
            // SAFETY: forwarded from this function's contract: the arguments name live memory sized
            // for the kernel.
            unsafe { stream.launch(kernel, config, args)? };
        }
        Ok(())
    };
    LAUNCH_ARGS.with(|cell| match cell.try_borrow_mut() {
        Ok(mut args) => run(&mut args),
        // Only reachable if a launch re-enters itself on this thread; use a fresh buffer then.
        Err(_) => run(&mut Vec::new()),
    })
}
