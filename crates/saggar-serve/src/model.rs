//! A loaded model: its metadata as the protocol shows it, its sessions, its queue and executor
//! threads, its counters; and [`LoadedModel::infer`], the one path every request of either
//! transport takes (checked against the model, queued, batched, answered).

use std::sync::Arc;
use std::time::Instant;

use saggar_dispatch::OwnedTensor;
use saggar_shape::DType;
use tokio::sync::oneshot;

use crate::batcher::{Batcher, Job};
use crate::config::ModelConfig;
use crate::datatype::protocol_name;
use crate::error::{Result, ServeError};
use crate::executor::Executor;
use crate::merge::Layout;
use crate::metrics::ModelMetrics;
use crate::tensor::InputTensor;

/// An input or output as the protocol's metadata shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorMeta {
    /// Its name.
    pub name: String,
    /// Its element type.
    pub dtype: DType,
    /// Its extents, -1 where variable (the batch, and symbolic dimensions).
    pub shape: Vec<i64>,
}

impl TensorMeta {
    /// The protocol's datatype name.
    pub fn datatype(&self) -> &'static str {
        protocol_name(self.dtype)
    }
}

/// An inference request of either transport, decoded.
#[derive(Debug, Clone, Default)]
pub struct InferRequest {
    /// The client's request id, echoed back.
    pub id: String,
    /// Its inputs, in any order.
    pub inputs: Vec<InputTensor>,
    /// The outputs asked for, by name; empty for all.
    pub outputs: Vec<String>,
}

/// The answer to an [`InferRequest`].
#[derive(Debug, Clone)]
pub struct InferResponse {
    /// The model's name.
    pub model: String,
    /// The version that ran.
    pub version: String,
    /// The request's id.
    pub id: String,
    /// The outputs asked for, in the order asked (the model's order when all).
    pub outputs: Vec<OwnedTensor>,
}

/// What a served request counts.
struct Timing {
    rows: u64,
    queue: std::time::Duration,
    compute: std::time::Duration,
}

/// A model being served.
pub struct LoadedModel {
    /// Its name.
    pub name: String,
    /// The version served.
    pub version: u64,
    /// Every version in the repository.
    pub versions: Vec<u64>,
    /// Its configuration, as resolved against the model.
    pub config: ModelConfig,
    /// Its inputs.
    pub inputs: Vec<TensorMeta>,
    /// Its outputs.
    pub outputs: Vec<TensorMeta>,
    /// The largest batch of a request and of a merged batch; 0 without batching.
    pub max_batch: u64,
    pub(crate) layout: Arc<Layout>,
    pub(crate) executor: Arc<dyn Executor>,
    pub(crate) batcher: Batcher,
    pub(crate) metrics: Arc<ModelMetrics>,
}

impl std::fmt::Debug for LoadedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedModel").field("name", &self.name).field("version", &self.version).finish_non_exhaustive()
    }
}

impl LoadedModel {
    /// Its counters.
    pub fn metrics(&self) -> &ModelMetrics {
        &self.metrics
    }

    /// Its sessions.
    pub fn executor(&self) -> &dyn Executor {
        &*self.executor
    }

    /// Whether every device of the model is lost: it answers nothing and is not ready.
    pub fn out_of_devices(&self) -> bool {
        self.batcher.out_of_devices()
    }

    /// Requests waiting in its queue.
    pub fn queued(&self) -> usize {
        self.batcher.queued()
    }

    /// Refuses new requests and waits for the queued ones to finish.
    pub fn drain(&self) {
        self.batcher.close_and_join();
    }

    /// Serves one request: checks it against the model, queues it, and waits for its batch.
    /// Counted as a success or a failure whatever happens.
    pub async fn infer(&self, request: InferRequest) -> Result<InferResponse> {
        let started = Instant::now();
        let result = self.infer_counted(request).await;
        match &result {
            Ok((_, done)) => self.metrics.success(done.rows, started.elapsed(), done.queue, done.compute),
            Err(_) => self.metrics.failure(started.elapsed()),
        }
        result.map(|(response, _)| response)
    }

    async fn infer_counted(&self, request: InferRequest) -> Result<(InferResponse, Timing)> {
        let wanted = self.requested_outputs(&request.outputs)?;
        let (inputs, rows) = self.check_inputs(request.inputs)?;
        // Requests that never merge need no key (it hashes the bytes of unbatched inputs).
        let key = if self.max_batch > 0 && self.config.batching.is_some() { self.layout.key(&inputs) } else { 0 };
        let (reply, answer) = oneshot::channel();
        self.batcher.submit(Job { inputs, outputs: wanted, rows, key, enqueued: Instant::now(), reply })?;
        let done = answer.await.map_err(|_| ServeError::Internal("the executor thread stopped".into()))??;
        let response = InferResponse {
            model: self.name.clone(),
            version: self.version.to_string(),
            id: request.id,
            outputs: done.outputs,
        };
        Ok((response, Timing { rows, queue: done.queue, compute: done.compute }))
    }

    /// Indices of the outputs asked for, in the order asked (all when none is named); an output
    /// named twice comes back once.
    fn requested_outputs(&self, names: &[String]) -> Result<Vec<usize>> {
        if names.is_empty() {
            return Ok((0..self.outputs.len()).collect());
        }
        let mut wanted = Vec::with_capacity(names.len());
        for n in names {
            let o = self.outputs.iter().position(|o| &o.name == n).ok_or_else(|| {
                ServeError::bad(format!(
                    "model `{}` has no output `{n}` (outputs: {})",
                    self.name,
                    self.outputs.iter().map(|o| o.name.as_str()).collect::<Vec<_>>().join(", ")
                ))
            })?;
            if !wanted.contains(&o) {
                wanted.push(o);
            }
        }
        Ok(wanted)
    }

    /// The inputs in the model's order, checked (names, datatypes, ranks, fixed extents, one batch
    /// within `max_batch`), with the request's rows.
    fn check_inputs(&self, given: Vec<InputTensor>) -> Result<(Vec<InputTensor>, u64)> {
        let model = &self.name;
        let mut slots: Vec<Option<InputTensor>> = self.inputs.iter().map(|_| None).collect();
        for t in given {
            let Some(i) = self.inputs.iter().position(|m| m.name == t.name) else {
                let names: Vec<&str> = self.inputs.iter().map(|m| m.name.as_str()).collect();
                return Err(ServeError::bad(format!(
                    "model `{model}` has no input `{}` (inputs: {})",
                    t.name,
                    names.join(", ")
                )));
            };
            if slots[i].is_some() {
                return Err(ServeError::bad(format!("input `{}` is given twice", t.name)));
            }
            slots[i] = Some(t);
        }
        let mut rows = None;
        let mut ordered = Vec::with_capacity(slots.len());
        for (meta, slot) in self.inputs.iter().zip(slots) {
            let t =
                slot.ok_or_else(|| ServeError::bad(format!("model `{model}`: input `{}` is missing", meta.name)))?;
            if t.dtype != meta.dtype {
                return Err(ServeError::bad(format!(
                    "input `{}`: datatype {} where the model takes {}",
                    t.name,
                    protocol_name(t.dtype),
                    meta.datatype()
                )));
            }
            let fits = t.shape.len() == meta.shape.len()
                && t.shape.iter().zip(&meta.shape).all(|(&d, &m)| m < 0 || d == m as u64);
            if !fits {
                return Err(ServeError::bad(format!(
                    "input `{}`: shape {:?} does not match the model's {:?} (-1 is any extent)",
                    t.name, t.shape, meta.shape
                )));
            }
            if self.max_batch > 0 && self.layout.inputs.get(ordered.len()).is_some_and(|l| l.batched) {
                let r = t.shape[0];
                if *rows.get_or_insert(r) != r {
                    return Err(ServeError::bad(format!(
                        "input `{}`: batch {r} differs from the other inputs'",
                        t.name
                    )));
                }
                if r == 0 || r > self.max_batch {
                    return Err(ServeError::bad(format!(
                        "input `{}`: batch {r} is outside 1..={} (max_batch_size of model `{model}`)",
                        t.name, self.max_batch
                    )));
                }
            }
            ordered.push(t);
        }
        Ok((ordered, rows.unwrap_or(1)))
    }
}
