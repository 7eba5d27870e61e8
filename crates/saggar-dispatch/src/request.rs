//! Checks of a request, made once per call path before anything is allocated, compiled or planned
//! for it: names, dtypes and shapes against the model's signature (in any order), the session's
//! [`RequestLimits`], and the caller's host and device buffers against the bytes the request's
//! shapes imply. [`crate::DeviceBinding`]s keep what these checks found, so their runs skip them.
//!
//! A request's shapes come from whoever sent it. Its rows and bytes are computed with checked
//! arithmetic and compared with the session's [`RequestLimits`]; host buffers are compared with
//! the bytes their shapes imply. Only then does a run allocate outputs, compile a per-shape
//! program or walk a split plan, so a request that claims 2^40 rows with buffers of 5 is a
//! [`DispatchError::LimitExceeded`] (or a [`DispatchError::BufferTooSmall`] under a raised
//! limit), never an allocation failure that aborts the process.

use std::borrow::Cow;

use saggar_device::DeviceSlice;
use saggar_shape::{Bindings, Dim, ShapeError, Signature, TensorShape, TensorSpec};

use crate::context::DeviceIo;
use crate::error::{DispatchError, Result};
use crate::programs::ProgramEntry;
use crate::tensors::{DeviceTensor, HostTensor};

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

/// A request tensor (host or device) as the signature checks see it.
pub(crate) trait RequestTensor: Copy + AsRef<[u64]> {
    fn shape(&self) -> TensorShape<'_>;
}

impl RequestTensor for HostTensor<'_> {
    #[inline]
    fn shape(&self) -> TensorShape<'_> {
        TensorShape::new(self.name, self.dtype, self.dims)
    }
}

impl RequestTensor for DeviceTensor<'_> {
    #[inline]
    fn shape(&self) -> TensorShape<'_> {
        TensorShape::new(self.name, self.dtype, self.dims)
    }
}

/// A request checked against the signature and the limits: its inputs in binding order (borrowed
/// when they came that way), their bindings, and whether they came in binding order (only such
/// requests take the ultra-fast and fast paths).
pub(crate) struct Checked<'r, 's, T: Clone> {
    pub(crate) ordered: Cow<'r, [T]>,
    pub(crate) bindings: Bindings<'s>,
    pub(crate) in_order: bool,
}

/// Checks a request's inputs, in any order, against `signature` and `guard`: names (missing,
/// unknown, duplicate), dtypes, ranks and extents, then rows and bytes. A request in binding order
/// costs a name comparison per input and [`Signature::check`]; any other takes [`Signature::bind`]
/// and one reordering.
pub(crate) fn check<'r, 's, T: RequestTensor>(
    signature: &'s Signature,
    guard: &RequestGuard,
    request: &'r [T],
) -> Result<Checked<'r, 's, T>> {
    let checked = if in_binding_order(signature, request) {
        Checked { bindings: signature.check(request)?, ordered: Cow::Borrowed(request), in_order: true }
    } else {
        let (ordered, bindings) = reorder(signature, request)?;
        Checked { ordered: Cow::Owned(ordered), bindings, in_order: false }
    };
    guard.check(&checked.bindings, &checked.ordered)?;
    Ok(checked)
}

/// Whether the request lists the model's inputs in binding order with the right dtypes.
#[inline]
fn in_binding_order<T: RequestTensor>(signature: &Signature, request: &[T]) -> bool {
    let specs = signature.inputs();
    request.len() == specs.len()
        && request.iter().zip(specs).all(|(t, s)| {
            let shape = t.shape();
            shape.dtype == s.dtype() && same_name(shape.name, s.name())
        })
}

/// The request's tensors in binding order, validated by name (missing, unknown, duplicate names,
/// wrong dtypes and ranks are typed errors), and their bindings.
fn reorder<'s, T: RequestTensor>(signature: &'s Signature, request: &[T]) -> Result<(Vec<T>, Bindings<'s>)> {
    let shapes: Vec<TensorShape<'_>> = request.iter().map(T::shape).collect();
    let bindings = signature.bind(&shapes)?;
    let mut ordered: Vec<Option<T>> = vec![None; request.len()];
    for t in request {
        let index = signature.input_index(t.shape().name).expect("bind checked every name");
        ordered[index] = Some(*t);
    }
    let ordered = ordered.into_iter().map(|t| t.expect("bind checked that every input is present")).collect();
    Ok((ordered, bindings))
}

/// Checks that the caller passed one buffer per output.
#[inline]
pub(crate) fn check_output_count(signature: &Signature, outputs: usize) -> Result<()> {
    let expected = signature.outputs().len();
    if outputs != expected {
        return Err(DispatchError::OutputCount { expected, actual: outputs });
    }
    Ok(())
}

/// Names are compared by address first: callers that reuse the model's own name strings skip the
/// string comparison.
#[inline]
fn same_name(given: &str, model: &str) -> bool {
    std::ptr::eq(given, model) || given == model
}

/// The bytes a tensor of `spec`'s element type with extents `dims` occupies.
pub(crate) fn request_bytes(spec: &TensorSpec, dims: &[u64]) -> Result<usize> {
    let bytes = saggar_shape::byte_size(dims, spec.dtype())
        .map_err(|source| saggar_shape::ShapeError::Overflow { input: spec.name().into(), source })?;
    // More than the address space holds: no buffer is large enough, which the buffer check reports.
    Ok(usize::try_from(bytes).unwrap_or(usize::MAX))
}

/// Checks that every host input (binding order) holds the bytes its shape implies.
pub(crate) fn check_host_inputs(signature: &Signature, inputs: &[HostTensor<'_>]) -> Result<()> {
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

/// Checks the caller's device buffers against a checked request (each large enough and aligned
/// for its element type; each output of the shape the request implies) and records them, in
/// binding order and trimmed to the bytes the request needs, in `io`. With `exact`, the request
/// has exactly that program's shapes (a direct-bind route), whose sizes are known.
pub(crate) fn check_device_io<P>(
    bindings: &Bindings<'_>,
    inputs: &[DeviceTensor<'_>],
    outputs: &[DeviceTensor<'_>],
    exact: Option<&ProgramEntry<P>>,
    io: &mut DeviceIo,
) -> Result<()> {
    let signature = bindings.signature();
    io.clear(inputs.len());
    for (i, (spec, t)) in signature.inputs().iter().zip(inputs).enumerate() {
        let needed = match exact {
            Some(entry) => entry.input_bytes[i],
            None => request_bytes(spec, t.dims)?,
        };
        io.push(checked_device_buffer("input", spec, needed, t.data)?);
    }
    for (o, (spec, t)) in signature.outputs().iter().zip(outputs).enumerate() {
        let computed;
        let (expected, needed) = match exact {
            Some(entry) => (&entry.output_dims[o][..], entry.output_bytes[o]),
            None => match bindings.output_shape(o) {
                Ok(shape) => {
                    computed = shape;
                    (&computed[..], request_bytes(spec, &computed)?)
                }
                // An extent input values fix (a per-shape model with value inputs): the caller's
                // shape is taken here and checked against the program's before it runs.
                Err(ShapeError::UnboundSymbol { .. }) => (t.dims, request_bytes(spec, t.dims)?),
                Err(e) => return Err(e.into()),
            },
        };
        if t.dims != expected || t.dtype != spec.dtype() || !same_name(t.name, spec.name()) {
            return Err(DispatchError::OutputShape {
                output: spec.name().to_string(),
                expected: expected.to_vec(),
                actual: (t.name.to_string(), t.dtype, t.dims.to_vec()),
            });
        }
        io.push(checked_device_buffer("output", spec, needed, t.data)?);
    }
    Ok(())
}

/// `data` trimmed to `needed` bytes, after checking that it holds them and is aligned for the
/// element type (a misaligned pointer would fault the kernel).
#[inline]
pub(crate) fn checked_device_buffer(
    role: &'static str,
    spec: &TensorSpec,
    needed: usize,
    data: DeviceSlice,
) -> Result<DeviceSlice> {
    let align = spec.dtype().size_bytes().max(1) as u64;
    if data.len() < needed || !data.ptr().0.is_multiple_of(align) {
        return Err(bad_device_buffer(role, spec, needed, data));
    }
    Ok(DeviceSlice::from_raw(data.ptr(), needed))
}

#[cold]
#[inline(never)]
fn bad_device_buffer(role: &'static str, spec: &TensorSpec, needed: usize, data: DeviceSlice) -> DispatchError {
    let name = spec.name().to_string();
    if data.len() < needed {
        DispatchError::BufferTooSmall { role, name, needed, actual: data.len() }
    } else {
        let align = spec.dtype().size_bytes().max(1) as u64;
        DispatchError::Misaligned { role, name, address: data.ptr().0, align }
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
}
