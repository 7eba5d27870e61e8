//! The check of a request given as one shape per input, in binding order.

use crate::bindings::Bindings;
use crate::signature::{BindState, FastPath, Values};
use crate::{DType, ShapeError, Signature, TensorSpec};

/// The inputs of one rank, with their `[expected, symbolic_mask]` pairs side by side.
///
/// Checking inputs grouped by rank gives the inner loop a trip count fixed at compile time for
/// ranks up to [`UNROLLED_RANK`], so the branch predictor never has to guess where an input
/// ends. Checking in binding order with a loop per input mispredicts about once per input, which
/// made that version about twice as slow on the 190-input benchmark.
pub(crate) struct RankGroup {
    rank: usize,
    inputs: Box<[u32]>,
    /// `rank` pairs per input, in the order of `inputs`.
    template: Box<[[u64; 2]]>,
}

/// Ranks up to this are checked with a fully unrolled loop.
const UNROLLED_RANK: usize = 6;

impl RankGroup {
    pub(crate) fn build(inputs: &[TensorSpec], offsets: &[usize], template: &[[u64; 2]]) -> Box<[RankGroup]> {
        let mut ranks: Vec<usize> = inputs.iter().map(TensorSpec::rank).collect();
        ranks.sort_unstable();
        ranks.dedup();
        ranks
            .into_iter()
            .map(|rank| {
                let members: Vec<u32> =
                    (0..inputs.len()).filter(|&index| inputs[index].rank() == rank).map(|index| index as u32).collect();
                let pairs = members
                    .iter()
                    .flat_map(|&index| &template[offsets[index as usize]..offsets[index as usize + 1]])
                    .copied()
                    .collect();
                RankGroup { rank, inputs: members.into(), template: pairs }
            })
            .collect()
    }

    /// OR of `extent ^ (expected | (value & mask))` over the group, or `None` on a rank mismatch.
    #[inline]
    fn diff<S: AsRef<[u64]>>(&self, shapes: &[S], value: u64) -> Option<u64> {
        match self.rank {
            0 => self.inputs.iter().all(|&input| shapes[input as usize].as_ref().is_empty()).then_some(0),
            1 => self.diff_unrolled::<1, S>(shapes, value),
            2 => self.diff_unrolled::<2, S>(shapes, value),
            3 => self.diff_unrolled::<3, S>(shapes, value),
            4 => self.diff_unrolled::<4, S>(shapes, value),
            5 => self.diff_unrolled::<5, S>(shapes, value),
            UNROLLED_RANK => self.diff_unrolled::<UNROLLED_RANK, S>(shapes, value),
            _ => {
                let mut diff = 0;
                for (&input, template) in self.inputs.iter().zip(self.template.chunks_exact(self.rank)) {
                    let dims = shapes[input as usize].as_ref();
                    if dims.len() != self.rank {
                        return None;
                    }
                    for (&extent, &[expected, mask]) in dims.iter().zip(template) {
                        diff |= extent ^ (expected | (value & mask));
                    }
                }
                Some(diff)
            }
        }
    }

    #[inline]
    fn diff_unrolled<const R: usize, S: AsRef<[u64]>>(&self, shapes: &[S], value: u64) -> Option<u64> {
        let (templates, _) = self.template.as_chunks::<R>();
        let mut diff = 0;
        for (&input, template) in self.inputs.iter().zip(templates) {
            let dims: &[u64; R] = shapes[input as usize].as_ref().try_into().ok()?;
            for axis in 0..R {
                let [expected, mask] = template[axis];
                diff |= dims[axis] ^ (expected | (value & mask));
            }
        }
        Some(diff)
    }
}

impl Signature {
    /// Checks a request given as one shape per input, in binding order.
    ///
    /// Accepts exactly what [`bind`](Signature::bind) accepts (element types aside, see
    /// [`check_dtypes`](Signature::check_dtypes)) and returns the same bindings, without
    /// allocating. For a model with at most one symbol it is one pass per rank group that folds
    /// `extent ^ (expected | (value & mask))` into one accumulator: ranks, fixed extents and
    /// agreement of every symbolic axis with the first are tested together, with no branch per
    /// axis. Only a failing request (or a model with several symbols) takes the slow path, which
    /// walks the inputs one by one to say precisely what is wrong.
    ///
    /// This touches every extent of every input. A caller that runs many requests can keep a
    /// [`RequestShapes`](crate::RequestShapes) instead, which validates extents as they are
    /// written and leaves only the symbolic ones to the per-run check.
    pub fn check<S: AsRef<[u64]>>(&self, shapes: &[S]) -> Result<Bindings<'_>, ShapeError> {
        if shapes.len() != self.inputs.len() {
            return Err(ShapeError::InputCount { expected: self.inputs.len(), actual: shapes.len() });
        }
        match self.fast {
            FastPath::Static => {
                if self.matches_template(shapes, 0) {
                    return Ok(Bindings::new(self, Values::new()));
                }
            }
            FastPath::OneSymbol { first_input, first_axis, reject_zero, max_value } => {
                if let Some(&value) = shapes[first_input].as_ref().get(first_axis)
                    && !(reject_zero && value == 0)
                    && value <= max_value
                    && self.matches_template(shapes, value)
                {
                    return Ok(Bindings::new(self, Values::from_slice(&[value])));
                }
            }
            FastPath::General => {}
        }
        self.check_slow(shapes)
    }

    /// Checks the element types of a request given in binding order.
    pub fn check_dtypes(&self, dtypes: &[DType]) -> Result<(), ShapeError> {
        if dtypes.len() != self.inputs.len() {
            return Err(ShapeError::InputCount { expected: self.inputs.len(), actual: dtypes.len() });
        }
        match self.inputs.iter().zip(dtypes).find(|(spec, actual)| spec.dtype() != **actual) {
            None => Ok(()),
            Some((spec, &actual)) => {
                Err(ShapeError::DTypeMismatch { input: spec.name().into(), expected: spec.dtype(), actual })
            }
        }
    }

    /// Whether every input has its declared rank and every extent equals the template with
    /// `value` on the symbolic axes.
    #[inline]
    fn matches_template<S: AsRef<[u64]>>(&self, shapes: &[S], value: u64) -> bool {
        let mut diff = 0u64;
        for group in &self.rank_groups {
            match group.diff(shapes, value) {
                Some(group_diff) => diff |= group_diff,
                None => return false,
            }
        }
        diff == 0
    }

    /// Validates input by input, in binding order: the precise (and slower) path.
    #[cold]
    pub(crate) fn check_slow<S: AsRef<[u64]>>(&self, shapes: &[S]) -> Result<Bindings<'_>, ShapeError> {
        let mut state = BindState::new(self.symbols.len());
        for (index, shape) in shapes.iter().enumerate() {
            self.validate_input(index, shape.as_ref(), &mut state)?;
        }
        Ok(Bindings::new(self, state.values))
    }
}
