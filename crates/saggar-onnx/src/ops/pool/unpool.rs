//! MaxUnpool, the partial inverse of MaxPool: the output is zero except where an index of `I`
//! puts the matching element of `X`. Indices are flat positions in the whole output, as MaxPool's
//! Indices output gives them. The output is shaped by the optional `output_shape` input, or by the
//! pooling geometry run backwards: `(in - 1) * stride + kernel - pad_begin - pad_end` per spatial
//! axis. On the GPU one launch zeroes the output and a second scatters (where two indices name one
//! position, which element lands there is unspecified; the host keeps the last).

use saggar_shape::{DType, Dim};

use super::gpu::MaxUnpoolKernel;
use crate::ops::conv::{bounded_ints, check_len, image_dims};
use crate::ops::gpu::{GpuCtx, GpuLaunch, GpuNode, Slot, Work, numel};
use crate::ops::{EvalInputs, InferInputs, NodeCtx, Op, OpError, ValueType, unknown_dim};
use crate::tensor::TensorMut;

/// `MaxUnpool`.
#[derive(Debug)]
struct MaxUnpool {
    kernel: Vec<usize>,
    /// Per-axis strides (empty: all 1).
    strides: Vec<usize>,
    /// Begin pads then end pads (empty: all 0).
    pads: Vec<usize>,
}

pub(super) fn build_max_unpool(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    let kernel = bounded_ints(ctx, "kernel_shape", 1)?;
    if kernel.is_empty() {
        return Err(OpError::attribute("kernel_shape", "is required"));
    }
    let strides = bounded_ints(ctx, "strides", 1)?;
    let pads = bounded_ints(ctx, "pads", 0)?;
    let rank = kernel.len();
    if !strides.is_empty() && strides.len() != rank || !pads.is_empty() && pads.len() != 2 * rank {
        return Err(OpError::attribute(
            "strides",
            format!("strides {strides:?} and pads {pads:?} do not match kernel_shape {kernel:?}"),
        ));
    }
    Ok(Box::new(MaxUnpool { kernel, strides, pads }))
}

impl MaxUnpool {
    /// The output extent of spatial axis `i` of input extent `input`, from the geometry.
    fn extent(&self, i: usize, input: usize) -> Result<usize, OpError> {
        let rank = self.kernel.len();
        let stride = self.strides.get(i).copied().unwrap_or(1) as i128;
        let pads = self.pads.get(i).copied().unwrap_or(0) + self.pads.get(rank + i).copied().unwrap_or(0);
        let extent = (input as i128 - 1) * stride + self.kernel[i] as i128 - pads as i128;
        usize::try_from(extent).ok().filter(|&e| (1..=1 << 40).contains(&e)).ok_or_else(|| {
            OpError::infer(format!(
                "MaxUnpool spatial axis {i}: pads {:?} leave an output extent of {extent} for input extent {input}",
                self.pads
            ))
        })
    }

    /// The output dims for input dims `x` and the `output_shape` input's values, if given.
    fn output_dims(&self, x: &[usize], shape: Option<Vec<i64>>) -> Result<Vec<usize>, OpError> {
        let Some(shape) = shape else {
            let mut dims = x[..2].to_vec();
            for (i, &d) in x[2..].iter().enumerate() {
                dims.push(self.extent(i, d)?);
            }
            return Ok(dims);
        };
        let dims: Option<Vec<usize>> = shape.iter().map(|&d| usize::try_from(d).ok().filter(|&d| d >= 1)).collect();
        match dims {
            Some(dims) if dims.len() == x.len() && dims[..2] == x[..2] => Ok(dims),
            _ => Err(OpError::infer(format!(
                "MaxUnpool output_shape {shape:?} must hold {} positive extents starting with the input's {:?}",
                x.len(),
                &x[..2]
            ))),
        }
    }

    /// Checks the ranks of X and I against the kernel.
    fn check_ranks(&self, x: usize, i: usize) -> Result<(), OpError> {
        if x != self.kernel.len() + 2 || i != x {
            return Err(OpError::infer(format!(
                "MaxUnpool takes X and I of rank {} for kernel_shape {:?}, found ranks {x} and {i}",
                self.kernel.len() + 2,
                self.kernel
            )));
        }
        Ok(())
    }
}

impl Op for MaxUnpool {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let x = image_dims("MaxUnpool", inputs.req(0)?.ty)?;
        let ind = inputs.req(1)?.ty;
        self.check_ranks(x.len(), ind.rank())?;
        let differ = |a: &Dim, b: &Dim| matches!((a.as_fixed(), b.as_fixed()), (Some(p), Some(q)) if p != q);
        if ind.dtype != DType::I64 || x.iter().zip(&ind.dims).any(|(a, b)| differ(a, b)) {
            return Err(OpError::infer(format!("MaxUnpool indices must be i64 shaped as X, found {ind}")));
        }
        let dims = match inputs.get(2) {
            Some(shape) => {
                if shape.ty.dtype != DType::I64 || shape.ty.rank() != 1 {
                    return Err(OpError::infer(format!(
                        "MaxUnpool output_shape must be a 1-D i64, found {}",
                        shape.ty
                    )));
                }
                match (shape.const_i64s(), x.iter().map(Dim::as_fixed).collect::<Option<Vec<u64>>>()) {
                    (Some(values), Some(xd)) => {
                        let xd: Vec<usize> = xd.into_iter().map(|d| d as usize).collect();
                        self.output_dims(&xd, Some(values))?.iter().map(|&d| Dim::Fixed(d as u64)).collect()
                    }
                    (Some(values), None) if values.len() == x.len() => {
                        values.iter().map(|&d| u64::try_from(d).map_or_else(|_| unknown_dim(), Dim::Fixed)).collect()
                    }
                    _ => vec![unknown_dim(); x.len()],
                }
            }
            None => {
                let mut dims = x[..2].to_vec();
                for (i, d) in x[2..].iter().enumerate() {
                    dims.push(match d.as_fixed() {
                        Some(d) => Dim::Fixed(self.extent(i, d as usize)? as u64),
                        None => unknown_dim(),
                    });
                }
                dims
            }
        };
        Ok(vec![ValueType::new(DType::F32, dims)])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let (xv, iv) = (inputs.req(0)?, inputs.req(1)?);
        check_len("MaxUnpool", xv)?;
        check_len("MaxUnpool", iv)?;
        self.check_ranks(xv.dims.len(), iv.dims.len()).map_err(|e| OpError::eval(e.to_string()))?;
        let shape = match inputs.get(2) {
            Some(s) => Some(s.to_i64s().ok_or_else(|| OpError::eval("MaxUnpool output_shape must be integers"))?),
            None => None,
        };
        let dims = self.output_dims(xv.dims, shape).map_err(|e| OpError::eval(e.to_string()))?;
        if outputs[0].dims != dims.as_slice() || iv.dims != xv.dims {
            return Err(OpError::eval(format!(
                "MaxUnpool: X {:?}, I {:?} and the output {:?} do not match",
                xv.dims, iv.dims, outputs[0].dims
            )));
        }
        let (x, ind) = (xv.f32s()?, iv.i64s()?);
        let y = outputs[0].f32s()?;
        y.fill(0.0);
        for (j, (&v, &at)) in x.iter().zip(ind).enumerate() {
            let slot = usize::try_from(at).ok().and_then(|at| y.get_mut(at)).ok_or_else(|| {
                OpError::eval(format!(
                    "MaxUnpool: index {at} (element {j} of I) is outside the output of {} elements",
                    dims.iter().product::<usize>()
                ))
            })?;
            *slot = v;
        }
        Ok(())
    }

    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        Some((|| {
            let (x, ind, y) = (ctx.input(0)?, ctx.input(1)?, ctx.output(0)?);
            if x.dtype != DType::F32 || ind.dtype != DType::I64 || ind.dims != x.dims {
                return Err(OpError::eval("MaxUnpool takes f32 X and i64 indices of X's shape"));
            }
            let meta = vec![numel(&x.dims) as i64, numel(&y.dims) as i64];
            Ok(GpuNode::Launches(vec![
                GpuLaunch::new(
                    MaxUnpoolKernel { scatter: false },
                    meta.clone(),
                    Work::Elements(numel(&y.dims)),
                    vec![Slot::Out(0)],
                ),
                GpuLaunch::new(
                    MaxUnpoolKernel { scatter: true },
                    meta,
                    Work::Elements(numel(&x.dims)),
                    vec![Slot::In(0), Slot::In(1), Slot::Out(0)],
                ),
            ]))
        })())
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::{f32s, ints, run_op, run_op_outputs, values};
    use crate::ops::{Attribute, Attributes, OpError};
    use crate::tensor::{Tensor, TensorData};

    fn i64s(dims: &[usize], v: &[i64]) -> Tensor {
        Tensor::new(dims.to_vec(), TensorData::I64(v.to_vec())).unwrap()
    }

    fn window() -> Attributes {
        Attributes(vec![("kernel_shape".into(), ints(&[2, 2])), ("strides".into(), ints(&[2, 2]))])
    }

    #[test]
    fn scatters_to_the_indices_with_and_without_output_shape() {
        let x = f32s(&[1, 1, 2, 2], &[5.0, 6.0, 7.0, 8.0]);
        let ind = i64s(&[1, 1, 2, 2], &[5, 7, 13, 15]);
        let out = run_op("MaxUnpool", 11, &window(), &[Some(&x), Some(&ind)]).unwrap();
        assert_eq!(out[0].dims(), &[1, 1, 4, 4]);
        let mut want = [0.0; 16];
        (want[5], want[7], want[13], want[15]) = (5.0, 6.0, 7.0, 8.0);
        assert_eq!(values(&out[0]), &want);
        // An explicit output shape (one larger than the geometry's) takes the same flat indices.
        let shape = i64s(&[4], &[1, 1, 5, 5]);
        let out = run_op("MaxUnpool", 11, &window(), &[Some(&x), Some(&ind), Some(&shape)]).unwrap();
        assert_eq!(out[0].dims(), &[1, 1, 5, 5]);
        let mut want = [0.0; 25];
        (want[5], want[7], want[13], want[15]) = (5.0, 6.0, 7.0, 8.0);
        assert_eq!(values(&out[0]), &want);
        // Pads shrink the geometry's output: (2 - 1) * 2 + 2 - 1 - 0 = 3.
        let mut padded = window();
        padded.set("pads", ints(&[1, 1, 0, 0]));
        let small = i64s(&[1, 1, 2, 2], &[0, 2, 6, 8]);
        let out = run_op("MaxUnpool", 9, &padded, &[Some(&x), Some(&small)]).unwrap();
        assert_eq!(out[0].dims(), &[1, 1, 3, 3]);
        assert_eq!(values(&out[0]), &[5.0, 0.0, 6.0, 0.0, 0.0, 0.0, 7.0, 0.0, 8.0]);
    }

    #[test]
    fn max_pool_then_unpool_keeps_the_maxima() {
        let x = f32s(&[1, 2, 3, 3], &(0..18).map(|v| ((v * 7) % 11) as f32).collect::<Vec<_>>());
        let pool = Attributes(vec![("kernel_shape".into(), ints(&[2, 2])), ("strides".into(), ints(&[1, 1]))]);
        let pooled = run_op_outputs("MaxPool", 12, &pool, &[Some(&x)], 2).unwrap();
        let shape = i64s(&[4], &[1, 2, 3, 3]);
        let out = run_op("MaxUnpool", 11, &pool, &[Some(&pooled[0]), Some(&pooled[1]), Some(&shape)]).unwrap();
        let TensorData::I64(ind) = pooled[1].data() else { panic!("indices are i64") };
        for (i, (&got, &orig)) in values(&out[0]).iter().zip(values(&x)).enumerate() {
            assert_eq!(got, if ind.contains(&(i as i64)) { orig } else { 0.0 }, "element {i}");
        }
    }

    #[test]
    fn bad_indices_shapes_and_attributes_are_typed_errors() {
        let x = f32s(&[1, 1, 2, 2], &[5.0, 6.0, 7.0, 8.0]);
        let run = |attrs: &Attributes, ind: &[i64], shape: Option<&[i64]>| {
            let ind = i64s(&[1, 1, 2, 2], ind);
            let shape = shape.map(|s| i64s(&[s.len()], s));
            run_op("MaxUnpool", 11, attrs, &[Some(&x), Some(&ind), shape.as_ref()])
        };
        let e = run(&window(), &[0, 1, 2, 16], None).unwrap_err();
        assert!(matches!(&e, OpError::Eval(_)) && e.to_string().contains("16"), "{e}");
        assert!(matches!(run(&window(), &[0, 1, 2, -1], None), Err(OpError::Eval(_))));
        let e = run(&window(), &[0, 1, 2, 3], Some(&[1, 2, 4, 4])).unwrap_err();
        assert!(matches!(&e, OpError::Infer(_)) && e.to_string().contains("[1, 2, 4, 4]"), "{e}");
        assert!(matches!(run(&window(), &[0, 1, 2, 3], Some(&[1, 1, 16])), Err(OpError::Infer(_))));
        assert!(matches!(run(&window(), &[0, 1, 2, 3], Some(&[1, 1, 0, 4])), Err(OpError::Infer(_))));
        let mut too_padded = window();
        too_padded.set("pads", ints(&[2, 0, 2, 0]));
        let e = run(&too_padded, &[0, 1, 2, 3], None).unwrap_err();
        assert!(matches!(&e, OpError::Infer(_)) && e.to_string().contains("[2, 0, 2, 0]"), "{e}");
        assert!(matches!(run(&Attributes::default(), &[0, 1, 2, 3], None), Err(OpError::Attribute { .. })));
        let mut zero_stride = window();
        zero_stride.set("strides", ints(&[0, 2]));
        assert!(matches!(run(&zero_stride, &[0, 1, 2, 3], None), Err(OpError::Attribute { .. })));
        let mut wrong_rank = window();
        wrong_rank.set("kernel_shape", Attribute::Ints(vec![2]));
        assert!(run(&wrong_rank, &[0, 1, 2, 3], None).is_err());
    }
}
