//! The declared op set: one folder per op family holding everything about it: each op's attribute
//! parsing, shape and type inference and host evaluation, its GPU form with the kernels it launches
//! (their C++ in `.cu` files beside the Rust), and its tests.
//!
//! # How an op family is added
//! 1. Make `src/ops/<family>/mod.rs` starting with a `//!` line. For each op write a struct holding
//!    its parsed attributes and implement [`Op`] for it:
//!    - [`Op::infer`] gets one [`InferInput`] per input slot ([`InferInputs::get`] is `None` for an
//!      absent optional input) with its [`ValueType`] (element type and [`Dim`]s, which may be
//!      symbolic) and, when the input is a constant, its value. It returns one [`ValueType`] per
//!      output. Compare dimensions only where both are [`Dim::Fixed`]; where an output extent cannot
//!      be known (symbolic inputs), return [`unknown_dim()`]. Reject what is certainly wrong with
//!      [`OpError::infer`]. An input whose value the output shape depends on (Reshape's `shape`,
//!      ReduceSum's `axes`) is read with [`InferInput::const_i64s`]; when it is not constant at import
//!      return [`unknown_dim()`]s: the per-shape compile sees every such input folded to a constant.
//!    - [`Op::eval`] computes outputs from concrete inputs. Outputs are pre-shaped by `infer` and
//!      their contents are unspecified (buffers are reused): write every element. The same function
//!      folds constants at import and is the host kernel at run time, so it must not allocate per
//!      element and must return [`OpError::eval`] rather than panic on any input (indices out of
//!      range, a type `infer` did not promise).
//!    - [`Op::gpu`] says what the node is on CUDA and HIP ([`gpu`]): an elementwise C++ expression
//!      of `$0`, `$1`, ... (fused with its neighbours), or launches of kernel kinds with their `meta`
//!      tables built from the concrete operands. A kind is a struct in the family's `gpu.rs`
//!      implementing [`gpu::GpuKernel`] (its name prefix and its text, rendered from a `.cu`
//!      template in the family folder by `gpu::render`; the template's leading `//` lines document
//!      its `meta` table). Without `gpu` the op runs on the host only and GPU backends refuse the
//!      model naming the op.
//! 2. Write a builder `fn build_x(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError>` that reads
//!    attributes through [`NodeCtx`] (`ctx.int_or("axis", 0)?`, `ctx.ints("perm")?`, ...). Every
//!    attribute a node carries must be read by the builder (or passed to [`NodeCtx::ignore`]):
//!    an attribute nobody read is reported as unsupported, so a new attribute is never silently
//!    dropped. An attribute value the op does not implement is
//!    `Err(ctx.unsupported("auto_pad", value, "NOTSET"))`. The importer adds the node name, op type
//!    and opset to every error.
//! 3. List the ops in `pub(crate) static OPS: &[OpEntry]` in the family's `mod.rs`, with the opset
//!    range (inclusive) each builder implements (one entry per range where the op's signature
//!    changed, e.g. ReduceSum's `axes` attribute up to 12, input from 13), then declare the module
//!    below (`pub(crate) mod linalg;`) and add `linalg::OPS` to `FAMILIES`: those two lines are the
//!    only edits a family makes outside its own folder. Families: `elementwise`, `convert`,
//!    `shapes`, `constants`, `data_movement`, `gather`, `scatter` (import side) and `linalg`,
//!    `conv`, `pool`, `norm`, `reduce`, `resize`, `rnn`, `select`, `attention` (compute side). An op
//!    with no device code of its own (computed at compile time) is listed in `COMPILE_TIME`; a test
//!    holds every other op to having a GPU form.
//! 4. Test in the family (`#[cfg(test)] mod tests`): build nodes with [`NodeCtx::for_test`], run
//!    `infer` and `eval` through [`testing::run_op`], and compare with hand-computed values; render
//!    each kernel kind's variants. The ONNX backend test suite exercises the same ops end to end, and
//!    the emulation tests run every kind's generated C++ on the CPU.
//!
//! Broadcasting and axis helpers shared by families live in [`shape_util`]; GEMM goes through the
//! `matrixmultiply` crate (`matrixmultiply::sgemm`, strided, so transposes cost nothing). Graph
//! rewrites that look inside ops (BatchNormalization folded into Conv, Gemm normalised) work on the
//! node's raw [`Attributes`] in the graph passes, so an op struct stays private to its family.
//!
//! Evaluation is reached three ways, all through [`Op::eval`]: [`evaluate::evaluate`] (constant
//! folding, tests), and the host kernel the lowering registers per node (`lower::host`: inputs read
//! in place from device memory, outputs written through a per-thread buffer). Keep `eval` free of per-call
//! allocations proportional to the data where you can (scratch per thread is fine).

pub(crate) mod attention;
mod attr;
pub(crate) mod constants;
pub(crate) mod control;
pub(crate) mod conv;
pub(crate) mod convert;
pub(crate) mod data_dependent;
pub(crate) mod data_movement;
pub(crate) mod elementwise;
pub mod evaluate;
pub(crate) mod gather;
#[doc(hidden)]
pub mod gpu;
pub(crate) mod legacy;
pub(crate) mod linalg;
pub(crate) mod loss;
pub(crate) mod norm;
pub(crate) mod pool;
pub(crate) mod quantize;
pub(crate) mod reduce;
pub(crate) mod resize;
pub(crate) mod rnn;
pub(crate) mod roi;
pub(crate) mod sample;
pub(crate) mod scatter;
pub(crate) mod select;
pub mod shape_util;
pub(crate) mod shapes;
pub(crate) mod signal;
pub mod testing;
pub mod types;

use std::fmt;

use saggar_shape::{DType, Dim};

pub use attr::{Attribute, Attributes, InputView, NodeCtx};

pub use crate::error::OpError;

use crate::tensor::{Tensor, TensorMut, TensorView};

/// The name of an extent that shape inference cannot know before concrete input shapes are given.
/// The importer renames each occurrence to a fresh symbol.
pub const UNKNOWN_DIM: &str = "?";

/// A dimension whose extent is not known at import ([`UNKNOWN_DIM`]).
pub fn unknown_dim() -> Dim {
    Dim::symbolic(UNKNOWN_DIM)
}

/// The element type and dimensions of a value.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ValueType {
    /// Element type.
    pub dtype: DType,
    /// Dimensions, fixed or symbolic.
    pub dims: Vec<Dim>,
}

impl ValueType {
    /// A value type.
    pub fn new(dtype: DType, dims: Vec<Dim>) -> ValueType {
        ValueType { dtype, dims }
    }

    /// A value type with fixed dimensions.
    pub fn fixed(dtype: DType, dims: &[usize]) -> ValueType {
        ValueType { dtype, dims: dims.iter().map(|&d| Dim::Fixed(d as u64)).collect() }
    }

    /// The rank.
    pub fn rank(&self) -> usize {
        self.dims.len()
    }

    /// The dimensions when all are fixed.
    pub fn fixed_dims(&self) -> Option<Vec<usize>> {
        self.dims.iter().map(|d| d.as_fixed().and_then(|v| usize::try_from(v).ok())).collect()
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[", self.dtype)?;
        for (i, d) in self.dims.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

/// What inference knows about one input.
#[derive(Clone, Copy, Debug)]
pub struct InferInput<'a> {
    /// Element type and dimensions.
    pub ty: &'a ValueType,
    /// The value, when the input is a constant (initializer or folded).
    pub value: Option<&'a Tensor>,
    /// For a 0-D or 1-D integer (or bool, as 0 and 1) input that is not constant but whose elements
    /// are known as integers or symbolic extents (the output of `Shape`, sliced, concatenated,
    /// compared), those elements.
    pub dims_value: Option<&'a [SymInt]>,
}

/// One element of a shape vector at import: a known integer (possibly `-1` or `0`, as Reshape
/// takes them) or a symbolic extent.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum SymInt {
    /// A known value.
    Int(i64),
    /// A symbolic extent (never negative).
    Sym(Box<str>),
}

impl SymInt {
    /// As a dimension (`None` for a negative value).
    pub fn to_dim(&self) -> Option<Dim> {
        match self {
            SymInt::Int(v) => u64::try_from(*v).ok().map(Dim::Fixed),
            SymInt::Sym(s) => Some(Dim::Symbolic(s.clone())),
        }
    }

    /// From a dimension.
    pub fn from_dim(d: &Dim) -> SymInt {
        match d {
            Dim::Fixed(v) => i64::try_from(*v).map_or(SymInt::Sym(UNKNOWN_DIM.into()), SymInt::Int),
            Dim::Symbolic(s) => SymInt::Sym(s.clone()),
        }
    }

    /// The known value.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            SymInt::Int(v) => Some(*v),
            SymInt::Sym(_) => None,
        }
    }
}

impl InferInput<'_> {
    /// The constant integer elements of this input, if it is a constant.
    pub fn const_i64s(&self) -> Option<Vec<i64>> {
        self.value.and_then(Tensor::to_i64s)
    }

    /// The elements as integers or symbols, when known: a constant integer tensor or a propagated
    /// shape vector.
    pub fn sym_ints(&self) -> Option<Vec<SymInt>> {
        if let Some(v) = self.const_i64s() {
            return Some(v.into_iter().map(SymInt::Int).collect());
        }
        // Bool vectors (comparisons of shape vectors) carry 0 and 1.
        if let Some(crate::tensor::TensorData::Bool(b)) = self.value.map(Tensor::data) {
            return Some(b.iter().map(|&v| SymInt::Int(i64::from(v))).collect());
        }
        self.dims_value.map(<[SymInt]>::to_vec)
    }

    /// The elements as dimensions, when known and none is negative.
    pub fn as_dims(&self) -> Option<Vec<Dim>> {
        self.sym_ints()?.iter().map(SymInt::to_dim).collect()
    }

    /// The one element of a constant number input (not bool), as f64.
    pub fn scalar_f64(&self) -> Option<f64> {
        let t = self.value?;
        let data = t.view().data;
        if t.len() != 1 || data.dtype() == saggar_shape::DType::Bool {
            return None;
        }
        crate::tensor::first_wide(data).map(crate::tensor::Wide::to_f64)
    }
}

/// The inputs of one node for inference; absent optional inputs are `None`.
#[derive(Clone, Copy, Debug)]
pub struct InferInputs<'a> {
    inputs: &'a [Option<InferInput<'a>>],
}

impl<'a> InferInputs<'a> {
    /// Wraps the inputs.
    pub fn new(inputs: &'a [Option<InferInput<'a>>]) -> InferInputs<'a> {
        InferInputs { inputs }
    }

    /// Number of input slots (present or not).
    pub fn len(&self) -> usize {
        self.inputs.len()
    }

    /// Whether there are no input slots.
    pub fn is_empty(&self) -> bool {
        self.inputs.is_empty()
    }

    /// Input `i`, if present.
    pub fn get(&self, i: usize) -> Option<&InferInput<'a>> {
        self.inputs.get(i).and_then(Option::as_ref)
    }

    /// Input `i`, which must be present.
    pub fn req(&self, i: usize) -> Result<&InferInput<'a>, OpError> {
        self.get(i).ok_or_else(|| OpError::infer(format!("input {i} is required")))
    }

    /// The present inputs in order.
    pub fn present(&self) -> impl Iterator<Item = &InferInput<'a>> {
        self.inputs.iter().flatten()
    }
}

/// The inputs of one node for evaluation; absent optional inputs are `None`.
#[derive(Clone, Copy, Debug)]
pub struct EvalInputs<'a> {
    inputs: &'a [Option<TensorView<'a>>],
}

impl<'a> EvalInputs<'a> {
    /// Wraps the inputs.
    pub fn new(inputs: &'a [Option<TensorView<'a>>]) -> EvalInputs<'a> {
        EvalInputs { inputs }
    }

    /// Number of input slots.
    pub fn len(&self) -> usize {
        self.inputs.len()
    }

    /// Whether there are no input slots.
    pub fn is_empty(&self) -> bool {
        self.inputs.is_empty()
    }

    /// Input `i`, if present.
    pub fn get(&self, i: usize) -> Option<&TensorView<'a>> {
        self.inputs.get(i).and_then(Option::as_ref)
    }

    /// Input `i`, which must be present.
    pub fn req(&self, i: usize) -> Result<&TensorView<'a>, OpError> {
        self.get(i).ok_or_else(|| OpError::eval(format!("input {i} is required")))
    }
}

/// One node's op with its parsed attributes. See the module docs for how to write one.
///
/// # Thread safety
/// `Send + Sync` and stateless: one op serves concurrent kernel launches.
pub trait Op: fmt::Debug + Send + Sync + 'static {
    /// Output element types and dimensions from the inputs'.
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError>;

    /// Computes the outputs (shaped as [`Op::infer`] said) from concrete inputs.
    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError>;

    /// For ops on shape vectors (`Shape`, `Gather`, `Concat`, ...): the elements of output 0 as
    /// dimensions when the inputs' are known, so symbolic shapes flow into `Reshape` and `Expand`.
    fn dims_value(&self, _inputs: &InferInputs<'_>) -> Option<Vec<SymInt>> {
        None
    }

    /// Whether output 0 is input 0's elements unchanged under another shape (Reshape, Flatten,
    /// Squeeze, Unsqueeze). The lowering then gives the output the input's memory and launches
    /// nothing; `eval` must still copy, for folding and the eager run.
    fn is_view(&self) -> bool {
        false
    }

    /// Whether evaluating on constant inputs at import is allowed (false for ops whose result is not
    /// a function of their inputs).
    fn foldable(&self) -> bool {
        true
    }

    /// A stable description of the op and its attributes, part of host kernel names and cache keys.
    /// The default, the `Debug` form, suits structs of plain attributes.
    fn key(&self) -> String {
        format!("{self:?}")
    }

    /// What the node is on CUDA and HIP ([`gpu`]): `None` when the op has no GPU lowering (the
    /// compiler then refuses the model for GPU backends, naming the op), `Some(Err(..))` when these
    /// operands are not supported there. By default a view ([`Op::is_view`]) is a copy of its input,
    /// for where it must materialise (the lowering otherwise launches nothing for it), and any
    /// other op has none.
    #[doc(hidden)]
    fn gpu(&self, ctx: &gpu::GpuCtx<'_>) -> Option<Result<gpu::GpuNode, OpError>> {
        self.is_view().then(|| data_movement::gpu::contiguous_copy(ctx))
    }

    /// For an op whose output extents depend on input values: its bounded form. `None` for other ops.
    fn bounded(&self) -> Option<Bounded> {
        None
    }

    /// Whether the output extents follow from the inputs' extents alone, whatever their values
    /// (broadcasting elementwise ops, Concat, MatMul, Gather): a fresh symbol in the output (a
    /// concatenation's sum, a broadcast of two unnamed extents) is then no reason to read any input
    /// as a shape, and the value-input analysis does not. Without it, each score vector a detector
    /// concatenates would be taken for a shape and key the program.
    fn extents_from_shapes(&self) -> bool {
        false
    }
}

/// The bounded form of an op whose output extents depend on its input values (NonZero, Compress,
/// Unique, NonMaxSuppression): what a compiled program runs in their place, since it cannot know
/// those extents. Slicing each cut output along its axis to the count gives the op's output.
#[derive(Clone, Debug)]
pub struct Bounded {
    /// The op computing every output at its worst-case extent, then one more output: the count,
    /// an i64 tensor of shape `[1]`. Unique's bounded op also needs indices, inverse_indices and counts
    /// as working memory on the GPU: where the node lacks some of them, they follow the count
    /// (`cuts.len() + 1` onwards), to be given temporaries and otherwise ignored.
    pub op: std::sync::Arc<dyn Op>,
    /// Its op type as shown in plans and errors (e.g. "NonZero.bounded").
    pub op_type: &'static str,
    /// Per output of the standard op: the axis cut to the count (`Some(axis)`), or `None` when
    /// the output's shape does not depend on values (Unique's inverse_indices).
    pub cuts: Vec<Option<usize>>,
    /// Whether the axes of `cuts` count from the end (output axis `rank - cut`): the node's `axis`
    /// attribute is negative, and the op does not know the input's rank. [`Bounded::cut_axis`]
    /// resolves either.
    pub cuts_from_end: bool,
}

impl Bounded {
    /// The axis of output `output` (of rank `rank`) cut to the count, if it is cut.
    pub fn cut_axis(&self, output: usize, rank: usize) -> Option<usize> {
        let cut = (*self.cuts.get(output)?)?;
        if self.cuts_from_end { rank.checked_sub(cut) } else { Some(cut) }
    }
}

/// Builds an [`Op`] from a node's attributes.
pub type BuildFn = fn(&mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError>;

/// One registered op: its ONNX type, the default-domain opsets it implements (inclusive) and its
/// builder.
#[derive(Debug, Clone, Copy)]
pub struct OpEntry {
    /// The ONNX `op_type`.
    pub op_type: &'static str,
    /// The first opset this builder implements.
    pub since: u32,
    /// The last opset this builder implements.
    pub until: u32,
    /// The builder.
    pub build: BuildFn,
}

/// The oldest default-domain opset imported (the forms of opsets 1 to 6 are translated to today's
/// by the `legacy` family).
pub const MIN_OPSET: u32 = 1;
/// The oldest opset whose forms have today's semantics (numpy broadcasting, no `broadcast` or
/// `is_test` attributes): graph passes that add nodes build them at this opset or the model's,
/// whichever is newer.
pub const MODERN_OPSET: u32 = 7;
/// The newest default-domain opset imported.
pub const MAX_OPSET: u32 = 24;

/// Every op family's table.
static FAMILIES: &[&[OpEntry]] = &[
    attention::OPS,
    elementwise::OPS,
    convert::OPS,
    shapes::OPS,
    data_dependent::OPS,
    constants::OPS,
    data_movement::OPS,
    gather::OPS,
    linalg::OPS,
    conv::OPS,
    pool::OPS,
    norm::OPS,
    reduce::OPS,
    resize::OPS,
    rnn::OPS,
    scatter::OPS,
    select::OPS,
    sample::OPS,
    roi::OPS,
    signal::OPS,
    loss::OPS,
    quantize::OPS,
    legacy::OPS,
    control::OPS,
];

/// The entry implementing `op_type` at `opset`, if the declared op set has one.
pub fn lookup(op_type: &str, opset: u32) -> Option<&'static OpEntry> {
    FAMILIES.iter().flat_map(|f| f.iter()).find(|e| e.op_type == op_type && (e.since..=e.until).contains(&opset))
}

/// Op `op_type` of the declared op set at `opset`, built from `attrs` for a node of `inputs` inputs
/// and `outputs` outputs: how the graph passes that add or rewrite nodes make their ops. The error
/// names the op and says why.
pub(crate) fn build_op(
    op_type: &str,
    opset: u32,
    attrs: &Attributes,
    inputs: usize,
    outputs: usize,
) -> Result<std::sync::Arc<dyn Op>, String> {
    let entry = lookup(op_type, opset).ok_or_else(|| format!("{op_type} is not declared at opset {opset}"))?;
    let op = (entry.build)(&mut NodeCtx::new(attrs, opset, inputs, outputs)).map_err(|e| format!("{op_type}: {e}"))?;
    Ok(std::sync::Arc::from(op))
}

/// The opset ranges the declared op set implements for `op_type`, for error messages
/// (`"13-21"`, or `"none"`).
pub fn supported_opsets(op_type: &str) -> String {
    let ranges: Vec<String> = FAMILIES
        .iter()
        .flat_map(|f| f.iter())
        .filter(|e| e.op_type == op_type)
        .map(|e| format!("{}-{}", e.since, e.until))
        .collect();
    if ranges.is_empty() { "none".to_string() } else { ranges.join(", ") }
}

/// Every op type of the declared op set, sorted.
pub fn declared_ops() -> Vec<&'static str> {
    let mut ops: Vec<&'static str> = FAMILIES.iter().flat_map(|f| f.iter()).map(|e| e.op_type).collect();
    ops.sort_unstable();
    ops.dedup();
    ops
}

/// How a declared op runs on CUDA and HIP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuForm {
    /// Generated device code: a kernel of its own, a fused expression or a view of its input.
    Kernel,
    /// Computed when a program is compiled, from shapes and constants (`Shape`, `Constant`, `Range`
    /// of constant bounds, ...), or removed by the graph passes (`Identity`, inference `Dropout`);
    /// a GPU backend refuses such a node whose inputs are run-time values.
    CompileTime,
}

/// The ops whose GPU form is [`GpuForm::CompileTime`]; every other declared op has device code
/// (a test builds each op and checks).
const COMPILE_TIME: &[&str] = &[
    "BlackmanWindow",
    "Constant",
    "HammingWindow",
    "HannWindow",
    "Identity",
    "If",
    "Loop",
    "MelWeightMatrix",
    "Range",
    "Scan",
    "Shape",
    "Size",
];

/// One op type of the declared op set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeclaredOp {
    /// The ONNX op type (default domain).
    pub op_type: &'static str,
    /// The opset ranges implemented, inclusive, oldest first.
    pub opsets: Vec<(u32, u32)>,
    /// How it runs on CUDA and HIP (every declared op runs on the host).
    pub gpu: GpuForm,
}

/// The declared op set, sorted by op type.
pub fn declared() -> Vec<DeclaredOp> {
    declared_ops()
        .into_iter()
        .map(|op_type| {
            let mut opsets: Vec<(u32, u32)> = FAMILIES
                .iter()
                .flat_map(|f| f.iter())
                .filter(|e| e.op_type == op_type)
                .map(|e| (e.since, e.until))
                .collect();
            opsets.sort_unstable();
            let gpu = if COMPILE_TIME.contains(&op_type) { GpuForm::CompileTime } else { GpuForm::Kernel };
            DeclaredOp { op_type, opsets, gpu }
        })
        .collect()
}

impl DeclaredOp {
    /// The element types the op takes per type constraint, at its newest opset ([`types`]).
    pub fn types(&self) -> Option<&'static types::OpTypes> {
        types::element_types(self.op_type)
    }
}

#[cfg(test)]
mod registry_tests {
    use super::*;

    /// Each op built without attributes (where its builder allows that) has a GPU form exactly when
    /// it is not listed as computed at compile time, so `saggar ops` tells the truth.
    #[test]
    fn every_declared_op_has_device_code_unless_listed_as_compile_time() {
        let empty: [Option<InferInput<'_>>; 0] = [];
        let infer = InferInputs::new(&empty);
        let ctx = gpu::GpuCtx { inputs: &[], outputs: &[], infer: &infer };
        let mut probed = 0;
        for e in FAMILIES.iter().flat_map(|f| f.iter()) {
            let attrs = Attributes::default();
            let Ok(op) = (e.build)(&mut NodeCtx::new(&attrs, e.since, 3, 3)) else { continue };
            probed += 1;
            let has_code = op.gpu(&ctx).is_some();
            assert_eq!(has_code, !COMPILE_TIME.contains(&e.op_type), "{} (opset {})", e.op_type, e.since);
        }
        assert!(probed > 100, "{probed} ops built without attributes");
        for name in COMPILE_TIME {
            assert!(lookup(name, MAX_OPSET).is_some(), "{name} is listed but not declared at opset {MAX_OPSET}");
        }
    }

    #[test]
    fn ranges_of_one_op_never_overlap() {
        for d in declared() {
            assert!(d.opsets.windows(2).all(|w| w[0].1 < w[1].0), "{}: {:?}", d.op_type, d.opsets);
            assert!(d.opsets.iter().all(|&(a, b)| a <= b && b <= MAX_OPSET), "{}: {:?}", d.op_type, d.opsets);
        }
    }
}
