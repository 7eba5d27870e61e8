//! Matrix products: MatMul (numpy-style batched, broadcasting batch dims, 1-D operands) and Gemm
//! (alpha, beta, transposes, broadcast C), both through `matrixmultiply::sgemm` with strides, so a
//! transposed operand is read in place; Einsum ([`einsum`], a GEMM where it is one) and Det
//! (`det.rs`).

mod det;
mod einsum;
pub(crate) mod gpu;

use std::sync::Arc;

use saggar_shape::{DType, Dim};

use self::gpu::GemmKernel;
use crate::ops::shape_util::{broadcast_concrete, broadcast_dims, broadcast_strides, fmt_dims, for_each_broadcast};
use crate::ops::{Attributes, EvalInputs, InferInputs, NodeCtx, Op, OpEntry, OpError, ValueType};
use crate::tensor::{DataMut, TensorMut};

/// The ops of this family.
pub(crate) static OPS: &[OpEntry] = &[
    OpEntry { op_type: "MatMul", since: 1, until: 24, build: |_| Ok(Box::new(MatMul { out: None, bias: false })) },
    OpEntry { op_type: "Gemm", since: 7, until: 24, build: build_gemm },
    OpEntry { op_type: "Det", since: 11, until: 24, build: det::build_det },
    OpEntry { op_type: "Einsum", since: 12, until: 24, build: einsum::build_einsum },
];

/// One strided f32 matrix product `c = alpha * a·b + beta * c` of an `m × k` by a `k × n` matrix,
/// each operand addressed by a base offset and row/column strides in elements. Checks that every
/// addressed element lies inside its slice before handing raw pointers to `sgemm`.
pub(crate) struct Gemm<'a> {
    /// Rows of the product.
    pub m: usize,
    /// Inner extent.
    pub k: usize,
    /// Columns of the product.
    pub n: usize,
    /// `a` with its offset, row stride and column stride.
    pub a: (&'a [f32], usize, usize, usize),
    /// `b` with its offset, row stride and column stride.
    pub b: (&'a [f32], usize, usize, usize),
}

/// The last element index a strided `rows × cols` matrix at `offset` touches, plus one; `None` on
/// overflow. An empty matrix touches nothing.
fn extent(offset: usize, rows: usize, cols: usize, rs: usize, cs: usize) -> Option<usize> {
    if rows == 0 || cols == 0 {
        return Some(0);
    }
    let last = (rows - 1).checked_mul(rs)?.checked_add((cols - 1).checked_mul(cs)?)?;
    offset.checked_add(last)?.checked_add(1)
}

fn as_isize(v: usize) -> Result<isize, OpError> {
    isize::try_from(v).map_err(|_| OpError::eval("a matrix stride does not fit in isize"))
}

impl Gemm<'_> {
    /// Runs the product into `c` (row-major, row stride `rsc`, starting at `c_offset`).
    pub fn run(&self, alpha: f32, beta: f32, c: &mut [f32], c_offset: usize, rsc: usize) -> Result<(), OpError> {
        let (a, ao, rsa, csa) = self.a;
        let (b, bo, rsb, csb) = self.b;
        let fits = |data: &[f32], end: Option<usize>| end.is_some_and(|e| e <= data.len());
        if !fits(a, extent(ao, self.m, self.k, rsa, csa))
            || !fits(b, extent(bo, self.k, self.n, rsb, csb))
            || !fits(c, extent(c_offset, self.m, self.n, rsc, 1))
        {
            return Err(OpError::eval(format!(
                "a {}x{}x{} matrix product addresses elements outside its operands",
                self.m, self.k, self.n
            )));
        }
        if self.m == 0 || self.n == 0 {
            return Ok(());
        }
        let (rsa, csa, rsb, csb, rsc) =
            (as_isize(rsa)?, as_isize(csa)?, as_isize(rsb)?, as_isize(csb)?, as_isize(rsc)?);
        // With k == 0 sgemm only scales C and never reads A or B, whose base offsets may then equal
        // their lengths; clamp them so the pointers stay inside (or one past) their slices.
        let (ao, bo) = (ao.min(a.len()), bo.min(b.len()));
        // SAFETY: every element sgemm reads from `a` and `b` (rows × cols at the given offsets and
        // strides) and writes in `c` was checked above to lie inside the slices; the three slices come
        // from distinct borrows (`c` is mutable, so it aliases neither), and the pointers are derived
        // from in-bounds offsets.
        unsafe {
            matrixmultiply::sgemm(
                self.m,
                self.k,
                self.n,
                alpha,
                a.as_ptr().add(ao),
                rsa,
                csa,
                b.as_ptr().add(bo),
                rsb,
                csb,
                beta,
                c.as_mut_ptr().add(c_offset),
                rsc,
                1,
            );
        }
        Ok(())
    }
}

fn require_f32(op: &str, dtype: DType) -> Result<(), OpError> {
    if dtype == DType::F32 { Ok(()) } else { Err(OpError::infer(format!("{op} takes f32 inputs, not {dtype}"))) }
}

/// The element types of a product's operands.
const FLOATS: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

/// The output type of a product of two `a`, `b` operands, written as `out` (`None`: as the operands,
/// the ONNX typing; `Some(F32)`: a half product written in f32, as the precision pass makes them).
fn product_type(op: &str, a: DType, b: DType, out: Option<DType>) -> Result<DType, OpError> {
    if !FLOATS.contains(&a) || a != b {
        return Err(OpError::infer(format!("{op} takes two f32, two f16 or two bf16 operands, not {a} and {b}")));
    }
    match out {
        None => Ok(a),
        Some(o) if o == a || o == DType::F32 => Ok(o),
        Some(o) => Err(OpError::infer(format!("{op} of {a} operands cannot write {o}"))),
    }
}

/// Runs `compute` on an f32 output buffer: the output itself when it is f32, otherwise a buffer
/// holding the output's values widened, rounded (to nearest even) back into its half precision
/// afterwards.
fn with_f32_output(
    out: &mut TensorMut<'_>,
    compute: impl FnOnce(&mut [f32]) -> Result<(), OpError>,
) -> Result<(), OpError> {
    match &mut out.data {
        DataMut::F32(c) => compute(c),
        DataMut::F16(c) => {
            through_f32(c, |b| half::f16::from_bits(b).to_f32(), |v| half::f16::from_f32(v).to_bits(), compute)
        }
        DataMut::BF16(c) => {
            through_f32(c, |b| half::bf16::from_bits(b).to_f32(), |v| half::bf16::from_f32(v).to_bits(), compute)
        }
        other => Err(OpError::eval(format!("expected floating-point output elements, found {}", other.dtype()))),
    }
}

/// `compute` on half-precision `bits` widened to f32, rounded back afterwards.
fn through_f32(
    bits: &mut [u16],
    widen: impl Fn(u16) -> f32,
    round: impl Fn(f32) -> u16,
    compute: impl FnOnce(&mut [f32]) -> Result<(), OpError>,
) -> Result<(), OpError> {
    let mut buf: Vec<f32> = bits.iter().map(|&b| widen(b)).collect();
    compute(&mut buf)?;
    bits.iter_mut().zip(&buf).for_each(|(o, &v)| *o = round(v));
    Ok(())
}

/// MatMul or Gemm (`op_type`, with its `attrs`) of half operands writing `out`: f32 (the form the
/// precision pass gives the products it runs on tensor cores) or their own half type (a product
/// whose readers take half values, `half_outputs`). With `bias`, a MatMul takes a third input, a
/// vector over the output's columns of the output's type, added in f32 before the result is rounded,
/// as Gemm adds its `C`.
pub(crate) fn half_product(op_type: &str, attrs: &Attributes, out: DType, bias: bool) -> Result<Arc<dyn Op>, OpError> {
    match op_type {
        "MatMul" => Ok(Arc::new(MatMul { out: Some(out), bias })),
        "Gemm" => {
            let mut op = GemmOp::parse(&NodeCtx::new(attrs, 13, 3, 1))?;
            op.out = Some(out);
            Ok(Arc::new(op))
        }
        other => Err(OpError::infer(format!("{other} is not a matrix product"))),
    }
}

fn check_inner(op: &str, a: &Dim, b: &Dim) -> Result<(), OpError> {
    match (a.as_fixed(), b.as_fixed()) {
        (Some(x), Some(y)) if x != y => Err(OpError::infer(format!("{op}: inner extents differ ({x} vs {y})"))),
        _ => Ok(()),
    }
}

/// `MatMul`: numpy `matmul` semantics; `out` as [`product_type`] says. With `bias` (the precision
/// pass's products only) a third input, `[n]` of the output's type, is added to every row in f32
/// before the result is rounded to the output's type.
#[derive(Debug)]
struct MatMul {
    out: Option<DType>,
    bias: bool,
}

impl Op for MatMul {
    fn extents_from_shapes(&self) -> bool {
        true
    }

    fn gpu(&self, ctx: &crate::ops::gpu::GpuCtx<'_>) -> Option<Result<crate::ops::gpu::GpuNode, OpError>> {
        use crate::ops::gpu::{GpuLaunch, GpuNode, Slot, Work, broadcast, ext, numel};
        Some((|| {
            let (a, b) = (ctx.input(0)?, ctx.input(1)?);
            let (ad, bd) = (&a.dims, &b.dims);
            if ad.is_empty() || bd.is_empty() {
                return Err(OpError::eval("MatMul does not take 0-D operands"));
            }
            let (a_batch, m, k) = if ad.len() == 1 { (&ad[..0], 1, ad[0]) } else { split2(ad) };
            let (b_batch, _, n) = if bd.len() == 1 { (&bd[..0], bd[0], 1) } else { split2(bd) };
            let batch = broadcast_concrete(a_batch, b_batch)?;
            let (sa, sb) = (broadcast(a_batch, &batch), broadcast(b_batch, &batch));
            let (mk, kn) = (ext(m * k), ext(k * n));
            // A bias is one row broadcast over every row (row stride 0).
            let (c_rs, c_cs) = if self.bias { (0, 1) } else { (0, 0) };
            let mut meta = vec![ext(m), ext(n), ext(k), ext(batch.len()), ext(k), 1, ext(n), 1, c_rs, c_cs];
            meta.extend(batch.iter().map(|&d| ext(d)));
            meta.extend(sa.iter().map(|s| s * mk));
            meta.extend(sb.iter().map(|s| s * kn));
            let out = product_type("MatMul", a.dtype, b.dtype, self.out)?;
            let mut slots = vec![Slot::In(0), Slot::In(1)];
            if self.bias {
                slots.push(Slot::In(2));
            }
            slots.push(Slot::Out(0));
            let beta = if self.bias { 1f32 } else { 0f32 };
            Ok(GpuNode::Launches(vec![GpuLaunch::new(
                GemmKernel::f32(1f32.to_bits(), beta.to_bits(), self.bias).with_types(a.dtype, out),
                meta,
                Work::Tiles { m: m as u64, n: n as u64, batch: numel(&batch) },
                slots,
            )]))
        })())
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let (a, b) = (inputs.req(0)?.ty, inputs.req(1)?.ty);
        let out = product_type("MatMul", a.dtype, b.dtype, self.out)?;
        if a.rank() == 0 || b.rank() == 0 {
            return Err(OpError::infer("MatMul does not take 0-D operands"));
        }
        let a_dims = if a.rank() == 1 { vec![Dim::Fixed(1), a.dims[0].clone()] } else { a.dims.clone() };
        let b_dims = if b.rank() == 1 { vec![b.dims[0].clone(), Dim::Fixed(1)] } else { b.dims.clone() };
        let (ar, br) = (a_dims.len(), b_dims.len());
        check_inner("MatMul", &a_dims[ar - 1], &b_dims[br - 2])
            .map_err(|e| OpError::infer(format!("{e}: {} x {}", fmt_dims(&a.dims), fmt_dims(&b.dims))))?;
        let mut dims = broadcast_dims(&a_dims[..ar - 2], &b_dims[..br - 2])?;
        if a.rank() > 1 {
            dims.push(a_dims[ar - 2].clone());
        }
        if b.rank() > 1 {
            dims.push(b_dims[br - 1].clone());
        }
        if self.bias {
            let c = inputs.req(2)?.ty;
            let n = &b_dims[br - 1];
            let vector = c.rank() == 1 || c.rank() == 2 && c.dims[0].as_fixed() == Some(1);
            if c.dtype != out || !vector || c.dims.last().and_then(Dim::as_fixed) != n.as_fixed() {
                return Err(OpError::infer(format!("a MatMul's bias must be [{n}] of {out}, found {c}")));
            }
        }
        Ok(vec![ValueType::new(out, dims)])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let (a, b) = (inputs.req(0)?, inputs.req(1)?);
        let (ad, bd) = (a.dims, b.dims);
        if ad.is_empty() || bd.is_empty() {
            return Err(OpError::eval("MatMul does not take 0-D operands"));
        }
        // Matrix views of the operands: (batch dims, rows, cols).
        let (a_batch, m, k) = if ad.len() == 1 { (&ad[..0], 1, ad[0]) } else { split2(ad) };
        let (b_batch, kb, n) = if bd.len() == 1 { (&bd[..0], bd[0], 1) } else { split2(bd) };
        if k != kb {
            return Err(OpError::eval(format!("MatMul: inner extents differ ({ad:?} x {bd:?})")));
        }
        let batch = broadcast_concrete(a_batch, b_batch)?;
        let bias = if self.bias { Some(inputs.req(2)?.floats()?) } else { None };
        if bias.as_ref().is_some_and(|b| b.len() != n) {
            return Err(OpError::eval(format!("a MatMul's bias must have {n} elements")));
        }
        let (a, b) = (a.floats()?, b.floats()?);
        let (a, b) = (&a[..], &b[..]);
        let out_dims = outputs[0].dims;
        with_f32_output(&mut outputs[0], |c| {
            matmul_f32(a, b, c, out_dims, [a_batch, b_batch], &batch, [m, k, n])?;
            if let Some(bias) = &bias {
                for row in c.chunks_exact_mut(n.max(1)) {
                    row.iter_mut().zip(bias.iter()).for_each(|(v, b)| *v += b);
                }
            }
            Ok(())
        })
    }
}

/// MatMul's f32 product of the matrix views of `a` and `b` (batch dims `a_batch` and `b_batch`,
/// broadcast to `batch`; matrices `m x k` and `k x n`) into `c`.
fn matmul_f32(
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
    out_dims: &[usize],
    [a_batch, b_batch]: [&[usize]; 2],
    batch: &[usize],
    [m, k, n]: [usize; 3],
) -> Result<(), OpError> {
    let batches: usize = batch.iter().product();
    if batches.checked_mul(m).and_then(|x| x.checked_mul(n)) != Some(c.len()) {
        return Err(OpError::eval(format!("MatMul output {out_dims:?} does not match the operands")));
    }
    let rank = batch.len();
    let (sa, sb) = (broadcast_strides(a_batch, rank), broadcast_strides(b_batch, rank));
    // A batched `a` against one shared `b` is one tall product (the transformer case).
    let a_full = a_batch.iter().product::<usize>() == batches;
    if sb.iter().all(|&s| s == 0) && a_full {
        let g = Gemm { m: batches * m, k, n, a: (a, 0, k, 1), b: (b, 0, n, 1) };
        return g.run(1.0, 0.0, c, 0, n);
    }
    let mut result = Ok(());
    let (mat_a, mat_b) = (m * k, k * n);
    for_each_broadcast(batch, [&sa, &sb], |i, [oa, ob]| {
        if result.is_ok() {
            let g = Gemm { m, k, n, a: (a, oa * mat_a, k, 1), b: (b, ob * mat_b, n, 1) };
            result = g.run(1.0, 0.0, c, i * m * n, n);
        }
    });
    result
}

/// `(batch dims, rows, cols)` of a rank ≥ 2 shape.
fn split2(d: &[usize]) -> (&[usize], usize, usize) {
    let r = d.len();
    (&d[..r - 2], d[r - 2], d[r - 1])
}

/// `Gemm`: `Y = alpha * A' · B' + beta * C`, `A'`/`B'` optionally transposed, C broadcast to `(M, N)`;
/// `out` as [`product_type`] says (C is of the output's type).
#[derive(Debug)]
struct GemmOp {
    alpha: f32,
    beta: f32,
    trans_a: bool,
    trans_b: bool,
    out: Option<DType>,
}

fn build_gemm(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(GemmOp::parse(ctx)?))
}

impl GemmOp {
    /// Gemm of the attributes in `ctx`.
    fn parse(ctx: &NodeCtx<'_>) -> Result<GemmOp, OpError> {
        let flag = |name: &str| -> Result<bool, OpError> {
            match ctx.int_or(name, 0)? {
                0 => Ok(false),
                1 => Ok(true),
                other => Err(OpError::attribute(name, format!("must be 0 or 1, found {other}"))),
            }
        };
        let (trans_a, trans_b) = (flag("transA")?, flag("transB")?);
        Ok(GemmOp { alpha: ctx.float_or("alpha", 1.0)?, beta: ctx.float_or("beta", 1.0)?, trans_a, trans_b, out: None })
    }

    /// `(M, K)` and `(K, N)` of the (transposed) operands' shapes.
    fn mkn<T: Clone>(&self, a: &[T], b: &[T]) -> ((T, T), (T, T)) {
        let ma = if self.trans_a { (a[1].clone(), a[0].clone()) } else { (a[0].clone(), a[1].clone()) };
        let mb = if self.trans_b { (b[1].clone(), b[0].clone()) } else { (b[0].clone(), b[1].clone()) };
        (ma, mb)
    }
}

impl Op for GemmOp {
    fn gpu(&self, ctx: &crate::ops::gpu::GpuCtx<'_>) -> Option<Result<crate::ops::gpu::GpuNode, OpError>> {
        use crate::ops::gpu::{GpuLaunch, GpuNode, Slot, Work, broadcast, ext};
        Some((|| {
            let (a, b) = (ctx.input(0)?, ctx.input(1)?);
            if a.dims.len() != 2 || b.dims.len() != 2 {
                return Err(OpError::eval("Gemm takes 2-D A and B"));
            }
            let ((m, k), (_, n)) = self.mkn(&a.dims, &b.dims);
            // Row and column strides of op(A) and op(B) in their stored layouts.
            let (a_rs, a_cs) = if self.trans_a { (1, ext(m)) } else { (ext(k), 1) };
            let (b_rs, b_cs) = if self.trans_b { (1, ext(k)) } else { (ext(n), 1) };
            let bias = ctx.inputs.get(2).and_then(Option::as_ref);
            let (c_rs, c_cs) = match bias {
                Some(c) => {
                    let s = broadcast(&c.dims, &[m, n]);
                    (s[0], s[1])
                }
                None => (0, 0),
            };
            let mut slots = vec![Slot::In(0), Slot::In(1)];
            if bias.is_some() {
                slots.push(Slot::In(2));
            }
            slots.push(Slot::Out(0));
            let out = product_type("Gemm", a.dtype, b.dtype, self.out)?;
            let kernel = GemmKernel::f32(self.alpha.to_bits(), self.beta.to_bits(), bias.is_some());
            Ok(GpuNode::Launches(vec![GpuLaunch::new(
                kernel.with_types(a.dtype, out),
                vec![ext(m), ext(n), ext(k), 0, a_rs, a_cs, b_rs, b_cs, c_rs, c_cs],
                Work::Tiles { m: m as u64, n: n as u64, batch: 1 },
                slots,
            )]))
        })())
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let (a, b) = (inputs.req(0)?.ty, inputs.req(1)?.ty);
        let out = product_type("Gemm", a.dtype, b.dtype, self.out)?;
        if a.rank() != 2 || b.rank() != 2 {
            return Err(OpError::infer(format!("Gemm takes 2-D A and B, found {a} and {b}")));
        }
        let ((m, ka), (kb, n)) = self.mkn(&a.dims, &b.dims);
        check_inner("Gemm", &ka, &kb)?;
        if let Some(c) = inputs.get(2) {
            if c.ty.dtype != out {
                return Err(OpError::infer(format!("Gemm's C must be {out} like its output, not {}", c.ty.dtype)));
            }
            if c.ty.rank() > 2 {
                return Err(OpError::infer(format!("Gemm's C must have rank at most 2, found {}", c.ty)));
            }
            // C broadcasts to (M, N) one way: each of its extents is 1 or the output's.
            let out = [m.clone(), n.clone()];
            let tail = &out[2 - c.ty.rank()..];
            for (cd, od) in c.ty.dims.iter().zip(tail) {
                if let (Some(x), Some(y)) = (cd.as_fixed(), od.as_fixed())
                    && x != 1
                    && x != y
                {
                    return Err(OpError::infer(format!("Gemm's C {} does not broadcast to [{m}, {n}]", c.ty)));
                }
            }
        }
        Ok(vec![ValueType::new(out, vec![m, n])])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let (a, b) = (inputs.req(0)?, inputs.req(1)?);
        if a.dims.len() != 2 || b.dims.len() != 2 {
            return Err(OpError::eval("Gemm takes 2-D A and B"));
        }
        let ((m, k), (kb, n)) = self.mkn(a.dims, b.dims);
        if k != kb {
            return Err(OpError::eval(format!("Gemm: inner extents differ ({:?} x {:?})", a.dims, b.dims)));
        }
        let c = match inputs.get(2) {
            Some(c) if self.beta != 0.0 => Some((c.dims, c.floats()?)),
            _ => None,
        };
        let (a, b) = (a.floats()?, b.floats()?);
        with_f32_output(&mut outputs[0], |y| {
            if m.checked_mul(n) != Some(y.len()) {
                return Err(OpError::eval("Gemm output does not match the operands"));
            }
            let mut beta = 0.0;
            if let Some((cd, cv)) = &c {
                if cd.len() > 2
                    || broadcast_concrete(cd, &[m, n])? != [m, n]
                    || cd.iter().product::<usize>() != cv.len()
                {
                    return Err(OpError::eval(format!("Gemm's C {cd:?} does not broadcast to [{m}, {n}]")));
                }
                let sc = broadcast_strides(cd, 2);
                for (i, row) in y.chunks_exact_mut(n.max(1)).enumerate().take(m) {
                    for (j, v) in row.iter_mut().enumerate() {
                        *v = cv[i * sc[0] + j * sc[1]];
                    }
                }
                beta = self.beta;
            }
            // A row-major (r, c) matrix read transposed swaps its strides.
            let sa = if self.trans_a { (1, m) } else { (k, 1) };
            let sb = if self.trans_b { (1, k) } else { (n, 1) };
            Gemm { m, k, n, a: (&a, 0, sa.0, sa.1), b: (&b, 0, sb.0, sb.1) }.run(self.alpha, beta, y, 0, n)
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::NodeCtx;
    use crate::ops::testing::{f32s, run_op, values};
    use crate::ops::{Attribute, Attributes, InferInput, InferInputs, OpError, ValueType, lookup, unknown_dim};
    use saggar_shape::{DType, Dim};

    fn seq(n: usize) -> Vec<f32> {
        (0..n).map(|i| i as f32).collect()
    }

    #[test]
    fn matmul_2d_and_1d_operands() {
        let a = f32s(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let b = f32s(&[3, 2], &[7.0, 8.0, 9.0, 10.0, 11.0, 12.0]);
        let out = run_op("MatMul", 13, &Attributes::default(), &[Some(&a), Some(&b)]).unwrap();
        assert_eq!(out[0].dims(), &[2, 2]);
        assert_eq!(values(&out[0]), &[58.0, 64.0, 139.0, 154.0]);

        let v = f32s(&[3], &[1.0, 0.0, -1.0]);
        let av = run_op("MatMul", 13, &Attributes::default(), &[Some(&a), Some(&v)]).unwrap();
        assert_eq!(av[0].dims(), &[2]);
        assert_eq!(values(&av[0]), &[-2.0, -2.0]);
        let w = f32s(&[2], &[1.0, 1.0]);
        let wa = run_op("MatMul", 13, &Attributes::default(), &[Some(&w), Some(&a)]).unwrap();
        assert_eq!(wa[0].dims(), &[3]);
        assert_eq!(values(&wa[0]), &[5.0, 7.0, 9.0]);
        let dot = run_op("MatMul", 13, &Attributes::default(), &[Some(&v), Some(&v)]).unwrap();
        assert_eq!(dot[0].dims(), &[] as &[usize]);
        assert_eq!(values(&dot[0]), &[2.0]);
    }

    #[test]
    fn half_products_accumulate_in_f32_and_round_their_output_once() {
        let half = |dims: &[usize], v: &[f32], d: DType| f32s(dims, v).narrowed(d).unwrap();
        // 2049 = 2048 + 1 is not an f16; the sum 2048 + 0.5 + 0.5 + 1 is, exactly, in f32 accumulation.
        for d in [DType::F16, DType::BF16] {
            let a = half(&[1, 4], &[2048.0, 0.5, 0.5, 1.0], d);
            let b = half(&[4, 1], &[1.0; 4], d);
            let out = run_op("MatMul", 13, &Attributes::default(), &[Some(&a), Some(&b)]).unwrap();
            assert_eq!(out[0].dtype(), d);
            let want = if d == DType::F16 { 2050.0 } else { 2048.0 };
            assert_eq!(out[0].to_f32s().unwrap(), [want], "{d}: 2050 rounded once to the output type");
            // Writing f32, the precision pass's form, keeps the exact sum.
            let mixed = super::half_product("MatMul", &Attributes::default(), DType::F32, false).unwrap();
            let out = crate::ops::evaluate::evaluate(mixed.as_ref(), &[Some(&a), Some(&b)], 16).unwrap();
            assert_eq!((out[0].dtype(), values(&out[0])), (DType::F32, &[2050.0f32][..]));
        }
        let gemm = super::half_product("Gemm", &Attributes::default(), DType::F32, false).unwrap();
        let (a, b) = (half(&[1, 2], &[1.0, 2.0], DType::F16), half(&[2, 1], &[3.0, 4.0], DType::F16));
        let c = f32s(&[1], &[0.25]);
        let out = crate::ops::evaluate::evaluate(gemm.as_ref(), &[Some(&a), Some(&b), Some(&c)], 16).unwrap();
        assert_eq!(values(&out[0]), [11.25], "the f32 bias adds in f32");
    }

    #[test]
    fn products_of_mixed_or_integer_operands_are_refused() {
        let f = f32s(&[2, 2], &[1.0; 4]);
        let h = f.clone().narrowed(DType::F16).unwrap();
        let bf = f.clone().narrowed(DType::BF16).unwrap();
        let i = crate::tensor::Tensor::from_i64s(vec![1, 2, 3, 4]).reshaped(vec![2, 2]).unwrap();
        for (a, b) in [(&f, &h), (&h, &bf), (&i, &i)] {
            let err = run_op("MatMul", 13, &Attributes::default(), &[Some(a), Some(b)]).unwrap_err();
            assert!(err.to_string().contains("two f32, two f16 or two bf16"), "{err}");
        }
        let c16 = h.clone();
        let gemm = super::half_product("Gemm", &Attributes::default(), DType::F32, false).unwrap();
        let err = crate::ops::evaluate::evaluate(gemm.as_ref(), &[Some(&h), Some(&h), Some(&c16)], 16).unwrap_err();
        assert!(err.to_string().contains("Gemm's C must be f32"), "{err}");
    }

    #[test]
    fn matmul_broadcasts_batch_dims_both_ways() {
        // a: [2, 1, 2, 2], b: [3, 2, 2] -> [2, 3, 2, 2]; check every block against a hand product.
        let a = f32s(&[2, 1, 2, 2], &seq(8));
        let b = f32s(&[3, 2, 2], &seq(12).iter().map(|x| x - 5.0).collect::<Vec<_>>());
        let out = run_op("MatMul", 9, &Attributes::default(), &[Some(&a), Some(&b)]).unwrap();
        assert_eq!(out[0].dims(), &[2, 3, 2, 2]);
        let (av, bv, ov) = (values(&a), values(&b), values(&out[0]));
        for i in 0..2 {
            for j in 0..3 {
                for r in 0..2 {
                    for c in 0..2 {
                        let want: f32 = (0..2).map(|p| av[i * 4 + r * 2 + p] * bv[j * 4 + p * 2 + c]).sum();
                        assert_eq!(ov[((i * 3 + j) * 2 + r) * 2 + c], want);
                    }
                }
            }
        }
        // The tall-product path: batched a against a 2-D b.
        let b2 = f32s(&[2, 1], &[1.0, -1.0]);
        let tall = run_op("MatMul", 13, &Attributes::default(), &[Some(&a), Some(&b2)]).unwrap();
        assert_eq!(tall[0].dims(), &[2, 1, 2, 1]);
        assert_eq!(values(&tall[0]), &[-1.0, -1.0, -1.0, -1.0]);
    }

    #[test]
    fn matmul_inference_keeps_symbols_and_rejects_mismatches() {
        let op = (lookup("MatMul", 13).unwrap().build)(&mut NodeCtx::for_test(&Attributes::default(), 13, 2)).unwrap();
        let a = ValueType::new(DType::F32, vec![Dim::symbolic("batch"), Dim::symbolic("seq"), Dim::Fixed(4)]);
        let b = ValueType::fixed(DType::F32, &[4, 8]);
        let ins = [
            Some(InferInput { ty: &a, value: None, dims_value: None }),
            Some(InferInput { ty: &b, value: None, dims_value: None }),
        ];
        let out = op.infer(&InferInputs::new(&ins)).unwrap();
        assert_eq!(out[0].dims, vec![Dim::symbolic("batch"), Dim::symbolic("seq"), Dim::Fixed(8)]);
        let c = ValueType::new(DType::F32, vec![Dim::symbolic("x"), Dim::Fixed(4), Dim::Fixed(2)]);
        let d = ValueType::new(DType::F32, vec![Dim::symbolic("y"), Dim::Fixed(2), Dim::Fixed(3)]);
        let ins = [
            Some(InferInput { ty: &c, value: None, dims_value: None }),
            Some(InferInput { ty: &d, value: None, dims_value: None }),
        ];
        assert_eq!(op.infer(&InferInputs::new(&ins)).unwrap()[0].dims[0], unknown_dim());
        let bad = ValueType::fixed(DType::F32, &[5, 8]);
        let ins = [
            Some(InferInput { ty: &a, value: None, dims_value: None }),
            Some(InferInput { ty: &bad, value: None, dims_value: None }),
        ];
        assert!(matches!(op.infer(&InferInputs::new(&ins)), Err(OpError::Infer(_))));
        let e = f32s(&[2, 3], &seq(6));
        let f = f32s(&[2, 3], &seq(6));
        assert!(run_op("MatMul", 13, &Attributes::default(), &[Some(&e), Some(&f)]).is_err());
    }

    #[test]
    fn gemm_transposed_operands_alpha_beta_and_broadcast_c() {
        // A is stored as (K, M) = (3, 2) and read transposed; B stored as (N, K) = (2, 3).
        let a = f32s(&[3, 2], &[1.0, 4.0, 2.0, 5.0, 3.0, 6.0]); // A' = [[1,2,3],[4,5,6]]
        let b = f32s(&[2, 3], &[7.0, 9.0, 11.0, 8.0, 10.0, 12.0]); // B' = [[7,8],[9,10],[11,12]]
        let c = f32s(&[2], &[1.0, -1.0]);
        let attrs = Attributes(vec![
            ("alpha".into(), Attribute::Float(0.5)),
            ("beta".into(), Attribute::Float(2.0)),
            ("transA".into(), Attribute::Int(1)),
            ("transB".into(), Attribute::Int(1)),
        ]);
        let out = run_op("Gemm", 13, &attrs, &[Some(&a), Some(&b), Some(&c)]).unwrap();
        assert_eq!(out[0].dims(), &[2, 2]);
        // 0.5 * [[58, 64], [139, 154]] + 2 * [1, -1]
        assert_eq!(values(&out[0]), &[31.0, 30.0, 71.5, 75.0]);

        // C as a column (M, 1), no transposes, C absent at opset 11.
        let a2 = f32s(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let b2 = f32s(&[3, 2], &[7.0, 8.0, 9.0, 10.0, 11.0, 12.0]);
        let col = f32s(&[2, 1], &[100.0, 200.0]);
        let out = run_op("Gemm", 11, &Attributes::default(), &[Some(&a2), Some(&b2), Some(&col)]).unwrap();
        assert_eq!(values(&out[0]), &[158.0, 164.0, 339.0, 354.0]);
        let out = run_op("Gemm", 11, &Attributes::default(), &[Some(&a2), Some(&b2)]).unwrap();
        assert_eq!(values(&out[0]), &[58.0, 64.0, 139.0, 154.0]);

        let wrong_c = f32s(&[3], &[0.0; 3]);
        assert!(run_op("Gemm", 11, &Attributes::default(), &[Some(&a2), Some(&b2), Some(&wrong_c)]).is_err());
        let bad_flag = Attributes(vec![("transA".into(), Attribute::Int(2))]);
        assert!(matches!(run_op("Gemm", 11, &bad_flag, &[Some(&a2), Some(&b2)]), Err(OpError::Attribute { .. })));
    }

    #[test]
    fn gemm_with_empty_inner_extent_is_beta_c() {
        let a = f32s(&[2, 0], &[]);
        let b = f32s(&[0, 2], &[]);
        let c = f32s(&[], &[3.0]);
        let out = run_op("Gemm", 13, &Attributes::default(), &[Some(&a), Some(&b), Some(&c)]).unwrap();
        assert_eq!(values(&out[0]), &[3.0; 4]);
    }
}
