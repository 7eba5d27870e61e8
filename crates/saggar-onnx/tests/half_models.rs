//! Half-precision models (f16 and bf16 weights, inputs and outputs, as `model.half()` exports them)
//! on the host backend. saggar computes them in f32 between a cast after each input and a cast
//! before each output (`src/half.rs`), so:
//! - a half-precision model's outputs are exactly the f32 model's outputs, with the same rounded
//!   weights and inputs, rounded to nearest even into the half precision (bit for bit);
//! - against the f32 model with its original weights and inputs they differ by the rounding of the
//!   weights and inputs: within `2e-3 + 2e-3·|expected|` for f16 and `1e-2 + 1e-2·|expected|` for
//!   bf16 on these models (the largest errors are printed).

use saggar_onnx::synthetic::{
    AttentionConfig, EncoderConfig, attention_block, bert_like_encoder, half_precision, rounded_weights,
};
use saggar_onnx::{
    ImportLimits, OnnxCompiler, OnnxModel, OnnxOptions, Tensor, TensorData, read_tensor_pb, run_on_host,
};
use saggar_shape::DType;

/// `(name, f32 model bytes, f32 inputs)` of the models checked.
fn models() -> Vec<(&'static str, Vec<u8>, Vec<Tensor>)> {
    let encoder =
        EncoderConfig { layers: 2, hidden: 32, heads: 2, intermediate: 64, vocab: 50, max_positions: 16, seq: None };
    let (batch, seq) = (2usize, 7usize);
    let ids = (0..batch * seq).map(|i| (i * 7 % 50) as i64).collect();
    let mask = (0..batch * seq).map(|i| i64::from(i % seq < seq - i / seq)).collect();
    let encoder_inputs = vec![
        Tensor::new(vec![batch, seq], TensorData::I64(ids)).unwrap(),
        Tensor::new(vec![batch, seq], TensorData::I64(mask)).unwrap(),
    ];
    let cfg = AttentionConfig::default();
    let x = (0..batch * seq * 16).map(|i| ((i * 7919 % 211) as f32 / 105.0) - 1.0).collect();
    let m = (0..batch * seq).map(|i| if i % seq + 2 * (i / seq) >= seq { f32::NEG_INFINITY } else { 0.0 }).collect();
    let attention_inputs = vec![
        Tensor::new(vec![batch, seq, 16], TensorData::F32(x)).unwrap(),
        Tensor::new(vec![batch, 1, 1, seq], TensorData::F32(m)).unwrap(),
    ];
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("models/mlp");
    let mlp = std::fs::read(dir.join("model.onnx")).unwrap();
    let mlp_input = read_tensor_pb(&dir.join("test_data_set_0/input_0.pb")).unwrap().tensor;
    vec![
        ("encoder", bert_like_encoder(encoder).to_bytes(), encoder_inputs),
        ("attention", attention_block(cfg).to_bytes(), attention_inputs),
        ("mlp", mlp, vec![mlp_input]),
    ]
}

fn run(bytes: &[u8], inputs: &[Tensor]) -> Vec<Tensor> {
    let model = OnnxModel::from_bytes(bytes, "model", &ImportLimits::default()).unwrap();
    run_on_host(&OnnxCompiler::new(model, OnnxOptions::default()), inputs).unwrap()
}

/// Float inputs rounded to `dtype` (kept as half-precision bits), others unchanged.
fn narrowed(inputs: &[Tensor], dtype: DType) -> Vec<Tensor> {
    inputs
        .iter()
        .map(|t| if t.dtype() == DType::F32 { t.clone().narrowed(dtype).unwrap() } else { t.clone() })
        .collect()
}

#[test]
fn half_models_compute_the_f32_model_of_their_rounded_weights_bit_for_bit() {
    for dtype in [DType::F16, DType::BF16] {
        for (name, bytes, inputs) in models() {
            let half_inputs = narrowed(&inputs, dtype);
            let got = run(&half_precision(&bytes, dtype).unwrap(), &half_inputs);
            let wide_inputs: Vec<Tensor> = half_inputs.iter().map(|t| t.clone().widened()).collect();
            let want = run(&rounded_weights(&bytes, dtype).unwrap(), &wide_inputs);
            assert_eq!(got.len(), want.len());
            for (k, (g, w)) in got.iter().zip(want).enumerate() {
                assert_eq!(g.dtype(), dtype, "{name} output {k} is {dtype}");
                assert_eq!(*g, w.narrowed(dtype).unwrap(), "{name} {dtype} output {k}");
            }
        }
    }
}

#[test]
fn half_models_stay_within_the_stated_tolerance_of_the_f32_model() {
    for (dtype, tol) in [(DType::F16, 2e-3f32), (DType::BF16, 1e-2)] {
        for (name, bytes, inputs) in models() {
            let got = run(&half_precision(&bytes, dtype).unwrap(), &narrowed(&inputs, dtype));
            let want = run(&bytes, &inputs);
            for (k, (g, w)) in got.iter().zip(&want).enumerate() {
                let (g, w) = (g.to_f32s().unwrap(), w.to_f32s().unwrap());
                let mut worst = 0f32;
                for (i, (a, b)) in g.iter().zip(&w).enumerate() {
                    if a.is_nan() && b.is_nan() {
                        continue;
                    }
                    let err = (a - b).abs();
                    assert!(err <= tol + tol * b.abs(), "{name} {dtype} output {k} element {i}: {a} vs {b}");
                    worst = worst.max(err / (1.0 + b.abs()));
                }
                println!("{name} {dtype} output {k}: largest error {worst:.2e} (relative to 1 + |expected|)");
            }
        }
    }
}

#[test]
fn a_half_model_declares_half_inputs_and_outputs_and_refuses_f32_data() {
    let (_, bytes, inputs) = models().remove(1);
    let model =
        OnnxModel::from_bytes(&half_precision(&bytes, DType::F16).unwrap(), "attention", &ImportLimits::default())
            .unwrap();
    assert!(model.inputs().iter().all(|i| i.dtype() == DType::F16));
    assert!(model.outputs().iter().all(|o| o.dtype() == DType::F16));
    let compiler = OnnxCompiler::new(model, OnnxOptions::default());
    let err = run_on_host(&compiler, &inputs).unwrap_err().to_string();
    assert!(err.contains("f16") || err.contains("F16"), "f32 data for an f16 input is refused: {err}");
}
