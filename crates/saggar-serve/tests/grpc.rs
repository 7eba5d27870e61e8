//! The protocol over gRPC against a server on the host backend: health, metadata, the 27-input
//! DLRM model with raw and typed contents checked against the eager reference, bad requests as
//! `INVALID_ARGUMENT` / `NOT_FOUND`, a message above the limit refused, and methods saggar does not
//! serve answered `UNIMPLEMENTED`.

mod common;
#[path = "common/grpc.rs"]
mod grpc_client;

use common::*;
use grpc_client::Client;
use saggar_serve::grpc::proto::*;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

fn raw_request(model: &str, names: &[String], inputs: &[saggar_onnx::Tensor]) -> ModelInferRequest {
    ModelInferRequest {
        model_name: model.into(),
        id: "g1".into(),
        inputs: names
            .iter()
            .zip(inputs)
            .map(|(n, t)| InferInputTensor {
                name: n.clone(),
                datatype: datatype(t).into(),
                shape: t.dims().iter().map(|&d| d as i64).collect(),
                ..Default::default()
            })
            .collect(),
        raw_input_contents: inputs.iter().map(saggar_onnx::Tensor::to_le_bytes).collect(),
        ..Default::default()
    }
}

#[test]
fn health_metadata_and_the_27_input_dlrm_model() {
    let (repo, cache) = (repository(&[("dlrm", None)]), tempfile::tempdir().unwrap());
    let server = start(repo.path(), cache.path(), |_| {});
    runtime().block_on(async {
        let mut c = Client::connect(server.grpc).await.unwrap();
        let live: ServerLiveResponse =
            c.call("/inference.GRPCInferenceService/ServerLive", ServerLiveRequest {}).await.unwrap();
        let ready: ServerReadyResponse =
            c.call("/inference.GRPCInferenceService/ServerReady", ServerReadyRequest {}).await.unwrap();
        assert!(live.live && ready.ready);
        let meta: ModelMetadataResponse = c
            .call(
                "/inference.GRPCInferenceService/ModelMetadata",
                ModelRef { name: "dlrm".into(), version: String::new() },
            )
            .await
            .unwrap();
        assert_eq!(meta.inputs.len(), 27);
        assert_eq!((meta.inputs[0].datatype.as_str(), meta.inputs[0].shape.clone()), ("FP32", vec![-1, 13]));
        let names: Vec<String> = meta.inputs.iter().map(|i| i.name.clone()).collect();
        let inputs = inputs("dlrm", 1);
        let expected = reference("dlrm", &inputs)[0].to_f32s().unwrap();
        let reply = c.infer(raw_request("dlrm", &names, &inputs)).await.unwrap();
        assert_eq!((reply.id.as_str(), reply.outputs[0].name.as_str()), ("g1", "score"));
        assert_close(&floats(&reply.raw_output_contents[0]), &expected, "dlrm over grpc, raw contents");
        // Typed contents, as KServe's clients send them.
        let mut typed = raw_request("dlrm", &names, &inputs);
        typed.raw_input_contents.clear();
        for (i, t) in typed.inputs.iter_mut().zip(&inputs) {
            i.contents = Some(match t.dtype() {
                saggar_shape::DType::F32 => {
                    InferTensorContents { fp32_contents: t.to_f32s().unwrap(), ..Default::default() }
                }
                _ => InferTensorContents { int64_contents: t.to_i64s().unwrap(), ..Default::default() },
            });
        }
        let reply = c.infer(typed).await.unwrap();
        assert_close(&floats(&reply.raw_output_contents[0]), &expected, "dlrm over grpc, typed contents");
        let unimplemented: Result<Empty, _> =
            c.call("/inference.GRPCInferenceService/ModelStatistics", ModelRef::default()).await;
        assert_eq!(unimplemented.unwrap_err().code(), tonic::Code::Unimplemented);
    });
}

#[test]
fn bad_requests_are_invalid_argument_or_not_found_and_the_server_keeps_serving() {
    let (repo, cache) = (repository(&[("mlp", None)]), tempfile::tempdir().unwrap());
    let server = start(repo.path(), cache.path(), |o| o.max_request_bytes = 1 << 20);
    let x = inputs("mlp", 0);
    let names = vec!["x".to_string()];
    runtime().block_on(async {
        let mut c = Client::connect(server.grpc).await.unwrap();
        let good = raw_request("mlp", &names, &x);
        let with = |f: &dyn Fn(&mut ModelInferRequest)| {
            let mut r = good.clone();
            f(&mut r);
            r
        };
        let cases: Vec<(&str, ModelInferRequest, tonic::Code, &str)> = vec![
            ("unknown model", with(&|r| r.model_name = "nope".into()), tonic::Code::NotFound, "unknown model"),
            (
                "wrong datatype",
                with(&|r| r.inputs[0].datatype = "FP64".into()),
                tonic::Code::InvalidArgument,
                "bytes of raw contents",
            ),
            ("unknown input", with(&|r| r.inputs[0].name = "y".into()), tonic::Code::InvalidArgument, "no input `y`"),
            ("short data", with(&|r| r.raw_input_contents[0].truncate(10)), tonic::Code::InvalidArgument, "10 bytes"),
            (
                "overflowing shape",
                with(&|r| r.inputs[0].shape = vec![i64::MAX, 2]),
                tonic::Code::InvalidArgument,
                "overflows",
            ),
            (
                "wrong shape",
                with(&|r| {
                    r.inputs[0].shape = vec![1, 64];
                    r.raw_input_contents[0].truncate(256);
                }),
                tonic::Code::InvalidArgument,
                "does not match",
            ),
        ];
        for (what, request, code, words) in cases {
            let e = c.infer(request).await.unwrap_err();
            assert_eq!(e.code(), code, "{what}: {}", e.message());
            assert!(e.message().contains(words), "{what}: {:?} lacks {words:?}", e.message());
            assert!(c.infer(good.clone()).await.is_ok(), "after {what}");
        }
        let huge = with(&|r| r.raw_input_contents[0] = vec![0; 2 << 20]);
        let e = c.infer(huge).await.unwrap_err();
        assert_ne!(e.code(), tonic::Code::Ok);
        assert!(e.message().contains("too large") || e.message().contains("limit"), "{e:?}");
        let mut c = Client::connect(server.grpc).await.unwrap();
        assert!(c.infer(good.clone()).await.is_ok(), "after a message above the limit");
    });
}

#[test]
fn one_client_is_not_held_back_by_delayed_acknowledgements() {
    // Without TCP_NODELAY on the server's sockets, each answer on a kept connection waited for the
    // client's delayed ACK: 40 ms per request on Linux, whatever the model's time (answers of a few
    // KiB, written as several frames, show it).
    let (repo, cache) = (repository(&[("bert", Some("max_batch_size: 8"))]), tempfile::tempdir().unwrap());
    let server = start(repo.path(), cache.path(), |_| {});
    let ids =
        saggar_onnx::Tensor::new(vec![2, 16], saggar_onnx::TensorData::I64((0..32).map(|i| 1 + i % 50).collect()))
            .unwrap();
    let mask = saggar_onnx::Tensor::new(vec![2, 16], saggar_onnx::TensorData::I64(vec![1; 32])).unwrap();
    let request = raw_request("bert", &["input_ids".to_string(), "attention_mask".to_string()], &[ids, mask]);
    runtime().block_on(async {
        let mut c = Client::connect(server.grpc).await.unwrap();
        c.infer(request.clone()).await.unwrap();
        let compute = metric(server.metrics, "nv_inference_compute_infer_duration_us", "bert");
        let mut overheads: Vec<f64> = Vec::new();
        for _ in 0..11 {
            let before = metric(server.metrics, "nv_inference_compute_infer_duration_us", "bert");
            let sent = std::time::Instant::now();
            c.infer(request.clone()).await.unwrap();
            let took = sent.elapsed().as_secs_f64() * 1e3;
            let computed = (metric(server.metrics, "nv_inference_compute_infer_duration_us", "bert") - before) / 1e3;
            overheads.push(took - computed);
        }
        overheads.sort_by(f64::total_cmp);
        assert!(compute > 0.0);
        assert!(overheads[5] < 25.0, "a request took {:.1} ms more than its batch's compute (median)", overheads[5]);
    });
}
