//! The data-dependent ops on the GPU: Compress of a constant condition in the every-kind model (its
//! output shape is known, so the standard op lowers), and the bounded forms of NonZero, Compress,
//! Unique and NonMaxSuppression, which no imported model lowers yet (segmented runs do): their
//! launches, with every input taken as a run-time value, run on the CPU and compared bit for bit
//! with the host evaluation, the outputs filled with a pattern beforehand (the kernels must write
//! every element). TopK over long rows runs the same way (its `k` a constant).

use std::fmt::Write as _;

use saggar_shape::DType;

use super::{Kinds, f32s};
use crate::gpu_emulation::build_and_run;
use crate::ops::Attribute::Int;
use crate::ops::gpu::{GpuCtx, GpuNode, Operand, PRELUDE, Slot, kernel_definition};
use crate::ops::{Attribute, Attributes, EvalInputs, InferInput, InferInputs, NodeCtx, Op, ValueType, lookup};
use crate::plan::launch::launch_config;
use crate::{Tensor, TensorData};

/// Compress of constant conditions over the model input: along an axis and flattened.
pub(super) fn data_dependent_nodes(k: &mut Kinds) {
    let bools = |v: Vec<u8>| Tensor::new(vec![v.len()], TensorData::Bool(v)).unwrap();
    k.init("cmp_rows", bools(vec![1, 0, 1]));
    k.init("cmp_flat", bools((0..130).map(|i| u8::from(i % 3 != 1)).collect()));
    k.node("Compress", &["x", "cmp_rows"], &["cmp_axis"], &[("axis", Int(-3))], DType::F32);
    k.node("Compress", &["x", "cmp_flat"], &["cmp_all"], &[], DType::F32);
}

/// One bounded op (or a plain one) on its inputs; the inputs in `known` are constants when it is
/// lowered, the others run-time values. The first `compared` outputs are compared (a bounded form's
/// working memory after its count is not).
struct Case {
    what: String,
    op: std::sync::Arc<dyn Op>,
    inputs: Vec<Option<Tensor>>,
    known: Vec<usize>,
    compared: usize,
}

fn case(op_type: &str, opset: u32, attrs: &[(&str, i64)], inputs: Vec<Option<Tensor>>, outputs: usize) -> Case {
    let a = Attributes(attrs.iter().map(|(k, v)| (k.to_string(), Attribute::Int(*v))).collect());
    let op = (lookup(op_type, opset).unwrap().build)(&mut NodeCtx::new(&a, opset, inputs.len(), outputs)).unwrap();
    let bounded = op.bounded().unwrap();
    let compared = bounded.cuts.len() + 1;
    Case { what: format!("{} {attrs:?}", bounded.op_type), op: bounded.op, inputs, known: Vec::new(), compared }
}

/// A plain op (one without a bounded form) on its inputs, those in `known` constants.
fn plain_case(op_type: &str, opset: u32, attrs: &[(&str, i64)], inputs: Vec<Option<Tensor>>, known: &[usize]) -> Case {
    let a = Attributes(attrs.iter().map(|(k, v)| (k.to_string(), Attribute::Int(*v))).collect());
    let op = (lookup(op_type, opset).unwrap().build)(&mut NodeCtx::new(&a, opset, inputs.len(), 2)).unwrap();
    let dims: Vec<Vec<usize>> = inputs.iter().flatten().map(|t| t.dims().to_vec()).collect();
    Case { what: format!("{op_type} {attrs:?} on {dims:?}"), op: op.into(), inputs, known: known.to_vec(), compared: 2 }
}

/// The host's outputs of `c` and its launches, every input a run-time value.
fn host_and_launches(c: &Case) -> (Vec<Tensor>, GpuNode) {
    let types: Vec<Option<ValueType>> =
        c.inputs.iter().map(|t| t.as_ref().map(|t| ValueType::fixed(t.dtype(), t.dims()))).collect();
    let infer: Vec<Option<InferInput<'_>>> = types
        .iter()
        .zip(&c.inputs)
        .enumerate()
        .map(|(i, (t, v))| {
            let value = if c.known.contains(&i) { v.as_ref() } else { None };
            t.as_ref().map(|ty| InferInput { ty, value, dims_value: None })
        })
        .collect();
    let infer = InferInputs::new(&infer);
    let out_types = c.op.infer(&infer).unwrap();
    let mut outputs: Vec<Tensor> =
        out_types.iter().map(|t| Tensor::zeros(t.dtype, t.fixed_dims().unwrap()).unwrap()).collect();
    let views: Vec<_> = c.inputs.iter().map(|t| t.as_ref().map(Tensor::view)).collect();
    let mut outs: Vec<_> = outputs.iter_mut().map(Tensor::view_mut).collect();
    c.op.eval(&EvalInputs::new(&views), &mut outs).unwrap();
    let operand = |t: &Tensor| Operand { dtype: t.dtype(), dims: t.dims().to_vec() };
    let ins: Vec<Option<Operand>> = c.inputs.iter().map(|t| t.as_ref().map(operand)).collect();
    let outs: Vec<Operand> = outputs.iter().map(operand).collect();
    let node = c.op.gpu(&GpuCtx { inputs: &ins, outputs: &outs, infer: &infer }).unwrap().unwrap();
    (outputs, node)
}

/// Runs every case's launches in one program on the CPU and compares each output with the host's.
fn check(cases: &[Case]) {
    let dir = tempfile::tempdir().unwrap();
    let file = |name: String| dir.path().join(name).to_string_lossy().into_owned();
    let (mut source, mut main, mut names) = (String::new(), String::from("int main() {\n"), Vec::new());
    let mut expected = Vec::new();
    for (n, c) in cases.iter().enumerate() {
        let (want, node) = host_and_launches(c);
        let GpuNode::Launches(launches) = node else { panic!("{}: not launches", c.what) };
        main.push_str("  {\n");
        for (i, t) in c.inputs.iter().enumerate() {
            let bytes = t.as_ref().map_or_else(Vec::new, Tensor::to_le_bytes);
            std::fs::write(file(format!("in{n}_{i}.bin")), &bytes).unwrap();
            let _ = writeln!(
                main,
                "    unsigned char* in{i} = load(\"{}\", {});",
                file(format!("in{n}_{i}.bin")),
                bytes.len()
            );
        }
        for (j, t) in want.iter().enumerate() {
            let len = t.to_le_bytes().len();
            std::fs::write(file(format!("out{n}_{j}.bin")), vec![0xa5u8; len]).unwrap();
            let _ = writeln!(main, "    unsigned char* out{j} = load(\"{}\", {len});", file(format!("out{n}_{j}.bin")));
        }
        for (l, launch) in launches.iter().enumerate() {
            let (name, definition) = kernel_definition(&*launch.kernel);
            if !names.contains(&name) {
                let _ = writeln!(source, "{definition}");
                names.push(name.clone());
            }
            let meta: Vec<u8> = launch.meta.iter().flat_map(|w| w.to_le_bytes()).collect();
            std::fs::write(file(format!("meta{n}_{l}.bin")), &meta).unwrap();
            let mut args = vec![format!("load(\"{}\", {})", file(format!("meta{n}_{l}.bin")), meta.len())];
            args.extend(launch.slots.iter().map(|s| match s {
                Slot::In(i) => format!("in{i}"),
                Slot::Out(j) => format!("out{j}"),
            }));
            let cfg = launch_config(launch.work);
            let (g, b) = (cfg.grid, cfg.block);
            let _ = writeln!(
                main,
                "    launch({name}, {}, {}, {}, {}, {}, {{{}}});",
                g.x,
                g.y,
                g.z,
                b.x,
                b.y,
                args.join(", ")
            );
        }
        for (j, t) in want.iter().enumerate() {
            let _ = writeln!(
                main,
                "    store(\"{}\", out{j}, {});",
                file(format!("got{n}_{j}.bin")),
                t.to_le_bytes().len()
            );
        }
        main.push_str("  }\n");
        expected.push(want);
    }
    main.push_str("  return 0;\n}\n");
    let source = [saggar_device::builtin::PRELUDE, PRELUDE, &source].concat();
    if build_and_run(dir.path(), &source, &main).is_none() {
        return;
    }
    for (n, (c, want)) in cases.iter().zip(&expected).enumerate() {
        for (j, w) in want.iter().enumerate().take(c.compared) {
            let got = std::fs::read(file(format!("got{n}_{j}.bin"))).unwrap();
            let first = got.iter().zip(w.to_le_bytes()).position(|(g, w)| *g != w);
            assert!(first.is_none(), "{}: output {j} differs from byte {first:?} on", c.what);
        }
    }
}

fn t(dims: &[usize], data: TensorData) -> Option<Tensor> {
    Some(Tensor::new(dims.to_vec(), data).unwrap())
}

/// Values with repeats, both zeros and NaN among them.
fn spread(n: usize, modulo: usize) -> Vec<f32> {
    (0..n)
        .map(|i| match i % 17 {
            3 => -0.0,
            5 => f32::NAN,
            _ => ((i * 7919) % modulo) as f32 / 4.0 - 2.0,
        })
        .collect()
}

fn nonzero_and_compress_cases() -> Vec<Case> {
    let mut cases = vec![
        case("NonZero", 13, &[], vec![t(&[3, 5, 7], TensorData::F32(spread(105, 9)))], 1),
        // Several chunks of a block's runs (the chunked kernels).
        case("NonZero", 13, &[], vec![t(&[5, 1001], TensorData::F32(spread(5005, 9)))], 1),
        case("NonZero", 13, &[], vec![t(&[3, 7, 900], TensorData::F32(spread(18_900, 5)))], 1),
        case(
            "NonZero",
            13,
            &[],
            vec![t(&[9000], TensorData::U8((0..9000).map(|i| u8::from(i % 11 < 4)).collect()))],
            1,
        ),
        case("NonZero", 13, &[], vec![t(&[300], TensorData::Bool((0..300).map(|i| u8::from(i % 7 < 3)).collect()))], 1),
        case("NonZero", 13, &[], vec![t(&[], TensorData::I64(vec![-3]))], 1),
        case("NonZero", 13, &[], vec![t(&[2, 2], TensorData::F16(vec![0x8000, 0x3c00, 0, 0x7e00]))], 1),
        case("NonZero", 13, &[], vec![t(&[10], TensorData::U8(vec![0; 10]))], 1),
        case(
            "NonZero",
            13,
            &[],
            vec![t(&[2, 3, 7, 11], TensorData::F64((0..462).map(|i| f64::from(i % 5) - 2.0).collect()))],
            1,
        ),
    ];
    let cond = |n: usize, every: usize| t(&[n], TensorData::Bool((0..n).map(|i| u8::from(i % every == 0)).collect()));
    let x = || t(&[2, 600, 1], TensorData::F32(spread(1200, 50)));
    cases.push(case("Compress", 11, &[("axis", 1)], vec![x(), cond(600, 3)], 1));
    cases.push(case("Compress", 11, &[("axis", -2)], vec![x(), cond(700, 2)], 1));
    let small = || t(&[4, 3, 5], TensorData::I64((0..60).collect()));
    cases.push(case("Compress", 11, &[("axis", 1)], vec![small(), cond(2, 1)], 1));
    cases.push(case("Compress", 11, &[], vec![small(), cond(40, 4)], 1));
    let halves = t(&[6, 2], TensorData::F16((0..12).collect()));
    cases.push(case("Compress", 9, &[("axis", 0)], vec![halves, cond(6, 5)], 1));
    cases.push(case("Compress", 11, &[("axis", 0)], vec![t(&[3], TensorData::Bool(vec![1, 0, 1])), cond(3, 7)], 1));
    cases
}

fn unique_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for sorted in [1, 0] {
        let flat = t(&[300], TensorData::F32(spread(300, 23)));
        cases.push(case("Unique", 11, &[("sorted", sorted)], vec![flat], 4));
        let slices = t(&[2, 40, 3], TensorData::I8((0..240).map(|i| ((i * 37 / 3) % 3) as i8 - 1).collect()));
        cases.push(case("Unique", 11, &[("sorted", sorted), ("axis", 1)], vec![slices.clone()], 4));
        cases.push(case("Unique", 11, &[("sorted", sorted), ("axis", -3)], vec![slices], 2));
        let wide = t(&[70], TensorData::F64((0..70).map(|i| ((i * 13) % 9) as f64 - 4.0).collect()));
        cases.push(case("Unique", 11, &[("sorted", sorted)], vec![wide], 1));
        let words = t(&[5, 9], TensorData::U16((0..45).map(|i| (i * 7 % 6) as u16 * 1000).collect()));
        cases.push(case("Unique", 11, &[("sorted", sorted), ("axis", 0)], vec![words], 3));
    }
    cases.push(case("Unique", 11, &[], vec![t(&[0], TensorData::I32(Vec::new()))], 4));
    cases.push(case(
        "Unique",
        11,
        &[],
        vec![t(&[9], TensorData::BF16(vec![0x8000, 0, 0x3f80, 0xbf80, 0x7fc0, 0x3f80, 0, 0xffc1, 1]))],
        4,
    ));
    cases
}

fn nms_cases() -> Vec<Case> {
    // 40 boxes on a line, each overlapping its neighbours; scores with ties and a NaN.
    let corners: Vec<f32> = (0..80)
        .flat_map(|i| {
            let x = (i % 40) as f32 * 0.45 + (i / 40) as f32 * 0.1;
            [0.0, x, 1.0, x + 1.0]
        })
        .collect();
    let centers: Vec<f32> =
        (0..80).flat_map(|i| [(i % 40) as f32 * 0.3, 0.5, 1.0, 1.0 + (i % 3) as f32 * 0.2]).collect();
    let scores: Vec<f32> = (0..240).map(|i| if i == 17 { f32::NAN } else { ((i * 31) % 11) as f32 / 10.0 }).collect();
    let boxes = |v: &[f32]| t(&[2, 40, 4], TensorData::F32(v.to_vec()));
    let scores = || t(&[2, 3, 40], TensorData::F32(scores.clone()));
    let one = |v: f32| t(&[1], TensorData::F32(vec![v]));
    let max = |m: i64| t(&[1], TensorData::I64(vec![m]));
    // More boxes than a block has threads, in a grid of overlapping squares.
    let grid: Vec<f32> = (0..300)
        .flat_map(|i| {
            let (y, x) = ((i / 20) as f32 * 0.7, (i % 20) as f32 * 0.6);
            [y, x, y + 1.0, x + 1.0]
        })
        .collect();
    let many = t(&[1, 300, 4], TensorData::F32(grid));
    let many_scores = t(&[1, 1, 300], TensorData::F32((0..300).map(|i| ((i * 89) % 97) as f32 / 97.0).collect()));
    // 700 unit squares on a lattice of pitch 0.8 (neighbours' IoU 0.11), scores with ties.
    let lattice: Vec<f32> = (0..700)
        .flat_map(|i| {
            let (x, y) = ((i % 30) as f32 * 0.8, (i / 30) as f32 * 0.8);
            [y, x, y + 1.0, x + 1.0]
        })
        .collect();
    let lattice = t(&[1, 700, 4], TensorData::F32(lattice));
    let lattice_scores = t(&[1, 1, 700], TensorData::F32((0..700).map(|i| ((i * 53) % 101) as f32 / 101.0).collect()));
    // 350 apart pairs of overlapping squares (IoU 0.11), every pair's first box scored above every
    // second box: each second box is suppressed by its partner alone, kept hundreds of ranks before.
    let pairs: Vec<f32> = (0..700)
        .flat_map(|i| {
            let p = i / 2;
            let (x, y) = ((p % 20) as f32 * 3.0 + (i % 2) as f32 * 0.8, (p / 20) as f32 * 3.0);
            [y, x, y + 1.0, x + 1.0]
        })
        .collect();
    let pairs = t(&[1, 700, 4], TensorData::F32(pairs));
    let pair_scores = t(
        &[1, 1, 700],
        TensorData::F32((0..700).map(|i| if i % 2 == 0 { 0.9 } else { 0.4 } - i as f32 * 1e-4).collect()),
    );
    // 9000 boxes scored with ties: a sort over four chunks of the staged sort and merges two of them
    // long, then two batches of 3000 boxes with a score threshold.
    let lattice_of = |n: usize, shift: f32| -> Vec<f32> {
        (0..n)
            .flat_map(|i| {
                let (x, y) = ((i % 71) as f32 * 0.5, (i / 71 % 70) as f32 * 0.5 + (i / 3000) as f32 * shift);
                [y, x, y + 1.0, x + 1.0]
            })
            .collect()
    };
    let tied = |n: usize| TensorData::F32((0..n).map(|i| ((i * 37) % 1009) as f32).collect());
    let (wide, wide_scores) = (t(&[1, 9000, 4], TensorData::F32(lattice_of(9000, 0.0))), t(&[1, 1, 9000], tied(9000)));
    let (two, two_scores) = (t(&[2, 3000, 4], TensorData::F32(lattice_of(6000, 0.25))), t(&[2, 1, 3000], tied(6000)));
    // The same without the IoU bit matrix: the sorted candidates taken a tile at a time.
    let tiled = |c: Case| Case { op: crate::ops::data_dependent::bounded_without_matrix(), ..c };
    vec![
        case("NonMaxSuppression", 11, &[], vec![many.clone(), many_scores.clone(), max(60), one(0.1)], 1),
        tiled(case("NonMaxSuppression", 11, &[], vec![many, many_scores, max(60), one(0.1)], 1)),
        // Hundreds kept: many words of the matrix; without it, several tiles, and the kept boxes
        // staged in several chunks.
        case("NonMaxSuppression", 11, &[], vec![lattice.clone(), lattice_scores.clone(), max(10_000), one(0.5)], 1),
        tiled(case(
            "NonMaxSuppression",
            11,
            &[],
            vec![lattice.clone(), lattice_scores.clone(), max(10_000), one(0.5)],
            1,
        )),
        case("NonMaxSuppression", 11, &[], vec![lattice, lattice_scores, max(400), one(0.1), one(0.2)], 1),
        case("NonMaxSuppression", 11, &[], vec![pairs.clone(), pair_scores.clone(), max(10_000), one(0.1)], 1),
        tiled(case("NonMaxSuppression", 11, &[], vec![pairs, pair_scores, max(10_000), one(0.1)], 1)),
        case("NonMaxSuppression", 11, &[], vec![wide, wide_scores, max(10_000), one(0.3)], 1),
        case("NonMaxSuppression", 11, &[], vec![two, two_scores, max(1000), one(0.3), one(200.0)], 1),
        // A constant cap below the box count: the rows have no room for the keys, found round by round.
        Case {
            known: vec![2],
            ..case("NonMaxSuppression", 11, &[], vec![boxes(&corners), scores(), max(5), one(0.4)], 1)
        },
        case("NonMaxSuppression", 11, &[], vec![boxes(&corners), scores(), max(5), one(0.4), one(0.2)], 1),
        case(
            "NonMaxSuppression",
            11,
            &[("center_point_box", 1)],
            vec![boxes(&centers), scores(), max(100), one(0.3)],
            1,
        ),
        case("NonMaxSuppression", 10, &[], vec![boxes(&corners), scores(), max(40), one(0.0), one(0.5)], 1),
        case("NonMaxSuppression", 11, &[], vec![boxes(&corners), scores(), max(0)], 1),
        case("NonMaxSuppression", 11, &[], vec![boxes(&corners), scores()], 1),
        case("NonMaxSuppression", 11, &[], vec![boxes(&corners), scores(), None, one(0.5)], 1),
        case(
            "NonMaxSuppression",
            11,
            &[],
            vec![
                t(&[1, 3, 4], TensorData::F32(f32s(&[12], 3).to_f32s().unwrap())),
                t(&[1, 1, 3], TensorData::F32(vec![0.5; 3])),
                max(-1),
            ],
            1,
        ),
    ]
}

/// TopK over rows longer than a shared-memory sort: `k` up to 8 (rounds), `k` within the shared
/// sort and above it (the radix select, the taken sorted in shared memory or in the outputs), of
/// f32 with ties, both zeros and NaN, of i64 and i32 with negatives, both directions, along a middle
/// axis too.
fn long_top_k_cases() -> Vec<Case> {
    let k = |v: i64| Some(Tensor::from_i64s(vec![v]));
    let floats = |dims: &[usize], modulo: usize| t(dims, TensorData::F32(spread(dims.iter().product(), modulo)));
    let ints = |dims: &[usize]| {
        let n: usize = dims.iter().product();
        t(dims, TensorData::I64((0..n).map(|i| ((i * 7919) % 613) as i64 - 300).collect()))
    };
    let int32 = |dims: &[usize]| {
        let n: usize = dims.iter().product();
        t(dims, TensorData::I32((0..n).map(|i| ((i * 104_729) % 100_003) as i32 - 50_000).collect()))
    };
    let top = |attrs: &[(&str, i64)], x: Option<Tensor>, kv: i64| plain_case("TopK", 11, attrs, vec![x, k(kv)], &[1]);
    vec![
        top(&[], floats(&[2, 3000], 50), 300),
        top(&[("largest", 0)], floats(&[1, 3000], 9), 300),
        top(&[], floats(&[1, 2600], 400), 2500),
        top(&[("largest", 0)], floats(&[1, 3001], 1000), 2100),
        top(&[], floats(&[1, 3000], 700), 6),
        top(&[("axis", 1)], floats(&[2, 2500, 3], 300), 40),
        top(&[], ints(&[1, 2200]), 100),
        top(&[("largest", 0)], ints(&[1, 4100]), 2049),
        top(&[], int32(&[1, 5000]), 1000),
    ]
}

#[test]
fn the_bounded_forms_match_the_host_bit_for_bit_when_run_on_the_cpu() {
    let mut cases = nonzero_and_compress_cases();
    cases.extend(unique_cases());
    cases.extend(nms_cases());
    cases.extend(long_top_k_cases());
    check(&cases);
}
