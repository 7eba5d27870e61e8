//! Both models end to end on the host backend: compile -> load -> launch -> outputs equal the CPU
//! reference, for several buckets; graph capture and replay; weight sharing between programs and
//! devices; concurrent launches; and the typed errors of bad requests and bad bindings.

mod common;

use std::sync::Arc;

use common::*;
use saggar_device::host::{HostBackend, HostDevice};
use saggar_device::{Backend, Device, DeviceBuffer, Stream};
use saggar_dispatch::{CompileRequest, Program, ProgramCompiler};
use saggar_models::{
    GemmVariant, MlpConfig, ModelConfig, ModelError, ModelKind, RecsysConfig, ReferenceCompiler, WeightSource,
    generate_inputs,
};

fn open() -> HostDevice {
    HostBackend::open(0).expect("host device")
}

#[test]
fn default_recsys_matches_reference_at_several_buckets() {
    let compiler = ReferenceCompiler::from_config(ModelKind::Recsys.default_config()).unwrap();
    check_end_to_end::<HostBackend>(&compiler, &open(), &[1, 3, 4, 8], 1);
}

#[test]
fn small_recsys_with_two_outputs_matches_reference() {
    for two_outputs in [false, true] {
        let compiler = ReferenceCompiler::from_config(small_recsys(two_outputs)).unwrap();
        check_end_to_end::<HostBackend>(&compiler, &open(), &[1, 2, 5, 16], 2);
    }
}

#[test]
fn dense_only_and_sparse_only_recsys_match_reference() {
    for (dense, sparse) in [(4, 0), (0, 3)] {
        let config = ModelConfig::Recsys(RecsysConfig {
            dense_inputs: dense,
            sparse_inputs: sparse,
            hidden: vec![24],
            ..RecsysConfig::default()
        });
        let compiler = ReferenceCompiler::from_config(config).unwrap();
        check_end_to_end::<HostBackend>(&compiler, &open(), &[1, 3], 3);
    }
}

#[test]
fn mlp_models_match_reference() {
    let default = ReferenceCompiler::from_config(ModelKind::Mlp.default_config()).unwrap();
    check_end_to_end::<HostBackend>(&default, &open(), &[1, 3, 4, 7], 4);
    let no_hidden = ModelConfig::Mlp(MlpConfig { input: 9, hidden: vec![], output: 5, ..MlpConfig::default() });
    let compiler = ReferenceCompiler::from_config(no_hidden).unwrap();
    check_end_to_end::<HostBackend>(&compiler, &open(), &[1, 6], 5);
}

#[test]
fn out_of_range_sparse_indices_contribute_nothing() {
    let config = small_recsys(true);
    let compiler = ReferenceCompiler::from_config(config.clone()).unwrap();
    let device = open();
    let batch = 4;
    let program = load::<HostBackend>(&compiler, &device, &compile::<HostBackend>(&compiler, &device, 4));
    let mut inputs = generate_inputs(&config, batch, 9);
    let bad = [-1i32, -2_000_000_000, 50, 51, i32::MAX, 0, 49, 7, 1_000_000, -50, 3, 50];
    let dense = 5;
    inputs[dense] = bad.iter().flat_map(|v| v.to_le_bytes()).collect();
    inputs[dense + 1] = bad.iter().rev().flat_map(|v| v.to_le_bytes()).collect();
    let outputs = run(&device, &program, &config, &inputs, batch);
    assert_matches_reference(&compiler, &inputs, batch, &outputs);
}

#[test]
fn launch_can_be_captured_and_replayed() {
    let compiler = ReferenceCompiler::from_config(small_recsys(true)).unwrap();
    check_graph_replay::<HostBackend>(&compiler, &open(), 3);
    let mlp = ReferenceCompiler::from_config(ModelKind::Mlp.default_config()).unwrap();
    check_graph_replay::<HostBackend>(&mlp, &open(), 2);
}

#[test]
fn programs_of_one_device_share_one_weight_upload() {
    let compiler = ReferenceCompiler::from_config(small_recsys(false)).unwrap();
    let device = open();
    let first = load::<HostBackend>(&compiler, &device, &compile::<HostBackend>(&compiler, &device, 1));
    let before = device.counters();
    let programs: Vec<_> = [2u64, 4, 8]
        .iter()
        .map(|b| load::<HostBackend>(&compiler, &device, &compile::<HostBackend>(&compiler, &device, *b)))
        .collect();
    let after = device.counters();
    assert_eq!(after.allocations, before.allocations, "no new weight buffer for later buckets");
    assert_eq!(after.live_device_bytes, before.live_device_bytes);
    drop((first, programs));
}

#[test]
fn one_compiler_serves_independent_devices_of_the_same_ordinal() {
    // Each `open` of the host backend is an independent simulated device with its own address space:
    // the weights uploaded to the first must not be reused by the second.
    let compiler = ReferenceCompiler::from_config(small_recsys(false)).unwrap();
    let artifact = compile::<HostBackend>(&compiler, &open(), 3);
    let (a, b) = (open(), open());
    let on_a = load::<HostBackend>(&compiler, &a, &artifact);
    let on_b = load::<HostBackend>(&compiler, &b, &artifact);
    let on_a_again = load::<HostBackend>(&compiler, &a, &artifact);
    for (device, program) in [(&a, &on_a), (&b, &on_b), (&a, &on_a_again)] {
        let inputs = generate_inputs(compiler.config(), 3, 5);
        let outputs = run(device, program, compiler.config(), &inputs, 3);
        assert_matches_reference(&compiler, &inputs, 3, &outputs);
    }
    // Device 1 of the host backend is another ordinal: its own upload too.
    let other = HostBackend::open(1).unwrap();
    let on_other = load::<HostBackend>(&compiler, &other, &artifact);
    let inputs = generate_inputs(compiler.config(), 3, 6);
    assert_matches_reference(&compiler, &inputs, 3, &run(&other, &on_other, compiler.config(), &inputs, 3));
}

#[test]
fn concurrent_launches_of_one_program_do_not_mix() {
    let compiler = Arc::new(ReferenceCompiler::from_config(small_recsys(true)).unwrap());
    let device = open();
    let program = Arc::new(load::<HostBackend>(&compiler, &device, &compile::<HostBackend>(&compiler, &device, 4)));
    std::thread::scope(|scope| {
        for t in 0..4u64 {
            let (compiler, program, device) = (compiler.clone(), program.clone(), device.clone());
            scope.spawn(move || {
                let bindings = Bindings::<HostBackend>::new(&device, compiler.config(), &program, 4);
                let stream = device.create_stream().unwrap();
                for round in 0..10 {
                    let inputs = generate_inputs(compiler.config(), 4, t * 1000 + round);
                    bindings.upload(&stream, &inputs);
                    bindings.launch(&program, &stream).unwrap();
                    stream.synchronize().unwrap();
                    assert_matches_reference(&compiler, &inputs, 4, &bindings.download(&stream));
                }
            });
        }
    });
}

#[test]
fn bad_compile_requests_are_typed_errors() {
    let compiler = ReferenceCompiler::from_config(small_recsys(false)).unwrap();
    let device = open();
    let good = compiler.config().input_dims(4);
    let compile = |dims: &[Vec<u64>], bucket| {
        ProgramCompiler::<HostBackend>::compile(&compiler, &device, &CompileRequest::new(dims, bucket))
    };
    let mut wrong_width = good.clone();
    wrong_width[0][1] = 4;
    let mut mixed_batch = good.clone();
    mixed_batch[8][0] = 5;
    let zero = compiler.config().input_dims(0);
    let huge = compiler.config().input_dims(saggar_models::MAX_BATCH + 1);
    for (dims, bucket, what) in [
        (&good[..3], Some(4), "too few inputs"),
        (&wrong_width[..], Some(4), "wrong width"),
        (&mixed_batch[..], Some(4), "mixed batch"),
        (&zero[..], None, "zero batch"),
        (&huge[..], None, "batch above the limit"),
        (&good[..], Some(8), "bucket differs from the batch"),
    ] {
        let e = compile(dims, bucket).expect_err(what);
        assert!(matches!(model_error(&e), ModelError::Request { .. }), "{what}: {e}");
    }
    assert!(compile(&good, None).is_ok(), "no bucket is fine");
}

#[test]
fn bad_bindings_are_errors_not_faults() {
    let config = small_recsys(false);
    let compiler = ReferenceCompiler::from_config(config.clone()).unwrap();
    let device = open();
    let program = load::<HostBackend>(&compiler, &device, &compile::<HostBackend>(&compiler, &device, 4));
    let b = Bindings::<HostBackend>::new(&device, &config, &program, 4);
    let short = device.alloc(8).unwrap();
    let stream = device.create_stream().unwrap();
    let inputs: Vec<_> = b.inputs.iter().map(|x| x.as_slice()).collect();
    let outputs: Vec<_> = b.outputs.iter().map(|x| x.as_slice()).collect();
    let mut short_input = inputs.clone();
    short_input[2] = short.as_slice();
    let cases: [(&[_], &[_], _, &str); 4] = [
        (&inputs[1..], &outputs, b.scratch.as_slice(), "missing input"),
        (&short_input, &outputs, b.scratch.as_slice(), "short input"),
        (&inputs, &[], b.scratch.as_slice(), "missing output"),
        (&inputs, &outputs, short.as_slice(), "short scratch"),
    ];
    for (ins, outs, scratch, what) in cases {
        // SAFETY: every slice names a live buffer of this test; the launch is refused before enqueueing.
        let r = unsafe { program.launch(&stream, ins, outs, scratch) };
        assert!(matches!(r, Err(saggar_device::Error::InvalidLaunchConfig { .. })), "{what}: {r:?}");
    }
    assert_eq!(device.counters().launches, 0, "nothing was enqueued");
    stream.synchronize().unwrap();
}

#[test]
fn identity_names_the_compiler_model_and_options() {
    let config = small_recsys(false);
    let a = ReferenceCompiler::from_config(config.clone()).unwrap();
    let id = ProgramCompiler::<HostBackend>::identity(&a);
    assert_eq!(id.compiler, "saggar-models");
    assert_eq!(id.version, env!("CARGO_PKG_VERSION"));
    assert_eq!(id.options.get("gemm").map(String::as_str), Some("splitk32"));
    assert_eq!(id.model_hash.as_str().len(), 64);
    let same = ReferenceCompiler::from_config(config.clone()).unwrap();
    assert_eq!(ProgramCompiler::<HostBackend>::identity(&same), id, "stable across instances");
    let mut reseeded = config.clone();
    *reseeded.weights_mut() = WeightSource::Seed(12);
    let other = ReferenceCompiler::from_config(reseeded).unwrap();
    assert_ne!(ProgramCompiler::<HostBackend>::identity(&other).model_hash, id.model_hash, "weights are hashed");
    let naive = ReferenceCompiler::from_config(config).unwrap().with_gemm(GemmVariant::Naive);
    assert_eq!(ProgramCompiler::<HostBackend>::identity(&naive).options["gemm"], "naive");
    assert_eq!(ProgramCompiler::<HostBackend>::model(&a).inputs.len(), 9);
}

#[test]
fn scratch_size_is_reported_and_sufficient() {
    let compiler = ReferenceCompiler::from_config(ModelKind::Recsys.default_config()).unwrap();
    let device = open();
    let program = load::<HostBackend>(&compiler, &device, &compile::<HostBackend>(&compiler, &device, 8));
    assert_eq!(program.scratch_bytes(), 8 * (1840 + 512 + 256) * 4);
    assert_eq!(Some(program.scratch_bytes()), compiler.scratch_bytes(8, saggar_device::BackendKind::Host));
    assert_eq!(compiler.scratch_bytes(0, saggar_device::BackendKind::Host), None);
    // GPU programs of the same batch need the same scratch (the layout does not depend on the backend).
    assert_eq!(compiler.scratch_bytes(8, saggar_device::BackendKind::Cuda), Some(program.scratch_bytes()));
    assert_eq!(program.launches(), 4);
    assert_eq!(program.output_dims()[0][0], 8, "the program computes batch 8");
}
