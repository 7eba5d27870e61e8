//! `Einsum` (opset 12): the equation is parsed when the node is built ([`Equation`]); each operand's
//! axes get labels (letters, and one label per axis of the broadcast `...`), a label's extent is the
//! same on every operand (1 broadcasts), a label repeated on one operand takes its diagonal, labels
//! missing from the output are summed, and the implicit output (no `->`) is the `...` axes then the
//! letters used once, in ASCII order (numpy's rules). The computation itself is planned per concrete
//! shape in [`plan`].

mod plan;

use saggar_shape::{DType, Dim};

use self::plan::EinsumPlan;
use crate::ops::elementwise::require_dtype;
use crate::ops::gpu::{GpuCtx, GpuNode};
use crate::ops::shape_util::broadcast_dims;
use crate::ops::{EvalInputs, InferInputs, NodeCtx, Op, OpError, ValueType};
use crate::tensor::TensorMut;

/// A subscript label: a letter (its ASCII code) or axis `i` of the broadcast `...` ([`ELLIPSIS`] + i).
pub(super) type Label = u16;
/// The label of the first `...` axis.
const ELLIPSIS: Label = 128;

/// One side of the equation: its labels in order, and where its `...` stands among them.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Term {
    letters: Vec<Label>,
    ellipsis: Option<usize>,
}

/// A parsed Einsum equation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Equation {
    inputs: Vec<Term>,
    /// The explicit output (after `->`), if any.
    output: Option<Term>,
}

fn bad(equation: &str, why: impl std::fmt::Display) -> OpError {
    OpError::attribute("equation", format!("`{equation}`: {why}"))
}

fn parse_term(equation: &str, text: &str) -> Result<Term, OpError> {
    let (mut letters, mut ellipsis, mut dots) = (Vec::new(), None, 0);
    for c in text.chars() {
        match c {
            '.' => {
                dots += 1;
                if dots == 3 {
                    if ellipsis.is_some() {
                        return Err(bad(equation, format!("`{text}` has two ellipses")));
                    }
                    ellipsis = Some(letters.len());
                }
            }
            _ if dots % 3 != 0 => return Err(bad(equation, format!("`{text}` has a `.` outside an ellipsis `...`"))),
            c if c.is_ascii_alphabetic() => letters.push(c as Label),
            c => return Err(bad(equation, format!("`{c}` is not a letter, `...`, `,` or `->`"))),
        }
    }
    if dots % 3 != 0 || dots > 3 {
        return Err(bad(equation, format!("`{text}` has a `.` outside one ellipsis `...`")));
    }
    Ok(Term { letters, ellipsis })
}

impl Equation {
    /// Parses and checks an equation: letters, at most one `...` a term, output letters that occur in
    /// an input and only once.
    pub(super) fn parse(equation: &str) -> Result<Equation, OpError> {
        let text: String = equation.chars().filter(|c| !c.is_whitespace()).collect();
        let (lhs, rhs) = match text.split_once("->") {
            Some((l, r)) => (l, Some(r)),
            None => (text.as_str(), None),
        };
        let inputs = lhs.split(',').map(|t| parse_term(equation, t)).collect::<Result<Vec<_>, _>>()?;
        let output = rhs.map(|r| parse_term(equation, r)).transpose()?;
        if let Some(out) = &output {
            for (i, l) in out.letters.iter().enumerate() {
                if out.letters[..i].contains(l) {
                    return Err(bad(equation, format!("the output repeats `{}`", *l as u8 as char)));
                }
                if !inputs.iter().any(|t| t.letters.contains(l)) {
                    return Err(bad(equation, format!("the output's `{}` is in no input", *l as u8 as char)));
                }
            }
        }
        Ok(Equation { inputs, output })
    }

    /// The label of every axis of each operand of `ranks`, and the output's labels.
    pub(super) fn labels(&self, ranks: &[usize]) -> Result<(Vec<Vec<Label>>, Vec<Label>), OpError> {
        if ranks.len() != self.inputs.len() {
            return Err(OpError::infer(format!(
                "Einsum's equation has {} operands, the node {} inputs",
                self.inputs.len(),
                ranks.len()
            )));
        }
        let mut spans = Vec::with_capacity(ranks.len());
        for (k, (term, &rank)) in self.inputs.iter().zip(ranks).enumerate() {
            let n = term.letters.len();
            match (term.ellipsis, rank.checked_sub(n)) {
                (Some(_), Some(span)) => spans.push(span),
                (None, Some(0)) => spans.push(0),
                _ => {
                    return Err(OpError::infer(format!(
                        "Einsum operand {k} has rank {rank}, its subscripts name {n} axes{}",
                        if term.ellipsis.is_some() { " and `...`" } else { "" }
                    )));
                }
            }
        }
        let width = spans.iter().copied().max().unwrap_or(0);
        if width > usize::from(Label::MAX - ELLIPSIS) {
            return Err(OpError::infer(format!("Einsum's `...` stands for {width} axes")));
        }
        let expand = |term: &Term, span: usize| -> Vec<Label> {
            let at = term.ellipsis.unwrap_or(term.letters.len());
            let dots = (width - span..width).map(|i| ELLIPSIS + i as Label);
            term.letters[..at].iter().copied().chain(dots).chain(term.letters[at..].iter().copied()).collect()
        };
        let operands: Vec<Vec<Label>> = self.inputs.iter().zip(&spans).map(|(t, &s)| expand(t, s)).collect();
        let output = match &self.output {
            Some(out) => expand(out, if out.ellipsis.is_some() { width } else { 0 }),
            None => {
                let once: Vec<Label> = (b'A' as Label..=b'z' as Label)
                    .filter(|l| {
                        self.inputs.iter().map(|t| t.letters.iter().filter(|x| *x == l).count()).sum::<usize>() == 1
                    })
                    .collect();
                (0..width).map(|i| ELLIPSIS + i as Label).chain(once).collect()
            }
        };
        Ok((operands, output))
    }
}

/// `Einsum`.
#[derive(Debug)]
struct Einsum {
    equation: Equation,
}

pub(super) fn build_einsum(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    let text = ctx.string("equation")?.ok_or_else(|| OpError::attribute("equation", "is required"))?;
    Ok(Box::new(Einsum { equation: Equation::parse(&text)? }))
}

impl Op for Einsum {
    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        Some((|| {
            let inputs = (0..ctx.inputs.len()).map(|i| ctx.input(i)).collect::<Result<Vec<_>, _>>()?;
            let dims: Vec<&[usize]> = inputs.iter().map(|o| o.dims.as_slice()).collect();
            EinsumPlan::new(&self.equation, &dims)?.gpu(inputs[0].dtype)
        })())
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let tys = (0..inputs.len()).map(|i| inputs.req(i).map(|x| x.ty)).collect::<Result<Vec<_>, _>>()?;
        let dtype = tys.first().map_or(DType::F32, |t| t.dtype);
        require_dtype("Einsum", dtype, &crate::tensor::NUMERIC_DTYPES)?;
        if let Some(t) = tys.iter().find(|t| t.dtype != dtype) {
            return Err(OpError::infer(format!("Einsum's operands differ in type ({dtype} and {})", t.dtype)));
        }
        let ranks: Vec<usize> = tys.iter().map(|t| t.rank()).collect();
        let (operands, output) = self.equation.labels(&ranks)?;
        let mut extents: Vec<(Label, Dim)> = Vec::new();
        for (k, (labels, ty)) in operands.iter().zip(&tys).enumerate() {
            for (&l, d) in labels.iter().zip(&ty.dims) {
                match extents.iter_mut().find(|(x, _)| *x == l) {
                    Some((_, e)) => {
                        let both = broadcast_dims(std::slice::from_ref(e), std::slice::from_ref(d));
                        *e = both.map_err(|_| mismatch(l, k, &*e, d))?.swap_remove(0);
                    }
                    None => extents.push((l, d.clone())),
                }
            }
        }
        let extent = |l: Label| extents.iter().find(|(x, _)| *x == l).map_or(Dim::Fixed(1), |(_, d)| d.clone());
        Ok(vec![ValueType::new(dtype, output.iter().map(|&l| extent(l)).collect())])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let views = (0..inputs.len()).map(|i| inputs.req(i)).collect::<Result<Vec<_>, _>>()?;
        let dims: Vec<&[usize]> = views.iter().map(|v| v.dims).collect();
        EinsumPlan::new(&self.equation, &dims)?.eval(&views, &mut outputs[0])
    }
}

/// The error of label `l` whose extents on operand `k` and before disagree.
pub(super) fn mismatch(l: Label, k: usize, before: impl std::fmt::Display, here: impl std::fmt::Display) -> OpError {
    let name = if l >= ELLIPSIS { format!("axis {} of `...`", l - ELLIPSIS) } else { format!("`{}`", l as u8 as char) };
    OpError::infer(format!("Einsum's {name} has extent {here} on operand {k} and {before} before"))
}

#[cfg(test)]
mod tests;
