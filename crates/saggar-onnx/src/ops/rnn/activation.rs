//! The activation functions of the recurrent ops (`activations`, `activation_alpha`,
//! `activation_beta`), each computed the same way on the host and in the generated C++.

use crate::ops::elementwise::c_float;
use crate::ops::{Attribute, NodeCtx, OpError};

/// One activation function with its alpha and beta.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Act {
    /// `max(0, x)`.
    Relu,
    /// `tanh(x)`.
    Tanh,
    /// `1 / (1 + e^-x)`.
    Sigmoid,
    /// `alpha * x + beta`.
    Affine { alpha: f32, beta: f32 },
    /// `x` where `x >= 0`, else `alpha * x`.
    LeakyRelu { alpha: f32 },
    /// `x` where `x >= alpha`, else 0.
    ThresholdedRelu { alpha: f32 },
    /// `alpha * tanh(beta * x)`.
    ScaledTanh { alpha: f32, beta: f32 },
    /// `min(max(alpha * x + beta, 0), 1)`.
    HardSigmoid { alpha: f32, beta: f32 },
    /// `x` where `x >= 0`, else `alpha * (e^x - 1)`.
    Elu { alpha: f32 },
    /// `x / (1 + |x|)`.
    Softsign,
    /// `log(1 + e^x)`, computed as `max(x, 0) + log1p(e^-|x|)` so that it overflows nowhere.
    Softplus,
}

/// The names the spec lists, for error messages.
const NAMES: &str = "Relu, Tanh, Sigmoid, Affine, LeakyRelu, ThresholdedRelu, ScaledTanh, HardSigmoid, Elu, \
                     Softsign, Softplus";

/// `(uses alpha, uses beta, default alpha, default beta)` of an activation named in lower case;
/// `None` for an unknown name. The defaults are those of the ONNX operator of the same name
/// (LeakyRelu 0.01, ThresholdedRelu 1, HardSigmoid 0.2 and 0.5, Elu 1) and the former Affine
/// operator's (1 and 0); ScaledTanh has none, so its values must be given.
fn parameters(lower: &str) -> Option<(bool, bool, Option<f32>, Option<f32>)> {
    Some(match lower {
        "relu" | "tanh" | "sigmoid" | "softsign" | "softplus" => (false, false, None, None),
        "affine" => (true, true, Some(1.0), Some(0.0)),
        "leakyrelu" => (true, false, Some(0.01), None),
        "thresholdedrelu" => (true, false, Some(1.0), None),
        "elu" => (true, false, Some(1.0), None),
        "hardsigmoid" => (true, true, Some(0.2), Some(0.5)),
        "scaledtanh" => (true, true, None, None),
        _ => return None,
    })
}

impl Act {
    fn from_name(lower: &str, alpha: f32, beta: f32) -> Act {
        match lower {
            "relu" => Act::Relu,
            "tanh" => Act::Tanh,
            "sigmoid" => Act::Sigmoid,
            "affine" => Act::Affine { alpha, beta },
            "leakyrelu" => Act::LeakyRelu { alpha },
            "thresholdedrelu" => Act::ThresholdedRelu { alpha },
            "scaledtanh" => Act::ScaledTanh { alpha, beta },
            "hardsigmoid" => Act::HardSigmoid { alpha, beta },
            "elu" => Act::Elu { alpha },
            "softsign" => Act::Softsign,
            _ => Act::Softplus,
        }
    }

    /// The function at `x`.
    pub(crate) fn apply(self, x: f32) -> f32 {
        match self {
            Act::Relu => {
                if x > 0.0 {
                    x
                } else {
                    0.0
                }
            }
            Act::Tanh => x.tanh(),
            Act::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            Act::Affine { alpha, beta } => alpha * x + beta,
            Act::LeakyRelu { alpha } => {
                if x >= 0.0 {
                    x
                } else {
                    alpha * x
                }
            }
            Act::ThresholdedRelu { alpha } => {
                if x >= alpha {
                    x
                } else {
                    0.0
                }
            }
            Act::ScaledTanh { alpha, beta } => alpha * (beta * x).tanh(),
            Act::HardSigmoid { alpha, beta } => (alpha * x + beta).clamp(0.0, 1.0),
            Act::Elu { alpha } => {
                if x >= 0.0 {
                    x
                } else {
                    alpha * x.exp_m1()
                }
            }
            Act::Softsign => x / (1.0 + x.abs()),
            Act::Softplus => x.max(0.0) + (-x.abs()).exp().ln_1p(),
        }
    }

    /// The C++ expression of the function at `v` (a variable name), computing what
    /// [`Act::apply`] does.
    pub(crate) fn c_expr(self, v: &str) -> String {
        match self {
            Act::Relu => format!("({v} > 0.0f ? {v} : 0.0f)"),
            Act::Tanh => format!("tanhf({v})"),
            Act::Sigmoid => format!("(1.0f / (1.0f + expf(-{v})))"),
            Act::Affine { alpha, beta } => format!("({} * {v} + {})", c_float(alpha), c_float(beta)),
            Act::LeakyRelu { alpha } => format!("({v} >= 0.0f ? {v} : {} * {v})", c_float(alpha)),
            Act::ThresholdedRelu { alpha } => format!("({v} >= {} ? {v} : 0.0f)", c_float(alpha)),
            Act::ScaledTanh { alpha, beta } => format!("({} * tanhf({} * {v}))", c_float(alpha), c_float(beta)),
            Act::HardSigmoid { alpha, beta } => {
                let t = format!("({} * {v} + {})", c_float(alpha), c_float(beta));
                format!("({t} < 0.0f ? 0.0f : ({t} > 1.0f ? 1.0f : {t}))")
            }
            Act::Elu { alpha } => format!("({v} >= 0.0f ? {v} : {} * expm1f({v}))", c_float(alpha)),
            Act::Softsign => format!("({v} / (1.0f + fabsf({v})))"),
            Act::Softplus => format!("(fmaxf({v}, 0.0f) + log1pf(expf(-fabsf({v}))))"),
        }
    }
}

/// The activations of a node: `per_direction` functions for each of `directions`, from the
/// `activations` attribute (or `defaults`). A list of `per_direction` names serves every
/// direction; RNN's list of two (its schema default) serves a single direction with its first. Alphas and
/// betas are consumed in order by the functions that take them (as ONNX Runtime does), a
/// function left without one taking its default; values left over are refused rather than
/// dropped.
pub(crate) fn read_activations(
    ctx: &NodeCtx<'_>,
    defaults: &[&str],
    per_direction: usize,
    directions: usize,
) -> Result<Vec<Act>, OpError> {
    let names: Vec<String> = match ctx.raw("activations") {
        None => defaults.iter().map(|s| s.to_string()).collect(),
        Some(Attribute::Strings(v)) => v.iter().map(|s| String::from_utf8_lossy(s).into_owned()).collect(),
        Some(other) => {
            return Err(OpError::attribute("activations", format!("expected STRINGS, found {}", other.type_name())));
        }
    };
    let wanted = per_direction * directions;
    let names: Vec<&String> = match names.len() {
        n if n == wanted => names.iter().collect(),
        n if n == per_direction => names.iter().cycle().take(wanted).collect(),
        // RNN's schema default (`Tanh, Tanh`), written out or not, for a single direction.
        2 if per_direction == 1 && directions == 1 => names.iter().take(1).collect(),
        n => {
            return Err(OpError::attribute(
                "activations",
                format!("{n} functions given; expected {per_direction} (for every direction) or {wanted}"),
            ));
        }
    };
    let alphas = ctx.floats("activation_alpha")?.unwrap_or_default();
    let betas = ctx.floats("activation_beta")?.unwrap_or_default();
    let (mut alpha_at, mut beta_at) = (0, 0);
    let mut acts = Vec::with_capacity(wanted);
    for name in names {
        let lower = name.to_ascii_lowercase();
        let (uses_alpha, uses_beta, alpha_default, beta_default) = parameters(&lower)
            .ok_or_else(|| ctx.unsupported("activations", format!("{name:?}"), &format!("one of {NAMES}")))?;
        let take = |uses: bool, values: &[f32], at: &mut usize, default: Option<f32>, attr: &str| {
            if !uses {
                return Ok(0.0);
            }
            let v = values.get(*at).copied().or(default);
            *at += 1;
            v.ok_or_else(|| OpError::attribute(attr, format!("{name} needs a value and {attr} has none left for it")))
        };
        let alpha = take(uses_alpha, &alphas, &mut alpha_at, alpha_default, "activation_alpha")?;
        let beta = take(uses_beta, &betas, &mut beta_at, beta_default, "activation_beta")?;
        acts.push(Act::from_name(&lower, alpha, beta));
    }
    for (attr, values, used) in [("activation_alpha", &alphas, alpha_at), ("activation_beta", &betas, beta_at)] {
        if values.len() > used {
            return Err(OpError::attribute(
                attr,
                format!(
                    "{} values given but the activations take {used}: which function each is for is unclear",
                    values.len()
                ),
            ));
        }
    }
    Ok(acts)
}
