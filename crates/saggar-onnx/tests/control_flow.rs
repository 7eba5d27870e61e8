//! Control flow (If, Loop, Scan) inlined at import or per compile: each op and mode run through
//! `run_once` and the host compile, and every refusal a typed error naming the node.

use saggar_device::BackendKind;
use saggar_onnx::builder::ModelBuilder;
use saggar_onnx::ops::Attribute;
use saggar_onnx::proto::GraphProto;
use saggar_onnx::{ImportLimits, OnnxCompiler, OnnxError, OnnxModel, OnnxOptions, Tensor, TensorData};
use saggar_shape::{DType, Dim};

fn fixed(d: &[u64]) -> Vec<Dim> {
    d.iter().map(|&v| Dim::Fixed(v)).collect()
}

fn f32s(dims: &[usize], v: &[f32]) -> Tensor {
    Tensor::new(dims.to_vec(), TensorData::F32(v.to_vec())).unwrap()
}

fn scalar_i64(v: i64) -> Tensor {
    Tensor::new(vec![], TensorData::I64(vec![v])).unwrap()
}

fn flag(v: bool) -> Tensor {
    Tensor::new(vec![], TensorData::Bool(vec![u8::from(v)])).unwrap()
}

fn floats(t: &Tensor) -> Vec<f32> {
    match t.data() {
        TensorData::F32(v) => v.clone(),
        other => panic!("expected f32, found {other:?}"),
    }
}

/// A subgraph: `inputs` and `outputs` declared (types only as hints), nodes added by `nodes`.
fn graph(name: &str, inputs: &[(&str, DType)], outputs: &[&str], nodes: impl FnOnce(&mut ModelBuilder)) -> GraphProto {
    let mut b = ModelBuilder::new(17);
    for (n, t) in inputs {
        b.input(n, *t, &[]);
    }
    nodes(&mut b);
    for o in outputs {
        b.output(o, DType::F32, &[]);
    }
    let mut g = b.graph().clone();
    g.name = name.to_string();
    g
}

fn import(b: &ModelBuilder) -> Result<OnnxModel, OnnxError> {
    OnnxModel::from_bytes(&b.to_bytes(), "control", &ImportLimits::default())
}

fn has_op(model: &OnnxModel, op: &str) -> bool {
    model.graph().nodes.iter().any(|n| n.op_type == op)
}

/// The node name and message of an [`OnnxError::Node`].
fn node_error(e: &OnnxError) -> (String, String) {
    match e {
        OnnxError::Node { node, source, .. } => (node.clone(), source.to_string()),
        other => panic!("expected a node error, found {other}"),
    }
}

/// `y = If(cond) then x + 1 else x * 10`, the branches reading `x` and constants from outside.
fn if_model(cond: Option<bool>) -> ModelBuilder {
    let then_branch = graph("then", &[], &["t"], |b| {
        b.node("Add", &["x", "one"], &["t"], &[]);
    });
    let else_branch = graph("else", &[], &["e"], |b| {
        b.node("Mul", &["x", "ten"], &["e"], &[]);
    });
    let mut b = ModelBuilder::new(17);
    b.input("x", DType::F32, &fixed(&[2]));
    match cond {
        Some(c) => b.initializer("c", &flag(c)),
        None => b.input("c", DType::Bool, &[]),
    };
    b.initializer("one", &f32s(&[], &[1.0])).initializer("ten", &f32s(&[], &[10.0]));
    b.control_node("If", &["c"], &["y"], &[], &[("then_branch", &then_branch), ("else_branch", &else_branch)]);
    b.output("y", DType::F32, &fixed(&[2]));
    b
}

#[test]
fn an_if_on_a_constant_is_its_branch_from_import() {
    for (cond, want) in [(true, [2.0, 3.0]), (false, [10.0, 20.0])] {
        let model = import(&if_model(Some(cond))).unwrap();
        assert!(!has_op(&model, "If") && !has_op(&model, "Identity"), "{:?}", model.graph().nodes);
        let y = model.run_once(&[f32s(&[2], &[1.0, 2.0])]).unwrap();
        assert_eq!(floats(&y[0]), want);
    }
}

#[test]
fn an_if_on_a_model_input_makes_it_a_value_input() {
    let model = import(&if_model(None)).unwrap();
    assert!(has_op(&model, "If"));
    assert_eq!(model.outputs()[0].dims(), &fixed(&[2]));
    let compiler = OnnxCompiler::new(model.clone(), OnnxOptions::default());
    assert_eq!(compiler.value_inputs(), &[1]);
    let x = f32s(&[2], &[1.0, 2.0]);
    assert_eq!(floats(&model.run_once(&[x.clone(), flag(true)]).unwrap()[0]), [2.0, 3.0]);
    assert_eq!(floats(&model.run_once(&[x, flag(false)]).unwrap()[0]), [10.0, 20.0]);
    // Unbound, the condition is data: the compile says what the node needs.
    let e = compiler.plan_summary(&[vec![2], vec![]], BackendKind::Host).unwrap_err();
    let (node, message) = node_error(&e);
    assert_eq!(node, "If:y");
    assert!(message.contains("condition `c`") && message.contains("value inputs [\"c\"]"), "{message}");
}

#[test]
fn nested_ifs_read_values_two_scopes_out() {
    // y = If(a) then (If(b) then x + 1 else x * 10) else x.
    let inner_then = graph("inner_then", &[], &["it"], |b| {
        b.node("Add", &["x", "one"], &["it"], &[]);
    });
    let inner_else = graph("inner_else", &[], &["ie"], |b| {
        b.node("Mul", &["x", "ten"], &["ie"], &[]);
    });
    let outer_then = graph("outer_then", &[], &["ot"], |b| {
        b.control_node("If", &["b"], &["ot"], &[], &[("then_branch", &inner_then), ("else_branch", &inner_else)]);
    });
    let outer_else = graph("outer_else", &[], &["x"], |_| {});
    let mut b = ModelBuilder::new(17);
    b.input("x", DType::F32, &fixed(&[2])).input("a", DType::Bool, &[]).input("b", DType::Bool, &[]);
    b.initializer("one", &f32s(&[], &[1.0])).initializer("ten", &f32s(&[], &[10.0]));
    b.control_node("If", &["a"], &["y"], &[], &[("then_branch", &outer_then), ("else_branch", &outer_else)]);
    b.output("y", DType::F32, &fixed(&[2]));
    let model = import(&b).unwrap();
    let compiler = OnnxCompiler::new(model.clone(), OnnxOptions::default());
    assert_eq!(compiler.value_inputs(), &[1, 2], "both conditions decide the program");
    let x = f32s(&[2], &[1.0, 2.0]);
    let run = |a, b| floats(&model.run_once(&[x.clone(), flag(a), flag(b)]).unwrap()[0]);
    assert_eq!(run(true, true), [2.0, 3.0]);
    assert_eq!(run(true, false), [10.0, 20.0]);
    assert_eq!(run(false, true), [1.0, 2.0]);

    let shallow = ImportLimits { max_subgraph_depth: 1, ..ImportLimits::default() };
    let e = OnnxModel::from_bytes(&b.to_bytes(), "deep", &shallow).unwrap_err();
    assert!(matches!(e, OnnxError::TooLarge { field: "max_subgraph_depth", .. }), "{e}");
}

#[test]
fn if_branches_of_different_types_are_an_error_naming_the_node() {
    let then_branch = graph("then", &[], &["t"], |b| {
        b.node("Add", &["x", "one"], &["t"], &[]);
    });
    let else_branch = graph("else", &[], &["e"], |b| {
        b.node("Cast", &["x"], &["e"], &[("to", Attribute::Int(7))]);
    });
    let mut b = ModelBuilder::new(17);
    b.input("x", DType::F32, &fixed(&[2])).input("c", DType::Bool, &[]);
    b.initializer("one", &f32s(&[], &[1.0]));
    b.control_node("If", &["c"], &["y"], &[], &[("then_branch", &then_branch), ("else_branch", &else_branch)]);
    b.output("y", DType::F32, &fixed(&[2]));
    let (node, message) = node_error(&import(&b).unwrap_err());
    assert_eq!(node, "If:y");
    assert!(message.contains("f32") && message.contains("i64") && message.contains("element type"), "{message}");
}

/// `Loop(M, cond, acc)`: the body adds the outer `x` to `acc`, its condition is `cond_of(b)`
/// (which defines `cond_out` from `iter`, `cond_in`, `acc_in`), and it scans `acc_out`.
fn loop_model(trip: Option<i64>, cond: Option<bool>, cond_of: impl FnOnce(&mut ModelBuilder)) -> ModelBuilder {
    let body = graph(
        "body",
        &[("iter", DType::I64), ("cond_in", DType::Bool), ("acc_in", DType::F32)],
        &["cond_out", "acc_out", "scan"],
        |b| {
            b.node("Add", &["acc_in", "x"], &["acc_out"], &[]);
            b.node("Identity", &["acc_out"], &["scan"], &[]);
            cond_of(b);
        },
    );
    let mut b = ModelBuilder::new(17);
    b.input("x", DType::F32, &fixed(&[2]));
    b.initializer("acc0", &f32s(&[2], &[0.0, 100.0]));
    let m = match trip {
        Some(m) => {
            b.initializer("M", &scalar_i64(m));
            "M"
        }
        None => "",
    };
    let c = match cond {
        Some(c) => {
            b.initializer("c0", &flag(c));
            "c0"
        }
        None => "",
    };
    b.control_node("Loop", &[m, c, "acc0"], &["acc", "scans"], &[], &[("body", &body)]);
    b.output("acc", DType::F32, &fixed(&[2])).output("scans", DType::F32, &[]);
    b
}

fn keep_going(b: &mut ModelBuilder) {
    b.node("Identity", &["cond_in"], &["cond_out"], &[]);
}

/// `cond_out = acc_out[0] < limit` (a scalar compare of the carried value).
fn below(limit: f32) -> impl FnOnce(&mut ModelBuilder) {
    move |b: &mut ModelBuilder| {
        b.initializer("limit", &f32s(&[], &[limit])).initializer("zero_i", &scalar_i64(0));
        b.node("Gather", &["acc_out", "zero_i"], &["first"], &[("axis", Attribute::Int(0))]);
        b.node("Less", &["first", "limit"], &["cond_out"], &[]);
    }
}

fn run_loop(b: &ModelBuilder) -> (Vec<f32>, Vec<usize>, Vec<f32>) {
    let model = import(b).unwrap();
    let out = model.run_once(&[f32s(&[2], &[1.0, 2.0])]).unwrap();
    (floats(&out[0]), out[1].dims().to_vec(), floats(&out[1]))
}

#[test]
fn a_loop_with_a_trip_count_only_unrolls_that_many_times() {
    let (acc, dims, scans) = run_loop(&loop_model(Some(3), None, keep_going));
    assert_eq!(acc, [3.0, 106.0]);
    assert_eq!(dims, [3, 2]);
    assert_eq!(scans, [1.0, 102.0, 2.0, 104.0, 3.0, 106.0]);
    // Unrolled at import: M and cond are constants.
    assert!(!has_op(&import(&loop_model(Some(3), None, keep_going)).unwrap(), "Loop"));
}

#[test]
fn a_loop_with_a_condition_only_runs_until_it_is_false() {
    let (acc, dims, _) = run_loop(&loop_model(None, Some(true), below(4.0)));
    assert_eq!((acc, dims), (vec![4.0, 108.0], vec![4, 2]));
    // No cond input at all: true.
    let (acc, _, _) = run_loop(&loop_model(None, None, below(2.0)));
    assert_eq!(acc, [2.0, 104.0]);
}

#[test]
fn a_loop_with_both_stops_at_whichever_comes_first() {
    assert_eq!(run_loop(&loop_model(Some(10), Some(true), below(4.0))).1, [4, 2]);
    assert_eq!(run_loop(&loop_model(Some(2), Some(true), below(4.0))).1, [2, 2]);
    // A false initial condition runs nothing: the carried value is the initial one, the scan
    // output empty.
    let (acc, dims, _) = run_loop(&loop_model(Some(3), Some(false), keep_going));
    assert_eq!((acc, dims), (vec![0.0, 100.0], vec![0, 2]));
}

#[test]
fn a_loop_trip_count_from_a_model_input_is_a_value_input() {
    let body =
        graph("body", &[("i", DType::I64), ("c", DType::Bool), ("acc_in", DType::F32)], &["c_out", "acc_out"], |b| {
            b.node("Cast", &["i"], &["fi"], &[("to", Attribute::Int(1))]);
            b.node("Add", &["acc_in", "fi"], &["acc_out"], &[]);
            b.node("Identity", &["c"], &["c_out"], &[]);
        });
    let mut b = ModelBuilder::new(17);
    b.input("n", DType::I64, &[]).input("go", DType::Bool, &[]);
    b.initializer("acc0", &f32s(&[1], &[0.5]));
    b.control_node("Loop", &["n", "go", "acc0"], &["acc"], &[], &[("body", &body)]);
    b.output("acc", DType::F32, &fixed(&[1]));
    let model = import(&b).unwrap();
    assert_eq!(OnnxCompiler::new(model.clone(), OnnxOptions::default()).value_inputs(), &[0, 1]);
    // 0 + 1 + 2 + 3 + 4 over five iterations.
    assert_eq!(floats(&model.run_once(&[scalar_i64(5), flag(true)]).unwrap()[0]), [10.5]);
    assert_eq!(floats(&model.run_once(&[scalar_i64(5), flag(false)]).unwrap()[0]), [0.5]);
    assert_eq!(floats(&model.run_once(&[scalar_i64(0), flag(true)]).unwrap()[0]), [0.5]);
}

#[test]
fn a_loop_that_never_stops_or_runs_absurdly_long_is_an_error_naming_the_value() {
    let model = import(&loop_model(None, Some(true), keep_going)).unwrap();
    assert!(has_op(&model, "Loop"), "left for the compile");
    let (node, message) = node_error(&model.run_once(&[f32s(&[2], &[1.0, 2.0])]).unwrap_err());
    assert_eq!(node, "Loop:acc");
    assert!(message.contains("`cond_out`") && message.contains("never became false"), "{message}");

    let model = import(&loop_model(Some(1 << 40), None, keep_going)).unwrap();
    let (node, message) = node_error(&model.run_once(&[f32s(&[2], &[1.0, 2.0])]).unwrap_err());
    assert_eq!(node, "Loop:acc");
    assert!(message.contains("trip count `M` = 1099511627776"), "{message}");
}

/// The loop runs at run time (`while_loops.rs` covers the loop segment itself).
#[test]
fn a_loop_condition_computed_from_large_data_runs_at_run_time() {
    // cond_out = ReduceSum(big) > acc_in[0]: `big` is too large to key programs by.
    let body =
        graph("body", &[("i", DType::I64), ("c", DType::Bool), ("acc_in", DType::F32)], &["c_out", "acc_out"], |b| {
            b.initializer("one", &f32s(&[1], &[1.0])).initializer("zero_i", &scalar_i64(0));
            b.node("Add", &["acc_in", "one"], &["acc_out"], &[]);
            b.node("ReduceSum", &["big"], &["total"], &[("keepdims", Attribute::Int(0))]);
            b.node("Gather", &["acc_out", "zero_i"], &["first"], &[("axis", Attribute::Int(0))]);
            b.node("Greater", &["total", "first"], &["c_out"], &[]);
        });
    let mut b = ModelBuilder::new(17);
    b.input("big", DType::F32, &fixed(&[5000]));
    b.initializer("acc0", &f32s(&[1], &[0.0]));
    b.control_node("Loop", &["", "", "acc0"], &["acc"], &[], &[("body", &body)]);
    b.output("acc", DType::F32, &fixed(&[1]));
    let model = import(&b).unwrap();
    let compiler = OnnxCompiler::new(model.clone(), OnnxOptions::default());
    assert!(compiler.value_inputs().is_empty());
    // ReduceSum(big) = 5: the condition holds after iterations 1 to 4 and fails after the fifth; with
    // a zero sum it fails after the first.
    for (each, want) in [(0.001f32, 5.0f32), (0.0, 1.0)] {
        let big = f32s(&[5000], &[each; 5000]);
        assert_eq!(floats(&model.run_once(std::slice::from_ref(&big)).unwrap()[0]), [want]);
        assert_eq!(floats(&saggar_onnx::run_on_host(&compiler, std::slice::from_ref(&big)).unwrap()[0]), [want]);
    }
}

#[test]
fn a_loop_body_with_the_wrong_output_count_is_an_error() {
    let body = graph("body", &[("i", DType::I64), ("c", DType::Bool), ("acc_in", DType::F32)], &["c"], |_| {});
    let mut b = ModelBuilder::new(17);
    b.initializer("acc0", &f32s(&[1], &[0.0])).initializer("M", &scalar_i64(2));
    b.control_node("Loop", &["M", "", "acc0"], &["acc"], &[], &[("body", &body)]);
    b.output("acc", DType::F32, &fixed(&[1]));
    let (node, message) = node_error(&import(&b).unwrap_err());
    assert_eq!(node, "Loop:acc");
    assert!(message.contains("makes 1 outputs"), "{message}");
}

#[test]
fn an_if_inside_a_loop_is_inlined_per_iteration() {
    // acc += (iter even ? 1 : 10), four iterations: 1 + 10 + 1 + 10.
    let then_branch = graph("then", &[], &["t"], |b| {
        b.node("Add", &["acc_in", "one"], &["t"], &[]);
    });
    let else_branch = graph("else", &[], &["e"], |b| {
        b.node("Add", &["acc_in", "ten"], &["e"], &[]);
    });
    let body =
        graph("body", &[("i", DType::I64), ("c", DType::Bool), ("acc_in", DType::F32)], &["c_out", "acc_out"], |b| {
            b.initializer("two", &scalar_i64(2)).initializer("zero_i", &scalar_i64(0));
            b.node("Mod", &["i", "two"], &["r"], &[]);
            b.node("Equal", &["r", "zero_i"], &["even"], &[]);
            b.control_node(
                "If",
                &["even"],
                &["acc_out"],
                &[],
                &[("then_branch", &then_branch), ("else_branch", &else_branch)],
            );
            b.node("Identity", &["c"], &["c_out"], &[]);
        });
    let mut b = ModelBuilder::new(17);
    b.input("x", DType::F32, &fixed(&[1]));
    b.initializer("M", &scalar_i64(4)).initializer("one", &f32s(&[], &[1.0])).initializer("ten", &f32s(&[], &[10.0]));
    b.control_node("Loop", &["M", "", "x"], &["acc"], &[], &[("body", &body)]);
    b.output("acc", DType::F32, &fixed(&[1]));
    let model = import(&b).unwrap();
    assert!(!has_op(&model, "Loop") && !has_op(&model, "If"));
    assert_eq!(floats(&model.run_once(&[f32s(&[1], &[0.5])]).unwrap()[0]), [22.5]);
    // The unrolled nodes lower on a GPU backend like any others.
    let compiler = OnnxCompiler::new(model, OnnxOptions::default());
    compiler.plan_summary(&[vec![1]], BackendKind::Cuda).unwrap();
}

/// A Scan summing its scan inputs into a state and scanning the running sums.
fn scan_body() -> GraphProto {
    graph("body", &[("s_in", DType::F32), ("a", DType::F32), ("b", DType::F32)], &["s_out", "y"], |b| {
        b.node("Add", &["s_in", "a"], &["s1"], &[]);
        b.node("Add", &["s1", "b"], &["s_out"], &[]);
        b.node("Identity", &["s_out"], &["y"], &[]);
    })
}

#[test]
fn scan_honours_axes_and_directions() {
    // a: [3, 2] scanned on axis 0 forward; b: [2, 3] scanned on axis 1 backward; y stacked on axis 1
    // backward.
    let mut b = ModelBuilder::new(17);
    b.input("a", DType::F32, &fixed(&[3, 2])).input("b", DType::F32, &fixed(&[2, 3]));
    b.initializer("s0", &f32s(&[2], &[0.0, 0.0]));
    let attrs = [
        ("num_scan_inputs", Attribute::Int(2)),
        ("scan_input_axes", Attribute::Ints(vec![0, -1])),
        ("scan_input_directions", Attribute::Ints(vec![0, 1])),
        ("scan_output_axes", Attribute::Ints(vec![1])),
        ("scan_output_directions", Attribute::Ints(vec![1])),
    ];
    b.control_node("Scan", &["s0", "a", "b"], &["s", "y"], &attrs, &[("body", &scan_body())]);
    b.output("s", DType::F32, &fixed(&[2])).output("y", DType::F32, &fixed(&[2, 3]));
    let model = import(&b).unwrap();
    assert!(!has_op(&model, "Scan"), "the extent is fixed: unrolled at import");
    let a = f32s(&[3, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let bb = f32s(&[2, 3], &[10.0, 20.0, 30.0, 40.0, 50.0, 60.0]);
    let out = model.run_once(&[a, bb]).unwrap();
    // Step 0: a[0] + b[:, 2] = [1+30, 2+60]; step 1: + a[1] + b[:, 1]; step 2: + a[2] + b[:, 0].
    let steps = [[31.0, 62.0], [54.0, 116.0], [69.0, 162.0]];
    assert_eq!(floats(&out[0]), steps[2]);
    assert_eq!(out[1].dims(), &[2, 3]);
    // Stacked on axis 1, last step first.
    assert_eq!(floats(&out[1]), [69.0, 54.0, 31.0, 162.0, 116.0, 62.0]);
    // The steps (Gather, Add, Unsqueeze, Concat) lower on a GPU backend like any other nodes.
    let compiler = OnnxCompiler::new(model, OnnxOptions::default());
    compiler.plan_summary(&[vec![3, 2], vec![2, 3]], BackendKind::Cuda).unwrap();
}

#[test]
fn scan_at_opset_8_scans_each_batch_element() {
    let mut b = ModelBuilder::new(8);
    b.input("s0", DType::F32, &fixed(&[2, 1])).input("a", DType::F32, &fixed(&[2, 3, 1]));
    b.input("b", DType::F32, &fixed(&[2, 3, 1]));
    let attrs = [("num_scan_inputs", Attribute::Int(2)), ("directions", Attribute::Ints(vec![0, 1]))];
    b.control_node("Scan", &["", "s0", "a", "b"], &["s", "y"], &attrs, &[("body", &scan_body())]);
    b.output("s", DType::F32, &fixed(&[2, 1])).output("y", DType::F32, &fixed(&[2, 3, 1]));
    let model = import(&b).unwrap();
    let s0 = f32s(&[2, 1], &[0.0, 100.0]);
    let a = f32s(&[2, 3, 1], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let bb = f32s(&[2, 3, 1], &[10.0, 20.0, 30.0, 40.0, 50.0, 60.0]);
    let out = model.run_once(&[s0, a, bb]).unwrap();
    // Batch 0: 0 + (1 + 30), + (2 + 20), + (3 + 10); batch 1: 100 + (4 + 60), + (5 + 50), + (6 + 40).
    assert_eq!(floats(&out[0]), [66.0, 265.0]);
    assert_eq!(out[1].dims(), &[2, 3, 1]);
    assert_eq!(floats(&out[1]), [31.0, 53.0, 66.0, 164.0, 219.0, 265.0]);
}

#[test]
fn scan_with_a_symbolic_sequence_unrolls_per_compile() {
    let mut b = ModelBuilder::new(17);
    b.input("a", DType::F32, &[Dim::symbolic("seq"), Dim::Fixed(1)]);
    b.initializer("s0", &f32s(&[1], &[0.0])).initializer("b", &f32s(&[1, 1], &[0.0]));
    // `b` is one step long on axis 1 (transposed): every step reads it.
    b.node("Expand", &["b", "shape_b"], &["bb"], &[]);
    b.node("Shape", &["a"], &["shape_a"], &[]);
    b.initializer("perm_src", &Tensor::from_i64s(vec![1, 0]));
    b.node("Gather", &["shape_a", "perm_src"], &["shape_b"], &[("axis", Attribute::Int(0))]);
    let attrs = [("num_scan_inputs", Attribute::Int(2)), ("scan_input_axes", Attribute::Ints(vec![0, 1]))];
    b.control_node("Scan", &["s0", "a", "bb"], &["s", "y"], &attrs, &[("body", &scan_body())]);
    b.output("s", DType::F32, &fixed(&[1])).output("y", DType::F32, &[]);
    let model = import(&b).unwrap();
    assert!(has_op(&model, "Scan"));
    assert_eq!(model.outputs()[1].dims()[0], Dim::symbolic("seq"));
    let out = model.run_once(&[f32s(&[4, 1], &[1.0, 2.0, 3.0, 4.0])]).unwrap();
    assert_eq!(floats(&out[0]), [10.0]);
    assert_eq!(floats(&out[1]), [1.0, 3.0, 6.0, 10.0]);
}

#[test]
fn hostile_subgraphs_are_typed_errors() {
    // Bytes that are not a GraphProto.
    let mut b = if_model(None);
    b.graph_mut().node[0].attribute[0].g = Some(vec![0xff; 9]);
    let e = import(&b).unwrap_err();
    assert!(matches!(e, OnnxError::Decode { message: "GraphProto", .. }), "{e}");
    // Subgraph nodes count against the node limit.
    let few = ImportLimits { max_nodes: 2, ..ImportLimits::default() };
    let e = OnnxModel::from_bytes(&if_model(None).to_bytes(), "few", &few).unwrap_err();
    assert!(matches!(e, OnnxError::TooLarge { field: "max_nodes", .. }), "{e}");
    // A name no enclosing graph defines.
    let lost = graph("then", &[], &["t"], |b| {
        b.node("Neg", &["nowhere"], &["t"], &[]);
    });
    let mut b = ModelBuilder::new(17);
    b.input("c", DType::Bool, &[]);
    b.control_node("If", &["c"], &["y"], &[], &[("then_branch", &lost), ("else_branch", &lost)]);
    b.output("y", DType::F32, &[]);
    let e = import(&b).unwrap_err();
    assert!(e.to_string().contains("`nowhere`"), "{e}");
}

#[test]
fn an_if_on_a_condition_computed_from_data_runs_as_segments() {
    use saggar_device::Backend as _;
    // c = ReduceSum(x) > 0 over 5,000 elements (too many to key programs by): a boundary value.
    let then_branch = graph("then", &[], &["t"], |b| {
        b.node("Add", &["x", "one"], &["t"], &[]);
    });
    let else_branch = graph("else", &[], &["e"], |b| {
        b.node("Mul", &["x", "ten"], &["e"], &[]);
    });
    let mut b = ModelBuilder::new(17);
    b.input("x", DType::F32, &fixed(&[5000]));
    b.initializer("one", &f32s(&[], &[1.0])).initializer("ten", &f32s(&[], &[10.0]));
    b.initializer("zero", &f32s(&[], &[0.0]));
    b.node("ReduceSum", &["x"], &["total"], &[("keepdims", Attribute::Int(0))]);
    b.node("Greater", &["total", "zero"], &["c"], &[]);
    b.control_node("If", &["c"], &["y"], &[], &[("then_branch", &then_branch), ("else_branch", &else_branch)]);
    b.output("y", DType::F32, &fixed(&[5000]));
    let model = import(&b).unwrap();
    let compiler = std::sync::Arc::new(OnnxCompiler::new(model.clone(), OnnxOptions::default()));
    assert!(compiler.value_inputs().is_empty(), "x is data");
    let config = saggar_dispatch::SessionConfig::builder().build().unwrap();
    let device = saggar_device::host::HostBackend::open(0).unwrap();
    let session: saggar_dispatch::Session<saggar_device::host::HostBackend, _> =
        saggar_dispatch::Session::new(device, compiler.clone(), config, &|_| {}).unwrap();
    assert!(session.is_segmented());
    for (sign, want) in [(1.0f32, 3.0f32), (-1.0, -20.0), (1.0, 3.0)] {
        let x = f32s(&[5000], &vec![2.0 * sign; 5000]);
        assert_eq!(floats(&model.run_once(std::slice::from_ref(&x)).unwrap()[0])[0], want);
        assert_eq!(floats(&saggar_onnx::run_on_host(&compiler, std::slice::from_ref(&x)).unwrap()[0])[0], want);
        let (dims, bytes) = ([5000u64], x.to_le_bytes());
        let host = [saggar_dispatch::HostTensor { name: "x", dtype: DType::F32, dims: &dims, data: &bytes }];
        let out = session.run(&host).unwrap();
        assert_eq!(f32::from_le_bytes(out[0].data[..4].try_into().unwrap()), want);
    }
    let st = session.stats();
    assert_eq!((st.segment_reads, st.shape_programs), (3, 2), "a program per branch taken: {st:?}");
}

/// A branch that computes with captured data makes it no value input, even where the If's output
/// extent is fresh (the branches disagree): only the condition and values that fix extents inside
/// a branch key the program. A detector's `If(boxes.numel() == 0)` around its NMS captures the
/// scores, which keyed every program by them.
#[test]
fn an_if_keys_its_program_by_its_condition_not_by_the_data_its_branches_read() {
    let then_branch = graph("then", &[], &["t"], |b| {
        b.node("Slice", &["x", "zero", "one_i"], &["t"], &[]);
    });
    let else_branch = graph("else", &[], &["e"], |b| {
        b.node("Relu", &["x"], &["e"], &[]);
    });
    let mut b = ModelBuilder::new(17);
    b.input("x", DType::F32, &[Dim::symbolic("n")]);
    b.input("c", DType::Bool, &[]);
    b.initializer("zero", &Tensor::from_i64s(vec![0])).initializer("one_i", &Tensor::from_i64s(vec![1]));
    b.control_node("If", &["c"], &["y"], &[], &[("then_branch", &then_branch), ("else_branch", &else_branch)]);
    b.output("y", DType::F32, &[]);
    let model = import(&b).unwrap();
    assert_eq!(OnnxCompiler::new(model.clone(), OnnxOptions::default()).value_inputs(), &[1], "c alone");
    let x = f32s(&[3], &[-1.0, 2.0, -3.0]);
    assert_eq!(floats(&model.run_once(&[x.clone(), flag(false)]).unwrap()[0]), [0.0, 2.0, 0.0]);
    assert_eq!(floats(&model.run_once(&[x, flag(true)]).unwrap()[0]), [-1.0]);
}

/// A detector's pattern: `If(c)` over data, whose then-branch runs NonZero (an extent its data
/// decides) and whose else-branch makes an empty result. Both branches are copied into the graph and
/// an `If.select` keeps the taken one's output, so the NonZero inside is cut into segments like one
/// outside; the session, `run_on_host` and the reference evaluator agree on both sides.
#[test]
fn a_bounded_op_inside_an_if_branch_runs_as_segments() {
    use saggar_device::Backend as _;
    let then_branch = graph("then", &[], &["t"], |b| {
        b.node("NonZero", &["x"], &["t"], &[]);
    });
    let else_branch = graph("else", &[], &["e"], |b| {
        b.node("Identity", &["empty"], &["e"], &[]);
    });
    let mut b = ModelBuilder::new(17);
    b.input("x", DType::F32, &fixed(&[6]));
    b.initializer("zero", &f32s(&[], &[0.0]));
    b.initializer("empty", &Tensor::new(vec![1, 0], TensorData::I64(vec![])).unwrap());
    b.node("ReduceSum", &["x"], &["total"], &[("keepdims", Attribute::Int(0))]);
    b.node("Greater", &["total", "zero"], &["c"], &[]);
    b.control_node("If", &["c"], &["y"], &[], &[("then_branch", &then_branch), ("else_branch", &else_branch)]);
    b.output("y", DType::I64, &[]);
    let model = import(&b).unwrap();
    let compiler = std::sync::Arc::new(OnnxCompiler::new(model.clone(), OnnxOptions::default()));
    let config = saggar_dispatch::SessionConfig::builder().build().unwrap();
    let device = saggar_device::host::HostBackend::open(0).unwrap();
    let session: saggar_dispatch::Session<saggar_device::host::HostBackend, _> =
        saggar_dispatch::Session::new(device, compiler.clone(), config, &|_| {}).unwrap();
    assert!(session.is_segmented());
    for (values, want) in [(vec![0.0, 2.0, 0.0, 3.0, 0.0, 1.0], vec![1i64, 3, 5]), (vec![-1.0; 6], vec![])] {
        let x = f32s(&[6], &values);
        for (what, got) in [
            ("run_once", model.run_once(std::slice::from_ref(&x)).unwrap()),
            ("run_on_host", saggar_onnx::run_on_host(&compiler, std::slice::from_ref(&x)).unwrap()),
        ] {
            assert_eq!(got[0].dims(), &[1, want.len()], "{what}");
            assert_eq!(got[0].data(), &TensorData::I64(want.clone()), "{what}");
        }
        let (dims, bytes) = ([6u64], x.to_le_bytes());
        let host = [saggar_dispatch::HostTensor { name: "x", dtype: DType::F32, dims: &dims, data: &bytes }];
        let out = session.run(&host).unwrap();
        assert_eq!(out[0].dims, [1, want.len() as u64]);
        let got: Vec<i64> = out[0].data.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect();
        assert_eq!(got, want);
    }
}
