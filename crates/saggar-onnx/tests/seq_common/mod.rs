//! BERT served from a grid of batch by sequence buckets, on any backend: a request of any batch and
//! sequence length is padded (the sequence with pad token 0 and attention mask 0, the batch by
//! repeating its last row), run, and sliced back; its outputs at the real positions (the hidden
//! states of every real token, the pooled CLS output) must equal an exact-shape run on the host.
//! Included by `gpu_common` (whose `support` it uses). The host test (`sequence_buckets.rs`) draws
//! the shapes with proptest; the GPU bundle's tests run the same check on CUDA and HIP.

#![allow(dead_code)]

use std::sync::Arc;

use saggar_device::Backend;
use saggar_dispatch::{BucketSpec, PaddedAxis, Session, SessionConfig};
use saggar_onnx::{OnnxCompiler, OnnxModel, OnnxOptions, Tensor, TensorData, run_on_host};

pub use super::support::Request;
use super::support::{assert_close, model_dir, owned_to_tensor};

/// The batch buckets of the sessions below (a larger batch is split).
pub const BATCH_BUCKETS: u64 = 4;
/// The sequence buckets; 16 is the longest sequence served.
pub const SEQ_BUCKETS: [u64; 3] = [4, 8, 16];

/// The BERT test model's compiler.
pub fn bert_compiler() -> Arc<OnnxCompiler> {
    let model = OnnxModel::load(model_dir("bert").join("model.onnx")).expect("the checked-in BERT model loads");
    Arc::new(OnnxCompiler::new(model, OnnxOptions::default()))
}

/// A session serving BERT from a grid of batch buckets 1, 2, 4 by sequence buckets 4, 8, 16.
pub fn bert_session<B: Backend>(device: B::Device, compiler: Arc<OnnxCompiler>) -> Session<B, OnnxCompiler> {
    let config = SessionConfig::builder()
        .buckets(BucketSpec::PowersOfTwo { max: BATCH_BUCKETS })
        .padded_axis(compiler.padded_axis("seq", BucketSpec::List(SEQ_BUCKETS.to_vec()), 0))
        .build()
        .expect("a valid configuration");
    Session::new(device, compiler, config, &|_| {}).unwrap_or_else(|e| panic!("BERT session on {:?}: {e}", B::KIND))
}

/// The axis declaration the sessions use, written out (what `OnnxCompiler::padded_axis` declares).
pub fn bert_sequence_axis() -> PaddedAxis {
    PaddedAxis::new("seq", BucketSpec::List(SEQ_BUCKETS.to_vec())).pad("input_ids", 0).pad("attention_mask", 0)
}

/// BERT inputs of `batch` rows of `seq` tokens: token ids drawn from `seed`, and a mask that keeps
/// a different number of real tokens per row (at least one), as the model's data sets do.
pub fn bert_inputs(batch: usize, seq: usize, seed: u64) -> Vec<Tensor> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let ids: Vec<i64> = (0..batch * seq).map(|_| (next() % 1000) as i64).collect();
    let mask: Vec<i64> = (0..batch)
        .flat_map(|b| {
            let real = 1 + (next() as usize + b) % seq;
            (0..seq).map(move |t| i64::from(t < real))
        })
        .collect();
    vec![
        Tensor::new(vec![batch, seq], TensorData::I64(ids)).expect("ids"),
        Tensor::new(vec![batch, seq], TensorData::I64(mask)).expect("mask"),
    ]
}

/// Panics unless `got` equals `want` within the checked-in models' tolerance.
pub fn assert_same(got: &Tensor, want: &Tensor, what: &str) {
    assert_close(got, want, what);
}

/// Runs a `batch` x `seq` request through `session` (twice: the second replays its graph) and
/// checks both outputs against the exact-shape host run. Returns the sequence bucket it ran as.
pub fn check_padded_matches_exact<B: Backend>(
    session: &Session<B, OnnxCompiler>,
    compiler: &OnnxCompiler,
    batch: usize,
    seq: usize,
    seed: u64,
) {
    let inputs = bert_inputs(batch, seq, seed);
    let exact = run_on_host(compiler, &inputs).unwrap_or_else(|e| panic!("exact run {batch}x{seq}: {e}"));
    let request = Request::new(&["input_ids", "attention_mask"], &inputs);
    for attempt in 0..2 {
        let outputs = session
            .run(&request.host())
            .unwrap_or_else(|e| panic!("padded run {batch}x{seq} ({attempt}) on {:?}: {e}", B::KIND));
        assert_eq!(outputs.len(), 2);
        for (k, o) in outputs.iter().enumerate() {
            let what = format!("BERT {batch}x{seq} output {k} run {attempt} on {:?}, padded vs exact", B::KIND);
            assert_close(&owned_to_tensor(o), &exact[k], &what);
        }
    }
}

/// The shapes the GPU bundle checks: every sequence bucket's edge, splits along the batch, and a
/// deterministic spread.
pub fn gpu_cases() -> Vec<(usize, usize)> {
    let mut cases = vec![(1, 1), (1, 4), (1, 5), (3, 8), (4, 16), (2, 9), (6, 3), (9, 13)];
    cases.extend((0..8).map(|i| (1 + (i * 5) % 7, 1 + (i * 11) % 16)));
    cases
}

/// Runs [`gpu_cases`] on `device` and prints a PASS line per case.
pub fn check_bert_sequence_buckets<B: Backend>(device: B::Device) {
    let compiler = bert_compiler();
    let session = bert_session::<B>(device, compiler.clone());
    assert_eq!(session.axis_buckets(), SEQ_BUCKETS.to_vec());
    for (i, (batch, seq)) in gpu_cases().into_iter().enumerate() {
        check_padded_matches_exact(&session, &compiler, batch, seq, i as u64);
        println!("PASS {:?} BERT sequence buckets: batch {batch} seq {seq}, padded equals exact", B::KIND);
    }
    let stats = session.stats();
    println!(
        "BERT sequence buckets on {:?}: {} requests, {} captures, {} replays, {} padded of {} batch rows",
        B::KIND,
        stats.requests,
        stats.captures,
        stats.replays,
        stats.padded_rows,
        stats.useful_rows + stats.padded_rows
    );
}
