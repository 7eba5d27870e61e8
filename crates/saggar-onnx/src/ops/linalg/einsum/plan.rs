//! One Einsum at concrete shapes: each label's extent, and each operand's stride along every label
//! (the sum of its axes' strides where a label repeats: the diagonal; 0 where it lacks the label or
//! broadcasts it). Two f32 operands whose labels split into batch, row, column and contracted groups
//! that each collapse to one stride, with the output laid out `[batch, rows, columns]`, are a
//! (batched) GEMM, unless it contracts nothing and has one row or column: `matrixmultiply` on the
//! host, a [`GemmKernel`] launch on GPU (which the lowering hands to BLAS-Lt where it can). Anything
//! else is the generic contraction: per output element, a sum over the summed labels of the
//! operands' product (`einsum.cu` on GPU).

use std::cmp::Reverse;

use saggar_shape::DType;

use super::{Equation, Label, mismatch};
use crate::ops::OpError;
use crate::ops::gpu::{GpuLaunch, GpuNode, Slot, Work, ext};
use crate::ops::linalg::Gemm;
use crate::ops::linalg::gpu::{EinsumKernel, GemmKernel};
use crate::ops::shape_util::strides;
use crate::tensor::{DataMut, Number, TensorMut, TensorView, checked_numel, typed_like};

/// Most multiply-adds a generic contraction may take (about a minute on one host core): above it an
/// equation of several operands should be split into two-operand Einsums.
const MAX_GENERIC_WORK: u64 = 1 << 36;

/// An Einsum at concrete shapes (see the module docs).
#[derive(Debug)]
pub(super) struct EinsumPlan {
    /// Extents of the output's labels, in output order.
    out_ext: Vec<usize>,
    /// Extents of the summed labels.
    sum_ext: Vec<usize>,
    /// Per operand, its stride along each output label, then along each summed label.
    strides: Vec<Vec<usize>>,
    /// Per operand, whether it has each label (output, then summed) with an extent above 1.
    present: Vec<Vec<bool>>,
}

/// A plan that is one (batched) GEMM: `A` is operand `a`, `B` the other.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct GemmForm {
    pub(super) a: usize,
    pub(super) m: usize,
    pub(super) n: usize,
    pub(super) k: usize,
    /// Row and column strides of A and B.
    pub(super) a_rs: usize,
    pub(super) a_cs: usize,
    pub(super) b_rs: usize,
    pub(super) b_cs: usize,
    /// Batch labels in output order: extent, A's stride, B's stride.
    pub(super) batch: Vec<(usize, usize, usize)>,
}

impl EinsumPlan {
    pub(super) fn new(equation: &Equation, dims: &[&[usize]]) -> Result<EinsumPlan, OpError> {
        let ranks: Vec<usize> = dims.iter().map(|d| d.len()).collect();
        let (operands, output) = equation.labels(&ranks)?;
        let mut extents: Vec<(Label, usize)> = Vec::new();
        for (k, (labels, dims)) in operands.iter().zip(dims).enumerate() {
            for (i, (&l, &d)) in labels.iter().zip(*dims).enumerate() {
                if let Some(j) = labels[..i].iter().position(|&x| x == l)
                    && dims[j] != d
                {
                    return Err(mismatch(l, k, dims[j], d));
                }
                match extents.iter_mut().find(|(x, _)| *x == l) {
                    Some((_, e)) if *e == d || d == 1 => {}
                    Some((_, e)) if *e == 1 => *e = d,
                    Some((_, e)) => return Err(mismatch(l, k, *e, d)),
                    None => extents.push((l, d)),
                }
            }
        }
        let summed: Vec<Label> = extents.iter().map(|&(l, _)| l).filter(|l| !output.contains(l)).collect();
        let order: Vec<Label> = output.iter().chain(&summed).copied().collect();
        let extent = |l: Label| extents.iter().find(|(x, _)| *x == l).map_or(1, |&(_, e)| e);
        let (mut all_strides, mut present) = (Vec::new(), Vec::new());
        for (labels, dims) in operands.iter().zip(dims) {
            let own = strides(dims);
            let along = |l: Label| (0..dims.len()).filter(move |&a| labels[a] == l && dims[a] > 1);
            all_strides.push(order.iter().map(|&l| along(l).map(|a| own[a]).sum()).collect());
            present.push(order.iter().map(|&l| along(l).next().is_some()).collect());
        }
        Ok(EinsumPlan {
            out_ext: output.iter().map(|&l| extent(l)).collect(),
            sum_ext: summed.iter().map(|&l| extent(l)).collect(),
            strides: all_strides,
            present,
        })
    }

    fn ext(&self, j: usize) -> usize {
        let no = self.out_ext.len();
        if j < no { self.out_ext[j] } else { self.sum_ext[j - no] }
    }

    /// The GEMM this plan is, when it is one (see the module docs).
    pub(super) fn gemm_form(&self) -> Option<GemmForm> {
        let [p0, p1] = self.present.as_slice() else { return None };
        let no = self.out_ext.len();
        let (mut batch, mut seq, mut inner) = (Vec::new(), Vec::new(), Vec::new());
        for j in (0..no + self.sum_ext.len()).filter(|&j| self.ext(j) != 1) {
            match (p0[j], p1[j], j < no) {
                (true, true, true) if seq.is_empty() => batch.push(j),
                (true, true, false) => inner.push(j),
                (true, false, true) => seq.push((j, 0)),
                (false, true, true) => seq.push((j, 1)),
                _ => return None,
            }
        }
        let a = seq.first().map_or(0, |&(_, op)| op);
        let split = seq.iter().position(|&(_, op)| op != a).unwrap_or(seq.len());
        if seq[split..].iter().any(|&(_, op)| op == a) {
            return None;
        }
        let b = 1 - a;
        let rows: Vec<usize> = seq[..split].iter().map(|&(j, _)| j).collect();
        let cols: Vec<usize> = seq[split..].iter().map(|&(j, _)| j).collect();
        inner.sort_by_key(|&j| Reverse(self.strides[a][j]));
        let (m, a_rs) = self.collapse(a, &rows)?;
        let (n, b_cs) = self.collapse(b, &cols)?;
        let (k, a_cs) = self.collapse(a, &inner)?;
        let (_, b_rs) = self.collapse(b, &inner)?;
        // Products without a contraction and a single row or column (elementwise products, scaled
        // vectors) are the generic kernel's: a thread an element, not a GEMM tile.
        if k == 1 && (m == 1 || n == 1) {
            return None;
        }
        // A group of one element has no stride of its own: pick the one of the BLAS layouts.
        let a_rs = if rows.is_empty() { k } else { a_rs };
        let a_cs = if inner.is_empty() { if a_rs == 1 { m } else { 1 } } else { a_cs };
        let b_rs = if inner.is_empty() { if b_cs == 1 { n } else { 1 } } else { b_rs };
        let b_cs = if cols.is_empty() { if b_rs == 1 { k } else { 1 } } else { b_cs };
        let batch = batch.iter().map(|&j| (self.ext(j), self.strides[a][j], self.strides[b][j])).collect();
        Some(GemmForm { a, m, n, k, a_rs, a_cs, b_rs, b_cs, batch })
    }

    /// `(extent, stride)` of labels `js` of operand `op` taken as one axis, when their strides nest.
    fn collapse(&self, op: usize, js: &[usize]) -> Option<(usize, usize)> {
        let s = &self.strides[op];
        if js.windows(2).any(|w| s[w[0]] != s[w[1]] * self.ext(w[1])) {
            return None;
        }
        Some((js.iter().map(|&j| self.ext(j)).product(), js.last().map_or(0, |&j| s[j])))
    }

    /// Elements of the output and multiply-adds of the generic contraction, checked against
    /// [`MAX_GENERIC_WORK`].
    fn generic_work(&self) -> Result<(usize, usize), OpError> {
        let out = checked_numel(&self.out_ext).ok_or_else(|| OpError::eval("Einsum's output size overflows"))?;
        let sum = checked_numel(&self.sum_ext).ok_or_else(|| OpError::eval("Einsum's summed extent overflows"))?;
        let work = (out as u64).saturating_mul(sum.max(1) as u64).saturating_mul(self.strides.len() as u64);
        if work > MAX_GENERIC_WORK {
            return Err(OpError::eval(format!(
                "Einsum would take {work} multiply-adds as one contraction (the limit is {MAX_GENERIC_WORK}); \
                 split the equation into two-operand Einsums"
            )));
        }
        Ok((out, sum))
    }

    /// The node's GPU form for operands of `dtype`.
    pub(super) fn gpu(&self, dtype: DType) -> Result<GpuNode, OpError> {
        if let (DType::F32, Some(g)) = (dtype, self.gemm_form()) {
            let mut meta = vec![ext(g.m), ext(g.n), ext(g.k), ext(g.batch.len())];
            meta.extend([g.a_rs, g.a_cs, g.b_rs, g.b_cs, 0, 0].map(ext));
            meta.extend(g.batch.iter().map(|b| ext(b.0)));
            meta.extend(g.batch.iter().map(|b| ext(b.1)));
            meta.extend(g.batch.iter().map(|b| ext(b.2)));
            let batch: usize = g.batch.iter().map(|b| b.0).product();
            return Ok(GpuNode::Launches(vec![GpuLaunch::new(
                GemmKernel::f32(1f32.to_bits(), 0, false),
                meta,
                Work::Tiles { m: g.m as u64, n: g.n as u64, batch: batch as u64 },
                vec![Slot::In(g.a), Slot::In(1 - g.a), Slot::Out(0)],
            )]));
        }
        let (out, sum) = self.generic_work()?;
        let mut meta = vec![ext(self.out_ext.len()), ext(self.sum_ext.len()), ext(out), ext(sum)];
        meta.extend(self.out_ext.iter().chain(&self.sum_ext).map(|&e| ext(e)));
        meta.extend(self.strides.iter().flatten().map(|&s| ext(s)));
        let mut slots: Vec<Slot> = (0..self.strides.len()).map(Slot::In).collect();
        slots.push(Slot::Out(0));
        Ok(GpuNode::Launches(vec![GpuLaunch::new(
            EinsumKernel { operands: self.strides.len(), dtype },
            meta,
            Work::Elements(out as u64),
            slots,
        )]))
    }

    /// Computes the output on the host.
    pub(super) fn eval(&self, inputs: &[&TensorView<'_>], out: &mut TensorMut<'_>) -> Result<(), OpError> {
        if checked_numel(out.dims) != checked_numel(&self.out_ext)
            || inputs.iter().any(|v| checked_numel(v.dims) != Some(v.len()))
        {
            return Err(OpError::eval("Einsum: the operands or the output do not match the equation"));
        }
        match &mut out.data {
            DataMut::F32(y) => {
                let ops = inputs.iter().map(|v| typed_like(y, v.data)).collect::<Result<Vec<_>, _>>()?;
                match self.gemm_form() {
                    Some(g) => self.gemm(&g, &ops, y),
                    None => self.generic(&ops, y, 0.0, |a, b| a * b, |a, b| a + b),
                }
            }
            other => crate::tensor::each_number_mut!(other, |y| {
                let ops = inputs.iter().map(|v| typed_like(y, v.data)).collect::<Result<Vec<_>, _>>()?;
                self.generic(&ops, y, Number::ZERO, Number::mul, Number::add)
            }, other => Err(OpError::eval(format!("Einsum does not compute {}", other.dtype())))),
        }
    }

    /// The GEMM form on the host: one strided product per batch element.
    fn gemm(&self, g: &GemmForm, ops: &[&[f32]], y: &mut [f32]) -> Result<(), OpError> {
        let (a, b) = (ops[g.a], ops[1 - g.a]);
        let batches: usize = g.batch.iter().map(|b| b.0).product();
        for bz in 0..batches {
            let (mut rem, mut ao, mut bo) = (bz, 0, 0);
            for &(e, sa, sb) in g.batch.iter().rev() {
                (ao, bo, rem) = (ao + rem % e * sa, bo + rem % e * sb, rem / e);
            }
            let gemm = Gemm { m: g.m, k: g.k, n: g.n, a: (a, ao, g.a_rs, g.a_cs), b: (b, bo, g.b_rs, g.b_cs) };
            gemm.run(1.0, 0.0, y, bz * g.m * g.n, g.n)?;
        }
        Ok(())
    }

    /// The generic contraction on the host: an odometer over the summed labels per output element.
    pub(super) fn generic<T: Copy>(
        &self,
        ops: &[&[T]],
        y: &mut [T],
        zero: T,
        mul: impl Fn(T, T) -> T,
        add: impl Fn(T, T) -> T,
    ) -> Result<(), OpError> {
        let (out, sum) = self.generic_work()?;
        let (no, ns, n) = (self.out_ext.len(), self.sum_ext.len(), ops.len());
        if y.len() != out || n == 0 {
            return Err(OpError::eval("Einsum: the output does not match the equation"));
        }
        let (mut base, mut off, mut idx) = (vec![0usize; n], vec![0usize; n], vec![0usize; ns]);
        for (i, yi) in y.iter_mut().enumerate() {
            base.fill(0);
            let mut rem = i;
            for d in (0..no).rev() {
                let c = rem % self.out_ext[d];
                rem /= self.out_ext[d];
                base.iter_mut().zip(&self.strides).for_each(|(b, s)| *b += c * s[d]);
            }
            off.copy_from_slice(&base);
            idx.fill(0);
            let mut acc = zero;
            for _ in 0..sum {
                let mut p = ops[0][off[0]];
                for k in 1..n {
                    p = mul(p, ops[k][off[k]]);
                }
                acc = add(acc, p);
                for d in (0..ns).rev() {
                    idx[d] += 1;
                    off.iter_mut().zip(&self.strides).for_each(|(o, s)| *o += s[no + d]);
                    if idx[d] < self.sum_ext[d] {
                        break;
                    }
                    off.iter_mut().zip(&self.strides).for_each(|(o, s)| *o -= s[no + d] * self.sum_ext[d]);
                    idx[d] = 0;
                }
            }
            *yi = acc;
        }
        Ok(())
    }
}
