//! Loops run at run time: a `Loop` whose condition is computed from data (a while loop) runs as a
//! loop segment, its body once per iteration, through `run_once`, the host compile and a session on
//! the host backend, with the same results; a condition that never turns false is a typed error.

use std::sync::Arc;

use saggar_device::Backend as _;
use saggar_device::host::HostBackend;
use saggar_dispatch::DispatchError;
use saggar_dispatch::steps::StepCompiler as _;
use saggar_onnx::builder::ModelBuilder;
use saggar_onnx::{ImportLimits, OnnxCompiler, OnnxError, OnnxModel, OnnxOptions};
use saggar_shape::{DType, Dim};

mod while_common;

use while_common::{BIG, CASES, big, check, f32s, scalar_i64, session, session_run, want, while_model};

#[test]
fn a_loop_whose_condition_is_computed_from_data_runs_its_body_once_per_iteration() {
    let model = while_model();
    let compiler = Arc::new(OnnxCompiler::new(model.clone(), OnnxOptions::default()));
    let segments = compiler.segments().expect("segments");
    let body = segments.segments.iter().find(|s| s.repeat.is_some()).expect("a loop segment");
    // The iteration number, the condition, `acc` and `grow`, then `big`; the captured constant `step`
    // is the body's own.
    let names: Vec<&str> = body.compiler.onnx_model().inputs().iter().map(|t| t.name()).collect();
    assert_eq!(names, ["i", "c", "acc_in", "grow_in", "big"]);
    assert_eq!(body.inputs.len(), 3, "{:?}", body.inputs);
    assert_eq!(compiler.value_inputs(), &[] as &[usize], "neither big nor the trip count keys the model's programs");
    for (total, m) in CASES {
        let inputs = [big(total), scalar_i64(m)];
        check(&model.run_once(&inputs).unwrap(), total, m, "run_once");
        check(&saggar_onnx::run_on_host(&compiler, &inputs).unwrap(), total, m, "run_on_host");
    }
    let iterations = while_common::runs_on::<HostBackend>(HostBackend::open(0).unwrap());
    assert_eq!(iterations, CASES.iter().map(|&(t, m)| want(t, m).0[0] as u64).sum::<u64>());
}

#[test]
fn a_while_loop_that_never_stops_is_a_typed_error_at_its_iteration_limit() {
    let options = OnnxOptions::default().with_max_loop_iterations(6);
    let compiler = Arc::new(OnnxCompiler::new(while_model(), options));
    let inputs = [big(1e6), scalar_i64(i64::MAX)];
    match saggar_onnx::run_on_host(&compiler, &inputs).unwrap_err() {
        OnnxError::Request { reason, .. } => {
            assert!(reason.contains("Loop") && reason.contains("6 iterations"), "{reason}")
        }
        other => panic!("expected a request error, got {other}"),
    }
    let session = session::<HostBackend>(HostBackend::open(0).unwrap(), compiler);
    match session_run(&session, &inputs).unwrap_err() {
        DispatchError::LoopIterations { node, limit } => assert_eq!((node.contains("Loop"), limit), (true, 6)),
        other => panic!("expected LoopIterations, got {other}"),
    }
    // Under the limit the same session still answers.
    check(&session_run(&session, &[big(3.5), scalar_i64(100)]).unwrap(), 3.5, 100, "after the failure");
}

#[test]
fn scan_outputs_whose_extents_change_between_iterations_are_a_typed_error_naming_the_loop() {
    let compiler = Arc::new(OnnxCompiler::new(while_common::while_model_scanning(true), OnnxOptions::default()));
    let inputs = [big(3.5), scalar_i64(100)];
    match saggar_onnx::run_on_host(&compiler, &inputs).unwrap_err() {
        OnnxError::Request { reason, .. } => {
            assert!(reason.contains("Loop") && reason.contains("scan output 0"), "{reason}")
        }
        other => panic!("expected a request error, got {other}"),
    }
    let session = session::<HostBackend>(HostBackend::open(0).unwrap(), compiler);
    let message = session_run(&session, &inputs).unwrap_err().to_string();
    assert!(message.contains("Loop") && message.contains("scan output 0"), "{message}");
    // One iteration stacks one row: no mismatch.
    let out = session_run(&session, &[big(0.5), scalar_i64(100)]).unwrap();
    assert_eq!(out[2].dims(), [1, 2]);
}

#[test]
fn a_while_loop_whose_body_computes_extents_from_data_is_refused_naming_the_node() {
    // The body keeps the elements of `big` above the carried value: NonZero in a loop run at run time.
    let mut bb = ModelBuilder::new(17);
    for (n, t) in [("i", DType::I64), ("c", DType::Bool), ("acc_in", DType::F32)] {
        bb.input(n, t, &[]);
    }
    bb.initializer("one", &f32s(&[], &[1.0])).initializer("zero_i", &scalar_i64(0));
    bb.node("Add", &["acc_in", "one"], &["acc_out"], &[]);
    bb.node("Greater", &["big", "acc_out"], &["mask"], &[]);
    bb.node("NonZero", &["mask"], &["nz"], &[]);
    bb.node("Size", &["nz"], &["count"], &[]);
    bb.node("Greater", &["count", "zero_i"], &["c_out"], &[]);
    bb.output("c_out", DType::Bool, &[]).output("acc_out", DType::F32, &[]);
    let mut body = bb.graph().clone();
    body.name = "body".into();
    let mut b = ModelBuilder::new(17);
    b.input("big", DType::F32, &[Dim::Fixed(BIG as u64)]);
    b.initializer("acc0", &f32s(&[], &[0.0]));
    b.control_node("Loop", &["", "", "acc0"], &["acc"], &[], &[("body", &body)]);
    b.output("acc", DType::F32, &[]);
    let model = OnnxModel::from_bytes(&b.to_bytes(), "while", &ImportLimits::default()).unwrap();
    let message = model.run_once(&[big(3.0)]).unwrap_err().to_string();
    assert!(message.contains("Loop") && message.contains("a body one program runs"), "{message}");
}

#[test]
fn a_torchscript_while_loop_runs_as_exported() {
    let model = while_common::halve_model();
    let compiler = OnnxCompiler::new(model.clone(), OnnxOptions::default());
    for (rows, scale) in while_common::HALVE_CASES {
        let (x, y, steps) = while_common::halve_case(rows, scale);
        for (what, out) in [
            ("run_once", model.run_once(std::slice::from_ref(&x)).unwrap()),
            ("run_on_host", saggar_onnx::run_on_host(&compiler, std::slice::from_ref(&x)).unwrap()),
        ] {
            assert_eq!(while_common::floats(&out[0]), y, "{what}: y at scale {scale}");
            assert_eq!(while_common::floats(&out[1]), [steps], "{what}: steps at scale {scale}");
        }
    }
    while_common::halve_runs_on::<HostBackend>(HostBackend::open(0).unwrap());
}
