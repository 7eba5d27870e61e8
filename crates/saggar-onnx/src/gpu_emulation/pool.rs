//! The pooling kernels on the CPU: windowed pools (max, average with and without the padding, Lp)
//! over one, two and three axes with pads, strides, dilations and ceil mode, each launch run in the
//! 32-bit indices it asks for and in 64-bit ones, and the global pools over planes of 49, 1 and 1600
//! elements, a warp a plane and a block a plane, all bit for bit against the host on integer
//! values (sums exact in any order); and a model of every pooling op at every precision against
//! the host, its plan checked to take the 32-bit bodies and the global pool kernel.

use saggar_shape::{DType, Dim};

use super::conv::{launches, matches_the_host_at_every_precision, values};
use super::single::SingleLaunches;
use crate::builder::ModelBuilder;
use crate::ops::Attribute::{self, Int, Ints};
use crate::ops::gpu::{GpuCtx, GpuNode, Operand, Work};
use crate::ops::testing::run_op;
use crate::ops::{Attributes, InferInputs, NodeCtx, lookup};
use crate::tensor::{Tensor, TensorData};

/// `(op, opset, attributes, input dims)` of a single-launch case.
type Case = (&'static str, u32, Vec<(&'static str, Attribute)>, &'static [usize]);

fn windowed_cases() -> Vec<Case> {
    let window = |k: &[i64], s: &[i64], p: &[i64]| {
        vec![("kernel_shape", Ints(k.to_vec())), ("strides", Ints(s.to_vec())), ("pads", Ints(p.to_vec()))]
    };
    let with = |mut w: Vec<(&'static str, Attribute)>, extra: Vec<(&'static str, Attribute)>| {
        w.extend(extra);
        w
    };
    let resnet = window(&[3, 3], &[2, 2], &[1, 1, 1, 1]);
    let odd = window(&[3, 2], &[2, 3], &[2, 1, 0, 1]);
    let ceil = || vec![("ceil_mode", Int(1))];
    vec![
        ("MaxPool", 12, resnet.clone(), &[2, 3, 9, 8]),
        (
            "MaxPool",
            12,
            with(odd.clone(), vec![("dilations", Ints(vec![2, 1])), ("ceil_mode", Int(1))]),
            &[1, 2, 9, 10],
        ),
        ("AveragePool", 19, with(resnet.clone(), ceil()), &[2, 2, 8, 9]),
        (
            "AveragePool",
            19,
            with(odd.clone(), vec![("count_include_pad", Int(1)), ("ceil_mode", Int(1))]),
            &[1, 3, 9, 10],
        ),
        ("AveragePool", 19, with(odd.clone(), vec![("dilations", Ints(vec![1, 2]))]), &[1, 3, 9, 10]),
        ("LpPool", 18, with(odd.clone(), vec![("p", Int(1))]), &[1, 2, 9, 10]),
        ("LpPool", 18, with(resnet.clone(), vec![("p", Int(2)), ("ceil_mode", Int(1))]), &[1, 2, 8, 9]),
        ("LpPool", 18, with(odd, vec![("p", Int(3)), ("dilations", Ints(vec![2, 2]))]), &[1, 2, 9, 10]),
        // One axis (planar, with a leading axis of extent 1) and three (the body of any rank).
        ("MaxPool", 12, with(window(&[3], &[2], &[1, 2]), ceil()), &[2, 3, 12]),
        ("AveragePool", 19, with(window(&[2], &[1], &[1, 0]), vec![("count_include_pad", Int(1))]), &[2, 3, 7]),
        ("MaxPool", 12, with(window(&[2, 2, 3], &[1, 2, 2], &[1, 0, 1, 0, 1, 1]), ceil()), &[1, 2, 4, 5, 6]),
        ("AveragePool", 19, window(&[2, 2, 3], &[1, 2, 2], &[1, 0, 1, 0, 1, 1]), &[1, 2, 4, 5, 6]),
        (
            "LpPool",
            18,
            with(window(&[2, 1, 2], &[2, 1, 1], &[0, 0, 1, 1, 0, 0]), vec![("p", Int(3))]),
            &[1, 2, 4, 3, 5],
        ),
    ]
}

fn global_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for dims in [&[2usize, 3, 7, 7][..], &[2, 3, 1, 1], &[1, 2, 40, 40], &[2, 3, 5]] {
        cases.push(("GlobalAveragePool", 1, vec![], dims));
        cases.push(("GlobalMaxPool", 1, vec![], dims));
        for p in [1, 2, 3] {
            cases.push(("GlobalLpPool", 2, vec![("p", Int(p))], dims));
        }
    }
    cases
}

/// Integers from -11 to 11: their sums, and those of their absolute values, squares and cubes, are
/// exact in f32 in any order.
fn integers(dims: &[usize]) -> Tensor {
    let n: usize = dims.iter().product();
    let v = (0..n).map(|i| ((i * 37 + 5) % 23) as f32 - 11.0).collect();
    Tensor::new(dims.to_vec(), TensorData::F32(v)).unwrap()
}

/// The op's one GPU launch for input `x` and the host's output bytes.
fn launch_and_host(&(op, opset, ref attrs, dims): &Case) -> (crate::ops::gpu::GpuLaunch, Vec<u8>, Tensor) {
    let attrs = Attributes(attrs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect());
    let entry = lookup(op, opset).unwrap();
    let built = (entry.build)(&mut NodeCtx::new(&attrs, opset, 1, 1)).unwrap();
    let inputs = [Some(Operand { dtype: DType::F32, dims: dims.to_vec() })];
    let ctx = GpuCtx { inputs: &inputs, outputs: &[], infer: &InferInputs::new(&[]) };
    let Some(Ok(GpuNode::Launches(mut launches))) = built.gpu(&ctx) else { panic!("{op} lowers") };
    let x = integers(dims);
    let want = run_op(op, opset, &attrs, &[Some(&x)]).unwrap()[0].to_le_bytes();
    (launches.remove(0), want, x)
}

/// Each windowed case's launch in 32-bit indices as made and in 64-bit ones with the flag cleared,
/// on fewer threads than outputs; each global case a warp a plane (blocks of 32 threads, fewer
/// blocks than planes) and a block a plane (256 threads: lanes combined across warps).
#[test]
fn every_pool_body_matches_the_host_when_run_on_the_cpu() {
    let mut runs = SingleLaunches::new();
    for case in windowed_cases() {
        let (launch, want, x) = launch_and_host(&case);
        let meta = &launch.meta;
        let rank = case.3.len() - 2;
        assert_eq!((meta[0], meta.len()), (rank.max(2) as i64, 4 + 7 * rank.max(2)), "{case:?}");
        assert_eq!(meta.last(), Some(&1), "{case:?}: 32-bit indices");
        let wide = [&meta[..meta.len() - 1], &[0]].concat();
        for (meta, what) in [(meta, "narrow"), (&wide, "wide")] {
            let what = format!("{} {:?} {:?} {what}", case.0, case.2, case.3);
            runs.push(launch.kernel.as_ref(), meta, (&x.to_le_bytes(), 0), (3, 32), want.clone(), what);
        }
    }
    for case in global_cases() {
        let (launch, want, x) = launch_and_host(&case);
        let planes = (case.3[0] * case.3[1]) as u64;
        assert_eq!(launch.work, Work::RowGroups { rows: planes, cols: case.3[2..].iter().product::<usize>() as u64 });
        for shape in [(2, 32), (2, 256)] {
            let what = format!("{} {:?} {:?} in {shape:?}", case.0, case.2, case.3);
            runs.push(launch.kernel.as_ref(), &launch.meta, (&x.to_le_bytes(), 0), shape, want.clone(), what);
        }
    }
    runs.check();
}

/// ResNet's stem MaxPool with its Indices, a dilated ceil-mode MaxPool with column-major Indices,
/// AveragePool with and without the padding, LpPool, one- and three-axis pools, and the global
/// pools over planes of 49 (2200 of them: a warp each, eight a block), 1 and 1600 elements, at
/// every precision: the host's results, every windowed pool in 32-bit indices and every global
/// pool through its own kernel.
#[test]
fn pooling_ops_match_the_host_when_run_on_the_cpu() {
    let mut b = ModelBuilder::new(19);
    let shapes: [(&str, &[u64]); 6] = [
        ("x", &[2, 4, 9, 8]),
        ("l", &[2, 3, 11]),
        ("v", &[1, 2, 4, 5, 6]),
        ("g", &[2, 1100, 7, 7]),
        ("one", &[2, 3, 1, 1]),
        ("big", &[1, 3, 40, 40]),
    ];
    for (name, dims) in shapes {
        b.input(name, DType::F32, &dims.iter().map(|&d| Dim::Fixed(d)).collect::<Vec<_>>());
    }
    let stem = vec![("kernel_shape", Ints(vec![3, 3])), ("strides", Ints(vec![2, 2])), ("pads", Ints(vec![1; 4]))];
    b.node("MaxPool", &["x"], &["mp", "mpi"], &stem);
    let mut dilated =
        vec![("kernel_shape", Ints(vec![2, 2])), ("dilations", Ints(vec![2, 1])), ("pads", Ints(vec![1, 0, 0, 1]))];
    dilated.extend([("ceil_mode", Int(1)), ("strides", Ints(vec![2, 2])), ("storage_order", Int(1))]);
    b.node("MaxPool", &["x"], &["md", "mdi"], &dilated);
    let mut avg = stem.clone();
    avg.push(("ceil_mode", Int(1)));
    b.node("AveragePool", &["x"], &["av"], &avg);
    avg.push(("count_include_pad", Int(1)));
    b.node("AveragePool", &["x"], &["avp"], &avg);
    let lp = [("kernel_shape", Ints(vec![2, 3])), ("pads", Ints(vec![1, 0, 1, 1])), ("p", Int(3))];
    b.node("LpPool", &["x"], &["lp"], &lp);
    let line = [("kernel_shape", Ints(vec![3])), ("strides", Ints(vec![2])), ("pads", Ints(vec![1, 1]))];
    b.node("MaxPool", &["l"], &["ml", "mli"], &line);
    let cube =
        [("kernel_shape", Ints(vec![2, 2, 3])), ("pads", Ints(vec![1, 0, 1, 0, 1, 1])), ("count_include_pad", Int(1))];
    b.node("AveragePool", &["v"], &["av3"], &cube);
    let mut outputs = vec!["mp", "mpi", "md", "mdi", "av", "avp", "lp", "ml", "mli", "av3"];
    for (input, prefix) in [("g", "g"), ("one", "o"), ("big", "b")] {
        let names: [&'static str; 3] = match prefix {
            "g" => ["ga", "gm", "gl"],
            "o" => ["oa", "om", "ol"],
            _ => ["ba", "bm", "bl"],
        };
        b.node("GlobalAveragePool", &[input], &[names[0]], &[]);
        b.node("GlobalMaxPool", &[input], &[names[1]], &[]);
        b.node("GlobalLpPool", &[input], &[names[2]], &[("p", Int(2))]);
        outputs.extend(names);
    }
    for name in outputs {
        let dtype = if name.ends_with('i') { DType::I64 } else { DType::F32 };
        b.output(name, dtype, &[]);
    }
    let inputs = shapes.map(|(_, dims)| values(&dims.iter().map(|&d| d as usize).collect::<Vec<_>>(), dims.len()));
    matches_the_host_at_every_precision(&b.to_bytes(), &inputs, |precision, lowered| {
        let narrow: Vec<i64> =
            launches(lowered, "onnx_pool_").map(|(_, meta)| meta(3 + 7 * meta(0) as usize)).collect();
        assert_eq!(narrow, [1; 7], "{precision}: every windowed pool in 32-bit indices");
        assert_eq!(launches(lowered, "onnx_global_pool_").count(), 9, "{precision}");
        assert_eq!(launches(lowered, "onnx_reduce_").count(), 0, "{precision}");
    });
}
