//! The strided copy kernel on the CPU: launches as `copy_launch` makes them (Split and Concat pieces
//! along the last axis, the attention head split, an odd inner extent, negative steps, axes of
//! extent 1) for every element size, in 32-bit and in 64-bit indices and from a misaligned input,
//! against a reference over the uncoalesced axes; and a model of Splits, Transposes and Slices at
//! every precision against the host, its plan checked to take the four-element path.

use saggar_shape::{DType, Dim};

use super::conv::{launches, matches_the_host_at_every_precision, values};
use super::single::SingleLaunches;
use crate::builder::ModelBuilder;
use crate::ops::Attribute::{Int, Ints};
use crate::ops::data_movement::gpu::copy_launch;
use crate::ops::gpu::Slot;

/// `(dims, in_base, in_strides, out_base, out_strides, quads)` of a copy case.
type Case = (&'static [usize], i64, &'static [i64], i64, &'static [i64], bool);
const CASES: [Case; 7] = [
    // The third piece of a Split of [2, 3, 24] along its last axis.
    (&[2, 3, 8], 16, &[72, 24, 1], 0, &[24, 8, 1], true),
    // Attention's head split: [2, 5, 3, 8] to [2, 3, 5, 8].
    (&[2, 3, 5, 8], 0, &[120, 8, 24, 1], 0, &[120, 40, 8, 1], true),
    // An odd inner extent: [2, 3, 5] to [2, 5, 3].
    (&[2, 5, 3], 0, &[15, 1, 5], 0, &[15, 3, 1], false),
    // A Slice of [4, 6, 8] with steps -1, 2, -1.
    (&[4, 3, 8], 3 * 48 + 7, &[-48, 12, -1], 0, &[24, 8, 1], false),
    // The second piece of a Concat of [2, 4] and [2, 8] along the last axis.
    (&[2, 8], 0, &[8, 1], 4, &[12, 1], true),
    // Axes of extent 1 around a contiguous run.
    (&[1, 6, 1, 4], 0, &[24, 4, 4, 1], 0, &[24, 4, 4, 1], true),
    // Whole groups inside, a row stride of 6: element by element.
    (&[3, 4], 0, &[6, 1], 0, &[4, 1], false),
];

/// The bytes of `out` after copying `dims` of `x` (elements of `bytes` bytes) as the case says,
/// the input read from element `shift` on.
fn reference(case: &Case, bytes: usize, x: &[u8], shift: usize, out_len: usize) -> Vec<u8> {
    let &(dims, ib, is, ob, os, _) = case;
    let mut out = vec![0u8; out_len * bytes];
    for flat in 0..dims.iter().product::<usize>() {
        let (mut rem, mut a, mut b) = (flat, ib, ob);
        for d in (0..dims.len()).rev() {
            let c = (rem % dims[d]) as i64;
            rem /= dims[d];
            (a, b) = (a + c * is[d], b + c * os[d]);
        }
        let (a, b) = (a as usize + shift, b as usize);
        out[b * bytes..(b + 1) * bytes].copy_from_slice(&x[a * bytes..(a + 1) * bytes]);
    }
    out
}

/// The largest offset a side reaches, plus one.
fn extent(dims: &[usize], base: i64, strides: &[i64]) -> usize {
    let high: i64 = dims.iter().zip(strides).map(|(&d, &s)| (d as i64 - 1) * s.max(0)).sum();
    (base + high + 1) as usize
}

/// Each case's launch for elements of 1, 2, 4 and 8 bytes, run as made, with its 32-bit flag cleared
/// and on an input one element off its alignment, on fewer threads than units: every output equals
/// the reference, bit for bit.
#[test]
fn every_copy_path_matches_a_reference_when_run_on_the_cpu() {
    let mut runs = SingleLaunches::new();
    for (c, case) in CASES.iter().enumerate() {
        let &(dims, ib, is, ob, os, quads) = case;
        for bytes in [1usize, 2, 4, 8] {
            let launch = copy_launch(bytes, dims, (Slot::In(0), ib, is), (Slot::Out(0), ob, os));
            let flags = &launch.meta[launch.meta.len() - 2..];
            assert_eq!(flags, [1, i64::from(quads)], "case {c}: narrow, quads");
            let wide = [&launch.meta[..launch.meta.len() - 2], &[0, flags[1]]].concat();
            let (in_len, out_len) = (extent(dims, ib, is) + 1, extent(dims, ob, os));
            let x: Vec<u8> = (0..in_len * bytes).map(|k| (k * 131 % 251 + 1) as u8).collect();
            for (v, (meta, shift)) in [(&launch.meta, 0), (&wide, 0), (&launch.meta, 1)].into_iter().enumerate() {
                let want = reference(case, bytes, &x, shift, out_len);
                let what = format!("case {c}, {bytes}-byte elements, variant {v}");
                runs.push(launch.kernel.as_ref(), meta, (&x, shift * bytes), (2, 8), want, what);
            }
        }
    }
    runs.check();
}

/// GPT-2's attention copies in small: the QKV projection split along its last axis, a head split
/// and its transpose, at f32 and over an f16 input, with a Slice of negative steps and a Transpose of
/// an odd inner extent beside them, at every precision: the host's results, the last-axis Splits and
/// the head transposes taking the four-element path in 32-bit indices.
#[test]
fn attention_splits_and_transposes_take_four_elements_a_step_and_match_the_host_when_run_on_the_cpu() {
    let mut b = ModelBuilder::new(17);
    b.input("x", DType::F32, &[2, 5, 24].map(Dim::Fixed));
    b.input("h", DType::F16, &[2, 5, 24].map(Dim::Fixed));
    b.initializer("heads", &crate::Tensor::from_i64s(vec![2, 5, 2, 4]));
    b.initializer("starts", &crate::Tensor::from_i64s(vec![-1, 20]));
    b.initializer("ends", &crate::Tensor::from_i64s(vec![-100, 1]));
    b.initializer("axes", &crate::Tensor::from_i64s(vec![1, 2]));
    b.initializer("steps", &crate::Tensor::from_i64s(vec![-2, -3]));
    let perm = [("perm", Ints(vec![0, 2, 1, 3]))];
    for (input, p) in [("x", ""), ("h", "h")] {
        let names = ["q", "k", "v", "qh", "qt", "sl", "odd"].map(|n| format!("{p}{n}"));
        let [q, k, v, qh, qt, sl, odd] = names.each_ref().map(String::as_str);
        b.node("Split", &[input], &[q, k, v], &[("axis", Int(2)), ("num_outputs", Int(3))]);
        b.node("Reshape", &[q, "heads"], &[qh], &[]);
        b.node("Transpose", &[qh], &[qt], &perm);
        b.node("Slice", &[input, "starts", "ends", "axes", "steps"], &[sl], &[]);
        b.node("Transpose", &[input], &[odd], &[("perm", Ints(vec![0, 2, 1]))]);
        let dtype = if p.is_empty() { DType::F32 } else { DType::F16 };
        for name in [k, v, qt, sl, odd] {
            b.output(name, dtype, &[]);
        }
    }
    let inputs = [values(&[2, 5, 24], 1), values(&[2, 5, 24], 2).narrowed(DType::F16).unwrap()];
    matches_the_host_at_every_precision(&b.to_bytes(), &inputs, |precision, lowered| {
        let copies: Vec<(i64, i64, i64)> = launches(lowered, "onnx_copy_")
            .map(|(_, meta)| {
                let rank = meta(0) as usize;
                (meta(0), meta(4 + 3 * rank), meta(5 + 3 * rank))
            })
            .collect();
        assert!(copies.iter().all(|&(_, narrow, _)| narrow == 1), "{precision}: {copies:?}");
        // Per input: three Split pieces (rank 2) and the head transpose (rank 4: no axes merge) by
        // groups of four; the Slice and the odd Transpose element by element.
        let quads = copies.iter().filter(|c| c.2 == 1).map(|c| c.0).collect::<Vec<_>>();
        assert!(quads.iter().filter(|&&r| r == 2).count() >= 6, "{precision}: {copies:?}");
        assert!(quads.iter().filter(|&&r| r == 4).count() >= 2, "{precision}: {copies:?}");
        assert!(copies.iter().filter(|c| c.2 == 0).count() >= 4, "{precision}: {copies:?}");
    });
}
