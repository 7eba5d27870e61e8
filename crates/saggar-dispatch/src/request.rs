//! Checks of a request's untrusted sizes, made before anything is allocated, compiled or planned
//! for it, and the constant-memory walk over the chunks of a split request.
//!
//! A request's shapes come from whoever sent it. Its rows and bytes are computed with checked
//! arithmetic and compared with the session's [`RequestLimits`]; host buffers are compared with
//! the bytes their shapes imply. Only then does a run allocate outputs, compile a per-shape
//! program or walk a split plan, so a request that claims 2^40 rows with buffers of 5 is a
//! [`DispatchError::LimitExceeded`] (or a [`DispatchError::BufferTooSmall`] under a raised
//! limit), never an allocation failure that aborts the process.

use saggar_shape::{Bindings, Chunk, Dim, Signature, SplitPlan, TensorSpec};

use crate::error::{DispatchError, Result};
use crate::session::request_bytes;

/// The most one request may ask for. A request above either limit fails with
/// [`DispatchError::LimitExceeded`] before anything is allocated or run for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestLimits {
    /// Rows on the batch axis (requests above the largest bucket are split, so this bounds the
    /// number of chunks too). Models without a batch axis have no rows.
    pub max_rows: u64,
    /// Bytes of all the request's inputs and outputs together, as its declared shapes imply.
    pub max_bytes: u64,
}

impl Default for RequestLimits {
    /// 2^20 rows and 16 GiB.
    fn default() -> RequestLimits {
        RequestLimits { max_rows: 1 << 20, max_bytes: 16 << 30 }
    }
}

/// A request's bytes as `fixed + per_row * rows`: what every tensor of a model whose only
/// symbolic dimension is the batch, at most once per tensor, occupies.
#[derive(Debug, Clone, Copy)]
struct LinearBytes {
    fixed: u64,
    per_row: u64,
}

impl LinearBytes {
    /// `None` when some tensor has another symbol, the batch symbol twice, or sizes that overflow.
    fn of(signature: &Signature) -> Option<LinearBytes> {
        let batch = signature.batch_layout().symbol();
        let mut linear = LinearBytes { fixed: 0, per_row: 0 };
        for spec in signature.inputs().iter().chain(signature.outputs()) {
            let mut bytes = spec.dtype().size_bytes() as u64;
            let mut batch_axes = 0;
            for dim in spec.dims() {
                match dim {
                    Dim::Fixed(extent) => bytes = bytes.checked_mul(*extent)?,
                    Dim::Symbolic(name) if Some(&**name) == batch => batch_axes += 1,
                    Dim::Symbolic(_) => return None,
                }
            }
            match batch_axes {
                0 => linear.fixed = linear.fixed.checked_add(bytes)?,
                1 => linear.per_row = linear.per_row.checked_add(bytes)?,
                _ => return None,
            }
        }
        Some(linear)
    }
}

/// A session's request limits with what it can precompute about its model.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RequestGuard {
    limits: RequestLimits,
    linear: Option<LinearBytes>,
}

impl RequestGuard {
    pub(crate) fn new(signature: &Signature, limits: RequestLimits) -> RequestGuard {
        RequestGuard { limits, linear: LinearBytes::of(signature) }
    }

    /// Checks a request's rows and bytes (`inputs` in binding order, already checked against the
    /// signature into `bindings`). Models whose only symbol is the batch cost two multiplications;
    /// others add up every tensor.
    #[inline]
    pub(crate) fn check<S: AsRef<[u64]>>(&self, bindings: &Bindings<'_>, inputs: &[S]) -> Result<()> {
        let rows = bindings.batch();
        if let Some(rows) = rows
            && rows > self.limits.max_rows
        {
            return Err(exceeded("rows", rows, self.limits.max_rows));
        }
        let bytes = match self.linear {
            Some(LinearBytes { fixed, per_row }) => {
                per_row.checked_mul(rows.unwrap_or(0)).and_then(|b| b.checked_add(fixed)).unwrap_or(u64::MAX)
            }
            None => total_bytes(bindings, inputs),
        };
        if bytes > self.limits.max_bytes {
            return Err(exceeded("bytes", bytes, self.limits.max_bytes));
        }
        Ok(())
    }
}

#[cold]
fn exceeded(what: &'static str, requested: u64, limit: u64) -> DispatchError {
    DispatchError::LimitExceeded { what, requested, limit }
}

/// Bytes of a request's inputs and of the outputs its inputs determine, saturating at `u64::MAX`.
/// Outputs with a data-dependent extent are left out: their size is the program's to report.
fn total_bytes<S: AsRef<[u64]>>(bindings: &Bindings<'_>, inputs: &[S]) -> u64 {
    let signature = bindings.signature();
    let size = |spec: &TensorSpec, dims: &[u64]| saggar_shape::byte_size(dims, spec.dtype()).unwrap_or(u64::MAX);
    let ins = signature.inputs().iter().zip(inputs).map(|(spec, dims)| size(spec, dims.as_ref()));
    let outs = (0..signature.outputs().len())
        .filter_map(|o| Some(size(&signature.outputs()[o], &bindings.output_shape(o).ok()?)));
    ins.chain(outs).fold(0u64, u64::saturating_add)
}

/// Checks that every host input (binding order) holds the bytes its shape implies.
pub(crate) fn check_host_inputs(signature: &Signature, inputs: &[crate::HostTensor<'_>]) -> Result<()> {
    for (spec, t) in signature.inputs().iter().zip(inputs) {
        let needed = request_bytes(spec, t.dims)?;
        if t.data.len() < needed {
            return Err(DispatchError::BufferTooSmall {
                role: "input",
                name: spec.name().to_string(),
                needed,
                actual: t.data.len(),
            });
        }
    }
    Ok(())
}

/// Checks that every host output buffer (binding order) holds the bytes of the output shape the
/// request implies. Outputs with a data-dependent extent are checked when they are written.
pub(crate) fn check_host_outputs<T: AsMut<[u8]>>(bindings: &Bindings<'_>, outputs: &mut [T]) -> Result<()> {
    let specs = bindings.signature().outputs();
    for (o, (spec, buffer)) in specs.iter().zip(outputs.iter_mut()).enumerate() {
        let Ok(dims) = bindings.output_shape(o) else { continue };
        let needed = request_bytes(spec, &dims)?;
        let actual = buffer.as_mut().len();
        if actual < needed {
            return Err(DispatchError::BufferTooSmall {
                role: "output",
                name: spec.name().to_string(),
                needed,
                actual,
            });
        }
    }
    Ok(())
}

/// The chunks a request runs as, walked without collecting them: a split plan stores a count of
/// full chunks and a short tail, so even an absurd batch takes constant memory.
pub(crate) enum Chunks {
    /// A bucketed model's plan.
    Planned(SplitPlan),
    /// A static or per-shape program: one launch.
    Whole,
}

impl Chunks {
    /// How many chunks (program launches).
    pub(crate) fn count(&self) -> u64 {
        match self {
            Chunks::Planned(plan) => plan.chunk_count(),
            Chunks::Whole => 1,
        }
    }

    /// Whether the request is split into several launches.
    pub(crate) fn is_split(&self) -> bool {
        self.count() > 1
    }

    /// The chunks in row order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = Chunk> + '_ {
        let (plan, whole) = match self {
            Chunks::Planned(plan) => (Some(plan), None),
            Chunks::Whole => (None, Some(Chunk::whole(1, 1))),
        };
        plan.into_iter().flat_map(SplitPlan::chunks).chain(whole)
    }
}

#[cfg(test)]
mod tests {
    use saggar_shape::{DType, Dim, Signature, TensorSpec};

    use super::*;

    fn signature() -> Signature {
        let batch = || Dim::symbolic("batch");
        Signature::new(
            vec![
                TensorSpec::new("x", DType::F32, [batch(), Dim::Fixed(4)]),
                TensorSpec::new("bias", DType::F32, [Dim::Fixed(4)]),
            ],
            vec![TensorSpec::new("y", DType::F16, [batch(), Dim::Fixed(2)])],
        )
        .unwrap()
    }

    #[test]
    fn linear_bytes_count_inputs_and_outputs() {
        let linear = LinearBytes::of(&signature()).unwrap();
        assert_eq!((linear.fixed, linear.per_row), (16, 16 + 4));
    }

    #[test]
    fn limits_apply_to_rows_and_bytes() {
        let sig = signature();
        let check = |limits: RequestLimits, rows: u64| {
            let dims = [vec![rows, 4], vec![4]];
            let bindings = sig.check(&dims).unwrap();
            let linear = RequestGuard::new(&sig, limits).check(&bindings, &dims);
            let general = RequestGuard { limits, linear: None }.check(&bindings, &dims);
            assert_eq!(format!("{linear:?}"), format!("{general:?}"), "both ways of counting agree");
            linear
        };
        let roomy = RequestLimits { max_rows: u64::MAX, max_bytes: 1 << 62 };
        assert!(check(RequestLimits { max_rows: 8, max_bytes: 1000 }, 8).is_ok());
        assert!(matches!(
            check(RequestLimits { max_rows: 8, max_bytes: 1000 }, 9),
            Err(DispatchError::LimitExceeded { what: "rows", requested: 9, limit: 8 })
        ));
        assert!(matches!(
            check(RequestLimits { max_rows: 100, max_bytes: 175 }, 8),
            Err(DispatchError::LimitExceeded { what: "bytes", requested: 176, limit: 175 })
        ));
        assert!(matches!(
            check(roomy, 1 << 59),
            Err(DispatchError::LimitExceeded { what: "bytes", requested, .. }) if requested == 20 * (1 << 59) + 16
        ));
    }

    #[test]
    fn chunks_of_an_absurd_batch_are_walked_lazily() {
        let policy = saggar_shape::BucketPolicy::powers_of_two(4).unwrap();
        let chunks = Chunks::Planned(policy.plan(1 << 40, saggar_shape::Splitting::Allowed).unwrap());
        assert_eq!(chunks.count(), 1 << 38);
        assert!(chunks.is_split());
        let first: Vec<Chunk> = chunks.iter().take(2).collect();
        assert_eq!(first, vec![Chunk { offset: 0, rows: 4, bucket: 4 }, Chunk { offset: 4, rows: 4, bucket: 4 }]);
        assert_eq!(Chunks::Whole.iter().collect::<Vec<_>>(), vec![Chunk::whole(1, 1)]);
    }
}
