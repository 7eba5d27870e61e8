//! Einsum's tests: hand-computed equations of every form, the GEMM and generic paths against a
//! brute-force sum over every label assignment, the GPU forms, the typed errors.

use saggar_shape::DType;

use super::plan::EinsumPlan;
use super::{Equation, Label};
use crate::ops::gpu::{GpuKernel, GpuNode};
use crate::ops::linalg::gpu::{EinsumKernel, GemmKernel};
use crate::ops::testing::{f32s, iota, run_op, values};
use crate::ops::{Attribute, Attributes, OpError};
use crate::tensor::{Tensor, TensorData};

fn eq(e: &str) -> Attributes {
    Attributes(vec![("equation".into(), Attribute::String(e.as_bytes().to_vec()))])
}

fn einsum(e: &str, ops: &[&Tensor]) -> Result<Tensor, OpError> {
    let inputs: Vec<Option<&Tensor>> = ops.iter().map(|t| Some(*t)).collect();
    run_op("Einsum", 12, &eq(e), &inputs).map(|mut o| o.remove(0))
}

/// The sum over every assignment of the labels of the operands' products: numpy's definition.
fn brute_force(e: &str, ops: &[&Tensor]) -> Vec<f32> {
    let equation = Equation::parse(e).unwrap();
    let ranks: Vec<usize> = ops.iter().map(|t| t.dims().len()).collect();
    let (labels, output) = equation.labels(&ranks).unwrap();
    let mut all: Vec<(Label, usize)> = Vec::new();
    for (ls, t) in labels.iter().zip(ops) {
        for (&l, &d) in ls.iter().zip(t.dims()) {
            match all.iter_mut().find(|(x, _)| *x == l) {
                Some((_, e)) => *e = (*e).max(d),
                None => all.push((l, d)),
            }
        }
    }
    let out_n: usize = output.iter().map(|l| all.iter().find(|(x, _)| x == l).unwrap().1).product();
    let mut out = vec![0.0f32; out_n];
    let total: usize = all.iter().map(|(_, e)| e).product();
    for mut a in 0..total {
        let mut at = vec![0usize; all.len()];
        for (i, (_, e)) in all.iter().enumerate().rev() {
            at[i] = a % e;
            a /= e;
        }
        let value = |l: Label| at[all.iter().position(|(x, _)| *x == l).unwrap()];
        let mut p = 1.0f32;
        for (ls, t) in labels.iter().zip(ops) {
            let mut off = 0;
            for (&l, &d) in ls.iter().zip(t.dims()) {
                off = off * d + if d == 1 { 0 } else { value(l) };
            }
            p *= values(t)[off];
        }
        let mut o = 0;
        for &l in &output {
            o = o * all.iter().find(|(x, _)| *x == l).unwrap().1 + value(l);
        }
        out[o] += p;
    }
    out
}

fn close(got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() <= 1e-4 * w.abs().max(1.0), "{got:?} vs {want:?}");
    }
}

fn seeded(dims: &[usize], seed: usize) -> Tensor {
    let n: usize = dims.iter().product();
    f32s(dims, &(0..n).map(|i| ((i * 37 + seed * 11) % 17) as f32 / 4.0 - 2.0).collect::<Vec<_>>())
}

#[test]
fn hand_computed_products_traces_sums_and_transposes() {
    let a = iota(&[2, 3]);
    let b = f32s(&[3, 2], &[1.0, 0.0, 0.0, 1.0, 1.0, 1.0]);
    let mm = einsum("ij,jk->ik", &[&a, &b]).unwrap();
    assert_eq!((mm.dims(), values(&mm)), (&[2, 2][..], &[2.0, 3.0, 8.0, 9.0][..]));
    let implicit = einsum("ij,jk", &[&a, &b]).unwrap();
    assert_eq!(values(&implicit), values(&mm));
    let t = einsum("ij->ji", &[&a]).unwrap();
    assert_eq!((t.dims(), values(&t)), (&[3, 2][..], &[0.0, 3.0, 1.0, 4.0, 2.0, 5.0][..]));
    let implicit_t = einsum(" j i ", &[&a]).unwrap();
    assert_eq!(values(&implicit_t), values(&t), "implicit output: letters in order");
    let sq = iota(&[3, 3]);
    assert_eq!(values(&einsum("ii->i", &[&sq]).unwrap()), &[0.0, 4.0, 8.0]);
    let trace = einsum("ii", &[&sq]).unwrap();
    assert_eq!((trace.dims(), values(&trace)), (&[][..], &[12.0][..]));
    assert_eq!(values(&einsum("ij->", &[&a]).unwrap()), &[15.0]);
    assert_eq!(values(&einsum("ij->i", &[&a]).unwrap()), &[3.0, 12.0]);
    let v = f32s(&[3], &[1.0, 2.0, 3.0]);
    assert_eq!(values(&einsum("i,i", &[&v, &v]).unwrap()), &[14.0]);
    let outer = einsum("i,j->ij", &[&v, &f32s(&[2], &[1.0, -1.0])]).unwrap();
    assert_eq!(values(&outer), &[1.0, -1.0, 2.0, -2.0, 3.0, -3.0]);
    let ints = Tensor::from_i64s(vec![1, 2, 3]);
    let dot = einsum("i,i->", &[&ints, &ints]).unwrap();
    assert_eq!(dot.data(), &TensorData::I64(vec![14]));
}

#[test]
fn every_form_matches_the_brute_force_sum() {
    let cases: &[(&str, &[&[usize]])] = &[
        ("bij,bjk->bik", &[&[2, 3, 4], &[2, 4, 5]]),
        ("bij,bjk->bki", &[&[2, 3, 4], &[2, 4, 5]]),
        ("ik,jk->ij", &[&[3, 4], &[5, 4]]),
        ("ki,kj->ji", &[&[4, 3], &[4, 5]]),
        ("bhqd,bhkd->bhqk", &[&[2, 2, 3, 4], &[2, 2, 5, 4]]),
        ("abc,cd->abd", &[&[2, 3, 4], &[4, 2]]),
        ("abcd,cde->abe", &[&[2, 2, 3, 2], &[3, 2, 4]]),
        ("ij,jk->ijk", &[&[2, 3], &[3, 4]]),
        ("ij,jk,kl->il", &[&[2, 3], &[3, 4], &[4, 2]]),
        ("...ij,...jk->...ik", &[&[2, 1, 2, 3], &[3, 3, 2]]),
        ("...ij,...jk", &[&[2, 2, 3], &[3, 4]]),
        ("i...->...", &[&[3, 2, 2]]),
        ("bii->bi", &[&[2, 3, 3]]),
        ("iij,jk->ki", &[&[3, 3, 2], &[2, 4]]),
        ("ij,ij->ij", &[&[2, 3], &[2, 3]]),
        ("ij,j->i", &[&[3, 4], &[4]]),
        ("Ab,bC->CA", &[&[2, 3], &[3, 2]]),
        ("ij,kl->", &[&[2, 2], &[3, 1]]),
    ];
    for (k, (e, dims)) in cases.iter().enumerate() {
        let ops: Vec<Tensor> = dims.iter().enumerate().map(|(i, d)| seeded(d, k * 3 + i)).collect();
        let refs: Vec<&Tensor> = ops.iter().collect();
        let got = einsum(e, &refs).unwrap_or_else(|err| panic!("{e}: {err}"));
        close(values(&got), &brute_force(e, &refs));
    }
}

#[test]
fn plain_and_batched_matmuls_are_one_gemm_and_the_rest_the_generic_kernel() {
    let plan = |e: &str, dims: &[&[usize]]| EinsumPlan::new(&Equation::parse(e).unwrap(), dims).unwrap();
    let g = plan("bij,bjk->bik", &[&[2, 3, 4], &[2, 4, 5]]).gemm_form().unwrap();
    assert_eq!((g.a, g.m, g.n, g.k, g.a_rs, g.a_cs, g.b_rs, g.b_cs), (0, 3, 5, 4, 4, 1, 5, 1));
    assert_eq!(g.batch, vec![(2, 12, 20)]);
    // The output's rows come from operand 1: it is A.
    let g = plan("ij,jk->ki", &[&[3, 4], &[4, 5]]).gemm_form().unwrap();
    assert_eq!((g.a, g.m, g.n, g.k, g.a_rs, g.a_cs, g.b_rs, g.b_cs), (1, 5, 3, 4, 1, 5, 1, 4));
    // Several row labels collapse into one.
    let g = plan("abc,cd->abd", &[&[2, 3, 4], &[4, 2]]).gemm_form().unwrap();
    assert_eq!((g.m, g.n, g.k, g.batch.len()), (6, 2, 4, 0));
    assert!(plan("ij,jk->ijk", &[&[2, 3], &[3, 4]]).gemm_form().is_none(), "a batch label after a row label");
    assert!(plan("ij,jk->k", &[&[2, 3], &[3, 4]]).gemm_form().is_none(), "i summed over one operand");
    assert!(plan("ij,jk,kl->il", &[&[2, 3], &[3, 4], &[4, 2]]).gemm_form().is_none());
    assert!(plan("ij,ij->ij", &[&[2, 3], &[2, 3]]).gemm_form().is_none(), "an elementwise product");
    assert!(plan("i,j->ij", &[&[2], &[3]]).gemm_form().is_some(), "an outer product");
    let launch = |node: GpuNode| match node {
        GpuNode::Launches(l) => l.into_iter().next().unwrap(),
        other => panic!("{other:?}"),
    };
    let mm = launch(plan("bij,bjk->bik", &[&[2, 3, 4], &[2, 4, 5]]).gpu(DType::F32).unwrap());
    assert!(mm.kernel_as::<GemmKernel>().is_some());
    assert_eq!(mm.meta, vec![3, 5, 4, 1, 4, 1, 5, 1, 0, 0, 2, 12, 20]);
    let ints = launch(plan("bij,bjk->bik", &[&[2, 3, 4], &[2, 4, 5]]).gpu(DType::I64).unwrap());
    assert_eq!(ints.kernel_as::<EinsumKernel>(), Some(&EinsumKernel { operands: 2, dtype: DType::I64 }));
    let kinds: Vec<Box<dyn GpuKernel>> = [(1, DType::F32), (2, DType::F32), (3, DType::I64), (2, DType::I32)]
        .map(|(operands, dtype)| Box::new(EinsumKernel { operands, dtype }) as Box<dyn GpuKernel>)
        .into();
    crate::ops::testing::assert_kernels_render(&kinds);
}

#[test]
fn bad_equations_and_operands_are_typed_errors() {
    let (a, b) = (iota(&[2, 3]), iota(&[4, 5]));
    let e = einsum("ij,jk->ik", &[&a, &b]).unwrap_err();
    assert!(matches!(&e, OpError::Infer(m) if m.contains("`j`") && m.contains('3') && m.contains('4')), "{e}");
    for bad in ["ij->k", "ij->ii", "i1->i", "i.j->ij", "....i->i", "...i...->i", "i-j"] {
        assert!(matches!(einsum(bad, &[&a]), Err(OpError::Attribute { .. })), "{bad}");
    }
    assert!(matches!(einsum("ij,jk->ik", &[&a]), Err(OpError::Infer(_))), "operand count");
    assert!(matches!(einsum("ijk->i", &[&a]), Err(OpError::Infer(_))), "rank");
    assert!(matches!(einsum("ii->i", &[&a]), Err(OpError::Infer(_))), "a diagonal of unequal axes");
    assert!(matches!(einsum("...i,...i->...i", &[&iota(&[2, 3]), &iota(&[3, 3])]), Err(OpError::Infer(_))));
    let mixed = Tensor::from_i64s(vec![1, 2]);
    assert!(einsum("i,i->i", &[&f32s(&[2], &[1.0, 2.0]), &mixed]).is_err());
    assert!(run_op("Einsum", 12, &Attributes::default(), &[Some(&a)]).is_err(), "equation is required");
    assert!(run_op("Einsum", 11, &eq("ij"), &[Some(&a)]).is_err(), "from opset 12");
}
