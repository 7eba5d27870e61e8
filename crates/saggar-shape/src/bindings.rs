//! The symbol values of one request.

use std::fmt;
use std::hash::{Hash, Hasher};

use crate::batch::BatchSource;
use crate::hash::{CanonicalSink, FastSink, StableShapeKey, StableSink, encode_input, fast_hasher};
use crate::signature::Values;
use crate::{Dim, Shape, ShapeError, Signature};

/// The symbol values of one valid request: the result of [`Signature::bind`] or
/// [`Signature::check`] or [`Signature::check_request`].
///
/// Every symbol the inputs use has a value, so the bindings determine every input shape. That
/// makes them the natural in-memory key of a run (`Hash` and `Eq` look at the values only): a
/// program cache keyed by bindings never confuses two shapes and never sorts anything.
#[derive(Clone)]
pub struct Bindings<'s> {
    signature: &'s Signature,
    values: Values,
}

impl<'s> Bindings<'s> {
    pub(crate) fn new(signature: &'s Signature, values: Values) -> Bindings<'s> {
        Bindings { signature, values }
    }

    /// The signature these bindings belong to.
    pub fn signature(&self) -> &'s Signature {
        self.signature
    }

    /// The value of each input symbol, indexed like [`Signature::symbols`].
    pub fn values(&self) -> &[u64] {
        &self.values
    }

    /// The value of `symbol`, if an input uses it.
    pub fn get(&self, symbol: &str) -> Option<u64> {
        self.signature.symbol_id(symbol).map(|id| self.values[id])
    }

    /// `(symbol, value)` pairs in symbol order.
    pub fn iter(&self) -> impl Iterator<Item = (&'s str, u64)> + '_ {
        self.signature.symbols().zip(self.values.iter().copied())
    }

    /// The request's batch: the batch symbol's value, or for a traced model the leading
    /// extent its batched inputs are fixed at. `None` when the model has no batch.
    pub fn batch(&self) -> Option<u64> {
        match self.signature.layout.source() {
            BatchSource::Symbol(_) => self.signature.batch_symbol.map(|id| self.values[id as usize]),
            BatchSource::LeadingExtent(extent) => Some(*extent),
            BatchSource::None => None,
        }
    }

    /// The same bindings with the batch symbol set to `batch`: the shapes a program compiled
    /// for a bucket takes.
    pub fn with_batch(&self, batch: u64) -> Result<Bindings<'s>, ShapeError> {
        let id = self.signature.batch_symbol.ok_or(ShapeError::NoBatchSymbol)?;
        if batch == 0 {
            return Err(ShapeError::ZeroBatchSize);
        }
        let mut values = self.values.clone();
        values[id as usize] = batch;
        Ok(Bindings { signature: self.signature, values })
    }

    /// The concrete shape of input `index` under these bindings.
    pub fn input_shape(&self, index: usize) -> Result<Shape, ShapeError> {
        self.signature.input_spec(index)?;
        Ok(self.signature.resolve_input(index, &self.values))
    }

    /// The concrete shape of output `index`, or [`ShapeError::UnboundSymbol`] when one of its
    /// dimensions is a symbol no input binds (a data-dependent extent).
    pub fn output_shape(&self, index: usize) -> Result<Shape, ShapeError> {
        let spec = self.signature.output_spec(index)?;
        spec.dims()
            .iter()
            .map(|dim| match dim {
                Dim::Fixed(extent) => Ok(*extent),
                Dim::Symbolic(name) => self
                    .signature
                    .symbol_id(name)
                    .map(|id| self.values[id])
                    .ok_or_else(|| ShapeError::UnboundSymbol { output: spec.name().into(), symbol: name.clone() }),
            })
            .collect()
    }

    /// The stable key of the request's input shapes: equal to [`StableShapeKey::of`] over the
    /// same named shapes. Allocates nothing for inputs of rank up to [`INLINE_RANK`](crate::INLINE_RANK).
    pub fn stable_key(&self) -> StableShapeKey {
        let mut sink = StableSink::new();
        self.encode(&mut sink);
        sink.finish()
    }

    /// The fast hash of the request's input shapes: equal to [`fast_hash`](crate::fast_hash)
    /// over the same named shapes. Hashing the bindings themselves (`Hash`) is cheaper still.
    pub fn fast_hash(&self) -> u64 {
        let mut sink = FastSink(fast_hasher());
        self.encode(&mut sink);
        sink.0.finish()
    }

    fn encode(&self, sink: &mut impl CanonicalSink) {
        let signature = self.signature;
        sink.u64(signature.inputs.len() as u64);
        for index in signature.canonical_order() {
            let spec = &signature.inputs[index];
            encode_input(sink, spec.name(), spec.dtype(), &signature.resolve_input(index, &self.values));
        }
    }
}

impl PartialEq for Bindings<'_> {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self.signature, other.signature) && self.values == other.values
    }
}

impl Eq for Bindings<'_> {}

impl Hash for Bindings<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.values.hash(state);
    }
}

impl fmt::Debug for Bindings<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}
