//! Holds the table of element types to the truth: for every declared op, every type constraint and
//! every type claimed, a node of that type is built and inferred, evaluated on the host and lowered
//! for the GPU; every refused type is checked to be refused.
//!
//! A half-precision claim (f16, bf16) is probed as a model holds it after import: in f32, since
//! the import widens every half-precision value inside a model (`crate::import::half`).
//!
//! A probe node is described by a line of `probes.rs` (or the default: each required input of
//! shape `[2, 2, 2]` holding ones, no attributes). Each input's type is the probed type where its
//! formal is bound to the probed constraint, the first claimed type of its own constraint otherwise,
//! or the formal's fixed type.

use saggar_shape::DType;

use super::probes::{PROBES, UNPROBED};
use super::{Arity, OpTypes, table};
use crate::import::proto::dtype_to_onnx;
use crate::ops::evaluate::evaluate;
use crate::ops::gpu::{GpuCtx, GpuNode, Operand};
use crate::ops::{Attribute, Attributes, GpuForm, InferInput, InferInputs, NodeCtx, Op, declared, lookup};
use crate::tensor::{Tensor, TensorData};

/// Dims of an input the probe line leaves to the default.
const DEFAULT_DIMS: [usize; 3] = [2, 2, 2];

/// The type a formal of `ty` (constraint or fixed type) takes when constraint `probed` is `t`.
fn type_of(op: &OpTypes, ty: &str, probed: &str, t: DType) -> Result<DType, String> {
    if ty == probed {
        return Ok(t);
    }
    match op.constraint(ty) {
        Some(c) => c.types.first().copied().ok_or_else(|| format!("constraint {ty} has no claimed type")),
        None => super::onnx_type(ty).ok_or_else(|| format!("fixed type {ty} is not one saggar holds")),
    }
}

/// A tensor of `dtype` and `dims` holding `values` (one per element), converted as `as` does.
pub(super) fn tensor_of(dtype: DType, dims: Vec<usize>, values: &[f64]) -> Result<Tensor, String> {
    macro_rules! conv {
        ($variant:ident, $ty:ty) => {
            TensorData::$variant(values.iter().map(|&v| v as $ty).collect())
        };
    }
    let data = match dtype {
        DType::F32 => conv!(F32, f32),
        DType::F64 => conv!(F64, f64),
        DType::I8 => conv!(I8, i8),
        DType::U8 => conv!(U8, u8),
        DType::I16 => conv!(I16, i16),
        DType::U16 => conv!(U16, u16),
        DType::I32 => conv!(I32, i32),
        DType::U32 => conv!(U32, u32),
        DType::I64 => conv!(I64, i64),
        DType::U64 => conv!(U64, u64),
        DType::Bool => TensorData::Bool(values.iter().map(|&v| u8::from(v != 0.0)).collect()),
        DType::F16 => TensorData::F16(values.iter().map(|&v| half::f16::from_f64(v).to_bits()).collect()),
        DType::BF16 => TensorData::BF16(values.iter().map(|&v| half::bf16::from_f64(v).to_bits()).collect()),
        other => return Err(format!("no tensors of {other}")),
    };
    Tensor::new(dims, data).map_err(|e| e.to_string())
}

/// `1,2,3` as numbers.
fn numbers(text: &str) -> Result<Vec<f64>, String> {
    text.split(',').filter(|v| !v.is_empty()).map(|v| v.parse().map_err(|_| format!("bad number {v:?}"))).collect()
}

/// One input token of a probe line as a tensor of `dtype`: `_` absent, `.` the default, `2x3` dims
/// holding ones, `2x3=v,..` dims with values, `=v,..` a vector, `s=v` a scalar.
fn input(token: &str, dtype: DType) -> Result<Option<Tensor>, String> {
    let (shape, values) = token.split_once('=').map_or((token, None), |(s, v)| (s, Some(v)));
    let dims: Vec<usize> = match shape {
        "_" => return Ok(None),
        "." => DEFAULT_DIMS.to_vec(),
        "s" => Vec::new(),
        "" => vec![values.map_or(Ok(0), |v| numbers(v).map(|n| n.len()))?],
        dims => {
            dims.split('x').map(|d| d.parse().map_err(|_| format!("bad dims {token:?}"))).collect::<Result<_, _>>()?
        }
    };
    let n = dims.iter().product::<usize>();
    let values = values.map_or(Ok(vec![1.0; n]), numbers)?;
    if values.len() != n {
        return Err(format!("{token:?}: {} values for {n} elements", values.len()));
    }
    tensor_of(dtype, dims, &values).map(Some)
}

/// One attribute token: `k=5`, `k=0.5`, `k=[1,2]`, `k='text'`, `k=@T` (the ONNX code of the type
/// constraint `T` takes), `k=%T` (a one-element tensor of that type holding 1). `slot` gives a
/// constraint's type as the node's values and widened attributes have it, `named` as written.
fn attribute(token: &str, slot: &Types<'_>, named: &Types<'_>) -> Result<(String, Attribute), String> {
    let (name, v) = token.split_once('=').ok_or_else(|| format!("bad attribute {token:?}"))?;
    let value = if let Some(c) = v.strip_prefix('@') {
        let ty = if WIDENED_ATTRIBUTES.contains(&name) { slot(c)? } else { named(c)? };
        Attribute::Int(i64::from(dtype_to_onnx(ty)))
    } else if let Some(c) = v.strip_prefix('%') {
        Attribute::Tensor(tensor_of(slot(c)?, vec![1], &[1.0])?)
    } else if let Some(s) = v.strip_prefix('\'') {
        Attribute::String(s.trim_end_matches('\'').as_bytes().to_vec())
    } else if let Some(list) = v.strip_prefix('[') {
        let list = list.trim_end_matches(']');
        if list.contains('.') {
            Attribute::Floats(numbers(list)?.into_iter().map(|x| x as f32).collect())
        } else {
            Attribute::Ints(numbers(list)?.into_iter().map(|x| x as i64).collect())
        }
    } else if v.contains('.') {
        Attribute::Float(v.parse().map_err(|_| format!("bad float {token:?}"))?)
    } else {
        Attribute::Int(v.parse().map_err(|_| format!("bad int {token:?}"))?)
    };
    Ok((name.to_string(), value))
}

/// A constraint's type in a probe.
type Types<'a> = dyn Fn(&str) -> Result<DType, String> + 'a;

/// The type attributes the import's half-precision widening rewrites to f32
/// (`crate::import::half`); tensor attributes are widened too.
const WIDENED_ATTRIBUTES: [&str; 2] = ["to", "dtype"];

/// The type values of half-precision type `t` have in an imported model: f32 (the import widens
/// every half-precision value inside a model, `crate::import::half`); any other type as it is.
fn as_imported(t: DType) -> DType {
    if matches!(t, DType::F16 | DType::BF16) { DType::F32 } else { t }
}

/// A probe node: its attributes, inputs and output count.
struct Node {
    attrs: Attributes,
    inputs: Vec<Option<Tensor>>,
    outputs: usize,
}

/// The probe node of `op` with constraint `probed` taking type `t`.
fn node(op: &OpTypes, probed: &str, t: DType) -> Result<Node, String> {
    let line = PROBES.iter().find(|(o, _)| *o == op.op_type).map_or("|", |(_, l)| *l);
    let (attr_text, input_text) = line.split_once('|').ok_or_else(|| format!("probe line {line:?} has no `|`"))?;
    let ty = |c: &str| type_of(op, c, probed, as_imported(t));
    let named = |c: &str| type_of(op, c, probed, t);
    let mut attrs = Attributes::default();
    let mut outputs = None;
    for token in attr_text.split_whitespace() {
        match token.strip_prefix("outputs=") {
            Some(n) => outputs = Some(n.parse().map_err(|_| format!("bad {token:?}"))?),
            None => {
                let (name, value) = attribute(token, &ty, &named)?;
                attrs.set(&name, value);
            }
        }
    }
    let tokens: Vec<&str> = input_text.split_whitespace().collect();
    let count = tokens.len().max(op.inputs.iter().rposition(|f| f.arity != Arity::Optional).map_or(0, |i| i + 1));
    let mut inputs = Vec::with_capacity(count);
    for i in 0..count {
        // Tokens past the formals bind to the last (variadic) one.
        let formal = op.inputs.get(i).or(op.inputs.last()).ok_or("more inputs than formals")?;
        let token = tokens.get(i).copied().unwrap_or(if formal.arity == Arity::Optional { "_" } else { "." });
        inputs.push(input(token, ty(formal.ty)?)?);
    }
    // Optional outputs of the probed constraint are asked for when no input carries it.
    let on_inputs = op.inputs.iter().zip(&inputs).any(|(f, t)| f.ty == probed && t.is_some());
    let outputs = outputs.unwrap_or_else(|| {
        let wanted = |f: &super::Formal| f.arity != Arity::Optional || (f.ty == probed && !on_inputs);
        op.outputs.iter().rposition(wanted).map_or(1, |i| i + 1)
    });
    Ok(Node { attrs, inputs, outputs })
}

/// Probes one claim: builds the node, infers and evaluates it (checking that the slots bound to
/// the constraint have the type) and, for an op with device code, lowers it for the GPU.
pub(super) fn probe(op: &OpTypes, probed: &str, t: DType) -> Result<(), String> {
    let node = node(op, probed, t)?;
    let entry = lookup(op.op_type, op.opset).ok_or("not declared at the table's opset")?;
    let mut ctx = NodeCtx::new(&node.attrs, op.opset, node.inputs.len(), node.outputs);
    let built = (entry.build)(&mut ctx).map_err(|e| format!("build: {e}"))?;
    if let Some(name) = ctx.unread().first() {
        return Err(format!("attribute {name} not read"));
    }
    let inputs: Vec<Option<&Tensor>> = node.inputs.iter().map(Option::as_ref).collect();
    let outputs = evaluate(built.as_ref(), &inputs, 1 << 16).map_err(|e| format!("infer/eval: {e}"))?;
    let mut exercised = false;
    for (i, formal) in op.inputs.iter().enumerate().filter(|(_, f)| f.ty == probed) {
        let given = node.inputs.iter().skip(i).take(if formal.arity == Arity::Variadic { usize::MAX } else { 1 });
        exercised |= given.flatten().next().is_some();
    }
    for (i, out) in outputs.iter().enumerate().take(node.outputs) {
        let formal = op.outputs.get(i).or(op.outputs.last()).ok_or("more outputs than formals")?;
        if formal.ty == probed {
            exercised = true;
            if out.dtype() != t && out.dtype() != as_imported(t) {
                return Err(format!("output {i} is {}, not {t}", out.dtype()));
            }
        }
    }
    if !exercised {
        return Err(format!("the probe gives no input or output of constraint {probed}"));
    }
    let code = declared().into_iter().find(|d| d.op_type == op.op_type).is_some_and(|d| d.gpu == GpuForm::Kernel);
    if !code {
        return Ok(());
    }
    match built.bounded() {
        Some(b) => {
            let outs = evaluate(b.op.as_ref(), &inputs, 1 << 16).map_err(|e| format!("bounded eval: {e}"))?;
            lower(b.op.as_ref(), &inputs, &outs)
        }
        None => lower(built.as_ref(), &inputs, &outputs),
    }
}

/// Lowers `op` for the GPU with these operands: it must have a GPU form for them, whose kernels render.
fn lower(op: &dyn Op, inputs: &[Option<&Tensor>], outputs: &[Tensor]) -> Result<(), String> {
    let operand = |t: &Tensor| Operand { dtype: t.dtype(), dims: t.dims().to_vec() };
    let types: Vec<Option<crate::ops::ValueType>> =
        inputs.iter().map(|t| t.map(|t| crate::ops::ValueType::fixed(t.dtype(), t.dims()))).collect();
    let infer: Vec<Option<InferInput<'_>>> = inputs
        .iter()
        .zip(&types)
        .map(|(t, ty)| Some(InferInput { ty: ty.as_ref()?, value: *t, dims_value: None }))
        .collect();
    let infer = InferInputs::new(&infer);
    let ins: Vec<Option<Operand>> = inputs.iter().map(|t| t.map(operand)).collect();
    let outs: Vec<Operand> = outputs.iter().map(operand).collect();
    let ctx = GpuCtx { inputs: &ins, outputs: &outs, infer: &infer };
    match op.gpu(&ctx) {
        None => Err("no GPU form".into()),
        Some(Err(e)) => Err(format!("gpu: {e}")),
        Some(Ok(GpuNode::Elementwise(expr))) if expr.is_empty() => Err("empty GPU expression".into()),
        Some(Ok(GpuNode::Elementwise(_))) => Ok(()),
        Some(Ok(GpuNode::Launches(launches))) => {
            match launches.iter().map(|l| l.kernel.source()).find(|s| s.contains('@')) {
                Some(s) => Err(format!("a kernel leaves a placeholder: {s}")),
                None => Ok(()),
            }
        }
    }
}

/// The claims of the table: `(op, constraint, type)` for every type claimed of every op probed.
fn claims() -> Vec<(&'static OpTypes, &'static str, DType)> {
    table()
        .iter()
        .filter(|op| !UNPROBED.iter().any(|(o, _)| *o == op.op_type))
        .flat_map(|op| op.constraints.iter().flat_map(move |c| c.types.iter().map(move |&t| (op, c.name, t))))
        .collect()
}

#[test]
fn every_claimed_type_infers_evaluates_and_lowers() {
    let claims = claims();
    let failures: Vec<String> = claims
        .iter()
        .filter_map(|&(op, c, t)| probe(op, c, t).err().map(|e| format!("{} {c}={t}: {e}", op.op_type)))
        .collect();
    assert!(failures.is_empty(), "{} of {} claims fail:\n{}", failures.len(), claims.len(), failures.join("\n"));
    assert!(claims.len() > 1000, "{} claims", claims.len());
}

#[test]
fn every_refused_type_is_refused() {
    let mut refused = 0;
    for op in table() {
        for c in &op.constraints {
            for &(t, why) in &c.refused {
                refused += 1;
                assert!(
                    probe(op, c.name, t).is_err(),
                    "{} {}={t} is listed as refused ({why}) but runs",
                    op.op_type,
                    c.name
                );
            }
        }
    }
    assert_eq!(
        refused,
        super::REFUSED.iter().map(|r| r.2.split(' ').count()).sum::<usize>(),
        "a refusal names a type the schema does not allow"
    );
}

#[test]
fn the_table_lists_every_declared_op_at_its_newest_opset() {
    let ops = table();
    assert_eq!(super::parse(super::TABLE).map(|t| t.len()), Ok(ops.len()));
    let declared = declared();
    assert_eq!(
        ops.iter().map(|o| o.op_type).collect::<Vec<_>>(),
        declared.iter().map(|d| d.op_type).collect::<Vec<_>>()
    );
    for (op, d) in ops.iter().zip(&declared) {
        assert_eq!(Some(op.opset), d.opsets.last().map(|r| r.1), "{}: regenerate types.tsv", op.op_type);
        assert!(op.schema_since <= op.opset, "{}", op.op_type);
        for f in op.inputs.iter().chain(&op.outputs) {
            assert!(
                op.constraint(f.ty).is_some()
                    || f.ty.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '(' || c == ')'),
                "{}: {f:?}",
                op.op_type
            );
        }
    }
    for (op, c, ..) in super::REFUSED {
        assert!(ops.iter().any(|o| o.op_type == *op && o.constraint(c).is_some()), "REFUSED names {op} {c}");
    }
    for (op, _) in PROBES.iter().chain(UNPROBED) {
        assert!(ops.iter().any(|o| o.op_type == *op), "a probe line names {op}, which is not declared");
    }
}
