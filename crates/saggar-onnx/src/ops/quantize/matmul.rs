//! MatMulInteger and QLinearMatMul: numpy `matmul` of int8/uint8 operands less their zero points
//! (per tensor, per row of a, per column of b), summed in 32 bits; QLinearMatMul requantises the
//! sums through its scales.

use saggar_shape::Dim;

use super::gpu::{Epilogue, QMatMulKernel};
use super::{
    centred, check_8bit, check_product_inputs, multiplier, quant_range, requantize, single, step, wide_values,
    write_numbers,
};
use crate::ops::elementwise::output_mismatch;
use crate::ops::gpu::{GpuCtx, GpuLaunch, GpuNode, Slot, Work, broadcast, ext, numel};
use crate::ops::shape_util::{broadcast_concrete, broadcast_dims, broadcast_strides, for_each_broadcast};
use crate::ops::{EvalInputs, InferInputs, NodeCtx, Op, OpError, ValueType};
use crate::tensor::{TensorMut, each_number_mut};

/// MatMulInteger (`qlinear` false: inputs a, b, a_zero_point, b_zero_point) or QLinearMatMul
/// (inputs a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point).
#[derive(Debug)]
struct QMatMul {
    qlinear: bool,
}

pub(super) fn build_matmul_integer(_: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(QMatMul { qlinear: false }))
}

pub(super) fn build_qlinear_matmul(_: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(QMatMul { qlinear: true }))
}

/// The matrix views of the operands: batch dims of each and of the output, `m`, `k`, `n`.
struct Geometry {
    a_batch: Vec<usize>,
    b_batch: Vec<usize>,
    batch: Vec<usize>,
    m: usize,
    k: usize,
    n: usize,
}

impl Geometry {
    fn of(op: &str, a: &[usize], b: &[usize]) -> Result<Geometry, OpError> {
        if a.is_empty() || b.is_empty() {
            return Err(OpError::eval(format!("{op} does not take 0-D operands")));
        }
        let (a_batch, m, k) =
            if a.len() == 1 { (&a[..0], 1, a[0]) } else { (&a[..a.len() - 2], a[a.len() - 2], a[a.len() - 1]) };
        let (b_batch, kb, n) =
            if b.len() == 1 { (&b[..0], b[0], 1) } else { (&b[..b.len() - 2], b[b.len() - 2], b[b.len() - 1]) };
        if k != kb {
            return Err(OpError::eval(format!("{op}: inner extents differ ({a:?} x {b:?})")));
        }
        let batch = broadcast_concrete(a_batch, b_batch)?;
        Ok(Geometry { a_batch: a_batch.to_vec(), b_batch: b_batch.to_vec(), batch, m, k, n })
    }
}

impl QMatMul {
    fn name(&self) -> &'static str {
        if self.qlinear { "QLinearMatMul" } else { "MatMulInteger" }
    }

    /// Input slots of a, b, a_zero_point, b_zero_point.
    fn slots(&self) -> [usize; 4] {
        if self.qlinear { [0, 3, 2, 5] } else { [0, 1, 2, 3] }
    }
}

/// numpy `matmul`'s output dims.
fn product_dims(op: &str, a: &[Dim], b: &[Dim]) -> Result<Vec<Dim>, OpError> {
    if a.is_empty() || b.is_empty() {
        return Err(OpError::infer(format!("{op} does not take 0-D operands")));
    }
    let a2 = if a.len() == 1 { vec![Dim::Fixed(1), a[0].clone()] } else { a.to_vec() };
    let b2 = if b.len() == 1 { vec![b[0].clone(), Dim::Fixed(1)] } else { b.to_vec() };
    let (ar, br) = (a2.len(), b2.len());
    if let (Some(x), Some(y)) = (a2[ar - 1].as_fixed(), b2[br - 2].as_fixed())
        && x != y
    {
        return Err(OpError::infer(format!("{op}: inner extents differ ({x} vs {y})")));
    }
    let mut dims = broadcast_dims(&a2[..ar - 2], &b2[..br - 2])?;
    if a.len() > 1 {
        dims.push(a2[ar - 2].clone());
    }
    if b.len() > 1 {
        dims.push(b2[br - 1].clone());
    }
    Ok(dims)
}

impl Op for QMatMul {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let op = self.name();
        let [a, b, az, bz] = self.slots();
        let (a, b) = (inputs.req(a)?.ty, inputs.req(b)?.ty);
        check_8bit(op, "a", a.dtype)?;
        check_8bit(op, "b", b.dtype)?;
        let zero_points = [(az, a.dtype, "a_zero_point"), (bz, b.dtype, "b_zero_point")];
        let out = check_product_inputs(op, inputs, zero_points, self.qlinear)?;
        Ok(vec![ValueType::new(out, product_dims(op, &a.dims, &b.dims)?)])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let op = self.name();
        let [ai, bi, azi, bzi] = self.slots();
        let (a, b) = (inputs.req(ai)?, inputs.req(bi)?);
        let g = Geometry::of(op, a.dims, b.dims)?;
        let (m, k, n) = (g.m, g.k, g.n);
        let batches: usize = g.batch.iter().product();
        let zp = |i: usize| inputs.get(i).map(|z| z.data);
        step(op, "a_zero_point", zp(azi).map_or(1, |z| z.len()), m)?;
        step(op, "b_zero_point", zp(bzi).map_or(1, |z| z.len()), n)?;
        let (av, bv) = (centred(op, a.data, zp(azi), k)?, centred(op, b.data, zp(bzi), 1)?);
        if batches.checked_mul(m * n) != Some(outputs[0].data.len()) {
            return Err(OpError::eval(format!("{op}: the output does not match {:?} x {:?}", a.dims, b.dims)));
        }
        let rank = g.batch.len();
        let (sa, sb) = (broadcast_strides(&g.a_batch, rank), broadcast_strides(&g.b_batch, rank));
        let mut sums = vec![0i32; batches * m * n];
        for_each_broadcast(&g.batch, [&sa, &sb], |bi, [oa, ob]| {
            let (a, b) = (&av[oa * m * k..], &bv[ob * k * n..]);
            for row in 0..m {
                for col in 0..n {
                    let dot = (0..k).fold(0i32, |s, t| s.wrapping_add(a[row * k + t].wrapping_mul(b[t * n + col])));
                    sums[(bi * m + row) * n + col] = dot;
                }
            }
        });
        if !self.qlinear {
            outputs[0].i32s()?.copy_from_slice(&sums);
            return Ok(());
        }
        let (a_s, b_s, y_s) = (inputs.req(1)?, inputs.req(4)?, inputs.req(6)?);
        let (ass, bss) = (step(op, "a_scale", a_s.len(), m)?, step(op, "b_scale", b_s.len(), n)?);
        single(op, "y_scale", y_s.len())?;
        let y_zp = wide_values(inputs.req(7)?.data);
        single(op, "y_zero_point", y_zp.len())?;
        let ty = a_s.dtype();
        let (a_s, b_s, y_s) = (wide_values(a_s.data), wide_values(b_s.data), wide_values(y_s.data)[0]);
        let range = quant_range(outputs[0].dtype()).ok_or_else(output_mismatch)?;
        let value = |i: usize| {
            let (col, row) = (i % n, i / n % m);
            requantize(sums[i], multiplier(a_s[row * ass], b_s[col * bss], y_s, ty), y_zp[0], range)
        };
        each_number_mut!(&mut outputs[0].data, |o| write_numbers(o, value), _ => Err(output_mismatch()))
    }

    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        Some(self.launch(ctx))
    }
}

impl QMatMul {
    fn launch(&self, ctx: &GpuCtx<'_>) -> Result<GpuNode, OpError> {
        let op = self.name();
        let [ai, bi, azi, bzi] = self.slots();
        let (a, b) = (ctx.input(ai)?, ctx.input(bi)?);
        let g = Geometry::of(op, &a.dims, &b.dims)?;
        let input = |i: usize| ctx.inputs.get(i).and_then(Option::as_ref);
        let count = |i: usize| input(i).map_or(1, |o| o.dims.iter().product::<usize>());
        let (azs, bzs) = (step(op, "a_zero_point", count(azi), g.m)?, step(op, "b_zero_point", count(bzi), g.n)?);
        let (mut ass, mut bss) = (0, 0);
        let mut slots = vec![Slot::In(ai), Slot::In(bi)];
        slots.extend([azi, bzi].into_iter().filter(|&i| input(i).is_some()).map(Slot::In));
        let epilogue = if self.qlinear {
            (ass, bss) = (step(op, "a_scale", count(1), g.m)?, step(op, "b_scale", count(4), g.n)?);
            single(op, "y_scale", count(6))?;
            single(op, "y_zero_point", count(7))?;
            slots.extend([1, 4, 6, 7].map(Slot::In));
            Epilogue::Requantize { scale: ctx.input(1)?.dtype, out: ctx.output(0)?.dtype }
        } else {
            Epilogue::Sum
        };
        slots.push(Slot::Out(0));
        let (mk, kn) = (ext(g.m * g.k), ext(g.k * g.n));
        let mut meta = vec![ext(g.m), ext(g.n), ext(g.k), ext(g.batch.len()), ext(azs), ext(bzs), ext(ass), ext(bss)];
        meta.extend(g.batch.iter().map(|&d| ext(d)));
        meta.extend(broadcast(&g.a_batch, &g.batch).iter().map(|s| s * mk));
        meta.extend(broadcast(&g.b_batch, &g.batch).iter().map(|s| s * kn));
        let kernel =
            QMatMulKernel { a: a.dtype, b: b.dtype, a_zp: input(azi).is_some(), b_zp: input(bzi).is_some(), epilogue };
        let work = Work::Elements(numel(&g.batch) * (g.m * g.n) as u64);
        Ok(GpuNode::Launches(vec![GpuLaunch::new(kernel, meta, work, slots)]))
    }
}
