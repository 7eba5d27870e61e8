//! Running one batch of queued requests on a device. The batch is written in place: a staged
//! request of the session is leased at the batch's dimensions (the padded axis at its bucket),
//! each request's input rows are written straight into its pinned staging (padded along the axis
//! there), the session runs, and each request's output rows are copied once, straight from the
//! pinned read-back buffer into that request's own tensors: no merged inputs, no batch-sized
//! output, no second copy per request. Where the session cannot serve the batch in place (a model
//! served per shape, an extent above the axis's buckets) it is merged, run with `Session::run`
//! (which pads and slices itself) and split, as before.

use std::sync::Arc;

use saggar_dispatch::{DispatchError, HostTensor, OwnedTensor};

use crate::batcher::{Job, Runner};
use crate::error::{Result, ServeError};
use crate::executor::Executor;
use crate::merge::{Layout, Part, view};
use crate::metrics::ModelMetrics;
use crate::model::TensorMeta;
use crate::tensor::InputTensor;

/// What a model's batches run with.
struct BatchRunner {
    name: String,
    executor: Arc<dyn Executor>,
    layout: Arc<Layout>,
    /// The model's outputs, for the names and types of the views of a staged batch.
    outputs: Vec<TensorMeta>,
    metrics: Arc<ModelMetrics>,
}

/// The batch runner of a model (see the module's documentation).
pub(crate) fn runner(
    name: String,
    executor: Arc<dyn Executor>,
    layout: Arc<Layout>,
    outputs: Vec<TensorMeta>,
    metrics: Arc<ModelMetrics>,
) -> Arc<Runner> {
    let runner = BatchRunner { name, executor, layout, outputs, metrics };
    Arc::new(move |device: usize, jobs: &[Job]| runner.run(device, jobs))
}

impl BatchRunner {
    fn run(&self, device: usize, jobs: &[Job]) -> Result<Vec<Vec<OwnedTensor>>> {
        let inputs: Vec<&[InputTensor]> = jobs.iter().map(|j| j.inputs.as_slice()).collect();
        let parts: Vec<Part<'_>> = jobs
            .iter()
            .map(|j| Part { rows: j.rows, extent: self.layout.axis_extent(&j.inputs), outputs: &j.outputs })
            .collect();
        let rows = parts.iter().map(|p| p.rows).sum();
        let axis = self.layout.batch_axis(&inputs, true);
        let dims = self.layout.batch_dims(&inputs, axis);
        match self.executor.request(device, &dims) {
            Ok(mut staged) => {
                for i in 0..dims.len() {
                    let view = staged.input_mut(i).map_err(|e| self.failed(&e))?;
                    self.layout.write_input(i, &inputs, axis, view)?;
                }
                staged.run().map_err(|e| self.failed(&e))?;
                self.metrics.execution(rows);
                let views = (0..self.outputs.len())
                    .map(|o| {
                        let meta = &self.outputs[o];
                        let data = staged.output(o).map_err(|e| self.failed(&e))?;
                        Ok(HostTensor { name: &meta.name, dtype: meta.dtype, dims: &staged.output_dims()[o], data })
                    })
                    .collect::<Result<Vec<_>>>()?;
                self.layout.split(&views, &parts)
            }
            Err(e) if e.is_device_lost() => Err(self.failed(&e)),
            Err(_) => self.run_merged(device, &inputs, &parts, rows),
        }
    }

    /// The batch merged into fresh tensors and run with `Executor::run`, which pads to the bucket
    /// and slices back itself.
    fn run_merged(
        &self,
        device: usize,
        inputs: &[&[InputTensor]],
        parts: &[Part<'_>],
        rows: u64,
    ) -> Result<Vec<Vec<OwnedTensor>>> {
        let merged;
        let batch: &[InputTensor] = if inputs.len() == 1 {
            inputs[0]
        } else {
            merged = self.layout.merge(inputs);
            &merged
        };
        let tensors: Vec<HostTensor<'_>> =
            batch.iter().map(|t| HostTensor { name: &t.name, dtype: t.dtype, dims: &t.shape, data: &t.data }).collect();
        let outputs = self.executor.run(device, &tensors).map_err(|e| self.failed(&e))?;
        self.metrics.execution(rows);
        if let [part] = parts {
            // One request: the session already sliced its outputs to it; hand over those asked for.
            let mut outputs: Vec<Option<OwnedTensor>> = outputs.into_iter().map(Some).collect();
            return Ok(vec![part.outputs.iter().filter_map(|&o| outputs.get_mut(o).and_then(Option::take)).collect()]);
        }
        let views: Vec<HostTensor<'_>> = outputs.iter().map(view).collect();
        self.layout.split(&views, parts)
    }

    /// A session's error as the batch's, logged once.
    fn failed(&self, error: &DispatchError) -> ServeError {
        let e = ServeError::from_dispatch(&self.name, error);
        tracing::error!(model = %self.name, error = %e, "batch failed");
        e
    }
}
