//! Tests of the recurrent ops: hand-computed steps of each cell, the sequence and layout handling
//! on a linear RNN whose states are running sums, every mode against a transcription of ONNX's
//! reference, the activations, the errors, and the GPU kernel's variants and launches.

use super::activation::{Act, read_activations};
use super::gpu::{MAX_HIDDEN, RecurrentKernel};
use super::{Cell, CellKind, build};
use crate::ops::gpu::{GpuCtx, GpuKernel, GpuNode, Operand, Slot, kernel_definition};
use crate::ops::testing::{f32s, run_op_outputs, values};
use crate::ops::{Attribute, Attributes, InferInputs, NodeCtx, OpError};
use crate::tensor::{Tensor, TensorData};
use saggar_shape::DType;

fn attrs(list: &[(&str, Attribute)]) -> Attributes {
    Attributes(list.iter().map(|(n, a)| (n.to_string(), a.clone())).collect())
}

fn strs(v: &[&str]) -> Attribute {
    Attribute::Strings(v.iter().map(|s| s.as_bytes().to_vec()).collect())
}

fn i32s(v: &[i32]) -> Tensor {
    Tensor::new(vec![v.len()], TensorData::I32(v.to_vec())).unwrap()
}

fn close(got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() <= 1e-5 * (1.0 + w.abs()), "{got:?} vs {want:?}");
    }
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// A linear RNN (`Affine`, alpha 1, beta 0) of one unit with W = R = 1: each state is the running
/// sum of the inputs, so every index is visible in exact values.
fn running_sums(extra: &[(&str, Attribute)], opset: u32, x: &Tensor, inputs: &[Option<&Tensor>]) -> Vec<Tensor> {
    let bidirectional =
        extra.iter().any(|(n, a)| *n == "direction" && *a == Attribute::String(b"bidirectional".to_vec()));
    let d = if bidirectional { 2 } else { 1 };
    let mut list = vec![("hidden_size", Attribute::Int(1)), ("activations", strs(&["Affine"]))];
    list.extend(extra.iter().cloned());
    let (w, r) = (f32s(&[d, 1, 1], &vec![1.0; d]), f32s(&[d, 1, 1], &vec![1.0; d]));
    let mut all: Vec<Option<&Tensor>> = vec![Some(x), Some(&w), Some(&r)];
    all.extend(inputs.iter().copied());
    run_op_outputs("RNN", opset, &attrs(&list), &all, 2).unwrap()
}

#[test]
fn rnn_sequence_lengths_directions_and_layouts_on_running_sums() {
    // X [T 3, B 2, I 1]: entry 0 reads 1, 2, 3 and entry 1 reads 10, 20, 30.
    let x = f32s(&[3, 2, 1], &[1.0, 10.0, 2.0, 20.0, 3.0, 30.0]);
    let out = running_sums(&[], 14, &x, &[]);
    assert_eq!(out[0].dims(), &[3, 1, 2, 1]);
    close(values(&out[0]), &[1.0, 10.0, 3.0, 30.0, 6.0, 60.0]);
    close(values(&out[1]), &[6.0, 60.0]);
    // Lengths 2 and 0 from initial states 0.5 and 7: past its length an entry keeps its state and
    // writes zeros; Y_h holds the state after its last step, the initial state for length 0.
    let (lens, h0) = (i32s(&[2, 0]), f32s(&[1, 2, 1], &[0.5, 7.0]));
    let out = running_sums(&[], 14, &x, &[None, Some(&lens), Some(&h0)]);
    close(values(&out[0]), &[1.5, 0.0, 3.5, 0.0, 0.0, 0.0]);
    close(values(&out[1]), &[3.5, 7.0]);
    // Reverse: entry 0 starts at its last step (t = 1), then t = 0.
    let reverse = [("direction", Attribute::String(b"reverse".to_vec()))];
    let out = running_sums(&reverse, 14, &x, &[None, Some(&lens), Some(&h0)]);
    close(values(&out[0]), &[3.5, 0.0, 2.5, 0.0, 0.0, 0.0]);
    close(values(&out[1]), &[3.5, 7.0]);
    // Both ways: Y [T, 2, B, 1], Y_h [2, B, 1].
    let both = [("direction", Attribute::String(b"bidirectional".to_vec()))];
    let out = running_sums(&both, 14, &x, &[]);
    assert_eq!(out[0].dims(), &[3, 2, 2, 1]);
    close(values(&out[0]), &[1.0, 10.0, 6.0, 60.0, 3.0, 30.0, 5.0, 50.0, 6.0, 60.0, 3.0, 30.0]);
    close(values(&out[1]), &[6.0, 60.0, 6.0, 60.0]);
    // Batch-major (layout 1, opset 14): X [B, T, I], Y [B, T, D, H], Y_h [B, D, H].
    let xb = f32s(&[2, 3, 1], &[1.0, 2.0, 3.0, 10.0, 20.0, 30.0]);
    let h0b = f32s(&[2, 2, 1], &[0.5, 0.0, 7.0, 1.0]);
    let layout = [both[0].clone(), ("layout", Attribute::Int(1))];
    let out = running_sums(&layout, 14, &xb, &[None, Some(&lens), Some(&h0b)]);
    assert_eq!(out[0].dims(), &[2, 3, 2, 1]);
    close(values(&out[0]), &[1.5, 3.0, 3.5, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
    assert_eq!(out[1].dims(), &[2, 2, 1]);
    close(values(&out[1]), &[3.5, 3.0, 7.0, 1.0]);
    // Clip bounds every activation's input.
    let clip = [("clip", Attribute::Float(2.5))];
    let out = running_sums(&clip, 14, &x, &[]);
    close(values(&out[0]), &[1.0, 2.5, 2.5, 2.5, 2.5, 2.5]);
    // Before opset 14 there is no layout attribute.
    let x1 = f32s(&[1, 1, 1], &[1.0]);
    let w = f32s(&[1, 1, 1], &[1.0]);
    let at13 = attrs(&[("hidden_size", Attribute::Int(1)), ("layout", Attribute::Int(1))]);
    let err = run_op_outputs("RNN", 13, &at13, &[Some(&x1), Some(&w), Some(&w)], 1).unwrap_err();
    assert!(matches!(err, OpError::Unsupported { .. }), "{err}");
}

#[test]
fn gru_step_by_hand_in_both_reset_modes() {
    let x = f32s(&[1, 1, 1], &[1.0]);
    let w = f32s(&[1, 3, 1], &[0.5, -0.5, 1.0]);
    let r = f32s(&[1, 3, 1], &[0.25, 0.5, 2.0]);
    let b = f32s(&[1, 6], &[0.1, 0.2, 0.3, 0.4, 0.5, 0.6]);
    let h0 = f32s(&[1, 1, 1], &[0.5]);
    let z = sigmoid(0.5 + 0.25 * 0.5 + 0.1 + 0.4);
    let rg = sigmoid(-0.5 + 0.5 * 0.5 + 0.2 + 0.5);
    for (lbr, hc) in
        [(0, (1.0 + rg * 0.5 * 2.0 + 0.3 + 0.6f32).tanh()), (1, (1.0 + rg * (0.5 * 2.0 + 0.6) + 0.3f32).tanh())]
    {
        let a = attrs(&[("hidden_size", Attribute::Int(1)), ("linear_before_reset", Attribute::Int(lbr))]);
        let ins = [Some(&x), Some(&w), Some(&r), Some(&b), None, Some(&h0)];
        let out = run_op_outputs("GRU", 14, &a, &ins, 2).unwrap();
        let want = (1.0 - z) * hc + z * 0.5;
        close(values(&out[0]), &[want]);
        close(values(&out[1]), &[want]);
    }
}

#[test]
fn lstm_step_by_hand_with_peepholes_and_coupled_gates() {
    let x = f32s(&[1, 1, 1], &[1.0]);
    let w = f32s(&[1, 4, 1], &[0.1, 0.2, 0.3, 0.4]);
    let r = f32s(&[1, 4, 1], &[0.5, 0.6, 0.7, 0.8]);
    let b = f32s(&[1, 8], &[0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.07, 0.08]);
    let (h0, c0) = (f32s(&[1, 1, 1], &[0.5]), f32s(&[1, 1, 1], &[2.0]));
    let p = f32s(&[1, 3], &[0.1, 0.2, 0.3]);
    let i = sigmoid(0.1 + 0.5 * 0.5 + 0.01 + 0.05 + 0.1 * 2.0);
    let cg = (0.4 + 0.8 * 0.5 + 0.04 + 0.08f32).tanh();
    for (coupled, f) in [(0, sigmoid(0.3 + 0.7 * 0.5 + 0.03 + 0.07 + 0.3 * 2.0)), (1, 1.0 - i)] {
        let a = attrs(&[("hidden_size", Attribute::Int(1)), ("input_forget", Attribute::Int(coupled))]);
        let ins = [Some(&x), Some(&w), Some(&r), Some(&b), None, Some(&h0), Some(&c0), Some(&p)];
        let out = run_op_outputs("LSTM", 7, &a, &ins, 3).unwrap();
        let c = f * 2.0 + i * cg;
        let o = sigmoid(0.2 + 0.6 * 0.5 + 0.02 + 0.06 + 0.2 * c);
        let h = o * c.tanh();
        close(values(&out[0]), &[h]);
        close(values(&out[1]), &[h]);
        close(values(&out[2]), &[c]);
    }
}

/// One configuration for the reference comparison.
#[derive(Clone, Copy)]
struct Case {
    op: &'static str,
    lbr: bool,
    dirs: usize,
    reverse: bool,
    optional: bool,
}

const T: usize = 3;
const B: usize = 2;
const I: usize = 3;
const H: usize = 4;

fn data(n: usize, seed: usize) -> Vec<f32> {
    (0..n).map(|i| ((i * 7919 + seed * 104_729) % 97) as f32 / 48.0 - 1.0).collect()
}

/// ONNX's reference (`onnx/reference/ops/op_{rnn,gru,lstm}.py`) transcribed for one direction of
/// one entry: the state after each step (None where masked) with the default activations.
#[allow(clippy::too_many_arguments)]
fn reference_entry(
    c: Case,
    x: &dyn Fn(usize) -> Vec<f32>,
    w: &[f32],
    r: &[f32],
    bias: &[f32],
    p: &[f32],
    mut h: Vec<f32>,
    mut cell: Vec<f32>,
    order: Vec<usize>,
    len: usize,
) -> (Vec<Option<Vec<f32>>>, Vec<f32>, Vec<f32>) {
    let g = w.len() / (H * I);
    let lin = |q: usize, xv: &[f32], hv: &[f32], rb: bool| -> Vec<f32> {
        (0..H)
            .map(|j| {
                let row = q * H + j;
                let a: f32 = (0..I).map(|k| xv[k] * w[row * I + k]).sum::<f32>();
                let b: f32 = (0..H).map(|k| hv[k] * r[row * H + k]).sum::<f32>();
                a + b + bias[row] + if rb { bias[g * H + row] } else { 0.0 }
            })
            .collect()
    };
    let mut ys = vec![None; T];
    for t in order {
        if t >= len {
            continue;
        }
        let xv = x(t);
        h = match c.op {
            "RNN" => lin(0, &xv, &h, true).iter().map(|v| v.tanh()).collect(),
            "GRU" => {
                let (z, rg) = (lin(0, &xv, &h, true), lin(1, &xv, &h, true));
                let (z, rg): (Vec<f32>, Vec<f32>) =
                    (z.iter().map(|&v| sigmoid(v)).collect(), rg.iter().map(|&v| sigmoid(v)).collect());
                let zero = vec![0.0; H];
                let rh: Vec<f32> = (0..H).map(|j| rg[j] * h[j]).collect();
                let hh: Vec<f32> = if c.lbr {
                    let (xw, hr) = (lin(2, &xv, &zero, false), lin(2, &[0.0; I], &h, true));
                    (0..H).map(|j| (xw[j] + rg[j] * (hr[j] - bias[2 * H + j])).tanh()).collect()
                } else {
                    lin(2, &xv, &rh, true).iter().map(|v| v.tanh()).collect()
                };
                (0..H).map(|j| (1.0 - z[j]) * hh[j] + z[j] * h[j]).collect()
            }
            _ => {
                let gate = |q: usize| lin(q, &xv, &h, true);
                let (i, o, f, cc) = (gate(0), gate(1), gate(2), gate(3));
                let ig: Vec<f32> = (0..H).map(|j| sigmoid(i[j] + p[j] * cell[j])).collect();
                let fg: Vec<f32> = (0..H).map(|j| sigmoid(f[j] + p[2 * H + j] * cell[j])).collect();
                cell = (0..H).map(|j| fg[j] * cell[j] + ig[j] * cc[j].tanh()).collect();
                (0..H).map(|j| sigmoid(o[j] + p[H + j] * cell[j]) * cell[j].tanh()).collect()
            }
        };
        ys[t] = Some(h.clone());
    }
    (ys, h, cell)
}

/// Runs `c` in both layouts and compares with the reference.
fn compare_with_reference(c: Case) {
    let g = match c.op {
        "RNN" => 1,
        "GRU" => 3,
        _ => 4,
    };
    let d = c.dirs;
    let x = data(T * B * I, 1);
    let (w, r) = (data(d * g * H * I, 2), data(d * g * H * H, 3));
    let (bias, p) = (data(d * 2 * g * H, 4), data(d * 3 * H, 5));
    let (h0, c0) = (data(d * B * H, 6), data(d * B * H, 7));
    let lens = [3, 1];
    let zeros = vec![0.0; d * 3 * H.max(2 * g * H)];
    let (mut y, mut yh, mut yc) = (vec![0.0; T * d * B * H], vec![0.0; d * B * H], vec![0.0; d * B * H]);
    for dir in 0..d {
        for b in 0..B {
            let reversed = c.reverse || dir == 1;
            let order: Vec<usize> = if reversed { (0..T).rev().collect() } else { (0..T).collect() };
            let st = (dir * B + b) * H;
            let pick = |v: &[f32], n: usize| if c.optional { v[dir * n..][..n].to_vec() } else { zeros[..n].to_vec() };
            let state = |v: &[f32]| if c.optional { v[st..st + H].to_vec() } else { vec![0.0; H] };
            let xt = |t: usize| x[(t * B + b) * I..][..I].to_vec();
            let len = if c.optional { lens[b] } else { T };
            let (ys, h, cell) = reference_entry(
                c,
                &xt,
                &w[dir * g * H * I..][..g * H * I],
                &r[dir * g * H * H..][..g * H * H],
                &pick(&bias, 2 * g * H),
                &pick(&p, 3 * H),
                state(&h0),
                state(&c0),
                order,
                len,
            );
            for (t, v) in ys.iter().enumerate() {
                let at = ((t * d + dir) * B + b) * H;
                y[at..at + H].copy_from_slice(v.as_deref().unwrap_or(&[0.0; H]));
            }
            yh[st..st + H].copy_from_slice(&h);
            yc[st..st + H].copy_from_slice(&cell);
        }
    }
    let direction = if d == 2 {
        "bidirectional"
    } else if c.reverse {
        "reverse"
    } else {
        "forward"
    };
    let mut list = vec![("hidden_size", Attribute::Int(H as i64)), ("direction", Attribute::String(direction.into()))];
    if c.lbr {
        list.push(("linear_before_reset", Attribute::Int(1)));
    }
    let outputs = if c.op == "LSTM" { 3 } else { 2 };
    let tensors = [
        f32s(&[T, B, I], &x),
        f32s(&[d, g * H, I], &w),
        f32s(&[d, g * H, H], &r),
        f32s(&[d, 2 * g * H], &bias),
        i32s(&lens.map(|l| l as i32)),
        f32s(&[d, B, H], &h0),
        f32s(&[d, B, H], &c0),
        f32s(&[d, 3 * H], &p),
    ];
    let slots = if c.op == "LSTM" { 8 } else { 6 };
    let ins: Vec<Option<&Tensor>> =
        tensors[..slots].iter().enumerate().map(|(i, t)| (i < 3 || c.optional).then_some(t)).collect();
    let out = run_op_outputs(c.op, 14, &attrs(&list), &ins, outputs).unwrap();
    let what = format!("{} lbr {} dirs {d} reverse {} optional {}", c.op, c.lbr, c.reverse, c.optional);
    for (k, want) in [&y, &yh, &yc][..outputs].iter().enumerate() {
        let got = values(&out[k]);
        assert!(got.iter().zip(*want).all(|(a, b)| (a - b).abs() < 1e-5), "{what} output {k}: {got:?} vs {want:?}");
    }
    // The same in layout 1: X [B, T, I], states [B, D, H], Y [B, T, D, H].
    // `[b, a, inner]` to `[a, b, inner]`.
    let swap = |v: &[f32], a: usize, b: usize, inner: usize| -> Vec<f32> {
        (0..a * b * inner).map(|i| v[((i / inner % b) * a + i / inner / b) * inner + i % inner]).collect()
    };
    let mut batch_major = tensors.clone();
    batch_major[0] = f32s(&[B, T, I], &swap(&x, B, T, I));
    batch_major[5] = f32s(&[B, d, H], &swap(&h0, B, d, H));
    batch_major[6] = f32s(&[B, d, H], &swap(&c0, B, d, H));
    let ins: Vec<Option<&Tensor>> =
        batch_major[..slots].iter().enumerate().map(|(i, t)| (i < 3 || c.optional).then_some(t)).collect();
    list.push(("layout", Attribute::Int(1)));
    let out = run_op_outputs(c.op, 14, &attrs(&list), &ins, outputs).unwrap();
    close(values(&out[0]), &swap(&y, B, T * d, H));
    close(values(&out[1]), &swap(&yh, B, d, H));
}

#[test]
fn every_cell_direction_and_layout_matches_onnx_reference() {
    for (op, lbr) in [("RNN", false), ("GRU", false), ("GRU", true), ("LSTM", false)] {
        for (dirs, reverse) in [(1, false), (1, true), (2, false)] {
            for optional in [false, true] {
                compare_with_reference(Case { op, lbr, dirs, reverse, optional });
            }
        }
    }
}

#[test]
fn activations_compute_the_spec_functions() {
    let cases = [
        (Act::Relu, -1.0, 0.0),
        (Act::Relu, 2.0, 2.0),
        (Act::Tanh, 0.5, 0.5f32.tanh()),
        (Act::Sigmoid, 0.0, 0.5),
        (Act::Affine { alpha: 3.0, beta: 1.0 }, 2.0, 7.0),
        (Act::LeakyRelu { alpha: 0.01 }, -2.0, -0.02),
        (Act::ThresholdedRelu { alpha: 1.0 }, 1.0, 1.0),
        (Act::ThresholdedRelu { alpha: 1.0 }, 0.5, 0.0),
        (Act::ScaledTanh { alpha: 2.0, beta: 0.5 }, 1.0, 2.0 * 0.5f32.tanh()),
        (Act::HardSigmoid { alpha: 0.2, beta: 0.5 }, 0.0, 0.5),
        (Act::HardSigmoid { alpha: 0.2, beta: 0.5 }, 10.0, 1.0),
        (Act::HardSigmoid { alpha: 0.2, beta: 0.5 }, -10.0, 0.0),
        (Act::Elu { alpha: 1.0 }, -1.0, (-1.0f32).exp() - 1.0),
        (Act::Elu { alpha: 1.0 }, 2.0, 2.0),
        (Act::Softsign, 1.0, 0.5),
        (Act::Softplus, 0.0, 2.0f32.ln()),
        (Act::Softplus, 100.0, 100.0),
    ];
    for (act, x, want) in cases {
        let got = act.apply(x);
        assert!((got - want).abs() < 1e-6, "{act:?}({x}) = {got}, expected {want}");
        assert!(!act.c_expr("v").contains('$') && act.c_expr("v").contains('v'), "{act:?}");
    }
}

fn read(list: &[(&str, Attribute)], per_direction: usize, directions: usize) -> Result<Vec<Act>, OpError> {
    let a = attrs(list);
    let ctx = NodeCtx::new(&a, 14, 3, 1);
    read_activations(&ctx, &["Sigmoid", "Tanh", "Tanh"][..per_direction], per_direction, directions)
}

#[test]
fn activation_alphas_and_betas_go_in_order_to_the_functions_that_take_them() {
    let names = ("activations", strs(&["LeakyRelu", "tanh", "HardSigmoid"]));
    let acts = read(
        &[
            names.clone(),
            ("activation_alpha", Attribute::Floats(vec![0.1, 0.3])),
            ("activation_beta", Attribute::Floats(vec![0.6])),
        ],
        3,
        1,
    )
    .unwrap();
    assert_eq!(acts, [Act::LeakyRelu { alpha: 0.1 }, Act::Tanh, Act::HardSigmoid { alpha: 0.3, beta: 0.6 }]);
    // Defaults where none is left; a list of one direction's serves both.
    let acts = read(&[names.clone(), ("activation_alpha", Attribute::Floats(vec![0.1]))], 3, 2).unwrap();
    assert_eq!(acts[2], Act::HardSigmoid { alpha: 0.2, beta: 0.5 });
    assert_eq!(acts[3], Act::LeakyRelu { alpha: 0.01 });
    assert_eq!(read(&[], 3, 2).unwrap(), [Act::Sigmoid, Act::Tanh, Act::Tanh, Act::Sigmoid, Act::Tanh, Act::Tanh]);
    // RNN's default pair serves one direction.
    assert_eq!(read(&[("activations", strs(&["Relu", "Tanh"]))], 1, 1).unwrap(), [Act::Relu]);
    let errors = [
        read(&[("activations", strs(&["Sigmoid", "Gelu", "Tanh"]))], 3, 1),
        read(&[("activations", strs(&["Sigmoid", "Tanh"]))], 3, 1),
        read(&[("activations", strs(&["Tanh"])), ("activation_alpha", Attribute::Floats(vec![1.0]))], 1, 1),
        read(&[("activations", strs(&["ScaledTanh"]))], 1, 1),
        read(&[("activations", Attribute::Int(1))], 1, 1),
    ];
    for e in errors {
        assert!(matches!(e, Err(OpError::Unsupported { .. } | OpError::Attribute { .. })), "{e:?}");
    }
}

fn lstm_inputs(hidden: usize) -> (Tensor, Tensor, Tensor) {
    (
        f32s(&[2, 1, 3], &[0.5; 6]),
        f32s(&[1, 4 * hidden, 3], &vec![0.1; 12 * hidden]),
        f32s(&[1, 4 * hidden, hidden], &vec![0.1; 4 * hidden * hidden]),
    )
}

#[test]
fn bad_attributes_and_shapes_are_typed_errors_naming_the_value() {
    let (x, w, r) = lstm_inputs(2);
    let run = |list: &[(&str, Attribute)], extra: &[Option<&Tensor>]| {
        let mut ins = vec![Some(&x), Some(&w), Some(&r)];
        ins.extend(extra.iter().copied());
        run_op_outputs("LSTM", 14, &attrs(list), &ins, 3).map(|_| ()).unwrap_err().to_string()
    };
    let hidden = |h: i64| ("hidden_size", Attribute::Int(h));
    assert!(run(&[hidden(3)], &[]).contains("hidden_size 3"), "{}", run(&[hidden(3)], &[]));
    assert!(run(&[hidden(-1)], &[]).contains("-1"));
    assert!(run(&[hidden(1 << 40)], &[]).contains(&(1u64 << 40).to_string()));
    assert!(run(&[hidden(i64::MAX)], &[]).contains(&i64::MAX.to_string()));
    assert!(run(&[("direction", Attribute::String(b"sideways".to_vec()))], &[]).contains("sideways"));
    assert!(run(&[("direction", Attribute::String(b"bidirectional".to_vec()))], &[]).contains("W is [1, 8, 3]"));
    assert!(run(&[("layout", Attribute::Int(2))], &[]).contains('2'));
    assert!(run(&[("clip", Attribute::Float(-1.0))], &[]).contains("-1"));
    assert!(run(&[("input_forget", Attribute::Int(3))], &[]).contains('3'));
    for (lens, shown) in [(i32s(&[-1]), "-1"), (i32s(&[3]), "is 3")] {
        let msg = run(&[], &[None, Some(&lens)]);
        assert!(msg.contains("sequence_lens[0]") && msg.contains(shown), "{msg}");
    }
    let wide = Tensor::from_i64s(vec![1]);
    assert!(run(&[], &[None, Some(&wide)]).contains("int32"));
    let bad_h0 = f32s(&[1, 2, 2], &[0.0; 4]);
    assert!(run(&[], &[None, None, Some(&bad_h0)]).contains("initial_h"));
    let bad_p = f32s(&[1, 5], &[0.0; 5]);
    assert!(run(&[], &[None, None, None, None, Some(&bad_p)]).contains("P is [1, 5]"));
    let flat = f32s(&[6], &[0.0; 6]);
    let err = run_op_outputs("LSTM", 14, &Attributes::default(), &[Some(&flat), Some(&w), Some(&r)], 1).unwrap_err();
    assert!(err.to_string().contains("3-D"), "{err}");
    // RNN has no initial_c slot or Y_c output.
    let (rw, rr) = (f32s(&[1, 2, 3], &[0.0; 6]), f32s(&[1, 2, 2], &[0.0; 4]));
    let seven = [Some(&x), Some(&rw), Some(&rr), None, None, None, Some(&x)];
    assert!(run_op_outputs("RNN", 14, &Attributes::default(), &seven, 1).is_err());
    assert!(run_op_outputs("RNN", 14, &Attributes::default(), &seven[..3], 3).is_err());
    // hidden_size may be left out: R's last extent.
    assert_eq!(run_op_outputs("RNN", 14, &Attributes::default(), &seven[..3], 2).unwrap()[1].dims(), &[1, 1, 2]);
}

/// The op of `list` lowered for the GPU on operands of `dims` (by slot, `None` where absent).
fn lower(
    kind: CellKind,
    list: &[(&str, Attribute)],
    dims: &[Option<Vec<usize>>],
    outputs: usize,
) -> Result<GpuNode, OpError> {
    let a = attrs(list);
    let mut ctx = NodeCtx::new(&a, 14, dims.len(), outputs);
    let op = build(&mut ctx, kind, true)?;
    let inputs: Vec<Option<Operand>> = dims
        .iter()
        .enumerate()
        .map(|(i, d)| d.clone().map(|dims| Operand { dtype: if i == 4 { DType::I32 } else { DType::F32 }, dims }))
        .collect();
    let outs = vec![Operand { dtype: DType::F32, dims: vec![1] }; outputs];
    let none = InferInputs::new(&[]);
    op.gpu(&GpuCtx { inputs: &inputs, outputs: &outs, infer: &none }).unwrap()
}

#[test]
fn gpu_launches_carry_extents_in_meta_and_refuse_hidden_sizes_past_shared_memory() {
    // Batch-major bidirectional LSTM, T 5, B 3, I 2, H 4, with lengths and initial states.
    let both = [("direction", Attribute::String(b"bidirectional".to_vec())), ("layout", Attribute::Int(1))];
    let dims =
        [Some(vec![3, 5, 2]), Some(vec![2, 16, 2]), Some(vec![2, 16, 4]), None, Some(vec![3]), Some(vec![3, 2, 4])];
    let Ok(GpuNode::Launches(l)) = lower(CellKind::Lstm, &both, &dims, 2) else { panic!("one launch") };
    assert_eq!(l[0].meta, vec![5, 3, 2, 4, 2, 0b10, 2, 10, 8, 4, 40, 4, 8]);
    assert_eq!(
        l[0].slots,
        vec![Slot::In(0), Slot::In(1), Slot::In(2), Slot::In(4), Slot::In(5), Slot::Out(0), Slot::Out(1)]
    );
    // Every shape gives the same text.
    let small =
        [Some(vec![1, 1, 2]), Some(vec![2, 16, 2]), Some(vec![2, 16, 4]), None, Some(vec![1]), Some(vec![1, 2, 4])];
    let Ok(GpuNode::Launches(s)) = lower(CellKind::Lstm, &both, &small, 2) else { panic!("one launch") };
    assert_eq!(s[0].kernel.source(), l[0].kernel.source());
    let big = MAX_HIDDEN + 1;
    let dims = [Some(vec![1, 1, 1]), Some(vec![1, big, 1]), Some(vec![1, big, big])];
    let err = lower(CellKind::Rnn, &[], &dims, 1).unwrap_err().to_string();
    assert!(err.contains(&big.to_string()) && err.contains(&MAX_HIDDEN.to_string()), "{err}");
}

#[test]
fn every_kernel_variant_renders_completely() {
    let mut names = std::collections::HashSet::new();
    for cell in [
        Cell::Rnn,
        Cell::Gru { linear_before_reset: false },
        Cell::Gru { linear_before_reset: true },
        Cell::Lstm { input_forget: false },
        Cell::Lstm { input_forget: true },
    ] {
        for flags in 0..32u32 {
            let on = |k: u32| flags & (1 << k) != 0;
            let lstm = matches!(cell, Cell::Lstm { .. });
            if !lstm && (on(3) || on(4)) {
                continue;
            }
            let n = cell.activations();
            // Directions of different functions (with the biases), or one direction's.
            let mut acts = vec![Act::Tanh; n];
            if on(0) {
                acts.extend(vec![Act::Affine { alpha: 2.0, beta: -1.0 }; n]);
            }
            let kernel = RecurrentKernel {
                cell,
                acts,
                clip: on(1).then_some(3.0),
                bias: on(0),
                lens: on(1),
                initial_h: on(2),
                initial_c: on(3),
                peepholes: on(4),
                outputs: 1 + flags as usize % cell.max_outputs(),
            };
            let (name, definition) = kernel_definition(&kernel);
            let body = kernel.source();
            assert!(!body.contains('@'), "{kernel:?} leaves a placeholder: {body}");
            assert!(body.starts_with("(const onnx_i64* meta") && definition.contains(&name), "{body}");
            assert_eq!(on(0), body.contains("d == 0 ?"), "{body}");
            names.insert(name);
        }
    }
    assert!(names.len() > 60, "{} distinct texts", names.len());
}
