//! Tests of the control-flow ops' attributes and inference, with stand-in subgraphs whose output
//! types are given (the model-level behaviour, inlining included, is in `tests/control_flow.rs`).

use std::any::Any;
use std::sync::{Arc, Mutex};

use saggar_shape::{DType, Dim};

use super::{Body, Subgraph, implicit_inputs};
use crate::ops::{Attribute, Attributes, InferInput, InferInputs, NodeCtx, Op, OpError, ValueType, lookup};
use crate::tensor::{Tensor, TensorData};

/// A subgraph that makes fixed output types and records the input types it was given.
#[derive(Debug)]
struct Fake {
    inputs: usize,
    captures: Vec<String>,
    outputs: Vec<ValueType>,
    seen: Mutex<Vec<ValueType>>,
}

impl Body for Fake {
    fn name(&self) -> &str {
        "fake"
    }
    fn inputs(&self) -> usize {
        self.inputs
    }
    fn outputs(&self) -> usize {
        self.outputs.len()
    }
    fn captures(&self) -> &[String] {
        &self.captures
    }
    fn node_count(&self) -> usize {
        1
    }
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        *self.seen.lock().unwrap() = inputs.iter().flatten().map(|x| x.ty.clone()).collect();
        Ok(self.outputs.clone())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

fn fake(inputs: usize, captures: &[&str], outputs: Vec<ValueType>) -> Arc<Fake> {
    let captures = captures.iter().map(ToString::to_string).collect();
    Arc::new(Fake { inputs, captures, outputs, seen: Mutex::new(Vec::new()) })
}

fn graph(body: &Arc<Fake>) -> Attribute {
    Attribute::Graph(Subgraph::new(body.clone(), format!("{:p}", Arc::as_ptr(body)).into_bytes()))
}

fn ty(dtype: DType, dims: &[u64]) -> ValueType {
    ValueType::new(dtype, dims.iter().map(|&d| Dim::Fixed(d)).collect())
}

fn build(op: &str, opset: u32, attrs: &Attributes, inputs: usize, outputs: usize) -> Result<Box<dyn Op>, OpError> {
    let entry = lookup(op, opset).expect("declared");
    let mut ctx = NodeCtx::new(attrs, opset, inputs, outputs);
    let built = (entry.build)(&mut ctx)?;
    assert!(ctx.unread().is_empty(), "{:?}", ctx.unread());
    Ok(built)
}

fn infer(op: &dyn Op, types: &[ValueType], values: &[Option<&Tensor>]) -> Result<Vec<ValueType>, OpError> {
    let inputs: Vec<Option<InferInput<'_>>> = types
        .iter()
        .enumerate()
        .map(|(i, ty)| Some(InferInput { ty, value: values.get(i).copied().flatten(), dims_value: None }))
        .collect();
    op.infer(&InferInputs::new(&inputs))
}

fn flag(v: bool) -> Tensor {
    Tensor::new(vec![], TensorData::Bool(vec![u8::from(v)])).unwrap()
}

#[test]
fn implicit_inputs_are_the_sorted_union_of_the_captures() {
    let a = fake(0, &["w", "x"], vec![]);
    let b = fake(0, &["x", "b"], vec![]);
    let attrs = Attributes(vec![("then_branch".into(), graph(&a)), ("else_branch".into(), graph(&b))]);
    assert_eq!(implicit_inputs(&attrs), ["b", "w", "x"]);
}

#[test]
fn if_takes_the_constant_branch_and_merges_both_otherwise() {
    let then_b = fake(0, &["x"], vec![ty(DType::F32, &[2, 3])]);
    let else_b = fake(0, &[], vec![ty(DType::F32, &[2, 4])]);
    let attrs = Attributes(vec![("then_branch".into(), graph(&then_b)), ("else_branch".into(), graph(&else_b))]);
    let op = build("If", 13, &attrs, 1, 1).unwrap();
    let types = [ty(DType::Bool, &[]), ty(DType::F32, &[7])];
    // The captured `x` is slot 1: the branch sees its type.
    let out = infer(op.as_ref(), &types, &[Some(&flag(true))]).unwrap();
    assert_eq!(out, [ty(DType::F32, &[2, 3])]);
    assert_eq!(*then_b.seen.lock().unwrap(), [ty(DType::F32, &[7])]);
    assert_eq!(infer(op.as_ref(), &types, &[Some(&flag(false))]).unwrap(), [ty(DType::F32, &[2, 4])]);
    let merged = infer(op.as_ref(), &types, &[]).unwrap();
    assert_eq!(merged[0].dims[0], Dim::Fixed(2));
    assert!(crate::ops::shape_util::is_unnamed(&merged[0].dims[1]));
    // A condition of another type or size is refused.
    let e = infer(op.as_ref(), &[ty(DType::F32, &[]), ty(DType::F32, &[7])], &[]).unwrap_err();
    assert!(e.to_string().contains("bool"), "{e}");
    let e = infer(op.as_ref(), &[ty(DType::Bool, &[2]), ty(DType::F32, &[7])], &[]).unwrap_err();
    assert!(e.to_string().contains("one element"), "{e}");
}

#[test]
fn if_branches_must_agree_in_element_type_and_count() {
    let f = fake(0, &[], vec![ty(DType::F32, &[2])]);
    let op = |other: &Arc<Fake>| {
        let attrs = Attributes(vec![("then_branch".into(), graph(&f)), ("else_branch".into(), graph(other))]);
        build("If", 11, &attrs, 1, 1)
    };
    let mismatch = op(&fake(0, &[], vec![ty(DType::I64, &[2])])).unwrap();
    let e = infer(mismatch.as_ref(), &[ty(DType::Bool, &[])], &[]).unwrap_err();
    assert!(e.to_string().contains("one element type"), "{e}");
    let e = op(&fake(0, &[], vec![ty(DType::F32, &[2]), ty(DType::F32, &[2])])).unwrap_err();
    assert!(e.to_string().contains("makes 2 outputs, the node has 1"), "{e}");
    let attrs = Attributes(vec![("then_branch".into(), graph(&f))]);
    assert!(build("If", 11, &attrs, 1, 1).unwrap_err().to_string().contains("else_branch"));
    // Ranks may differ (the spec allows any shapes): the larger rank, extents unknown, until the
    // compile knows the branch.
    let ranks = op(&fake(0, &[], vec![ty(DType::F32, &[2, 1])])).unwrap();
    let out = infer(ranks.as_ref(), &[ty(DType::Bool, &[])], &[]).unwrap();
    assert_eq!(out[0].rank(), 2);
    assert!(out[0].dims.iter().all(crate::ops::shape_util::is_unnamed));
    assert_eq!(infer(ranks.as_ref(), &[ty(DType::Bool, &[])], &[Some(&flag(true))]).unwrap(), [ty(DType::F32, &[2])]);
}

#[test]
fn loop_carries_input_types_and_scans_with_an_unknown_extent() {
    let body = fake(3, &[], vec![ty(DType::Bool, &[]), ty(DType::F32, &[2]), ty(DType::I64, &[4])]);
    let attrs = Attributes(vec![("body".into(), graph(&body))]);
    let op = build("Loop", 16, &attrs, 3, 2).unwrap();
    let types = [ty(DType::I64, &[]), ty(DType::Bool, &[]), ty(DType::F32, &[2])];
    let out = infer(op.as_ref(), &types, &[]).unwrap();
    assert_eq!(out[0], ty(DType::F32, &[2]));
    assert!(crate::ops::shape_util::is_unnamed(&out[1].dims[0]));
    assert_eq!(out[1].dims[1..], [Dim::Fixed(4)]);
    assert_eq!(*body.seen.lock().unwrap(), [ty(DType::I64, &[]), ty(DType::Bool, &[]), ty(DType::F32, &[2])]);
    // A carried value whose type the body changes, a trip count of the wrong type, a wrong
    // output count.
    let e = infer(op.as_ref(), &[types[0].clone(), types[1].clone(), ty(DType::I64, &[2])], &[]).unwrap_err();
    assert!(e.to_string().contains("carried value 0"), "{e}");
    let e = infer(op.as_ref(), &[ty(DType::F32, &[]), types[1].clone(), types[2].clone()], &[]).unwrap_err();
    assert!(e.to_string().contains("trip count"), "{e}");
    let op = build("Loop", 16, &attrs, 3, 1).unwrap();
    assert!(infer(op.as_ref(), &types, &[]).unwrap_err().to_string().contains("makes 3 outputs"));
    assert!(build("Loop", 16, &attrs, 1, 1).is_err(), "M and cond slots are required");
}

#[test]
fn scan_infers_per_spec_and_validates_its_attributes() {
    let body = fake(2, &[], vec![ty(DType::F32, &[2]), ty(DType::F32, &[5])]);
    let attrs = Attributes(vec![
        ("body".into(), graph(&body)),
        ("num_scan_inputs".into(), Attribute::Int(1)),
        ("scan_input_axes".into(), Attribute::Ints(vec![-1])),
        ("scan_output_axes".into(), Attribute::Ints(vec![1])),
    ]);
    let op = build("Scan", 11, &attrs, 2, 2).unwrap();
    let out = infer(op.as_ref(), &[ty(DType::F32, &[2]), ty(DType::F32, &[3, 7])], &[]).unwrap();
    assert_eq!(out, [ty(DType::F32, &[2]), ty(DType::F32, &[5, 7])]);
    assert_eq!(*body.seen.lock().unwrap(), [ty(DType::F32, &[2]), ty(DType::F32, &[3])]);
    // Negative axes before opset 11, directions other than 0 and 1, too many scan inputs.
    assert!(build("Scan", 9, &attrs, 2, 2).unwrap_err().to_string().contains("opset 11"));
    let mut bad = attrs.clone();
    bad.set("scan_input_directions", Attribute::Ints(vec![2]));
    assert!(build("Scan", 11, &bad, 2, 2).unwrap_err().to_string().contains("0 or 1"));
    let mut bad = attrs.clone();
    bad.set("num_scan_inputs", Attribute::Int(3));
    assert!(build("Scan", 11, &bad, 2, 2).unwrap_err().to_string().contains("1 to 2"));
    // The body must make the states and the scan outputs.
    let op = build("Scan", 11, &attrs, 2, 3).unwrap_err();
    assert!(op.to_string().contains("entries"), "{op}");
}

#[test]
fn scan_at_opset_8_has_a_batch_axis() {
    let body = fake(2, &[], vec![ty(DType::F32, &[2]), ty(DType::F32, &[5])]);
    let attrs = Attributes(vec![
        ("body".into(), graph(&body)),
        ("num_scan_inputs".into(), Attribute::Int(1)),
        ("directions".into(), Attribute::Ints(vec![1])),
    ]);
    let op = build("Scan", 8, &attrs, 3, 2).unwrap();
    let types = [ty(DType::I64, &[4]), ty(DType::F32, &[4, 2]), ty(DType::F32, &[4, 6, 3])];
    let out = infer(op.as_ref(), &types, &[]).unwrap();
    assert_eq!(out, [ty(DType::F32, &[4, 2]), ty(DType::F32, &[4, 6, 5])]);
    assert_eq!(*body.seen.lock().unwrap(), [ty(DType::F32, &[2]), ty(DType::F32, &[3])]);
}
