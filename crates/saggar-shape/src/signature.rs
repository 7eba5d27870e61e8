//! A model's signature: binding symbols from a request, and the per-run shape check.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use smallvec::SmallVec;

use crate::batch::BatchLayout;
use crate::bindings::Bindings;
use crate::check::RankGroup;
use crate::hash::TensorShape;
use crate::pad::{PadPlan, SlicePlan};
use crate::shape::product;
use crate::split::Chunk;
use crate::{Dim, Shape, ShapeError, TensorRole, TensorSpec};

/// Marks a flattened axis that is fixed rather than symbolic.
pub(crate) const FIXED: u32 = u32::MAX;

/// Symbol values of one request, indexed by symbol id. Eight symbols stay inline.
pub(crate) type Values = SmallVec<[u64; 8]>;

/// Gives every signature an identity, so a [`RequestShapes`](crate::RequestShapes) is never
/// checked against a signature it was not made for.
static NEXT_SIGNATURE_ID: AtomicU64 = AtomicU64::new(1);

/// A model's inputs and outputs, with everything the per-run checks need worked out once.
///
/// Build one per loaded model. It keeps the specs in binding order (the program's order), the
/// symbols the inputs use, the canonical (by name) order used for hashing, the detected
/// [`BatchLayout`], and flattened tables:
///
/// * every axis of every input as an `[expected, symbolic_mask]` pair: the fixed extent (0 on a
///   symbolic axis) and an all-ones mask on symbolic axes, grouped by input rank;
/// * every symbolic axis as one slot of a [`RequestShapes`](crate::RequestShapes), with its
///   input, axis and symbol;
/// * for a model with a single input symbol (typically the batch), the largest value for which
///   no input's byte size overflows.
///
/// Three ways in, from the most general to the fastest:
///
/// * [`bind`](Signature::bind): inputs by name, in any order (the standard path);
/// * [`check`](Signature::check): one shape per input in binding order;
/// * [`check_request`](Signature::check_request): a reusable
///   [`RequestShapes`](crate::RequestShapes), validated as it is written, so the per-run check
///   only looks at the symbolic extents.
///
/// All three accept exactly the same extents and return the same [`Bindings`]; element types
/// are checked by `bind` and, for the other two, by [`check_dtypes`](Signature::check_dtypes).
pub struct Signature {
    pub(crate) id: u64,
    pub(crate) inputs: Box<[TensorSpec]>,
    pub(crate) outputs: Box<[TensorSpec]>,
    /// Symbols used by the inputs, in order of first occurrence in binding order.
    pub(crate) symbols: Box<[Box<str>]>,
    /// Input indices sorted by name.
    pub(crate) canonical: Box<[u32]>,
    pub(crate) layout: BatchLayout,
    pub(crate) batch_symbol: Option<u32>,
    /// Per input: start of its axes in the flattened tables (len = inputs + 1).
    pub(crate) offsets: Box<[usize]>,
    /// Per flattened axis: `[fixed extent or 0, u64::MAX if symbolic else 0]`.
    pub(crate) template: Box<[[u64; 2]]>,
    /// Per flattened axis: symbol id, or [`FIXED`].
    pub(crate) axis_symbol: Box<[u32]>,
    /// The inputs grouped by rank, for [`check`](Signature::check).
    pub(crate) rank_groups: Box<[RankGroup]>,
    /// Per input: start of its symbolic axes among all symbolic axes (len = inputs + 1).
    pub(crate) slot_offsets: Box<[usize]>,
    /// Per symbolic axis: `(input, axis)`.
    pub(crate) slot_sites: Box<[(u32, u32)]>,
    /// Per symbolic axis: its symbol id.
    pub(crate) slot_symbols: Box<[u32]>,
    pub(crate) fast: FastPath,
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum FastPath {
    /// No input symbol: the request must match the fixed shapes exactly.
    Static,
    /// Exactly one input symbol.
    OneSymbol {
        first_input: usize,
        first_axis: usize,
        reject_zero: bool,
        /// Largest value for which every input's byte size fits in 64 bits.
        max_value: u64,
    },
    /// Several symbols: the request is validated axis by axis.
    General,
}

impl Signature {
    /// The signature of a model with these inputs (in binding order) and outputs (in program
    /// order), detecting the batch with [`BatchLayout::detect`].
    ///
    /// Fails when two inputs or two outputs share a name, or when the fixed extents of a spec
    /// alone overflow a 64-bit byte size.
    pub fn new(inputs: Vec<TensorSpec>, outputs: Vec<TensorSpec>) -> Result<Signature, ShapeError> {
        let layout = BatchLayout::detect(&inputs, &outputs);
        Signature::with_layout(inputs, outputs, layout)
    }

    /// Like [`new`](Signature::new), with `batch_symbol` named as the batch instead of detected.
    pub fn with_batch_symbol(
        inputs: Vec<TensorSpec>,
        outputs: Vec<TensorSpec>,
        batch_symbol: &str,
    ) -> Result<Signature, ShapeError> {
        let layout = BatchLayout::with_symbol(&inputs, &outputs, batch_symbol)?;
        Signature::with_layout(inputs, outputs, layout)
    }

    fn with_layout(
        inputs: Vec<TensorSpec>,
        outputs: Vec<TensorSpec>,
        layout: BatchLayout,
    ) -> Result<Signature, ShapeError> {
        reject_duplicates(&inputs, TensorRole::Input)?;
        reject_duplicates(&outputs, TensorRole::Output)?;
        for spec in inputs.iter().chain(&outputs) {
            let fixed: Shape = spec.dims().iter().map(|dim| dim.as_fixed().unwrap_or(1)).collect();
            product(&fixed, spec.dtype().size_bytes() as u64)
                .map_err(|source| ShapeError::Overflow { input: spec.name().into(), source })?;
        }

        let mut symbols: Vec<Box<str>> = Vec::new();
        let mut offsets = Vec::with_capacity(inputs.len() + 1);
        let mut template = Vec::new();
        let mut axis_symbol = Vec::new();
        let mut slot_offsets = Vec::with_capacity(inputs.len() + 1);
        let mut slot_sites = Vec::new();
        let mut slot_symbols = Vec::new();
        for (index, spec) in inputs.iter().enumerate() {
            offsets.push(template.len());
            slot_offsets.push(slot_sites.len());
            for (axis, dim) in spec.dims().iter().enumerate() {
                match dim {
                    Dim::Fixed(extent) => {
                        template.push([*extent, 0]);
                        axis_symbol.push(FIXED);
                    }
                    Dim::Symbolic(name) => {
                        let id = match symbols.iter().position(|known| known == name) {
                            Some(id) => id,
                            None => {
                                symbols.push(name.clone());
                                symbols.len() - 1
                            }
                        } as u32;
                        template.push([0, u64::MAX]);
                        axis_symbol.push(id);
                        slot_sites.push((index as u32, axis as u32));
                        slot_symbols.push(id);
                    }
                }
            }
        }
        offsets.push(template.len());
        slot_offsets.push(slot_sites.len());

        let mut canonical: Vec<u32> = (0..inputs.len() as u32).collect();
        canonical.sort_by(|&a, &b| inputs[a as usize].name().cmp(inputs[b as usize].name()));
        let batch_symbol =
            layout.symbol().and_then(|name| symbols.iter().position(|known| &**known == name)).map(|id| id as u32);
        let rank_groups = RankGroup::build(&inputs, &offsets, &template);

        let mut signature = Signature {
            id: NEXT_SIGNATURE_ID.fetch_add(1, Ordering::Relaxed),
            inputs: inputs.into(),
            outputs: outputs.into(),
            symbols: symbols.into(),
            canonical: canonical.into(),
            layout,
            batch_symbol,
            offsets: offsets.into(),
            template: template.into(),
            axis_symbol: axis_symbol.into(),
            rank_groups,
            slot_offsets: slot_offsets.into(),
            slot_sites: slot_sites.into(),
            slot_symbols: slot_symbols.into(),
            fast: FastPath::General,
        };
        signature.fast = signature.plan_fast_path();
        Ok(signature)
    }

    fn plan_fast_path(&self) -> FastPath {
        match self.symbols.len() {
            0 => FastPath::Static,
            1 => {
                let (first_input, first_axis) = self.slot_sites[0];
                // The largest value that keeps every input's size in range, by bisection: the
                // sizes grow with the value, and 1 is known to fit (checked in `with_layout`).
                let fits = |value: u64| self.first_overflow(&[value]).is_none();
                let (mut low, mut high) = (1u64, u64::MAX);
                if fits(high) {
                    low = high;
                }
                while high - low > 1 {
                    let mid = low + (high - low) / 2;
                    if fits(mid) {
                        low = mid;
                    } else {
                        high = mid;
                    }
                }
                FastPath::OneSymbol {
                    first_input: first_input as usize,
                    first_axis: first_axis as usize,
                    reject_zero: self.batch_symbol == Some(0),
                    max_value: low,
                }
            }
            _ => FastPath::General,
        }
    }

    /// The first input whose byte size overflows with symbol values `values`, as an error.
    pub(crate) fn first_overflow(&self, values: &[u64]) -> Option<ShapeError> {
        self.inputs.iter().enumerate().find_map(|(index, spec)| {
            product(&self.resolve_input(index, values), spec.dtype().size_bytes() as u64)
                .err()
                .map(|source| ShapeError::Overflow { input: spec.name().into(), source })
        })
    }

    /// The inputs, in binding order.
    pub fn inputs(&self) -> &[TensorSpec] {
        &self.inputs
    }

    /// The outputs, in program order.
    pub fn outputs(&self) -> &[TensorSpec] {
        &self.outputs
    }

    /// The symbols the inputs use, in order of first occurrence; a symbol's position here is
    /// its index into [`Bindings::values`].
    pub fn symbols(&self) -> impl ExactSizeIterator<Item = &str> {
        self.symbols.iter().map(|name| &**name)
    }

    /// Which inputs and outputs carry the batch.
    pub fn batch_layout(&self) -> &BatchLayout {
        &self.layout
    }

    /// Whether no input has a symbolic dimension.
    pub fn is_static(&self) -> bool {
        self.symbols.is_empty()
    }

    /// The binding-order index of the input called `name`. O(log n): a binary search over the
    /// canonical order.
    pub fn input_index(&self, name: &str) -> Option<usize> {
        self.canonical
            .binary_search_by(|&index| self.inputs[index as usize].name().cmp(name))
            .ok()
            .map(|position| self.canonical[position] as usize)
    }

    /// Input indices in canonical order (sorted by name): the order shapes are hashed in.
    pub fn canonical_order(&self) -> impl ExactSizeIterator<Item = usize> + '_ {
        self.canonical.iter().map(|&index| index as usize)
    }

    /// Binds the symbols of a request that names its inputs, in any order: the standard path.
    ///
    /// Checks, per input: that the model has it and the request gives it once, its element
    /// type, its rank, every fixed extent, that each symbol gets one value in the whole
    /// request, that the batch is not zero, and that its byte size fits in 64 bits; then that
    /// no input is missing. The first failure is returned as a typed error naming the input.
    /// Allocates nothing for models of up to 256 inputs and 8 symbols.
    pub fn bind(&self, request: &[TensorShape<'_>]) -> Result<Bindings<'_>, ShapeError> {
        let mut seen: SmallVec<[u64; 4]> = SmallVec::from_elem(0, self.inputs.len().div_ceil(64));
        let mut state = BindState::new(self.symbols.len());
        for input in request {
            let index =
                self.input_index(input.name).ok_or_else(|| ShapeError::UnknownInput { input: input.name.into() })?;
            let (word, bit) = (index / 64, 1u64 << (index % 64));
            if seen[word] & bit != 0 {
                return Err(ShapeError::DuplicateInput { input: input.name.into() });
            }
            seen[word] |= bit;
            let spec = &self.inputs[index];
            if input.dtype != spec.dtype() {
                return Err(ShapeError::DTypeMismatch {
                    input: input.name.into(),
                    expected: spec.dtype(),
                    actual: input.dtype,
                });
            }
            self.validate_input(index, input.dims, &mut state)?;
        }
        if request.len() != self.inputs.len() {
            let missing = (0..self.inputs.len()).find(|&index| seen[index / 64] & (1 << (index % 64)) == 0);
            if let Some(index) = missing {
                return Err(ShapeError::MissingInput { input: self.inputs[index].name().into() });
            }
        }
        Ok(Bindings::new(self, state.values))
    }

    /// Validates the extents of input `index`, binding its symbols into `state`.
    pub(crate) fn validate_input(&self, index: usize, dims: &[u64], state: &mut BindState) -> Result<(), ShapeError> {
        let spec = &self.inputs[index];
        let start = self.offsets[index];
        if dims.len() != spec.rank() {
            return Err(ShapeError::RankMismatch {
                input: spec.name().into(),
                expected: spec.rank(),
                actual: dims.len(),
                shape: Shape::new(dims),
            });
        }
        for (axis, &actual) in dims.iter().enumerate() {
            let flat = start + axis;
            let symbol = self.axis_symbol[flat];
            if symbol == FIXED {
                let expected = self.template[flat][0];
                if actual != expected {
                    return Err(ShapeError::FixedDimMismatch { input: spec.name().into(), axis, expected, actual });
                }
                continue;
            }
            let id = symbol as usize;
            match state.first[id] {
                None => {
                    if self.batch_symbol == Some(symbol) && actual == 0 {
                        return Err(ShapeError::ZeroBatch { input: spec.name().into(), axis });
                    }
                    state.values[id] = actual;
                    state.first[id] = Some((index as u32, axis as u32));
                }
                Some((first_input, first_axis)) => {
                    let first_value = state.values[id];
                    if actual != first_value {
                        return Err(ShapeError::SymbolConflict {
                            symbol: self.symbols[id].clone(),
                            first_input: self.inputs[first_input as usize].name().into(),
                            first_axis: first_axis as usize,
                            first_value,
                            input: spec.name().into(),
                            axis,
                            value: actual,
                        });
                    }
                }
            }
        }
        product(dims, spec.dtype().size_bytes() as u64)
            .map_err(|source| ShapeError::Overflow { input: spec.name().into(), source })?;
        Ok(())
    }

    /// The extents of input `index` with symbol values `values` (indexed by symbol id).
    pub(crate) fn resolve_input(&self, index: usize, values: &[u64]) -> Shape {
        let range = self.offsets[index]..self.offsets[index + 1];
        self.template[range.clone()]
            .iter()
            .zip(&self.axis_symbol[range])
            .map(|(&[expected, _], &symbol)| if symbol == FIXED { expected } else { values[symbol as usize] })
            .collect()
    }

    /// The spec of input `index`, or [`ShapeError::IndexOutOfRange`].
    pub(crate) fn input_spec(&self, index: usize) -> Result<&TensorSpec, ShapeError> {
        self.inputs.get(index).ok_or(ShapeError::IndexOutOfRange {
            role: TensorRole::Input,
            index,
            count: self.inputs.len(),
        })
    }

    /// The spec of output `index`, or [`ShapeError::IndexOutOfRange`].
    pub(crate) fn output_spec(&self, index: usize) -> Result<&TensorSpec, ShapeError> {
        self.outputs.get(index).ok_or(ShapeError::IndexOutOfRange {
            role: TensorRole::Output,
            index,
            count: self.outputs.len(),
        })
    }

    pub(crate) fn symbol_id(&self, name: &str) -> Option<usize> {
        self.symbols.iter().position(|known| &**known == name)
    }

    /// The pad plan of input `index` for one chunk of a request, given the request's extents
    /// `dims` for that input. Inputs without a batch axis get a pass-through plan.
    pub fn pad_plan(&self, index: usize, dims: &[u64], chunk: Chunk) -> Result<PadPlan, ShapeError> {
        let spec = self.input_spec(index)?;
        PadPlan::new(TensorShape::new(spec.name(), spec.dtype(), dims), self.layout.is_input_batched(index), chunk)
    }

    /// The slice plan of output `index` for one chunk, given the extents `program_dims` the
    /// program produced (with the chunk's bucket as the batch).
    pub fn slice_plan(&self, index: usize, program_dims: &[u64], chunk: Chunk) -> Result<SlicePlan, ShapeError> {
        let spec = self.output_spec(index)?;
        let batched = self.layout.outputs()[index].resolve(program_dims.first().copied(), chunk.bucket);
        SlicePlan::new(TensorShape::new(spec.name(), spec.dtype(), program_dims), batched, chunk)
    }
}

impl fmt::Debug for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Signature")
            .field("inputs", &self.inputs)
            .field("outputs", &self.outputs)
            .field("symbols", &self.symbols)
            .field("batch", self.layout.source())
            .finish_non_exhaustive()
    }
}

fn reject_duplicates(specs: &[TensorSpec], role: TensorRole) -> Result<(), ShapeError> {
    let mut names: Vec<&str> = specs.iter().map(TensorSpec::name).collect();
    names.sort_unstable();
    match names.windows(2).find(|pair| pair[0] == pair[1]) {
        Some(pair) => Err(ShapeError::DuplicateSpec { role, name: pair[0].into() }),
        None => Ok(()),
    }
}

/// Symbol values found so far, and where each was first bound (for error messages).
pub(crate) struct BindState {
    pub(crate) values: Values,
    first: SmallVec<[Option<(u32, u32)>; 8]>,
}

impl BindState {
    pub(crate) fn new(symbols: usize) -> BindState {
        BindState { values: SmallVec::from_elem(0, symbols), first: SmallVec::from_elem(None, symbols) }
    }
}
