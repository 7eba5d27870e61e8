//! Host requests of a model with a padded axis (a sequence): each input that carries the axis is
//! padded with its declared value up to the axis's bucket in a context-owned buffer, the padded
//! request runs on the host path as an exact cell of the bucket grid (its batch padded there as
//! usual, by repeating the last row), and each output that carries the axis is sliced back to the
//! request's extent. The buffers grow to the largest request seen and are reused, so a warm
//! context allocates nothing.

use std::borrow::Cow;

use saggar_device::Backend;
use saggar_shape::{AxisPlan, ShapeError, TensorShape, pad_axis_into, slice_axis_into};
use smallvec::SmallVec;

use crate::buckets::{AxisLayout, Grid};
use crate::compiler::ProgramCompiler;
use crate::context::RunContext;
use crate::error::Result;
use crate::path_host::HostBuffers;
use crate::request::{self, Checked};
use crate::session::Inner;
use crate::tensors::{HostTensor, RunInfo};

/// A run context's host buffers for padded requests: inputs padded along the axis and their
/// extents, and outputs as the program produced them (at the axis's bucket).
#[derive(Debug, Default)]
pub(crate) struct PaddedIo {
    inputs: Vec<Vec<u8>>,
    dims: Vec<Vec<u64>>,
    outputs: Vec<Vec<u8>>,
}

impl<B: Backend, C: ProgramCompiler<B>> Inner<B, C> {
    /// Runs a checked host request of a model with a padded axis.
    pub(crate) fn run_host_padded<T: AsMut<[u8]>>(
        &self,
        ctx: &mut RunContext<B>,
        grid: &Grid,
        axis: &AxisLayout,
        request: &Checked<'_, '_, HostTensor<'_>>,
        outputs: &mut [T],
        buffers: HostBuffers,
    ) -> Result<RunInfo> {
        if buffers == HostBuffers::Unchecked {
            request::check_host_inputs(&self.signature, &request.ordered)?;
            request::check_host_outputs(&request.bindings, outputs)?;
        }
        let bucket = grid.axis_bucket(request.bindings.values()[axis.symbol_id])?;
        // The buffers leave the context for the run (moving three vectors), so the padded request
        // can borrow them while the context runs it.
        let mut io = std::mem::take(&mut ctx.padded);
        let result = self.run_padded_in(ctx, &mut io, axis, request, outputs, bucket);
        ctx.padded = io;
        result
    }

    fn run_padded_in<T: AsMut<[u8]>>(
        &self,
        ctx: &mut RunContext<B>,
        io: &mut PaddedIo,
        axis: &AxisLayout,
        request: &Checked<'_, '_, HostTensor<'_>>,
        outputs: &mut [T],
        bucket: u64,
    ) -> Result<RunInfo> {
        let ordered = &request.ordered[..];
        let PaddedIo { inputs, dims, outputs: produced } = io;
        inputs.resize_with(ordered.len(), Vec::new);
        dims.resize_with(ordered.len(), Vec::new);
        produced.resize_with(self.signature.outputs().len(), Vec::new);
        for (i, t) in ordered.iter().enumerate() {
            dims[i].clear();
            dims[i].extend_from_slice(t.dims);
            if let Some(at) = axis.inputs[i] {
                let plan = AxisPlan::new(TensorShape::new(t.name, t.dtype, t.dims), at.axis, bucket)?;
                dims[i][at.axis] = bucket;
                inputs[i].resize(plan.padded_len(), 0);
                pad_axis_into(t.data, &mut inputs[i], &plan, at.pad())?;
            }
        }
        let padded: SmallVec<[HostTensor<'_>; 8]> = ordered
            .iter()
            .enumerate()
            .map(|(i, t)| match axis.inputs[i] {
                Some(_) => HostTensor { name: t.name, dtype: t.dtype, dims: &dims[i], data: &inputs[i] },
                None => *t,
            })
            .collect();
        let bindings = self.signature.check(dims)?;
        for (o, (spec, buffer)) in self.signature.outputs().iter().zip(produced.iter_mut()).enumerate() {
            buffer.resize(request::request_bytes(spec, &bindings.output_shape(o)?)?, 0);
        }
        let padded_request = Checked { ordered: Cow::Borrowed(&padded[..]), bindings, in_order: true };
        let info = self.run_host_exact(ctx, &padded_request, produced, HostBuffers::Checked, None)?;
        for (o, (spec, out)) in self.signature.outputs().iter().zip(outputs.iter_mut()).enumerate() {
            let (src, dst) = (&produced[o], out.as_mut());
            match axis.outputs[o] {
                Some(at) => {
                    let real = request.bindings.output_shape(o)?;
                    let plan = AxisPlan::new(TensorShape::new(spec.name(), spec.dtype(), &real), at, bucket)?;
                    slice_axis_into(src, dst, &plan)?;
                }
                None => {
                    let actual = dst.len();
                    let target = dst.get_mut(..src.len()).ok_or(ShapeError::BufferTooShort {
                        buffer: "destination",
                        needed: src.len(),
                        actual,
                    })?;
                    target.copy_from_slice(src);
                }
            }
        }
        Ok(info)
    }
}
