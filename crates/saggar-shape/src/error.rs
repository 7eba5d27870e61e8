//! The crate's error type.

use std::fmt;

use crate::{DType, Shape, SizeOverflow};

/// Whether a name refers to a model input or a model output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TensorRole {
    /// A tensor the caller provides.
    Input,
    /// A tensor the program produces.
    Output,
}

impl fmt::Display for TensorRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TensorRole::Input => "input",
            TensorRole::Output => "output",
        })
    }
}

/// Everything that can go wrong in saggar-shape.
///
/// Each variant names what the caller can act on: the input, the axis, the expected and the
/// actual value. Errors are built only on the failing path, so returning `Result` costs the hot
/// path nothing but a branch.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ShapeError {
    /// Two specs of one model share a name.
    #[error("the model declares {role} `{name}` twice")]
    DuplicateSpec {
        /// Input or output.
        role: TensorRole,
        /// The repeated name.
        name: Box<str>,
    },
    /// The request names an input the model does not have.
    #[error("the request has an input `{input}` that the model does not declare")]
    UnknownInput {
        /// The unknown name.
        input: Box<str>,
    },
    /// The request gives the same input twice.
    #[error("the request gives input `{input}` more than once")]
    DuplicateInput {
        /// The repeated name.
        input: Box<str>,
    },
    /// The request lacks an input the model needs.
    #[error("the request is missing input `{input}`")]
    MissingInput {
        /// The missing name.
        input: Box<str>,
    },
    /// A request passed in binding order has the wrong number of inputs.
    #[error("the model takes {expected} inputs, the request has {actual}")]
    InputCount {
        /// Inputs the model declares.
        expected: usize,
        /// Inputs the request has.
        actual: usize,
    },
    /// An input or output index past the model's inputs or outputs.
    #[error("the model has {count} {role}s, there is no {role} {index}")]
    IndexOutOfRange {
        /// Input or output.
        role: TensorRole,
        /// The index asked for.
        index: usize,
        /// How many the model has.
        count: usize,
    },
    /// A [`RequestShapes`](crate::RequestShapes) was used with a signature it was not made for.
    #[error("these request shapes belong to a different signature")]
    ForeignRequest,
    /// An input has the wrong element type.
    #[error("input `{input}` must be {expected}, the request gives {actual}")]
    DTypeMismatch {
        /// The input.
        input: Box<str>,
        /// The declared element type.
        expected: DType,
        /// The request's element type.
        actual: DType,
    },
    /// An input has the wrong number of dimensions.
    #[error("input `{input}` must have rank {expected}, the request gives rank {actual} (shape {shape})")]
    RankMismatch {
        /// The input.
        input: Box<str>,
        /// The declared rank.
        expected: usize,
        /// The request's rank.
        actual: usize,
        /// The request's shape.
        shape: Shape,
    },
    /// A fixed dimension has the wrong extent.
    #[error("input `{input}` axis {axis} is fixed at {expected}, the request gives {actual}")]
    FixedDimMismatch {
        /// The input.
        input: Box<str>,
        /// The axis.
        axis: usize,
        /// The declared extent.
        expected: u64,
        /// The request's extent.
        actual: u64,
    },
    /// One symbol got two different values in one request.
    #[error(
        "symbol `{symbol}` is {first_value} at input `{first_input}` axis {first_axis} \
         but {value} at input `{input}` axis {axis}"
    )]
    SymbolConflict {
        /// The symbol.
        symbol: Box<str>,
        /// Where it was bound first.
        first_input: Box<str>,
        /// The axis of the first binding.
        first_axis: usize,
        /// The first value.
        first_value: u64,
        /// Where it disagreed.
        input: Box<str>,
        /// The axis of the disagreement.
        axis: usize,
        /// The disagreeing value.
        value: u64,
    },
    /// An input's batch axis is zero.
    #[error("input `{input}` has a batch of 0 at axis {axis}: a request needs at least one row")]
    ZeroBatch {
        /// The input.
        input: Box<str>,
        /// The batch axis.
        axis: usize,
    },
    /// A batch size of zero was asked for a bucket or a plan.
    #[error("batch size 0 has no bucket: a request needs at least one row")]
    ZeroBatchSize,
    /// An input's byte size does not fit in 64 bits (or in `usize` for a host buffer).
    #[error("input `{input}`: {source}")]
    Overflow {
        /// The input (or output) name.
        input: Box<str>,
        /// The overflowing product.
        #[source]
        source: SizeOverflow,
    },
    /// An output dimension uses a symbol that no input binds.
    #[error("output `{output}` uses symbol `{symbol}`, which no input binds")]
    UnboundSymbol {
        /// The output.
        output: Box<str>,
        /// The symbol.
        symbol: Box<str>,
    },
    /// The model has no batch symbol to set.
    #[error("the model has no symbolic batch dimension")]
    NoBatchSymbol,
    /// A named symbol does not occur in the model's inputs.
    #[error("symbol `{symbol}` does not occur in any input of the model")]
    UnknownSymbol {
        /// The symbol.
        symbol: Box<str>,
    },
    /// A batch exceeds the largest bucket and splitting is disabled.
    #[error("batch {batch} exceeds the largest bucket {largest} and splitting is disabled")]
    BatchAboveLargestBucket {
        /// The requested batch.
        batch: u64,
        /// The largest bucket of the policy.
        largest: u64,
    },
    /// A bucket policy could not be built from its parameters.
    #[error("invalid bucket policy: {reason}")]
    InvalidPolicy {
        /// What is wrong, in words.
        reason: &'static str,
    },
    /// A histogram count overflowed 64 bits.
    #[error("the histogram's total count overflows 64 bits")]
    HistogramOverflow,
    /// A chunk asks for rows the tensor does not have, or a program output has the wrong row count.
    #[error("`{tensor}` has {available} rows along its batch axis, the plan needs {needed}")]
    RowsOutOfRange {
        /// The tensor.
        tensor: Box<str>,
        /// Rows the plan needs.
        needed: u64,
        /// Rows the tensor has.
        available: u64,
    },
    /// A chunk with no rows, or with more rows than its bucket.
    #[error("chunk at row {offset} has {rows} rows for a bucket of {bucket}")]
    InvalidChunk {
        /// The chunk's first row.
        offset: u64,
        /// Its real rows.
        rows: u64,
        /// Its bucket.
        bucket: u64,
    },
    /// A batched tensor has rank 0, so it has no batch axis to pad or slice.
    #[error("`{tensor}` is marked batched but is a scalar")]
    ScalarBatched {
        /// The tensor.
        tensor: Box<str>,
    },
    /// An axis plan names an axis the tensor does not have.
    #[error("`{tensor}` has rank {rank}, it has no axis {axis} to pad or slice")]
    AxisOutOfRange {
        /// The tensor.
        tensor: Box<str>,
        /// The axis asked for.
        axis: usize,
        /// The tensor's rank.
        rank: usize,
    },
    /// An axis plan pads an axis to fewer positions than it has.
    #[error("`{tensor}` has {extent} positions along axis {axis}, more than the {padded} it is padded to")]
    PaddedExtentTooSmall {
        /// The tensor.
        tensor: Box<str>,
        /// The axis.
        axis: usize,
        /// Its real extent.
        extent: u64,
        /// The extent it was to be padded to.
        padded: u64,
    },
    /// A pad value is not one element of the tensor's type.
    #[error("a pad value of {actual} bytes for elements of {expected}")]
    PadValueSize {
        /// The element size.
        expected: usize,
        /// The pad value's size.
        actual: usize,
    },
    /// A host buffer is shorter than its plan needs.
    #[error("the {buffer} buffer holds {actual} bytes, the plan needs {needed}")]
    BufferTooShort {
        /// `"source"` or `"destination"`.
        buffer: &'static str,
        /// Bytes the plan reads or writes.
        needed: usize,
        /// Bytes the buffer has.
        actual: usize,
    },
}
