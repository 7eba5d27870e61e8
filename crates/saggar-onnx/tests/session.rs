//! ONNX models served by a `Session` on the host backend: bucketed (padding and slicing, batches
//! split above the largest bucket) and per-shape, equal to the eager reference run.

use std::sync::Arc;

use saggar_device::Backend;
use saggar_device::host::HostBackend;
use saggar_dispatch::{BucketSpec, HostTensor, Session, SessionConfig};
use saggar_onnx::synthetic::{EncoderConfig, bert_like_encoder};
use saggar_onnx::{ImportLimits, OnnxCompiler, OnnxModel, OnnxOptions, Tensor, TensorData};

fn inputs(batch: usize, seq: usize, vocab: usize) -> Vec<Tensor> {
    let ids: Vec<i64> = (0..batch * seq).map(|i| ((i * 7 + 3) % vocab) as i64).collect();
    // The last position of every other row is masked out.
    let mask: Vec<i64> = (0..batch * seq).map(|i| i64::from(!(i % seq == seq - 1 && (i / seq) % 2 == 1))).collect();
    vec![
        Tensor::new(vec![batch, seq], TensorData::I64(ids)).unwrap(),
        Tensor::new(vec![batch, seq], TensorData::I64(mask)).unwrap(),
    ]
}

fn run_session(session: &Session<HostBackend, OnnxCompiler>, model: &OnnxModel, xs: &[Tensor]) -> Vec<f32> {
    let dims: Vec<Vec<u64>> = xs.iter().map(|t| t.dims().iter().map(|&d| d as u64).collect()).collect();
    let bytes: Vec<Vec<u8>> = xs.iter().map(Tensor::to_le_bytes).collect();
    let host: Vec<HostTensor<'_>> = model
        .inputs()
        .iter()
        .zip(xs)
        .enumerate()
        .map(|(i, (spec, t))| HostTensor { name: spec.name(), dtype: t.dtype(), dims: &dims[i], data: &bytes[i] })
        .collect();
    let out = session.run(&host).unwrap();
    out[0].data.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

fn assert_close(got: &[f32], want: &Tensor, what: &str) {
    let TensorData::F32(want) = want.data() else { panic!("f32 output") };
    assert_eq!(got.len(), want.len(), "{what}: length");
    let max = got.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    assert!(max < 1e-4, "{what}: max abs error {max}");
}

#[test]
fn fixed_sequence_encoder_is_bucketed_padded_and_split() {
    let cfg = EncoderConfig { seq: Some(8), ..EncoderConfig::default() };
    let model = OnnxModel::from_bytes(&bert_like_encoder(cfg).to_bytes(), "encoder", &ImportLimits::default()).unwrap();
    let compiler = Arc::new(OnnxCompiler::new(model.clone(), OnnxOptions::default()));
    let config = SessionConfig::builder().buckets(BucketSpec::PowersOfTwo { max: 8 }).build().unwrap();
    let session = Session::new(HostBackend::open(0).unwrap(), compiler, config, &|_| {}).unwrap();
    for batch in [1, 3, 17, 3] {
        let xs = inputs(batch, 8, cfg.vocab);
        let eager = model.run_once(&xs).unwrap();
        assert_eq!(eager[0].dims(), &[batch, 8, cfg.hidden]);
        assert_close(&run_session(&session, &model, &xs), &eager[0], &format!("batch {batch}"));
    }
    let stats = session.stats();
    assert_eq!(stats.compiles, 4, "buckets 1, 2, 4, 8 compiled once each");
    assert!(stats.padded_rows > 0 && stats.split_requests > 0, "{stats:?}");
}

#[test]
fn symbolic_sequence_encoder_takes_the_per_shape_path() {
    let cfg = EncoderConfig::default();
    let model = OnnxModel::from_bytes(&bert_like_encoder(cfg).to_bytes(), "encoder", &ImportLimits::default()).unwrap();
    assert_eq!(model.outputs()[0].dims()[0], saggar_shape::Dim::symbolic("batch"));
    assert_eq!(model.outputs()[0].dims()[1], saggar_shape::Dim::symbolic("seq"));
    let compiler = Arc::new(OnnxCompiler::new(model.clone(), OnnxOptions::default()));
    let session =
        Session::new(HostBackend::open(0).unwrap(), compiler, SessionConfig::builder().build().unwrap(), &|_| {})
            .unwrap();
    for (batch, seq) in [(1, 5), (3, 11), (2, 5)] {
        let xs = inputs(batch, seq, cfg.vocab);
        let eager = model.run_once(&xs).unwrap();
        assert_close(&run_session(&session, &model, &xs), &eager[0], &format!("batch {batch} seq {seq}"));
    }
}
