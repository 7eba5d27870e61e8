//! Batch-axis detection: which inputs and outputs carry the batch.

use crate::{Dim, ShapeError, TensorSpec};

/// Where a model's batch comes from.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum BatchSource {
    /// Batched tensors have this symbol as their leading dimension.
    Symbol(Box<str>),
    /// No input has a symbolic leading dimension (a traced model, or one whose dimension names
    /// were lost): batched inputs are those whose leading extent is this, the most common
    /// leading extent among the inputs.
    LeadingExtent(u64),
    /// No input has a leading dimension at all (only scalars, or no inputs).
    None,
}

/// Whether one tensor carries the batch along its leading axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BatchAxis {
    /// Axis 0 is the batch: padded on the way in, sliced on the way out.
    Leading,
    /// The tensor has no batch axis: passed through whole, never padded or sliced.
    Absent,
    /// Only for outputs whose leading dimension is a symbol no input binds (a name the model's
    /// exporter made up, say `unk__7`): the output is treated as batched when the program
    /// produces exactly as many leading rows as the bucket it ran at.
    Undetermined,
}

impl BatchAxis {
    /// Whether a tensor with this axis, produced by a program run at `bucket` rows with
    /// `leading_extent` as its axis-0 extent (`None` for a scalar), is batched.
    pub fn resolve(self, leading_extent: Option<u64>, bucket: u64) -> bool {
        match self {
            BatchAxis::Leading => true,
            BatchAxis::Absent => false,
            BatchAxis::Undetermined => leading_extent == Some(bucket),
        }
    }
}

/// Which inputs and outputs of a model carry the batch, and whether the batch is the model's
/// only dynamic dimension.
///
/// Detection follows seed 001 and its review:
///
/// 1. If the caller names the batch symbol, that symbol is the batch
///    ([`BatchLayout::with_symbol`]).
/// 2. Otherwise the batch is the symbol that leads the most inputs (ties go to the symbol seen
///    first in binding order). A model fed `ids: [batch, seq]` and `mask: [batch, seq]` plus a
///    lookup table `[1000, 64]` gets `batch`, and the table is not batched.
/// 3. When no input has a symbolic leading dimension (a traced model, or one exported without
///    dimension names), the reviewer's heuristic applies: the most common leading extent marks
///    the batch inputs, and an input whose leading extent differs has no batch axis. This can
///    misfire when an unbatched input happens to lead with the same extent; name the symbol
///    in that case.
///
/// Inputs without a batch axis are never padded. The batch is always axis 0: a model whose
/// batch symbol also occurs at another axis is still described, but
/// [`batch_is_only_dynamic_dim`](BatchLayout::batch_is_only_dynamic_dim) is false for it, so
/// it is not served from buckets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchLayout {
    source: BatchSource,
    inputs: Box<[BatchAxis]>,
    outputs: Box<[BatchAxis]>,
    only_dynamic: bool,
}

impl BatchLayout {
    /// Detects the batch of a model with these inputs and outputs (rules 2 and 3 above).
    pub fn detect(inputs: &[TensorSpec], outputs: &[TensorSpec]) -> BatchLayout {
        let leading_symbol = most_common(inputs.iter().filter_map(|spec| match spec.dims().first() {
            Some(Dim::Symbolic(name)) => Some(&**name),
            _ => None,
        }));
        let source = match leading_symbol {
            Some(symbol) => BatchSource::Symbol(symbol.into()),
            None => match most_common(inputs.iter().filter_map(|spec| spec.dims().first().and_then(Dim::as_fixed))) {
                Some(extent) => BatchSource::LeadingExtent(extent),
                None => BatchSource::None,
            },
        };
        BatchLayout::from_source(source, inputs, outputs)
    }

    /// The layout of a model whose batch symbol is `symbol` (rule 1 above).
    ///
    /// Fails with [`ShapeError::UnknownSymbol`] when no input uses the symbol.
    pub fn with_symbol(inputs: &[TensorSpec], outputs: &[TensorSpec], symbol: &str) -> Result<BatchLayout, ShapeError> {
        let used = inputs.iter().flat_map(|spec| spec.dims()).any(|dim| dim.symbol() == Some(symbol));
        if !used {
            return Err(ShapeError::UnknownSymbol { symbol: symbol.into() });
        }
        Ok(BatchLayout::from_source(BatchSource::Symbol(symbol.into()), inputs, outputs))
    }

    fn from_source(source: BatchSource, inputs: &[TensorSpec], outputs: &[TensorSpec]) -> BatchLayout {
        let input_symbol =
            |name: &str| inputs.iter().flat_map(|spec| spec.dims()).any(|dim| dim.symbol() == Some(name));
        let axis_of = |spec: &TensorSpec, is_output: bool| -> BatchAxis {
            match (&source, spec.dims().first()) {
                (BatchSource::Symbol(batch), Some(Dim::Symbolic(name))) if name == batch => BatchAxis::Leading,
                (BatchSource::LeadingExtent(batch), Some(Dim::Fixed(extent))) if extent == batch => BatchAxis::Leading,
                (BatchSource::Symbol(_) | BatchSource::LeadingExtent(_), Some(Dim::Symbolic(name)))
                    if is_output && !input_symbol(name) =>
                {
                    BatchAxis::Undetermined
                }
                _ => BatchAxis::Absent,
            }
        };
        let only_dynamic = match &source {
            BatchSource::Symbol(batch) => inputs.iter().all(|spec| {
                spec.dims().iter().enumerate().all(|(axis, dim)| match dim {
                    Dim::Fixed(_) => true,
                    Dim::Symbolic(name) => axis == 0 && name == batch,
                })
            }),
            BatchSource::LeadingExtent(_) | BatchSource::None => false,
        };
        BatchLayout {
            inputs: inputs.iter().map(|spec| axis_of(spec, false)).collect(),
            outputs: outputs.iter().map(|spec| axis_of(spec, true)).collect(),
            source,
            only_dynamic,
        }
    }

    /// Where the batch comes from.
    pub fn source(&self) -> &BatchSource {
        &self.source
    }

    /// The batch symbol, when the batch is symbolic.
    pub fn symbol(&self) -> Option<&str> {
        match &self.source {
            BatchSource::Symbol(name) => Some(name),
            BatchSource::LeadingExtent(_) | BatchSource::None => None,
        }
    }

    /// Whether the batch is the only symbolic dimension of the inputs and occurs only as
    /// their leading axis: the condition for serving the model from precompiled buckets.
    /// Models that fail it take the per-shape path.
    pub fn batch_is_only_dynamic_dim(&self) -> bool {
        self.only_dynamic
    }

    /// The batch axis of each input, in binding order.
    pub fn inputs(&self) -> &[BatchAxis] {
        &self.inputs
    }

    /// The batch axis of each output, in program order.
    pub fn outputs(&self) -> &[BatchAxis] {
        &self.outputs
    }

    /// Whether input `index` is padded to the bucket.
    pub fn is_input_batched(&self, index: usize) -> bool {
        self.inputs.get(index) == Some(&BatchAxis::Leading)
    }
}

/// The most frequent item, ties going to the one seen first. Quadratic, but only ever run
/// once per model over its input list.
fn most_common<T: PartialEq + Copy>(items: impl Iterator<Item = T>) -> Option<T> {
    let mut tally: Vec<(T, usize)> = Vec::new();
    for item in items {
        match tally.iter_mut().find(|(seen, _)| *seen == item) {
            Some((_, count)) => *count += 1,
            None => tally.push((item, 1)),
        }
    }
    // `max_by_key` keeps the last maximum; scanning in reverse makes it keep the first.
    tally.into_iter().rev().max_by_key(|&(_, count)| count).map(|(item, _)| item)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DType;

    fn spec(name: &str, dims: &[Dim]) -> TensorSpec {
        TensorSpec::new(name, DType::F32, dims.iter().cloned())
    }

    #[test]
    fn most_common_prefers_first_on_ties() {
        assert_eq!(most_common([3, 1, 1, 3].into_iter()), Some(3));
        assert_eq!(most_common([3, 1, 1].into_iter()), Some(1));
        assert_eq!(most_common(std::iter::empty::<u8>()), None);
    }

    #[test]
    fn symbolic_batch_marks_only_leading_symbol_inputs() {
        let inputs = [
            spec("ids", &["batch".into(), 128.into()]),
            spec("table", &[1000.into(), 64.into()]),
            spec("mask", &["batch".into(), 128.into()]),
        ];
        let outputs = [spec("logits", &["batch".into(), 2.into()]), spec("pooled", &[64.into()])];
        let layout = BatchLayout::detect(&inputs, &outputs);
        assert_eq!(layout.symbol(), Some("batch"));
        assert_eq!(layout.inputs(), &[BatchAxis::Leading, BatchAxis::Absent, BatchAxis::Leading]);
        assert_eq!(layout.outputs(), &[BatchAxis::Leading, BatchAxis::Absent]);
        assert!(layout.batch_is_only_dynamic_dim());
    }

    #[test]
    fn second_symbol_or_non_leading_batch_is_not_bucketable() {
        let seq = [spec("ids", &["batch".into(), "seq".into()])];
        assert!(!BatchLayout::detect(&seq, &[]).batch_is_only_dynamic_dim());
        let square = [spec("adj", &["n".into(), "n".into()])];
        let layout = BatchLayout::detect(&square, &[]);
        assert_eq!(layout.symbol(), Some("n"));
        assert!(!layout.batch_is_only_dynamic_dim());
    }

    #[test]
    fn traced_model_uses_most_common_leading_extent() {
        let inputs = [
            spec("a", &[8.into(), 3.into()]),
            spec("weights", &[3.into(), 3.into()]),
            spec("b", &[8.into()]),
            spec("scale", &[]),
        ];
        let outputs = [spec("y", &[8.into(), 3.into()]), spec("z", &["unk__1".into()]), spec("w", &[3.into()])];
        let layout = BatchLayout::detect(&inputs, &outputs);
        assert_eq!(layout.source(), &BatchSource::LeadingExtent(8));
        assert_eq!(layout.inputs(), &[BatchAxis::Leading, BatchAxis::Absent, BatchAxis::Leading, BatchAxis::Absent]);
        assert_eq!(layout.outputs(), &[BatchAxis::Leading, BatchAxis::Undetermined, BatchAxis::Absent]);
        assert!(!layout.batch_is_only_dynamic_dim());
    }

    #[test]
    fn named_symbol_overrides_detection() {
        let inputs = [spec("x", &["seq".into(), "n".into()]), spec("y", &["n".into()]), spec("z", &["seq".into()])];
        assert_eq!(BatchLayout::detect(&inputs, &[]).symbol(), Some("seq"));
        let layout = BatchLayout::with_symbol(&inputs, &[], "n").unwrap();
        assert_eq!(layout.inputs(), &[BatchAxis::Absent, BatchAxis::Leading, BatchAxis::Absent]);
        assert_eq!(
            BatchLayout::with_symbol(&inputs, &[], "nope"),
            Err(ShapeError::UnknownSymbol { symbol: "nope".into() })
        );
    }

    #[test]
    fn undetermined_resolves_by_bucket_rows() {
        assert!(BatchAxis::Undetermined.resolve(Some(8), 8));
        assert!(!BatchAxis::Undetermined.resolve(Some(7), 8));
        assert!(!BatchAxis::Undetermined.resolve(None, 8));
        assert!(BatchAxis::Leading.resolve(Some(3), 8));
        assert!(!BatchAxis::Absent.resolve(Some(8), 8));
    }
}
