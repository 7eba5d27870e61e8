//! `DepthToSpace` (DCR and, from opset 11, CRD) and `SpaceToDepth` on `[N, C, H, W]`: a reshape,
//! a transpose and a reshape, which is one [`StridedView`] of the input.

use saggar_shape::Dim;

use super::view::StridedView;
use crate::error::OpError;
use crate::ops::{EvalInputs, InferInputs, NodeCtx, Op, ValueType, unknown_dim};
use crate::tensor::TensorMut;

/// Which rearrangement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// DepthToSpace, depth-column-row: channels split as `[b, b, C / b²]`.
    Dcr,
    /// DepthToSpace, column-row-depth: channels split as `[C / b², b, b]`.
    Crd,
    /// SpaceToDepth: `[C, H / b, b, W / b, b]` to channels `[b, b, C]`.
    SpaceToDepth,
}

/// DepthToSpace or SpaceToDepth with block size `block`.
#[derive(Debug)]
pub(super) struct DepthSpace {
    mode: Mode,
    block: usize,
}

fn blocksize(ctx: &NodeCtx<'_>) -> Result<usize, OpError> {
    let b = ctx.int("blocksize")?.ok_or_else(|| OpError::attribute("blocksize", "required"))?;
    usize::try_from(b)
        .ok()
        .filter(|&b| b > 0 && b <= u32::MAX as usize)
        .ok_or_else(|| OpError::attribute("blocksize", format!("must be positive, found {b}")))
}

/// DepthToSpace; `modes` when the opset has the `mode` attribute (11 on).
pub(super) fn build_depth_to_space(ctx: &mut NodeCtx<'_>, modes: bool) -> Result<Box<dyn Op>, OpError> {
    let mode = if modes {
        match ctx.string_or("mode", "DCR")?.as_str() {
            "DCR" => Mode::Dcr,
            "CRD" => Mode::Crd,
            other => return Err(ctx.unsupported("mode", other, "DCR, CRD")),
        }
    } else {
        Mode::Dcr
    };
    Ok(Box::new(DepthSpace { mode, block: blocksize(ctx)? }))
}

pub(super) fn build_space_to_depth(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(DepthSpace { mode: Mode::SpaceToDepth, block: blocksize(ctx)? }))
}

impl DepthSpace {
    fn name(&self) -> &'static str {
        if self.mode == Mode::SpaceToDepth { "SpaceToDepth" } else { "DepthToSpace" }
    }

    /// `[C, H, W]` of the output from the input's, or why they do not divide.
    fn out_chw(&self, [c, h, w]: [u64; 3]) -> Result<[u64; 3], OpError> {
        let b = self.block as u64;
        let bb = b * b;
        let grow = |v: u64| {
            v.checked_mul(b).ok_or_else(|| OpError::infer(format!("{} extent {v} x {b} overflows", self.name())))
        };
        match self.mode {
            Mode::SpaceToDepth if h % b == 0 && w % b == 0 => {
                Ok([c.checked_mul(bb).ok_or_else(|| OpError::infer("SpaceToDepth channels overflow"))?, h / b, w / b])
            }
            Mode::SpaceToDepth => Err(OpError::infer(format!("SpaceToDepth needs H {h} and W {w} divisible by {b}"))),
            _ if c % bb == 0 => Ok([c / bb, grow(h)?, grow(w)?]),
            _ => Err(OpError::infer(format!("DepthToSpace needs channels {c} divisible by {b}²"))),
        }
    }

    /// The output as a view of an input of `[n, c, h, w]`.
    fn view(&self, [n, c, h, w]: [usize; 4]) -> StridedView {
        let b = self.block;
        match self.mode {
            Mode::Dcr => StridedView::permuted(&[n, b, b, c / (b * b), h, w], &[0, 3, 4, 1, 5, 2]),
            Mode::Crd => StridedView::permuted(&[n, c / (b * b), b, b, h, w], &[0, 1, 4, 2, 5, 3]),
            Mode::SpaceToDepth => StridedView::permuted(&[n, c, h / b, b, w / b, b], &[0, 3, 5, 1, 2, 4]),
        }
    }

    fn nchw(&self, dims: &[usize]) -> Result<[usize; 4], OpError> {
        let nchw: [usize; 4] =
            dims.try_into().map_err(|_| OpError::eval(format!("{} takes [N, C, H, W], not {dims:?}", self.name())))?;
        let [_, c, h, w] = nchw.map(|d| d as u64);
        self.out_chw([c, h, w]).map_err(|e| OpError::eval(e.to_string()))?;
        Ok(nchw)
    }
}

impl Op for DepthSpace {
    fn gpu(&self, ctx: &crate::ops::gpu::GpuCtx<'_>) -> Option<Result<crate::ops::gpu::GpuNode, OpError>> {
        Some(ctx.input(0).and_then(|x| Ok(self.view(self.nchw(&x.dims)?).gpu(x.dtype))))
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let x = inputs.req(0)?.ty;
        if x.rank() != 4 {
            return Err(OpError::infer(format!("{} takes [N, C, H, W], not {x}", self.name())));
        }
        let mut dims = x.dims.clone();
        match (x.dims[1].as_fixed(), x.dims[2].as_fixed(), x.dims[3].as_fixed()) {
            (Some(c), Some(h), Some(w)) => {
                let chw = self.out_chw([c, h, w])?;
                (0..3).for_each(|i| dims[i + 1] = Dim::Fixed(chw[i]));
            }
            _ => dims[1..].iter_mut().for_each(|d| *d = unknown_dim()),
        }
        Ok(vec![ValueType::new(x.dtype, dims)])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let x = inputs.req(0)?;
        self.view(self.nchw(x.dims)?).eval(x, &mut outputs[0])
    }
}

#[cfg(test)]
mod tests {
    use crate::error::OpError;
    use crate::ops::testing::{f32s, iota, run_op, values};
    use crate::ops::{Attribute, Attributes};
    use crate::tensor::Tensor;

    fn attrs(block: i64, mode: Option<&str>) -> Attributes {
        let mut a = Attributes(vec![("blocksize".into(), Attribute::Int(block))]);
        if let Some(m) = mode {
            a.set("mode", Attribute::String(m.as_bytes().to_vec()));
        }
        a
    }

    /// The ONNX operator docs' example: `x[0, c, h, w] = 9c + 3h + w` of shape [1, 8, 2, 3].
    fn doc_input() -> Tensor {
        f32s(&[1, 8, 2, 3], &(0..48).map(|i| (9 * (i / 6) + 3 * (i / 3 % 2) + i % 3) as f32).collect::<Vec<_>>())
    }

    #[test]
    fn depth_to_space_dcr_and_crd_as_the_docs_show() {
        let dcr = run_op("DepthToSpace", 13, &attrs(2, Some("DCR")), &[Some(&doc_input())]).unwrap();
        assert_eq!(dcr[0].dims(), &[1, 2, 4, 6]);
        #[rustfmt::skip]
        let want = [0., 18., 1., 19., 2., 20., 36., 54., 37., 55., 38., 56., 3., 21., 4., 22., 5., 23., 39., 57., 40., 58., 41., 59.,
            9., 27., 10., 28., 11., 29., 45., 63., 46., 64., 47., 65., 12., 30., 13., 31., 14., 32., 48., 66., 49., 67., 50., 68.];
        assert_eq!(values(&dcr[0]), want);
        let crd = run_op("DepthToSpace", 11, &attrs(2, Some("CRD")), &[Some(&doc_input())]).unwrap();
        #[rustfmt::skip]
        let want = [0., 9., 1., 10., 2., 11., 18., 27., 19., 28., 20., 29., 3., 12., 4., 13., 5., 14., 21., 30., 22., 31., 23., 32.,
            36., 45., 37., 46., 38., 47., 54., 63., 55., 64., 56., 65., 39., 48., 40., 49., 41., 50., 57., 66., 58., 67., 59., 68.];
        assert_eq!(values(&crd[0]), want);
        // Opset 1-10 is DCR and has no mode attribute.
        let old = run_op("DepthToSpace", 9, &attrs(2, None), &[Some(&doc_input())]).unwrap();
        assert_eq!(old[0], dcr[0]);
        assert!(matches!(
            run_op("DepthToSpace", 9, &attrs(2, Some("CRD")), &[Some(&doc_input())]),
            Err(OpError::Unsupported { .. })
        ));
    }

    #[test]
    fn space_to_depth_by_hand_and_undoing_depth_to_space() {
        let x = iota(&[1, 2, 2, 2]);
        let out = run_op("SpaceToDepth", 13, &attrs(2, None), &[Some(&x)]).unwrap();
        assert_eq!(out[0].dims(), &[1, 8, 1, 1]);
        assert_eq!(values(&out[0]), [0.0, 4.0, 1.0, 5.0, 2.0, 6.0, 3.0, 7.0]);
        let x = iota(&[2, 3, 4, 6]);
        let s2d = run_op("SpaceToDepth", 1, &attrs(2, None), &[Some(&x)]).unwrap();
        assert_eq!(s2d[0].dims(), &[2, 12, 2, 3]);
        let back = run_op("DepthToSpace", 13, &attrs(2, None), &[Some(&s2d[0])]).unwrap();
        assert_eq!(back[0], x);
    }

    #[test]
    fn extents_that_do_not_divide_and_bad_attributes_are_errors() {
        let x = iota(&[1, 6, 2, 2]);
        assert!(matches!(run_op("DepthToSpace", 13, &attrs(2, None), &[Some(&x)]), Err(OpError::Infer(_))));
        assert!(matches!(run_op("SpaceToDepth", 13, &attrs(4, None), &[Some(&x)]), Err(OpError::Infer(_))));
        assert!(run_op("SpaceToDepth", 13, &attrs(0, None), &[Some(&x)]).is_err());
        assert!(run_op("SpaceToDepth", 13, &Attributes::default(), &[Some(&x)]).is_err());
        assert!(matches!(
            run_op("DepthToSpace", 13, &attrs(1, Some("RCD")), &[Some(&x)]),
            Err(OpError::Unsupported { .. })
        ));
        assert!(run_op("DepthToSpace", 13, &attrs(1, None), &[Some(&iota(&[6, 2, 2]))]).is_err());
    }
}
