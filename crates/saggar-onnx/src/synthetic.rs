//! Synthetic models written with [`ModelBuilder`], shaped like exporter output, for tests and
//! benches that must not depend on files: a BERT-style encoder with the Shape/Gather/Concat/Reshape
//! chains the PyTorch exporters emit.

use saggar_shape::{DType, Dim};

use crate::builder::ModelBuilder;
use crate::ops::Attribute;
use crate::tensor::{Tensor, TensorData};

/// Sizes of a [`bert_like_encoder`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncoderConfig {
    /// Encoder layers.
    pub layers: usize,
    /// Hidden size.
    pub hidden: usize,
    /// Attention heads (dividing `hidden`).
    pub heads: usize,
    /// Feed-forward width.
    pub intermediate: usize,
    /// Vocabulary size.
    pub vocab: usize,
    /// Longest sequence (position table rows).
    pub max_positions: usize,
    /// A fixed sequence length, or `None` for a symbolic `seq` axis.
    pub seq: Option<usize>,
}

impl EncoderConfig {
    /// BERT-base's shape: 12 layers, hidden 768, 12 heads, FFN 3072, vocabulary 30522, 512
    /// positions, at a fixed sequence length `seq`.
    pub fn bert_base(seq: usize) -> EncoderConfig {
        EncoderConfig {
            layers: 12,
            hidden: 768,
            heads: 12,
            intermediate: 3072,
            vocab: 30522,
            max_positions: 512,
            seq: Some(seq),
        }
    }
}

impl Default for EncoderConfig {
    fn default() -> EncoderConfig {
        EncoderConfig { layers: 2, hidden: 64, heads: 4, intermediate: 128, vocab: 100, max_positions: 64, seq: None }
    }
}

/// Deterministic weights: a SplitMix64 stream scaled to `[-scale, scale)`.
fn weights(seed: &mut u64, dims: &[usize], scale: f32) -> Tensor {
    let n = dims.iter().product();
    let values = (0..n)
        .map(|_| {
            *seed = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = *seed;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            ((z >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect();
    Tensor::new(dims.to_vec(), TensorData::F32(values)).unwrap_or_else(|_| unreachable!("dims match the count"))
}

fn scalar_f32(v: f32) -> Tensor {
    Tensor::new(Vec::new(), TensorData::F32(vec![v])).unwrap_or_else(|_| unreachable!("one element"))
}

fn ints(v: &[i64]) -> Tensor {
    Tensor::from_i64s(v.to_vec())
}

/// A BERT-style encoder, opset 17: inputs `input_ids` and `attention_mask` (`[batch, seq]` int64),
/// output `last_hidden_state` (`[batch, seq, hidden]` f32). Attention reshapes go through
/// `Shape -> Gather -> Unsqueeze -> Concat -> Reshape` as exporters write them, the mask through
/// `Cast -> Sub -> Mul -> Unsqueeze`, GELU as `Div -> Erf -> Add -> Mul -> Mul`.
pub fn bert_like_encoder(cfg: EncoderConfig) -> ModelBuilder {
    let (h, heads) = (cfg.hidden, cfg.heads);
    let hd = h / heads.max(1);
    let mut seed = 0x5eed_u64;
    let mut b = ModelBuilder::new(17);
    let seq = cfg.seq.map_or_else(|| Dim::symbolic("seq"), |n| Dim::Fixed(n as u64));
    let dims = [Dim::symbolic("batch"), seq.clone()];
    b.input("input_ids", DType::I64, &dims);
    b.input("attention_mask", DType::I64, &dims);
    b.initializer("word_emb", &weights(&mut seed, &[cfg.vocab, h], 0.5));
    b.initializer("pos_emb", &weights(&mut seed, &[cfg.max_positions, h], 0.1));
    for (name, t) in [
        ("c_zero", ints(&[0]).reshaped(vec![]).unwrap_or_else(|_| unreachable!())),
        ("c_one", ints(&[1]).reshaped(vec![]).unwrap_or_else(|_| unreachable!())),
        ("c_ax0", ints(&[0])),
        ("c_ax1", ints(&[1])),
        ("c_ax12", ints(&[1, 2])),
        ("c_heads", ints(&[heads as i64])),
        ("c_hd", ints(&[hd as i64])),
        ("c_hidden", ints(&[h as i64])),
    ] {
        b.initializer(name, &t);
    }
    b.initializer("f_one", &scalar_f32(1.0));
    b.initializer("f_neg", &scalar_f32(-10000.0));
    b.initializer("f_scale", &scalar_f32((hd as f32).sqrt()));
    b.initializer("f_sqrt2", &scalar_f32(std::f32::consts::SQRT_2));
    b.initializer("f_half", &scalar_f32(0.5));

    // Embeddings: word + position (positions = Range(0, seq)).
    b.node("Gather", &["word_emb", "input_ids"], &["we"], &[]);
    b.node("Shape", &["input_ids"], &["ids_shape"], &[]);
    b.node("Gather", &["ids_shape", "c_one"], &["seq_len"], &[("axis", Attribute::Int(0))]);
    b.node("Range", &["c_zero", "seq_len", "c_one"], &["positions"], &[]);
    b.node("Gather", &["pos_emb", "positions"], &["pe"], &[]);
    b.node("Add", &["we", "pe"], &["emb"], &[]);
    let mut x = layer_norm(&mut b, &mut seed, "emb", "emb_ln", h);

    // Additive mask [batch, 1, 1, seq].
    b.node("Cast", &["attention_mask"], &["mask_f"], &[("to", Attribute::Int(1))]);
    b.node("Sub", &["f_one", "mask_f"], &["mask_inv"], &[]);
    b.node("Mul", &["mask_inv", "f_neg"], &["mask_add"], &[]);
    b.node("Unsqueeze", &["mask_add", "c_ax12"], &["mask4"], &[]);

    // Shape pieces of the hidden states, as exporters compute them.
    b.node("Shape", &[&x], &["x_shape"], &[]);
    b.node("Gather", &["x_shape", "c_zero"], &["dim_b"], &[("axis", Attribute::Int(0))]);
    b.node("Gather", &["x_shape", "c_one"], &["dim_s"], &[("axis", Attribute::Int(0))]);
    b.node("Unsqueeze", &["dim_b", "c_ax0"], &["dim_b1"], &[]);
    b.node("Unsqueeze", &["dim_s", "c_ax0"], &["dim_s1"], &[]);
    b.node("Concat", &["dim_b1", "dim_s1", "c_heads", "c_hd"], &["split_shape"], &[("axis", Attribute::Int(0))]);
    b.node("Concat", &["dim_b1", "dim_s1", "c_hidden"], &["merge_shape"], &[("axis", Attribute::Int(0))]);

    for l in 0..cfg.layers {
        let p = |s: &str| format!("l{l}_{s}");
        let proj = |b: &mut ModelBuilder, seed: &mut u64, input: &str, name: &str, n_in: usize, n_out: usize| {
            b.initializer(&p(&format!("{name}_w")), &weights(seed, &[n_in, n_out], 0.2));
            b.initializer(&p(&format!("{name}_b")), &weights(seed, &[n_out], 0.05));
            b.node("MatMul", &[input, &p(&format!("{name}_w"))], &[&p(&format!("{name}_mm"))], &[]);
            b.node("Add", &[&p(&format!("{name}_mm")), &p(&format!("{name}_b"))], &[&p(name)], &[]);
            p(name)
        };
        let heads_of = |b: &mut ModelBuilder, t: String, perm: &[i64]| {
            b.node("Reshape", &[&t, "split_shape"], &[&format!("{t}_r")], &[]);
            b.node(
                "Transpose",
                &[&format!("{t}_r")],
                &[&format!("{t}_t")],
                &[("perm", Attribute::Ints(perm.to_vec()))],
            );
            format!("{t}_t")
        };
        let q = proj(&mut b, &mut seed, &x, "q", h, h);
        let k = proj(&mut b, &mut seed, &x, "k", h, h);
        let v = proj(&mut b, &mut seed, &x, "v", h, h);
        let (q, k, v) = (
            heads_of(&mut b, q, &[0, 2, 1, 3]),
            heads_of(&mut b, k, &[0, 2, 3, 1]),
            heads_of(&mut b, v, &[0, 2, 1, 3]),
        );
        b.node("MatMul", &[&q, &k], &[&p("scores")], &[]);
        b.node("Div", &[&p("scores"), "f_scale"], &[&p("scaled")], &[]);
        b.node("Add", &[&p("scaled"), "mask4"], &[&p("masked")], &[]);
        b.node("Softmax", &[&p("masked")], &[&p("probs")], &[("axis", Attribute::Int(-1))]);
        b.node("MatMul", &[&p("probs"), &v], &[&p("ctx")], &[]);
        b.node("Transpose", &[&p("ctx")], &[&p("ctx_t")], &[("perm", Attribute::Ints(vec![0, 2, 1, 3]))]);
        b.node("Reshape", &[&p("ctx_t"), "merge_shape"], &[&p("ctx_m")], &[]);
        let attn = proj(&mut b, &mut seed, &p("ctx_m"), "o", h, h);
        b.node("Add", &[&attn, &x], &[&p("res1")], &[]);
        let y = layer_norm(&mut b, &mut seed, &p("res1"), &p("ln1"), h);
        let f = proj(&mut b, &mut seed, &y, "ff1", h, cfg.intermediate);
        b.node("Div", &[&f, "f_sqrt2"], &[&p("g_div")], &[]);
        b.node("Erf", &[&p("g_div")], &[&p("g_erf")], &[]);
        b.node("Add", &[&p("g_erf"), "f_one"], &[&p("g_add")], &[]);
        b.node("Mul", &[&f, &p("g_add")], &[&p("g_mul")], &[]);
        b.node("Mul", &[&p("g_mul"), "f_half"], &[&p("gelu")], &[]);
        let f2 = proj(&mut b, &mut seed, &p("gelu"), "ff2", cfg.intermediate, h);
        b.node("Add", &[&f2, &y], &[&p("res2")], &[]);
        x = layer_norm(&mut b, &mut seed, &p("res2"), &p("ln2"), h);
    }
    b.node("Identity", &[&x], &["last_hidden_state"], &[]);
    b.output("last_hidden_state", DType::F32, &[Dim::symbolic("batch"), seq, Dim::Fixed(h as u64)]);
    b
}

fn layer_norm(b: &mut ModelBuilder, seed: &mut u64, input: &str, name: &str, h: usize) -> String {
    b.initializer(&format!("{name}_g"), &weights(seed, &[h], 0.1));
    b.initializer(&format!("{name}_beta"), &weights(seed, &[h], 0.1));
    b.node(
        "LayerNormalization",
        &[input, &format!("{name}_g"), &format!("{name}_beta")],
        &[name],
        &[("axis", Attribute::Int(-1)), ("epsilon", Attribute::Float(1e-12))],
    );
    name.to_string()
}

/// How an [`attention_block`] scales, masks and guards its scores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttentionConfig {
    /// Attention heads.
    pub heads: usize,
    /// Size of each head.
    pub head_dim: usize,
    /// Scores divided by `sqrt(head_dim)` (`Div` after the MatMul); otherwise Q and K are each
    /// multiplied by `head_dim^-1/4` before it, as the dynamo exporter writes it.
    pub div_scale: bool,
    /// An additive mask input `mask` f32 `[batch, 1, 1, seq]` (written `Add(mask, scores)`).
    pub mask: bool,
    /// Softmax results guarded by `Where(IsNaN(P), 0, P)` (rows masked entirely give zeros).
    pub nan_guard: bool,
    /// The scores are a second graph output too (so they cannot be fused away).
    pub scores_output: bool,
    /// How Q, K and V are projected.
    pub projections: Projections,
}

impl Default for AttentionConfig {
    /// Two heads of 8, scaled Q and K, a mask and the NaN guard, three projections.
    fn default() -> Self {
        AttentionConfig {
            heads: 2,
            head_dim: 8,
            div_scale: false,
            mask: true,
            nan_guard: true,
            scores_output: false,
            projections: Projections::Separate,
        }
    }
}

/// How an [`attention_block`] projects Q, K and V from its input.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Projections {
    /// Three MatMuls, as BERT's exports have them.
    #[default]
    Separate,
    /// One MatMul to `[batch, seq, 3 * heads * head_dim]` split in three along its last axis, as
    /// GPT-2's exports have it.
    Split,
    /// One MatMul viewed as `[batch, seq, 3, heads * head_dim]`, transposed to put the 3 first and
    /// gathered at 0, 1 and 2, as torchvision's `nn.MultiheadAttention` exports it.
    Stacked,
}

/// One multi-head self-attention block, opset 17: input `x` f32 `[batch, seq, heads * head_dim]`
/// (and `mask` when asked), output `y` of the same shape. Q, K and V are projections of `x` split
/// into heads by `Reshape` and `Transpose` (K transposed straight to `[batch, heads, dim, seq]`), the
/// result merged back by `Transpose` and `Reshape`.
pub fn attention_block(cfg: AttentionConfig) -> ModelBuilder {
    let (heads, hd) = (cfg.heads, cfg.head_dim);
    let h = heads * hd;
    let mut seed = 0xa77e_u64;
    let mut b = ModelBuilder::new(17);
    let dims = [Dim::symbolic("batch"), Dim::symbolic("seq"), Dim::Fixed(h as u64)];
    b.input("x", DType::F32, &dims);
    if cfg.mask {
        b.input("mask", DType::F32, &[Dim::symbolic("batch"), Dim::Fixed(1), Dim::Fixed(1), Dim::symbolic("seq")]);
    }
    b.initializer("split", &ints(&[0, 0, heads as i64, hd as i64]));
    b.initializer("merge", &ints(&[0, 0, h as i64]));
    b.initializer("zero", &scalar_f32(0.0));
    b.initializer("sqrt_d", &scalar_f32((hd as f32).sqrt()));
    b.initializer("quarter", &scalar_f32((hd as f32).powf(-0.25)));
    project(&mut b, &mut seed, cfg.projections, h);
    for (name, perm) in [("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])] {
        b.node("Reshape", &[&format!("{name}_p"), "split"], &[&format!("{name}_4")], &[]);
        b.node(
            "Transpose",
            &[&format!("{name}_4")],
            &[&format!("{name}_h")],
            &[("perm", Attribute::Ints(perm.to_vec()))],
        );
    }
    if cfg.div_scale {
        b.node("MatMul", &["q_h", "k_h"], &["raw"], &[]);
        b.node("Div", &["raw", "sqrt_d"], &["scores"], &[]);
    } else {
        b.node("Mul", &["q_h", "quarter"], &["q_s"], &[]);
        b.node("Mul", &["quarter", "k_h"], &["k_s"], &[]);
        b.node("MatMul", &["q_s", "k_s"], &["scores"], &[]);
    }
    let mut s = "scores";
    if cfg.mask {
        b.node("Add", &["mask", "scores"], &["masked"], &[]);
        s = "masked";
    }
    b.node("Softmax", &[s], &["probs"], &[("axis", Attribute::Int(-1))]);
    let mut p = "probs";
    if cfg.nan_guard {
        b.node("IsNaN", &["probs"], &["nan"], &[]);
        b.node("Where", &["nan", "zero", "probs"], &["guarded"], &[]);
        p = "guarded";
    }
    b.node("MatMul", &[p, "v_h"], &["ctx"], &[]);
    b.node("Transpose", &["ctx"], &["ctx_t"], &[("perm", Attribute::Ints(vec![0, 2, 1, 3]))]);
    b.node("Reshape", &["ctx_t", "merge"], &["y"], &[]);
    b.output("y", DType::F32, &dims);
    if cfg.scores_output {
        b.output("scores", DType::F32, &[]);
    }
    b
}

/// The projections `q_p`, `k_p` and `v_p` (`[batch, seq, h]`) of `x` for [`attention_block`].
fn project(b: &mut ModelBuilder, seed: &mut u64, projections: Projections, h: usize) {
    let names = ["q_p", "k_p", "v_p"];
    match projections {
        Projections::Separate => {
            for (name, out) in ["wq", "wk", "wv"].into_iter().zip(names) {
                b.initializer(name, &weights(seed, &[h, h], 0.5));
                b.node("MatMul", &["x", name], &[out], &[]);
            }
        }
        Projections::Split => {
            b.initializer("wqkv", &weights(seed, &[h, 3 * h], 0.5));
            b.initializer("thirds", &ints(&[h as i64; 3]));
            b.node("MatMul", &["x", "wqkv"], &["qkv"], &[]);
            b.node("Split", &["qkv", "thirds"], &names, &[("axis", Attribute::Int(2))]);
        }
        Projections::Stacked => {
            b.initializer("wqkv", &weights(seed, &[h, 3 * h], 0.5));
            b.initializer("stack", &ints(&[0, 0, 3, h as i64]));
            b.node("MatMul", &["x", "wqkv"], &["qkv"], &[]);
            b.node("Reshape", &["qkv", "stack"], &["qkv_4"], &[]);
            b.node("Transpose", &["qkv_4"], &["qkv_t"], &[("perm", Attribute::Ints(vec![2, 0, 1, 3]))]);
            for (k, out) in names.into_iter().enumerate() {
                let index = format!("index{k}");
                b.initializer(&index, &Tensor::new(vec![], TensorData::I64(vec![k as i64])).expect("a scalar"));
                b.node("Gather", &["qkv_t", &index], &[out], &[("axis", Attribute::Int(0))]);
            }
        }
    }
}

/// The f32 ONNX model `bytes` as a half-precision export writes it (`model.half()` in PyTorch):
/// every f32 initializer, graph input and output, value info and `Cast` target in `dtype` (f16 or
/// bf16), the weights rounded to nearest even. Integer and bool parts stay as they are.
pub fn half_precision(bytes: &[u8], dtype: DType) -> Result<Vec<u8>, crate::OnnxError> {
    convert_floats(bytes, dtype, true)
}

/// The f32 ONNX model `bytes` with its f32 initializers rounded to `dtype` (f16 or bf16) and kept
/// in f32: the f32 model computing exactly what [`half_precision`]'s model computes (saggar
/// computes half-precision models in f32 between their input and output casts).
pub fn rounded_weights(bytes: &[u8], dtype: DType) -> Result<Vec<u8>, crate::OnnxError> {
    convert_floats(bytes, dtype, false)
}

fn convert_floats(bytes: &[u8], dtype: DType, retype: bool) -> Result<Vec<u8>, crate::OnnxError> {
    use prost::Message;

    use crate::import::proto::{ModelProto, data_type};
    let bad = |reason: String| crate::OnnxError::Graph { reason };
    let code = match dtype {
        DType::F16 => data_type::FLOAT16,
        DType::BF16 => data_type::BFLOAT16,
        other => return Err(bad(format!("{other} is not a half precision"))),
    };
    let mut model = ModelProto::decode(bytes).map_err(|e| bad(format!("not a ModelProto: {e}")))?;
    let graph = model.graph.as_mut().ok_or_else(|| bad("the model has no graph".into()))?;
    let constants = graph
        .node
        .iter_mut()
        .filter(|n| n.op_type == "Constant")
        .flat_map(|n| n.attribute.iter_mut().filter_map(|a| a.t.as_mut()));
    for init in graph.initializer.iter_mut().chain(constants).filter(|t| t.data_type == data_type::FLOAT) {
        let tensor = crate::import::tensor_pb::tensor_from_proto(init, None, &crate::ImportLimits::default())?;
        let narrowed = tensor.narrowed(dtype).map_err(|e| bad(e.to_string()))?;
        let out = if retype { narrowed } else { narrowed.widened() };
        *init = crate::import::tensor_pb::tensor_to_proto(&init.name, &out);
    }
    if retype {
        for info in graph.input.iter_mut().chain(graph.output.iter_mut()).chain(graph.value_info.iter_mut()) {
            if let Some(t) = info.r#type.as_mut().and_then(|t| t.tensor_type.as_mut())
                && t.elem_type == data_type::FLOAT
            {
                t.elem_type = code;
            }
        }
        for node in graph.node.iter_mut().filter(|n| n.op_type == "Cast") {
            for a in node.attribute.iter_mut().filter(|a| a.name == "to" && a.i == i64::from(data_type::FLOAT)) {
                a.i = i64::from(code);
            }
        }
    }
    Ok(model.encode_to_vec())
}
