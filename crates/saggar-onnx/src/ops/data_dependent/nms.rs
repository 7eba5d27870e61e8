//! NonMaxSuppression, as the ONNX reference computes it: per batch and class, the boxes whose score
//! passes `score_threshold` (strictly above it; every box without one) are taken by descending
//! score (equal scores by lower box index; NaN scores last), each kept unless its IoU with a box
//! already kept is above `iou_threshold`, up to `max_output_boxes_per_class` (absent, 0 or negative:
//! none). The rows `[batch, class, box]` are ordered by batch, class, then selection. Boxes are
//! `[y1, x1, y2, x2]` (any two opposite corners) or with `center_point_box` = 1
//! `[x_center, y_center, width, height]`; everything is computed in f32 in the reference's order.

use std::cmp::Ordering;

use saggar_shape::{DType, Dim};

use super::gpu::{NMS_MASK_WORDS, NmsCompactKernel, NmsMaskKernel, NmsSelectKernel};
use super::{bounded, bounded_type, count_type, fixed, gpu_of_standard, write_count};
use crate::ops::gpu::{GpuCtx, GpuLaunch, GpuNode, Slot, Work, ext};
use crate::ops::{Bounded, EvalInputs, InferInputs, NodeCtx, Op, OpError, ValueType, unknown_dim};
use crate::tensor::{TensorMut, TensorView};

/// `NonMaxSuppression` (opsets 10 and 11 are the same).
#[derive(Debug, Clone)]
struct Nms {
    center: bool,
    /// The most bytes the GPU's IoU bit matrix may take ([`NMS_MASK_BYTES`]).
    mask_limit: u64,
}

/// `NonMaxSuppression.bounded`: `[batches * classes * k, 3]` rows, `k` the constant
/// max_output_boxes_per_class when it is one (at most the boxes), else the boxes; the selected
/// rows first, zeros after; then the count; then the GPU's working memory ([`mask_work`]).
#[derive(Debug)]
struct NmsBounded(Nms);

/// The most bytes of working memory the GPU's selection through an IoU bit matrix may take (every
/// batch and class's sorted keys and matrix); above it, the selection runs without the matrix.
const NMS_MASK_BYTES: u64 = 1 << 28;

pub(super) fn build(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    let center = super::flag(ctx, "center_point_box", false)?;
    Ok(Box::new(Nms { center, mask_limit: NMS_MASK_BYTES }))
}

/// NonMaxSuppression's bounded form whose GPU kernels never take the IoU bit matrix: the tests' way
/// to the selection without it, on sizes an emulation can run.
#[cfg(test)]
pub(crate) fn bounded_without_matrix() -> std::sync::Arc<dyn Op> {
    std::sync::Arc::new(NmsBounded(Nms { center: false, mask_limit: 0 }))
}

/// The GPU's selection through the IoU bit matrix for `pairs` batches x classes of `n` boxes and
/// `k` rows each, where it applies (`k` equal to `n`, no constant cap below the boxes, at most
/// [`NMS_MASK_WORDS`] words of 64 candidates, within `limit` bytes): the words, and the working
/// memory in int64s (a count per pair, then `n` keys per pair, then per pair the matrix's words from
/// the diagonal on, `64 (1 + 2 + ... + words)`).
fn mask_work(pairs: u64, n: u64, k: u64, limit: u64) -> Option<(u64, u64)> {
    let words = n.div_ceil(64);
    if k != n || n == 0 || words > NMS_MASK_WORDS as u64 {
        return None;
    }
    let matrix = 64 * words * (words + 1) / 2;
    let elems = pairs.checked_mul(1 + n + matrix)?;
    (elems.checked_mul(8)? <= limit).then_some((words, elems))
}

/// The scalar inputs: boxes kept per class, IoU threshold, score threshold.
#[derive(Debug, Clone, Copy)]
struct Params {
    max_out: usize,
    iou: f32,
    score: Option<f32>,
}

/// `(batches, classes, boxes)` from the inputs' types, checked against each other.
fn extents(inputs: &InferInputs<'_>) -> Result<[Dim; 3], OpError> {
    let (boxes, scores) = (inputs.req(0)?.ty, inputs.req(1)?.ty);
    for (name, t) in [("boxes", boxes), ("scores", scores)] {
        if t.dtype != DType::F32 || t.rank() != 3 {
            return Err(OpError::infer(format!("NonMaxSuppression's {name} must be f32 of rank 3, found {t}")));
        }
    }
    let mismatch = |what: &str| {
        OpError::infer(format!("NonMaxSuppression's boxes {boxes} and scores {scores} differ in their {what}"))
    };
    let differ = |a: &Dim, b: &Dim| a.as_fixed().zip(b.as_fixed()).is_some_and(|(a, b)| a != b);
    if differ(&boxes.dims[0], &scores.dims[0]) {
        return Err(mismatch("batches"));
    }
    if differ(&boxes.dims[1], &scores.dims[2]) {
        return Err(mismatch("boxes (axis 1 of boxes, axis 2 of scores)"));
    }
    if boxes.dims[2].as_fixed().is_some_and(|d| d != 4) {
        return Err(OpError::infer(format!("NonMaxSuppression's boxes must have 4 coordinates each, found {boxes}")));
    }
    for (i, name, dtype) in [
        (2, "max_output_boxes_per_class", DType::I64),
        (3, "iou_threshold", DType::F32),
        (4, "score_threshold", DType::F32),
    ] {
        if let Some(t) = inputs.get(i).map(|v| v.ty)
            && (t.dtype != dtype || t.dims.iter().any(|d| d.as_fixed().is_some_and(|d| d > 1)))
        {
            return Err(OpError::infer(format!("NonMaxSuppression's {name} must be one {dtype}, found {t}")));
        }
    }
    Ok([boxes.dims[0].clone(), scores.dims[1].clone(), boxes.dims[1].clone()])
}

/// The constant max_output_boxes_per_class (absent or empty: 0; negative: 0), if known.
fn const_max_out(inputs: &InferInputs<'_>) -> Option<usize> {
    match inputs.get(2) {
        None => Some(0),
        Some(m) => m.const_i64s().map(|v| v.first().map_or(0, |&v| v.max(0) as usize)),
    }
}

/// The scalar inputs' values (an empty tensor counts as absent).
fn params(inputs: &EvalInputs<'_>) -> Result<Params, OpError> {
    let float = |i: usize| -> Result<Option<f32>, OpError> {
        inputs.get(i).map(|t| t.f32s().map(|v| v.first().copied())).transpose().map(Option::flatten)
    };
    let max_out = match inputs.get(2) {
        None => 0,
        Some(t) => t.i64s()?.first().map_or(0, |&v| v.max(0) as usize),
    };
    Ok(Params { max_out, iou: float(3)?.unwrap_or(0.0), score: float(4)? })
}

/// Python's `max(a, b)` and `min(a, b)`: the first unless the second is strictly beyond it.
fn py_max(a: f32, b: f32) -> f32 {
    if b > a { b } else { a }
}
fn py_min(a: f32, b: f32) -> f32 {
    if b < a { b } else { a }
}

/// `(x_min, x_max, y_min, y_max)` of a box.
fn corners(b: &[f32], center: bool) -> (f32, f32, f32, f32) {
    let ordered = |l: f32, r: f32| if l >= r { (r, l) } else { (l, r) };
    if center {
        let (w, h) = (b[2] * 0.5, b[3] * 0.5);
        (b[0] - w, b[0] + w, b[1] - h, b[1] + h)
    } else {
        let ((x0, x1), (y0, y1)) = (ordered(b[1], b[3]), ordered(b[0], b[2]));
        (x0, x1, y0, y1)
    }
}

/// Whether `candidate` overlaps `kept` by more than `iou` (the reference's `suppress_by_iou`).
fn suppressed(candidate: &[f32], kept: &[f32], center: bool, iou: f32) -> bool {
    let (ax0, ax1, ay0, ay1) = corners(candidate, center);
    let (bx0, bx1, by0, by1) = corners(kept, center);
    let (ix0, ix1) = (py_max(ax0, bx0), py_min(ax1, bx1));
    let (iy0, iy1) = (py_max(ay0, by0), py_min(ay1, by1));
    if ix1 <= ix0 || iy1 <= iy0 {
        return false;
    }
    let inter = (ix1 - ix0) * (iy1 - iy0);
    if inter <= 0.0 {
        return false;
    }
    let (area_a, area_b) = ((ax1 - ax0) * (ay1 - ay0), (bx1 - bx0) * (by1 - by0));
    let union = area_a + area_b - inter;
    if area_a <= 0.0 || area_b <= 0.0 || union <= 0.0 {
        return false;
    }
    inter / union > iou
}

/// Descending score, a lower index first among equal scores, NaN scores last.
fn by_score(scores: &[f32], a: usize, b: usize) -> Ordering {
    let (sa, sb) = (scores[a], scores[b]);
    match (sa.is_nan(), sb.is_nan()) {
        (true, true) => a.cmp(&b),
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        _ => sb.partial_cmp(&sa).unwrap_or(Ordering::Equal).then(a.cmp(&b)),
    }
}

impl Nms {
    /// Calls `emit(batch, class, box)` for every selected box in output order, at most `cap` a
    /// class.
    fn select(
        &self,
        boxes: &TensorView<'_>,
        scores: &TensorView<'_>,
        p: Params,
        cap: usize,
        mut emit: impl FnMut(usize, usize, usize) -> Result<(), OpError>,
    ) -> Result<(), OpError> {
        let (bx, sc) = (boxes.f32s()?, scores.f32s()?);
        let &[batches, classes, n] = scores.dims else {
            return Err(OpError::eval(format!("scores {:?} must have rank 3", scores.dims)));
        };
        if boxes.dims != [batches, n, 4] {
            return Err(OpError::eval(format!("boxes {:?} do not match scores {:?}", boxes.dims, scores.dims)));
        }
        let max_out = p.max_out.min(cap);
        let (mut order, mut kept) = (Vec::with_capacity(n), Vec::new());
        for b in 0..batches {
            let boxes_of = |i: usize| &bx[(b * n + i) * 4..(b * n + i) * 4 + 4];
            for c in 0..classes {
                let s = &sc[(b * classes + c) * n..(b * classes + c + 1) * n];
                order.clear();
                order.extend((0..n).filter(|&i| p.score.is_none_or(|t| s[i] > t)));
                order.sort_by(|&x, &y| by_score(s, x, y));
                kept.clear();
                for &i in &order {
                    if kept.len() >= max_out {
                        break;
                    }
                    if !kept.iter().any(|&k| suppressed(boxes_of(i), boxes_of(k), self.center, p.iou)) {
                        kept.push(i);
                        emit(b, c, i)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Writes the selected rows into `out` (`rows` rows of 3), zeros after them; returns their number.
    fn write(&self, inputs: &EvalInputs<'_>, out: &mut [i64], cap: usize) -> Result<usize, OpError> {
        let p = params(inputs)?;
        let mut n = 0;
        self.select(inputs.req(0)?, inputs.req(1)?, p, cap, |b, c, i| {
            let row =
                out.get_mut(n * 3..n * 3 + 3).ok_or_else(|| OpError::eval("more boxes selected than output rows"))?;
            row.copy_from_slice(&[b as i64, c as i64, i as i64]);
            n += 1;
            Ok(())
        })?;
        out[n * 3..].fill(0);
        Ok(n)
    }

    /// The launches of the bounded form: a block per batch and class selecting into its own `k`
    /// rows (the rest marked -1), then one block packing the rows and writing the count.
    fn launches(&self, ctx: &GpuCtx<'_>) -> Result<GpuNode, OpError> {
        let (boxes, scores, out) = (ctx.input(0)?, ctx.input(1)?, ctx.output(0)?);
        let &[batches, classes, n] = scores.dims.as_slice() else {
            return Err(OpError::eval(format!("scores {:?} must have rank 3", scores.dims)));
        };
        if boxes.dims != [batches, n, 4] {
            return Err(OpError::eval(format!("boxes {:?} do not match scores {:?}", boxes.dims, scores.dims)));
        }
        if n > i32::MAX as usize {
            return Err(OpError::eval(format!(
                "NonMaxSuppression over {n} boxes: the GPU kernel takes up to 2^31 - 1"
            )));
        }
        let rows = out.dims[0];
        let k = rows.checked_div(batches * classes).unwrap_or(0);
        // A scalar input is read on the device where the node has it (not empty); else its default.
        let present = |i: usize| ctx.inputs.get(i).and_then(Option::as_ref).is_some_and(|o| o.bytes() != Some(0));
        let slot = |i: usize| if present(i) { Slot::In(i) } else { Slot::In(0) };
        let mut meta = vec![
            ext(batches),
            ext(classes),
            ext(n),
            ext(k),
            i64::from(self.center),
            i64::from(present(2)),
            i64::from(present(3)),
            i64::from(present(4)),
        ];
        let mut slots = vec![Slot::In(0), Slot::In(1), slot(2), slot(3), slot(4), Slot::Out(0)];
        let pairs = (batches * classes) as u64;
        let mut launches = match mask_work(pairs, n as u64, k as u64, self.mask_limit) {
            Some((words, elems)) => {
                let work = ctx.output(2)?;
                if work.dims.iter().product::<usize>() as u64 != elems {
                    return Err(OpError::eval(format!(
                        "NonMaxSuppression.bounded's working memory {:?} is not the {elems} int64s its matrix takes",
                        work.dims
                    )));
                }
                meta.push(words as i64);
                slots.push(Slot::Out(2));
                let groups = words.div_ceil(4);
                let phase =
                    |phase: u8, work| GpuLaunch::new(NmsMaskKernel { phase }, meta.clone(), work, slots.clone());
                vec![
                    phase(0, Work::Rows(pairs)),
                    phase(1, Work::Rows(pairs * words * groups)),
                    phase(2, Work::Rows(pairs)),
                ]
            }
            None => vec![GpuLaunch::new(NmsSelectKernel, meta, Work::Rows(pairs), slots)],
        };
        let compact =
            GpuLaunch::new(NmsCompactKernel, vec![ext(rows)], Work::Rows(1), vec![Slot::Out(0), Slot::Out(1)]);
        launches.push(compact);
        Ok(GpuNode::Launches(launches))
    }
}

impl Op for Nms {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let [b, c, n] = extents(inputs)?;
        let empty = [&b, &c, &n].iter().any(|d| d.as_fixed() == Some(0)) || const_max_out(inputs) == Some(0);
        let all_const = (0..inputs.len()).all(|i| inputs.get(i).is_none_or(|v| v.value.is_some()));
        let rows = if empty {
            fixed(0)
        } else if all_const {
            let views: Vec<Option<TensorView<'_>>> =
                (0..inputs.len()).map(|i| inputs.get(i).and_then(|v| v.value).map(|t| t.view())).collect();
            let evals = EvalInputs::new(&views);
            let mut count = 0;
            self.select(evals.req(0)?, evals.req(1)?, params(&evals)?, usize::MAX, |_, _, _| {
                count += 1;
                Ok(())
            })?;
            fixed(count)
        } else {
            unknown_dim()
        };
        Ok(vec![ValueType::new(DType::I64, vec![rows, fixed(3)])])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let [y] = outputs else { return Err(OpError::eval("NonMaxSuppression has one output")) };
        let rows = y.dims.first().copied().unwrap_or(0);
        let n = self.write(inputs, y.i64s()?, usize::MAX)?;
        if n != rows {
            return Err(OpError::eval(format!("NonMaxSuppression selected {n} boxes, the output has {rows} rows")));
        }
        Ok(())
    }

    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        Some(gpu_of_standard("NonMaxSuppression", ctx))
    }

    fn bounded(&self) -> Option<Bounded> {
        bounded(NmsBounded(self.clone()), "NonMaxSuppression.bounded", vec![Some(0)], false)
    }
}

impl Op for NmsBounded {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let [b, c, n] = extents(inputs)?;
        let (rows, work) = match (b.as_fixed(), c.as_fixed(), n.as_fixed()) {
            (Some(b), Some(c), Some(n)) => {
                let k = const_max_out(inputs).map_or(n, |m| n.min(m as u64));
                let rows = b.checked_mul(c).and_then(|bc| bc.checked_mul(k));
                let rows = rows.ok_or_else(|| {
                    OpError::infer(format!("NonMaxSuppression.bounded's rows {b} x {c} x {k} overflow"))
                })?;
                let work = mask_work(b.saturating_mul(c), n, k, self.0.mask_limit).map_or(1, |(_, elems)| elems);
                (Dim::Fixed(rows), Dim::Fixed(work))
            }
            _ => (unknown_dim(), unknown_dim()),
        };
        Ok(vec![
            bounded_type("NonMaxSuppression", DType::I64, vec![rows, fixed(3)])?,
            count_type(),
            ValueType::new(DType::I64, vec![work]),
        ])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        // The third output is the GPU's working memory, unread.
        let ([y, count] | [y, count, _]) = outputs else {
            return Err(OpError::eval("NonMaxSuppression.bounded has two outputs and working memory"));
        };
        let scores = inputs.req(1)?;
        let per_class = scores.dims.first().zip(scores.dims.get(1)).map_or(0, |(b, c)| b * c);
        let cap = y.dims.first().map_or(0, |&rows| rows.checked_div(per_class).unwrap_or(0));
        let n = self.0.write(inputs, y.i64s()?, cap)?;
        write_count(count, n)
    }

    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        Some(self.0.launches(ctx))
    }
}
