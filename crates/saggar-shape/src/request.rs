//! Reusable request shapes, validated as they are written.

use crate::bindings::Bindings;
use crate::signature::{BindState, FIXED, FastPath, Values};
use crate::{Shape, ShapeError, Signature};

/// The shapes of one request in a packed, reusable form: one slot per symbolic axis of the
/// model, everything fixed left implicit.
///
/// Seed 001 re-checks only the symbolic dimensions per run, trusting that the fixed ones did
/// not change. `RequestShapes` makes that sound instead of trusted: every write
/// ([`set`](RequestShapes::set), [`set_batch`](RequestShapes::set_batch)) validates rank, fixed
/// extents, a non-zero batch and the byte size right away, so the only things left for the
/// per-run [`Signature::check_request`] are what no single write can know: that every input
/// was given, and that each symbol has the same value everywhere. For a model whose only symbol
/// is the batch that is one pass over a contiguous array of batch slots.
///
/// A dispatcher keeps one per in-flight request (or per lease) and, for a batch-only model,
/// calls `set_batch` once per run. Made by [`Signature::request_shapes`]; using it with another
/// signature is an error, not a silent mix-up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestShapes {
    signature: u64,
    /// One per symbolic axis of the signature, in binding order.
    slots: Box<[u64]>,
    /// Per input: whether its symbolic extents were written (true from the start for an input
    /// without symbolic axes).
    written: Box<[bool]>,
    unwritten: usize,
}

impl RequestShapes {
    fn check_owner(&self, signature: &Signature) -> Result<(), ShapeError> {
        if self.signature == signature.id { Ok(()) } else { Err(ShapeError::ForeignRequest) }
    }

    fn mark_written(&mut self, index: usize) {
        if !self.written[index] {
            self.written[index] = true;
            self.unwritten -= 1;
        }
    }

    /// Writes the extents of input `index` (binding order), validating them against the
    /// signature first: rank, fixed extents, a repeated symbol within the input, a zero batch
    /// and the byte size. On error nothing is written.
    pub fn set(&mut self, signature: &Signature, index: usize, dims: &[u64]) -> Result<(), ShapeError> {
        self.check_owner(signature)?;
        signature.input_spec(index)?;
        signature.validate_input(index, dims, &mut BindState::new(signature.symbols.len()))?;
        let slots = signature.slot_offsets[index]..signature.slot_offsets[index + 1];
        for slot in slots {
            let (_, axis) = signature.slot_sites[slot];
            self.slots[slot] = dims[axis as usize];
        }
        self.mark_written(index);
        Ok(())
    }

    /// Sets every batch axis to `batch`. Inputs whose only symbol is the batch are then
    /// complete, so for a batch-only model this one call describes the whole request.
    ///
    /// Fails without writing when the model has no batch symbol, when `batch` is zero, or when
    /// some input's byte size would overflow.
    pub fn set_batch(&mut self, signature: &Signature, batch: u64) -> Result<(), ShapeError> {
        self.check_owner(signature)?;
        let batch_symbol = signature.batch_symbol.ok_or(ShapeError::NoBatchSymbol)?;
        if batch == 0 {
            return Err(ShapeError::ZeroBatchSize);
        }
        if let FastPath::OneSymbol { max_value, .. } = signature.fast {
            if batch > max_value
                && let Some(overflow) = signature.first_overflow(&[batch])
            {
                return Err(overflow);
            }
            // The batch is the only symbol: every slot is a batch slot and every input is done.
            self.slots.fill(batch);
            self.written.fill(true);
            self.unwritten = 0;
            return Ok(());
        }
        // Several symbols: sizes are validated per run (`check_request` takes the slow path).
        for (slot, &symbol) in self.slots.iter_mut().zip(&signature.slot_symbols) {
            if symbol == batch_symbol {
                *slot = batch;
            }
        }
        for index in 0..signature.inputs.len() {
            let symbols = &signature.slot_symbols[signature.slot_offsets[index]..signature.slot_offsets[index + 1]];
            if !symbols.is_empty() && symbols.iter().all(|&symbol| symbol == batch_symbol) {
                self.mark_written(index);
            }
        }
        Ok(())
    }

    /// Whether every input with a symbolic axis has been written.
    pub fn is_complete(&self) -> bool {
        self.unwritten == 0
    }
}

impl Signature {
    /// Empty request shapes for this signature: inputs with symbolic axes still to be written.
    pub fn request_shapes(&self) -> RequestShapes {
        let written: Box<[bool]> = self.slot_offsets.windows(2).map(|range| range[0] == range[1]).collect();
        RequestShapes {
            signature: self.id,
            slots: vec![0; self.slot_sites.len()].into(),
            unwritten: written.iter().filter(|&&done| !done).count(),
            written,
        }
    }

    /// The per-run check of reusable request shapes (see [`RequestShapes`]).
    ///
    /// Accepts exactly what [`check`](Signature::check) would accept for the same extents and
    /// returns the same bindings. For a model whose only symbol is the batch it reads only the
    /// batch slots, in one branch-free pass, and never allocates.
    pub fn check_request(&self, request: &RequestShapes) -> Result<Bindings<'_>, ShapeError> {
        request.check_owner(self)?;
        if request.unwritten != 0 {
            let index = request.written.iter().position(|&done| !done).unwrap_or(0);
            return Err(ShapeError::MissingInput { input: self.inputs[index].name().into() });
        }
        match self.fast {
            FastPath::Static => return Ok(Bindings::new(self, Values::new())),
            FastPath::OneSymbol { .. } => {
                // Writes validated everything else; what is left is agreement between slots.
                let value = request.slots[0];
                if differs_from(&request.slots, value) == 0 {
                    return Ok(Bindings::new(self, Values::from_slice(&[value])));
                }
            }
            FastPath::General => {}
        }
        let mut state = BindState::new(self.symbols.len());
        for index in 0..self.inputs.len() {
            self.validate_input(index, &self.resolve_request_input(request, index), &mut state)?;
        }
        Ok(Bindings::new(self, state.values))
    }

    /// The extents of input `index` as `request` currently describes it (0 on symbolic axes
    /// not yet written).
    pub fn request_input_shape(&self, request: &RequestShapes, index: usize) -> Result<Shape, ShapeError> {
        request.check_owner(self)?;
        self.input_spec(index)?;
        Ok(self.resolve_request_input(request, index))
    }

    fn resolve_request_input(&self, request: &RequestShapes, index: usize) -> Shape {
        let axes = self.offsets[index]..self.offsets[index + 1];
        let mut slot = self.slot_offsets[index];
        self.template[axes.clone()]
            .iter()
            .zip(&self.axis_symbol[axes])
            .map(|(&[expected, _], &symbol)| {
                if symbol == FIXED {
                    expected
                } else {
                    slot += 1;
                    request.slots[slot - 1]
                }
            })
            .collect()
    }
}

/// OR of `slot ^ value` over `slots`: zero exactly when every slot equals `value`.
///
/// Eight independent accumulators keep the loop from waiting on a single chain of ORs, so it
/// runs at the speed of the loads (vectorised by the compiler).
#[inline]
fn differs_from(slots: &[u64], value: u64) -> u64 {
    let (chunks, rest) = slots.as_chunks::<8>();
    let mut lanes = [0u64; 8];
    for chunk in chunks {
        for (lane, &slot) in lanes.iter_mut().zip(chunk) {
            *lane |= slot ^ value;
        }
    }
    let head = lanes.iter().fold(0, |diff, &lane| diff | lane);
    rest.iter().fold(head, |diff, &slot| diff | (slot ^ value))
}
