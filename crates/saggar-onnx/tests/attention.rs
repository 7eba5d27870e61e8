//! Attention fusion on the host backend: the pattern is recognised in synthetic attention blocks (both
//! scale placements, with and without a mask and the NaN guard, more keys than one kernel chunk), in
//! the exporter-style synthetic encoder and in the checked-in BERT, and the fused plan (one host
//! kernel running the GPU kernel's online softmax) gives the unfused plan's outputs.

use std::path::Path;

use saggar_device::BackendKind;
use saggar_onnx::synthetic::{AttentionConfig, EncoderConfig, Projections, attention_block, bert_like_encoder};
use saggar_onnx::{
    ImportLimits, OnnxCompiler, OnnxModel, OnnxOptions, Tensor, TensorData, read_tensor_pb, run_on_host,
};

fn compilers(model: &OnnxModel) -> (OnnxCompiler, OnnxCompiler) {
    (
        OnnxCompiler::new(model.clone(), OnnxOptions::default()),
        OnnxCompiler::new(model.clone(), OnnxOptions::default().with_fusion(false)),
    )
}

fn f32s(dims: &[usize], seed: usize) -> Tensor {
    let n: usize = dims.iter().product();
    let v = (0..n).map(|i| ((i * 7919 + seed * 104_729) % 211) as f32 / 105.0 - 1.0).collect();
    Tensor::new(dims.to_vec(), TensorData::F32(v)).unwrap()
}

fn assert_close(got: &[Tensor], want: &[Tensor], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.dims(), w.dims(), "{what} output {k}");
        match (g.data(), w.data()) {
            (TensorData::F32(g), TensorData::F32(w)) => {
                for (i, (a, b)) in g.iter().zip(w).enumerate() {
                    let ok = (a.is_nan() && b.is_nan()) || (a - b).abs() <= 1e-5 + 1e-4 * b.abs();
                    assert!(ok, "{what} output {k} element {i}: fused {a} vs unfused {b}");
                }
            }
            (g, w) => assert_eq!(g, w, "{what} output {k}"),
        }
    }
}

/// A mask `[batch, 1, 1, seq]`: batch row `r` keeps its first `seq - r` keys; with `all_masked`, the
/// last batch row masks every key (`-inf`).
fn mask(batch: usize, seq: usize, all_masked: bool) -> Tensor {
    let v = (0..batch * seq)
        .map(|i| {
            let (r, j) = (i / seq, i % seq);
            if (all_masked && r == batch - 1) || j + r >= seq { f32::NEG_INFINITY } else { 0.0 }
        })
        .collect();
    Tensor::new(vec![batch, 1, 1, seq], TensorData::F32(v)).unwrap()
}

#[test]
fn synthetic_attention_blocks_fuse_and_match_the_unfused_plan() {
    let base = AttentionConfig::default();
    let cases = [
        (base, 3, 10, true),
        (AttentionConfig { div_scale: true, ..base }, 2, 7, false),
        (AttentionConfig { mask: false, nan_guard: false, ..base }, 2, 5, false),
        (AttentionConfig { nan_guard: false, ..base }, 3, 6, false),
        // More keys than one chunk of the kernel (256): the online rescaling runs.
        (AttentionConfig { heads: 1, head_dim: 4, ..base }, 1, 300, false),
    ];
    for (cfg, batch, seq, all_masked) in cases {
        let what = format!("{cfg:?} batch {batch} seq {seq}");
        let model =
            OnnxModel::from_bytes(&attention_block(cfg).to_bytes(), "attention", &ImportLimits::default()).unwrap();
        let (fused, unfused) = compilers(&model);
        let mut inputs = vec![f32s(&[batch, seq, cfg.heads * cfg.head_dim], seq)];
        if cfg.mask {
            inputs.push(mask(batch, seq, all_masked));
        }
        let dims: Vec<Vec<u64>> = inputs.iter().map(|t| t.dims().iter().map(|&d| d as u64).collect()).collect();
        for backend in [BackendKind::Host, BackendKind::Cuda] {
            let f = fused.plan_summary(&dims, backend).unwrap();
            let u = unfused.plan_summary(&dims, backend).unwrap();
            assert_eq!((f.attention_groups, u.attention_groups, u.fused_groups), (1, 0, 0), "{what} on {backend:?}");
            assert!(f.launches < u.launches, "{what}: {} fused launches vs {} unfused", f.launches, u.launches);
            // The projections (one product since import merged them), the attention kernel: Q, K, V
            // read in place in the product, the head split/merge views folded in.
            assert_eq!(f.launches, 2, "{what} on {backend:?}");
        }
        let got = run_on_host(&fused, &inputs).unwrap();
        let want = run_on_host(&unfused, &inputs).unwrap();
        assert_close(&got, &want, &what);
        if all_masked {
            let TensorData::F32(y) = got[0].data() else { panic!("f32 output") };
            let row = seq * cfg.heads * cfg.head_dim;
            assert!(y[(batch - 1) * row..].iter().all(|&v| v == 0.0), "{what}: a row masked entirely gives zeros");
        }
    }
}

/// Q, K and V split off one projection, as GPT-2 (a Split) and torchvision's ViT (a transposed
/// stack gathered at 0, 1 and 2) export them: the kernel reads each part of the projection in place,
/// at its offset, so the Split, the Gathers and the Transpose launch nothing; the outputs match the
/// unfused plan's.
#[test]
fn packed_projections_are_read_in_place_at_their_offsets() {
    let base = AttentionConfig {
        heads: 2,
        head_dim: 8,
        div_scale: true,
        mask: true,
        nan_guard: false,
        scores_output: false,
        projections: Projections::Split,
    };
    for cfg in [base, AttentionConfig { projections: Projections::Stacked, div_scale: false, ..base }] {
        let (batch, seq) = (3, 9);
        let what = format!("{:?}", cfg.projections);
        let model =
            OnnxModel::from_bytes(&attention_block(cfg).to_bytes(), "attention", &ImportLimits::default()).unwrap();
        let (fused, unfused) = compilers(&model);
        let inputs = vec![f32s(&[batch, seq, 16], 4), mask(batch, seq, false)];
        let dims: Vec<Vec<u64>> = inputs.iter().map(|t| t.dims().iter().map(|&d| d as u64).collect()).collect();
        for backend in [BackendKind::Host, BackendKind::Cuda] {
            let f = fused.plan_summary(&dims, backend).unwrap();
            assert_eq!(f.attention_groups, 1, "{what} on {backend:?}");
            // The projection and the attention kernel: nothing copies Q, K or V out.
            assert_eq!(f.launches, 2, "{what} on {backend:?}");
        }
        assert_close(&run_on_host(&fused, &inputs).unwrap(), &run_on_host(&unfused, &inputs).unwrap(), &what);
    }
}

#[test]
fn scores_read_outside_the_pattern_are_not_fused() {
    let cfg = AttentionConfig {
        head_dim: 4,
        div_scale: true,
        nan_guard: false,
        scores_output: true,
        ..AttentionConfig::default()
    };
    let model = OnnxModel::from_bytes(&attention_block(cfg).to_bytes(), "attention", &ImportLimits::default()).unwrap();
    let (fused, unfused) = compilers(&model);
    let inputs = vec![f32s(&[2, 5, 8], 1), mask(2, 5, false)];
    let s = fused.plan_summary(&[vec![2, 5, 8], vec![2, 1, 1, 5]], BackendKind::Cuda).unwrap();
    assert_eq!(s.attention_groups, 0, "the scores are a graph output");
    assert_close(&run_on_host(&fused, &inputs).unwrap(), &run_on_host(&unfused, &inputs).unwrap(), "scores output");
}

#[test]
fn the_exporter_style_encoder_and_the_checked_in_bert_fuse_every_layer_and_match_unfused() {
    let cfg = EncoderConfig { layers: 2, seq: None, ..EncoderConfig::default() };
    let synthetic =
        OnnxModel::from_bytes(&bert_like_encoder(cfg).to_bytes(), "encoder", &ImportLimits::default()).unwrap();
    let ids = Tensor::new(vec![2, 6], TensorData::I64((0..12).map(|i| (i * 7 % 100) as i64).collect())).unwrap();
    let attn =
        Tensor::new(vec![2, 6], TensorData::I64((0..12).map(|i| i64::from(i % 6 < 4 || i < 6)).collect())).unwrap();
    let bert = OnnxModel::load(Path::new(env!("CARGO_MANIFEST_DIR")).join("models/bert/model.onnx")).unwrap();
    let set = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/bert/test_data_set_0");
    let bert_inputs: Vec<Tensor> =
        (0..2).map(|k| read_tensor_pb(&set.join(format!("input_{k}.pb"))).unwrap().tensor).collect();
    for (model, inputs, layers) in [(synthetic, vec![ids, attn], cfg.layers), (bert, bert_inputs, 2)] {
        let (fused, unfused) = compilers(&model);
        let dims: Vec<Vec<u64>> = inputs.iter().map(|t| t.dims().iter().map(|&d| d as u64).collect()).collect();
        let s = fused.plan_summary(&dims, BackendKind::Cuda).unwrap();
        assert_eq!(s.attention_groups, layers, "{}: one attention group per layer", model.name());
        let got = run_on_host(&fused, &inputs).unwrap();
        let want = run_on_host(&unfused, &inputs).unwrap();
        assert_close(&got, &want, model.name());
    }
}
