//! The forms of default-domain opsets 1 to 6 (and a few of 7 and 8) that differ from the form
//! today's op implements: each builder reads exactly the legacy attributes, translates them into
//! the newer form (the version converter's rules: `consumed_inputs` dropped, `is_test=1` removed,
//! Concat's default axis written out, Cast's type name turned into its code, ...) and builds that
//! form through its own entry ([`rebuild`]), adding the shape rules the older form had
//! ([`broadcast::Checked`]). Binary ops' `broadcast`/`axis` ([`broadcast`]) insert a view of `B`
//! aligned with `A` where `axis` is not the trailing alignment, so the GPU fuses them like any
//! other elementwise node.
//!
//! Not declared: Pad-1 (its `paddings` text and example disagree on the order), Tile-1 (`tiles`
//! and `axis` as float inputs), Reshape-1 to 4 (`shape` attribute) and Split-1 with its float
//! `split` input.

mod broadcast;
#[cfg(test)]
mod tests;

use crate::ops::{Attribute, Attributes, NodeCtx, Op, OpEntry, OpError, lookup};
use broadcast::{Check, Checked, build_binary, build_prelu};

/// The ops of this family.
pub(crate) static OPS: &[OpEntry] = &[
    // `consumed_inputs` (an in-place hint) is all that differs before 6.
    OpEntry { op_type: "Abs", since: 1, until: 5, build: |c| consumed(c, "Abs", 6, &[]) },
    OpEntry { op_type: "Ceil", since: 1, until: 5, build: |c| consumed(c, "Ceil", 6, &[]) },
    OpEntry { op_type: "Exp", since: 1, until: 5, build: |c| consumed(c, "Exp", 6, &[]) },
    OpEntry { op_type: "Floor", since: 1, until: 5, build: |c| consumed(c, "Floor", 6, &[]) },
    OpEntry { op_type: "Log", since: 1, until: 5, build: |c| consumed(c, "Log", 6, &[]) },
    OpEntry { op_type: "Neg", since: 1, until: 5, build: |c| consumed(c, "Neg", 6, &[]) },
    OpEntry { op_type: "Reciprocal", since: 1, until: 5, build: |c| consumed(c, "Reciprocal", 6, &[]) },
    OpEntry { op_type: "Relu", since: 1, until: 5, build: |c| consumed(c, "Relu", 6, &[]) },
    OpEntry { op_type: "Sigmoid", since: 1, until: 5, build: |c| consumed(c, "Sigmoid", 6, &[]) },
    OpEntry { op_type: "Sqrt", since: 1, until: 5, build: |c| consumed(c, "Sqrt", 6, &[]) },
    OpEntry { op_type: "Tanh", since: 1, until: 5, build: |c| consumed(c, "Tanh", 6, &[]) },
    OpEntry { op_type: "Elu", since: 1, until: 5, build: |c| consumed(c, "Elu", 6, &["alpha"]) },
    OpEntry {
        op_type: "HardSigmoid",
        since: 1,
        until: 5,
        build: |c| consumed(c, "HardSigmoid", 6, &["alpha", "beta"]),
    },
    OpEntry { op_type: "LeakyRelu", since: 1, until: 5, build: |c| consumed(c, "LeakyRelu", 6, &["alpha"]) },
    OpEntry { op_type: "Selu", since: 1, until: 5, build: build_selu },
    OpEntry { op_type: "Clip", since: 1, until: 5, build: |c| consumed(c, "Clip", 6, &["min", "max"]) },
    OpEntry {
        op_type: "InstanceNormalization",
        since: 1,
        until: 5,
        build: |c| consumed(c, "InstanceNormalization", 6, &["epsilon"]),
    },
    // A slope of one element, or of one per channel (axis 1).
    OpEntry { op_type: "PRelu", since: 1, until: 5, build: |c| build_prelu(c, true) },
    OpEntry { op_type: "PRelu", since: 6, until: 6, build: |c| build_prelu(c, false) },
    // `broadcast` and `axis` instead of numpy broadcasting.
    OpEntry { op_type: "Add", since: 1, until: 5, build: |c| build_binary(c, "Add", true) },
    OpEntry { op_type: "Add", since: 6, until: 6, build: |c| build_binary(c, "Add", false) },
    OpEntry { op_type: "Sub", since: 1, until: 5, build: |c| build_binary(c, "Sub", true) },
    OpEntry { op_type: "Sub", since: 6, until: 6, build: |c| build_binary(c, "Sub", false) },
    OpEntry { op_type: "Mul", since: 1, until: 5, build: |c| build_binary(c, "Mul", true) },
    OpEntry { op_type: "Mul", since: 6, until: 6, build: |c| build_binary(c, "Mul", false) },
    OpEntry { op_type: "Div", since: 1, until: 5, build: |c| build_binary(c, "Div", true) },
    OpEntry { op_type: "Div", since: 6, until: 6, build: |c| build_binary(c, "Div", false) },
    OpEntry { op_type: "Pow", since: 1, until: 6, build: |c| build_binary(c, "Pow", false) },
    OpEntry { op_type: "And", since: 1, until: 6, build: |c| build_binary(c, "And", false) },
    OpEntry { op_type: "Or", since: 1, until: 6, build: |c| build_binary(c, "Or", false) },
    OpEntry { op_type: "Xor", since: 1, until: 6, build: |c| build_binary(c, "Xor", false) },
    OpEntry { op_type: "Equal", since: 1, until: 6, build: |c| build_binary(c, "Equal", false) },
    OpEntry { op_type: "Greater", since: 1, until: 6, build: |c| build_binary(c, "Greater", false) },
    OpEntry { op_type: "Less", since: 1, until: 6, build: |c| build_binary(c, "Less", false) },
    // No broadcasting before 8.
    OpEntry { op_type: "Sum", since: 1, until: 7, build: |c| variadic(c, "Sum") },
    OpEntry { op_type: "Mean", since: 1, until: 7, build: |c| variadic(c, "Mean") },
    OpEntry { op_type: "Max", since: 1, until: 7, build: |c| variadic(c, "Max") },
    OpEntry { op_type: "Min", since: 1, until: 7, build: |c| variadic(c, "Min") },
    OpEntry { op_type: "Gemm", since: 1, until: 6, build: build_gemm },
    OpEntry { op_type: "BatchNormalization", since: 1, until: 8, build: build_batch_norm },
    OpEntry { op_type: "Dropout", since: 1, until: 6, build: build_dropout },
    OpEntry { op_type: "Concat", since: 1, until: 3, build: build_concat },
    OpEntry { op_type: "Split", since: 1, until: 1, build: build_split },
    OpEntry { op_type: "Cast", since: 1, until: 5, build: build_cast },
    OpEntry { op_type: "AveragePool", since: 1, until: 6, build: |c| pool(c, "AveragePool", 7) },
    OpEntry { op_type: "MaxPool", since: 1, until: 7, build: |c| pool(c, "MaxPool", 8) },
    OpEntry { op_type: "LpPool", since: 1, until: 1, build: |c| float_p(c, "LpPool", &POOL_ATTRS) },
    OpEntry { op_type: "GlobalLpPool", since: 1, until: 1, build: |c| float_p(c, "GlobalLpPool", &[]) },
    OpEntry { op_type: "Upsample", since: 1, until: 6, build: build_upsample },
    // `output_sequence` (whether `Y` is wanted: the node's outputs say that) until 7.
    OpEntry { op_type: "RNN", since: 1, until: 6, build: |c| recurrent(c, "RNN", &[]) },
    OpEntry { op_type: "GRU", since: 1, until: 2, build: |c| recurrent(c, "GRU", &[]) },
    OpEntry { op_type: "GRU", since: 3, until: 6, build: |c| recurrent(c, "GRU", &["linear_before_reset"]) },
    OpEntry { op_type: "LSTM", since: 1, until: 6, build: |c| recurrent(c, "LSTM", &["input_forget"]) },
];

/// The attributes of the opset 1 pooling forms.
const POOL_ATTRS: [&str; 4] = ["auto_pad", "kernel_shape", "pads", "strides"];

/// Builds `op_type` in its form of opset `at` from `attrs` (every one of which that form must read)
/// for the node `ctx` describes.
pub(super) fn rebuild(ctx: &NodeCtx<'_>, op_type: &str, at: u32, attrs: Attributes) -> Result<Box<dyn Op>, OpError> {
    let entry =
        lookup(op_type, at).ok_or_else(|| OpError::infer(format!("{op_type} is not declared at opset {at}")))?;
    let mut inner = NodeCtx::new(&attrs, at, ctx.num_inputs(), ctx.num_outputs());
    let op = (entry.build)(&mut inner)?;
    if let Some(name) = inner.unread().first() {
        let value = attrs.get(name).map(ToString::to_string).unwrap_or_default();
        return Err(ctx.unsupported(name, value, &format!("{op_type} of opset {at} does not read it")));
    }
    Ok(op)
}

/// The node's attributes among `names` (marked read; any other stays unread, so the importer
/// refuses it), in model order.
fn carry(ctx: &NodeCtx<'_>, names: &[&str]) -> Attributes {
    Attributes(names.iter().filter_map(|n| ctx.raw(n).map(|a| (n.to_string(), a.clone()))).collect())
}

/// The form of opset `at` with the attributes `names`: what the form before took, the same.
fn translate(ctx: &NodeCtx<'_>, op_type: &str, at: u32, names: &[&str]) -> Result<Box<dyn Op>, OpError> {
    rebuild(ctx, op_type, at, carry(ctx, names))
}

/// [`translate`] of a form that also had `consumed_inputs`.
fn consumed(ctx: &mut NodeCtx<'_>, op_type: &str, at: u32, names: &[&str]) -> Result<Box<dyn Op>, OpError> {
    ctx.ignore("consumed_inputs");
    translate(ctx, op_type, at, names)
}

/// Selu 1-5: the defaults were the 4-digit `alpha = 1.6732`, `gamma = 1.0507`.
fn build_selu(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    ctx.ignore("consumed_inputs");
    let mut attrs = Attributes::default();
    attrs.set("alpha", Attribute::Float(ctx.float_or("alpha", 1.6732)?));
    attrs.set("gamma", Attribute::Float(ctx.float_or("gamma", 1.0507)?));
    rebuild(ctx, "Selu", 6, attrs)
}

/// Sum, Mean, Max, Min 1-7: every input of one shape (`consumed_inputs` until 6).
fn variadic(ctx: &mut NodeCtx<'_>, op_type: &str) -> Result<Box<dyn Op>, OpError> {
    if ctx.opset() < 6 {
        ctx.ignore("consumed_inputs");
    }
    Ok(Box::new(Checked { inner: rebuild(ctx, op_type, 8, Attributes::default())?, check: Check::SameShapes }))
}

/// Gemm 1-6: `C` as the output's shape, or broadcast to it with `broadcast=1` (opset 7's rule).
fn build_gemm(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    let broadcast = ctx.int_or("broadcast", 0)?;
    let inner = translate(ctx, "Gemm", 7, &["alpha", "beta", "transA", "transB"])?;
    match broadcast {
        0 => Ok(Box::new(Checked { inner, check: Check::ThirdIsOutput })),
        1 => Ok(inner),
        other => Err(ctx.unsupported("broadcast", other, "0 or 1")),
    }
}

/// BatchNormalization 1-8: inference only (`is_test=1` until 6), `spatial` until 8, `momentum` a
/// training parameter.
fn build_batch_norm(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    if ctx.opset() < 6 {
        ctx.ignore("consumed_inputs");
    }
    if ctx.opset() < 7 {
        let is_test = ctx.int_or("is_test", 0)?;
        if is_test == 0 {
            return Err(ctx.unsupported("is_test", is_test, "1 (inference only: training mode is not supported)"));
        }
    }
    let spatial = ctx.int_or("spatial", 1)?;
    let inner = translate(ctx, "BatchNormalization", 9, &["epsilon", "momentum"])?;
    match spatial {
        1 => Ok(inner),
        0 => Ok(Box::new(Checked { inner, check: Check::VectorParams })),
        other => Err(ctx.unsupported("spatial", other, "0 or 1")),
    }
}

/// Dropout 1-6: inference only (`is_test=1`; its default 0 is training, which is random).
fn build_dropout(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    if ctx.opset() < 6 {
        ctx.ignore("consumed_inputs");
    }
    let is_test = ctx.int_or("is_test", 0)?;
    if is_test == 0 {
        return Err(ctx.unsupported("is_test", is_test, "1 (inference only: training mode is random)"));
    }
    translate(ctx, "Dropout", 7, &["ratio"])
}

/// Concat 1-3: `axis` defaults to 1.
fn build_concat(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    let mut attrs = Attributes::default();
    attrs.set("axis", Attribute::Int(ctx.int_or("axis", 1)?));
    rebuild(ctx, "Concat", 4, attrs)
}

/// Split 1 with its lengths as the `split` attribute and an explicit `axis` (no default was given).
fn build_split(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    if ctx.num_inputs() > 1 {
        return Err(ctx.unsupported(
            "input split",
            "present",
            "the `split` attribute (Split-1's float lengths input is not implemented)",
        ));
    }
    if ctx.raw("axis").is_none() {
        return Err(OpError::attribute("axis", "is required (Split-1 defines no default)"));
    }
    translate(ctx, "Split", 2, &["axis", "split"])
}

/// Cast 1-5: `to` names the type (`"FLOAT"`); the code of opset 6 is taken too, as graph passes
/// write it.
fn build_cast(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    const NAMES: [&str; 16] = [
        "UNDEFINED",
        "FLOAT",
        "UINT8",
        "INT8",
        "UINT16",
        "INT16",
        "INT32",
        "INT64",
        "STRING",
        "BOOL",
        "FLOAT16",
        "DOUBLE",
        "UINT32",
        "UINT64",
        "COMPLEX64",
        "COMPLEX128",
    ];
    let code = match ctx.raw("to") {
        Some(Attribute::String(s)) => {
            let name = String::from_utf8_lossy(s).to_ascii_uppercase();
            let code = NAMES.iter().position(|n| *n == name).filter(|&c| c > 0);
            code.ok_or_else(|| ctx.unsupported("to", &name, "an ONNX TensorProto type name (FLOAT, INT64, ...)"))?
        }
        Some(Attribute::Int(code)) => usize::try_from(*code).unwrap_or(0),
        Some(other) => return Err(OpError::attribute("to", format!("expected STRING, found {}", other.type_name()))),
        None => return Err(OpError::attribute("to", "required")),
    };
    let mut attrs = Attributes::default();
    attrs.set("to", Attribute::Int(code as i64));
    rebuild(ctx, "Cast", 6, attrs)
}

/// AveragePool 1-6 (no `count_include_pad`: 0) and MaxPool 1-7 (no `storage_order`, one output).
fn pool(ctx: &mut NodeCtx<'_>, op_type: &str, at: u32) -> Result<Box<dyn Op>, OpError> {
    if ctx.num_outputs() > 1 {
        return Err(ctx.unsupported("outputs", ctx.num_outputs(), "1 (Indices came with opset 8)"));
    }
    translate(ctx, op_type, at, &POOL_ATTRS)
}

/// LpPool 1 and GlobalLpPool 1: `p` was a float (an integer one is what opset 2 reads).
fn float_p(ctx: &mut NodeCtx<'_>, op_type: &str, names: &[&str]) -> Result<Box<dyn Op>, OpError> {
    let p = ctx.float_or("p", 2.0)?;
    if p.fract() != 0.0 || !(1.0..=64.0).contains(&p) {
        return Err(ctx.unsupported("p", p, "a whole number from 1"));
    }
    let mut attrs = carry(ctx, names);
    attrs.set("p", Attribute::Int(p as i64));
    rebuild(ctx, op_type, 2, attrs)
}

/// Upsample 1 (experimental): `height_scale` and `width_scale` of an NCHW input, `nearest` or
/// `bilinear`; opset 7's `scales` and `linear`.
fn build_upsample(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    let scale = |name: &str| ctx.float(name)?.ok_or_else(|| OpError::attribute(name, "is required"));
    let (h, w) = (scale("height_scale")?, scale("width_scale")?);
    let mode = match ctx.string_or("mode", "nearest")?.as_str() {
        "nearest" => "nearest",
        "bilinear" => "linear",
        other => return Err(ctx.unsupported("mode", other, "nearest, bilinear")),
    };
    let mut attrs = Attributes::default();
    attrs.set("scales", Attribute::Floats(vec![1.0, 1.0, h, w]));
    attrs.set("mode", Attribute::String(mode.as_bytes().to_vec()));
    rebuild(ctx, "Upsample", 7, attrs)
}

/// RNN, GRU, LSTM before 7: opset 7's attributes plus `output_sequence`.
fn recurrent(ctx: &mut NodeCtx<'_>, op_type: &str, extra: &[&str]) -> Result<Box<dyn Op>, OpError> {
    ctx.int("output_sequence")?;
    let mut names = vec!["activation_alpha", "activation_beta", "activations", "clip", "direction", "hidden_size"];
    names.extend_from_slice(extra);
    translate(ctx, op_type, 7, &names)
}
