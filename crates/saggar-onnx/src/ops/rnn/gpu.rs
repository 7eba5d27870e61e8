//! The GPU kernel of the recurrent ops (`recurrent.cu` with the cell's step, `rnn_step.cu`,
//! `gru_step.cu` or `lstm_step.cu`): a block per (direction, batch entry) looping over the time
//! steps, the state in shared memory, a group of lanes per hidden unit summing its weight rows. Every extent travels in `meta`; the text depends only on the
//! cell, its attributes and which optional inputs and outputs the node has.

use super::activation::Act;
use super::{Cell, Recurrent};
use crate::ops::OpError;
use crate::ops::elementwise::c_float;
use crate::ops::gpu::{GpuCtx, GpuKernel, GpuLaunch, GpuNode, Slot, Work, ext, render};

/// The largest hidden size on GPU: the kernel keeps up to three vectors of it in a block's static
/// shared memory (3 x 4096 f32 = 48 KiB, CUDA's limit for static shared memory).
pub(crate) const MAX_HIDDEN: usize = 4096;

/// One recurrent layer over whole sequences.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RecurrentKernel {
    pub(crate) cell: Cell,
    /// The activations of direction 0, then (when it differs) of direction 1.
    pub(crate) acts: Vec<Act>,
    pub(crate) clip: Option<f32>,
    /// Which optional inputs the node has: B, sequence_lens, initial_h, initial_c, P.
    pub(crate) bias: bool,
    pub(crate) lens: bool,
    pub(crate) initial_h: bool,
    pub(crate) initial_c: bool,
    pub(crate) peepholes: bool,
    /// Y, then Y_h and Y_c (1 to 3).
    pub(crate) outputs: usize,
}

impl RecurrentKernel {
    /// Whether the kernel takes input slot `i` (3 to 7) after X, W and R.
    fn takes(&self, i: usize) -> bool {
        [self.bias, self.lens, self.initial_h, self.initial_c, self.peepholes].get(i.wrapping_sub(3)) == Some(&true)
    }

    /// Activation `k` (of the direction `d` the block runs) at the variable `v`, clipped first.
    fn act(&self, k: usize, v: &str) -> String {
        let v = match self.clip {
            Some(c) => format!("fminf(fmaxf({v}, {}), {})", c_float(-c), c_float(c)),
            None => v.to_string(),
        };
        let first = self.acts[k].c_expr(&v);
        match self.acts.get(self.cell.activations() + k) {
            Some(other) if *other != self.acts[k] => format!("(d == 0 ? {first} : {})", other.c_expr(&v)),
            _ => first,
        }
    }

    /// `+= Wb[row]; += Rb[row]` of each `(variable, gate)`, when the node has biases.
    fn bias_adds(&self, gates: &[(&str, usize)]) -> String {
        if !self.bias {
            return String::new();
        }
        let row = |q: usize| if q == 0 { "j".to_string() } else { format!("{q} * nh + j") };
        gates
            .iter()
            .map(|(v, q)| format!("\n        {v} += wb[{}];\n        {v} += rb[{}];", row(*q), row(*q)))
            .collect()
    }

    fn step(&self) -> String {
        match self.cell {
            Cell::Rnn => {
                render(include_str!("rnn_step.cu"), &[("BIAS", &self.bias_adds(&[("a", 0)])), ("F", &self.act(0, "a"))])
            }
            Cell::Lstm { input_forget } => {
                let (peep_if, peep_o) = if self.peepholes {
                    (
                        "\n        ai += pd[j] * cp;\n        af += pd[2 * nh + j] * cp;",
                        "\n        ao += pd[nh + j] * cn;",
                    )
                } else {
                    ("", "")
                };
                let forget = if input_forget { "1.0f - ig".to_string() } else { self.act(0, "af") };
                render(
                    include_str!("lstm_step.cu"),
                    &[
                        ("BIAS", &self.bias_adds(&[("ai", 0), ("ao", 1), ("af", 2), ("ac", 3)])),
                        ("PEEP_IF", peep_if),
                        ("PEEP_O", peep_o),
                        ("F_I", &self.act(0, "ai")),
                        ("F_F", &forget),
                        ("G_C", &self.act(1, "ac")),
                        ("F_O", &self.act(0, "ao")),
                        ("H_C", &self.act(2, "cn")),
                    ],
                )
            }
            Cell::Gru { linear_before_reset } => {
                let (wbh, rbh) = if self.bias {
                    ("\n        ah += wb[2 * nh + j];", "\n        rec += rb[2 * nh + j];")
                } else {
                    ("", "")
                };
                let (reset, hidden) = if linear_before_reset {
                    let rec = "\n        float rec = 0.0f;\n        for (onnx_i64 k = lane; k < nh; k += ONNX_ROW_LANES) \
                               rec += h[k] * rj[k];\n        ah = onnx_lanes_fold<false>(ah);\n        \
                               rec = onnx_lanes_fold<false>(rec);";
                    ("rg".to_string(), format!("{rec}{rbh}\n        ah += s3[j] * rec;{wbh}"))
                } else {
                    let rec = "\n        for (onnx_i64 k = lane; k < nh; k += ONNX_ROW_LANES) ah += s3[k] * rj[k];\n        \
                               ah = onnx_lanes_fold<false>(ah);";
                    ("rg * h[j]".to_string(), format!("{rec}{}", self.bias_adds(&[("ah", 2)])))
                };
                render(
                    include_str!("gru_step.cu"),
                    &[
                        ("BIAS_ZR", &self.bias_adds(&[("az", 0), ("ar", 1)])),
                        ("F_Z", &self.act(0, "az")),
                        ("F_R", &self.act(0, "ar")),
                        ("RESET", &reset),
                        ("HIDDEN", &hidden),
                        ("G_H", &self.act(1, "ah")),
                    ],
                )
            }
        }
    }
}

impl GpuKernel for RecurrentKernel {
    fn prefix(&self) -> &'static str {
        match self.cell {
            Cell::Rnn => "rnn",
            Cell::Gru { .. } => "gru",
            Cell::Lstm { .. } => "lstm",
        }
    }

    fn source(&self) -> String {
        let gates = self.cell.gates();
        let three = !matches!(self.cell, Cell::Rnn);
        let mut params = String::new();
        let declared = [
            (self.bias, "const float* __restrict__ bias"),
            (self.lens, "const int* __restrict__ lens"),
            (self.initial_h, "const float* __restrict__ h0"),
            (self.initial_c, "const float* __restrict__ c0"),
            (self.peepholes, "const float* __restrict__ p"),
            (true, "float* __restrict__ y"),
            (self.outputs >= 2, "float* __restrict__ yh"),
            (self.outputs >= 3, "float* __restrict__ yc"),
        ];
        for (_, decl) in declared.iter().filter(|(on, _)| *on) {
            params.push_str(", ");
            params.push_str(decl);
        }
        let mut pointers = String::new();
        if three {
            pointers.push_str("\n    float* const s3 = sh + 2 * nh;");
        }
        if self.bias {
            pointers.push_str(&format!(
                "\n    const float* const wb = bias + d * {} * nh;\n    const float* const rb = wb + {gates} * nh;",
                2 * gates
            ));
        }
        if self.peepholes {
            pointers.push_str("\n    const float* const pd = p + d * 3 * nh;");
        }
        let mut init = String::from(if self.initial_h { " h[j] = h0[st + j];" } else { " h[j] = 0.0f;" });
        if let Cell::Lstm { .. } = self.cell {
            init.push_str(if self.initial_c { " s3[j] = c0[st + j];" } else { " s3[j] = 0.0f;" });
        }
        let mut last = String::new();
        if self.outputs >= 2 {
            last.push_str(" yh[st + j] = h[j];");
        }
        if self.outputs >= 3 {
            last.push_str(" yc[st + j] = s3[j];");
        }
        render(
            include_str!("recurrent.cu"),
            &[
                ("PARAMS", &params),
                ("ARRAYS", if three { "3" } else { "2" }),
                ("MAX_HIDDEN", &MAX_HIDDEN.to_string()),
                ("GATES", &gates.to_string()),
                ("POINTERS", &pointers),
                ("LEN", if self.lens { "(onnx_i64)lens[b]" } else { "nt" }),
                ("INIT", &init),
                ("STEP", &self.step()),
                ("FINAL", &last),
            ],
        )
    }
}

/// The node's launch: a block per (direction, batch entry), or a refusal naming a hidden size
/// whose state does not fit shared memory.
pub(super) fn lower(op: &Recurrent, ctx: &GpuCtx<'_>) -> Result<GpuNode, OpError> {
    let present = |i: usize| ctx.inputs.get(i).is_some_and(Option::is_some);
    let dims: Vec<Option<&[usize]>> = ctx.inputs.iter().map(|o| o.as_ref().map(|o| o.dims.as_slice())).collect();
    let e = op.extents(&dims)?;
    if e.hidden > MAX_HIDDEN {
        return Err(OpError::eval(format!(
            "{}: hidden_size {} is above {MAX_HIDDEN}, the largest whose state fits the GPU kernel's shared memory; \
             run this model on the host backend",
            op.cell.name(),
            e.hidden
        )));
    }
    let outputs = ctx.outputs.len().min(op.cell.max_outputs());
    if outputs == 0 {
        return Ok(GpuNode::Launches(Vec::new()));
    }
    let s = e.strides(op.batch_major);
    let reversed = (0..e.dirs).filter(|&d| op.direction.reversed(d)).fold(0, |m, d| m | 1 << d);
    let meta = [e.seq, e.batch, e.input, e.hidden, e.dirs, reversed, s.xt, s.xb, s.yt, s.yd, s.yb, s.sd, s.sb];
    let n = op.cell.activations();
    let both_alike = op.acts.len() == 2 * n && op.acts[..n] == op.acts[n..];
    let lstm = matches!(op.cell, Cell::Lstm { .. });
    let kernel = RecurrentKernel {
        cell: op.cell,
        acts: if both_alike { op.acts[..n].to_vec() } else { op.acts.clone() },
        clip: op.clip,
        bias: present(3),
        lens: present(4),
        initial_h: present(5),
        initial_c: lstm && present(6),
        peepholes: lstm && present(7),
        outputs,
    };
    let mut slots = vec![Slot::In(0), Slot::In(1), Slot::In(2)];
    slots.extend((3..8).filter(|&i| kernel.takes(i)).map(Slot::In));
    slots.extend((0..outputs).map(Slot::Out));
    Ok(GpuNode::Launches(vec![GpuLaunch::new(
        kernel,
        meta.map(ext).to_vec(),
        Work::Rows((e.dirs * e.batch) as u64),
        slots,
    )]))
}
