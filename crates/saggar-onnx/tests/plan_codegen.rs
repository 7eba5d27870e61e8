//! The GPU lowering checked without a GPU: the checked-in models lower for CUDA to one source per
//! model (the same text at every batch, so one code object serves every bucket), fusion reduces
//! their kernel counts, the source passes a C++ syntax check (g++ with a shim for the CUDA keywords),
//! and an op without a GPU form is refused naming the op.

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

use saggar_device::BackendKind;
use saggar_onnx::builder::ModelBuilder;
use saggar_onnx::{ImportLimits, OnnxCompiler, OnnxError, OnnxModel, OnnxOptions, Tensor, TensorData};
use saggar_shape::{DType, Dim};

const MODELS: [&str; 4] = ["bert", "dlrm", "mlp", "cnn"];

fn compiler(name: &str) -> OnnxCompiler {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("models").join(name).join("model.onnx");
    OnnxCompiler::new(OnnxModel::load(path).unwrap(), OnnxOptions::default())
}

/// Input shapes of `name` at `batch` (BERT at sequence 16).
fn dims(c: &OnnxCompiler, batch: u64) -> Vec<Vec<u64>> {
    c.onnx_model()
        .inputs()
        .iter()
        .map(|spec| {
            spec.dims()
                .iter()
                .enumerate()
                .map(|(i, d)| d.as_fixed().unwrap_or(if i == 0 { batch } else { 16 }))
                .collect()
        })
        .collect()
}

/// Definitions that let the generated CUDA/HIP C++ pass a host C++ syntax check.
const SHIM: &str = r#"
#include <math.h>
#include <string.h>
#define __global__
#define __device__
#define __shared__ static
#define __restrict__ __restrict
struct saggar_dim3 { unsigned x, y, z; };
static saggar_dim3 blockIdx, threadIdx, blockDim, gridDim;
inline void __syncthreads() {}
inline float __shfl_xor_sync(unsigned, float v, int, int) { return v; }
inline unsigned __shfl_sync(unsigned, unsigned v, int, int) { return v; }
static float saggar_dynamic_shared[1];
#define ONNX_DYNAMIC_SHARED(name) float* const name = saggar_dynamic_shared
#define ONNX_FORCEINLINE inline
#define ONNX_NOINLINE
#define ONNX_BOUNDS(threads, blocks)
struct float4 { float x, y, z, w; };
struct uint4 { unsigned x, y, z, w; };
struct int4 { int x, y, z, w; };
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
struct char4 { signed char x, y, z, w; };
inline char4 make_char4(signed char x, signed char y, signed char z, signed char w) { return {x, y, z, w}; }
struct uchar4 { unsigned char x, y, z, w; };
inline uchar4 make_uchar4(unsigned char x, unsigned char y, unsigned char z, unsigned char w) { return {x, y, z, w}; }
struct uint2 { unsigned x, y; };
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
struct ushort4 { unsigned short x, y, z, w; };
inline ushort4 make_ushort4(unsigned short x, unsigned short y, unsigned short z, unsigned short w) { return {x, y, z, w}; }
inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
inline int __float_as_int(float f) { int i; memcpy(&i, &f, 4); return i; }
"#;

fn syntax_check(source: &str, what: &str) {
    let Ok(mut child) = Command::new("g++")
        .args(["-std=c++17", "-fsyntax-only", "-Werror=return-type", "-x", "c++", "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    else {
        println!("{what}: g++ not found, syntax check skipped");
        return;
    };
    child.stdin.take().unwrap().write_all(format!("{SHIM}\n{source}").as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{what}: generated source does not compile:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn every_model_has_one_gpu_source_for_all_batches_that_compiles_and_fusion_cuts_launches() {
    for name in MODELS {
        let c = compiler(name);
        let source = c.gpu_source(&dims(&c, 1)).unwrap_or_else(|e| panic!("{name}: {e}"));
        for batch in [3, 17, 64] {
            assert_eq!(c.gpu_source(&dims(&c, batch)).unwrap(), source, "{name}: the source differs at batch {batch}");
        }
        let gpu = c.plan_summary(&dims(&c, 3), BackendKind::Cuda).unwrap();
        let host = c.plan_summary(&dims(&c, 3), BackendKind::Host).unwrap();
        println!(
            "{name}: {} computing nodes; GPU launches {} unfused, {} fused ({} fused groups, {} BLAS matmuls); host launches {}",
            gpu.nodes, gpu.launches_unfused, gpu.launches, gpu.fused_groups, gpu.matmuls, host.launches
        );
        assert_eq!(gpu.nodes, host.nodes, "{name}: host and GPU plans group the same nodes");
        assert_eq!(gpu.scratch_bytes, host.scratch_bytes, "{name}: one memory plan for both");
        assert_eq!(gpu.matmuls, host.matmuls, "{name}: the host plan runs the same BLAS steps as the GPU's");
        if name == "bert" || name == "mlp" {
            assert!(gpu.matmuls > 0, "{name}: its GEMMs go through BLAS-Lt");
        }
        assert!(gpu.launches <= gpu.launches_unfused, "{name}");
        if name == "bert" || name == "mlp" {
            assert!(gpu.fused_groups > 0 && gpu.launches < gpu.launches_unfused, "{name}: something fuses");
        }
        syntax_check(&source, name);
    }
}

/// `(model, GPU steps unfused, GPU steps fused, attention groups)` at batch 3 (BERT at seq 16); a
/// step is a kernel launch or a BLAS-Lt matmul (with its fused bias/ReLU epilogue). The CNN runs
/// channels-last: its input's transpose and channel padding and its output's transpose are three
/// steps more than channels-first, which the bias adds taken into BLAS epilogues make up fused.
const PINNED_LAUNCHES: [(&str, usize, usize, usize); 4] =
    [("bert", 77, 24, 2), ("dlrm", 61, 32, 0), ("mlp", 10, 5, 0), ("cnn", 31, 20, 0)];

#[test]
fn kernel_counts_before_and_after_fusion_are_pinned_per_model() {
    let mut counts = Vec::new();
    for (name, _, _, _) in PINNED_LAUNCHES {
        let c = compiler(name);
        let off = OnnxCompiler::new(c.onnx_model().clone(), OnnxOptions::default().with_fusion(false));
        let on = c.plan_summary(&dims(&c, 3), BackendKind::Cuda).unwrap();
        let plain = off.plan_summary(&dims(&c, 3), BackendKind::Cuda).unwrap();
        println!(
            "{name}: {} launches unfused, {} fused ({} fused groups, {} attention); scratch {} B shared by liveness, {} B unshared; peak {} B",
            plain.launches,
            on.launches,
            on.fused_groups,
            on.attention_groups,
            on.scratch_bytes,
            on.unshared_scratch_bytes,
            on.peak_bytes
        );
        counts.push((name, plain.launches, on.launches, on.attention_groups));
        assert_eq!(plain.launches, on.launches_unfused, "{name}: the summary's unfused count is the unfused plan's");
        assert!(on.scratch_bytes <= on.unshared_scratch_bytes && on.peak_bytes >= on.scratch_bytes, "{name}");
    }
    assert_eq!(counts, PINNED_LAUNCHES, "kernel counts changed (update PINNED_LAUNCHES if intended)");
}

#[test]
fn an_op_the_gpu_does_not_lower_is_refused_naming_it() {
    // Det of matrices above 64x64 runs on the host; the GPU kernel keeps a matrix in shared memory.
    let c = OnnxCompiler::new(big_dets(1), OnnxOptions::default());
    c.plan_summary(&[vec![2, 65, 65]], BackendKind::Host).expect("the host takes any size");
    for backend in [BackendKind::Cuda, BackendKind::Hip] {
        match c.plan_summary(&[vec![2, 65, 65]], backend) {
            Err(OnnxError::UnsupportedOnBackend { op, backend: b, node, reason }) => {
                assert_eq!((op.as_str(), b), ("Det", backend));
                assert!(!node.is_empty() && reason.contains("64x64"), "{node}: {reason}");
            }
            other => panic!("expected UnsupportedOnBackend, got {other:?}"),
        }
    }
}

/// A model of `count` Det nodes over its `[n, 65, 65]` input (each of a matrix scaled apart), summed.
fn big_dets(count: usize) -> OnnxModel {
    let mut b = ModelBuilder::new(13);
    b.input("x", DType::F32, &[Dim::symbolic("n"), Dim::Fixed(65), Dim::Fixed(65)]);
    let mut last: Option<String> = None;
    for k in 0..count {
        let (scale, scaled, det) = (format!("k{k}"), format!("x{k}"), format!("d{k}"));
        b.initializer(&scale, &Tensor::new(vec![], TensorData::F32(vec![k as f32 + 1.0])).unwrap());
        b.node("Mul", &["x", scale.as_str()], &[scaled.as_str()], &[]);
        b.node("Det", &[scaled.as_str()], &[det.as_str()], &[]);
        last = Some(match last {
            None => det,
            Some(prev) => {
                let sum = format!("s{k}");
                b.node("Add", &[prev.as_str(), det.as_str()], &[sum.as_str()], &[]);
                sum
            }
        });
    }
    b.node("Identity", &[last.unwrap_or_default().as_str()], &["y"], &[]);
    b.output("y", DType::F32, &[]);
    OnnxModel::from_bytes(&b.to_bytes(), "big_dets", &ImportLimits::default()).unwrap()
}

/// A GPU refusal lists every node the lowering cannot run, not only the first.
#[test]
fn a_gpu_refusal_names_every_node_it_cannot_lower() {
    let c = OnnxCompiler::new(big_dets(2), OnnxOptions::default());
    c.plan_summary(&[vec![2, 65, 65]], BackendKind::Host).expect("the host runs both");
    let err = c.plan_summary(&[vec![2, 65, 65]], BackendKind::Cuda).unwrap_err();
    let nodes: Vec<(&str, &str)> = err
        .node_errors()
        .iter()
        .map(|e| match e {
            OnnxError::UnsupportedOnBackend { op, node, .. } => (op.as_str(), node.as_str()),
            other => panic!("expected UnsupportedOnBackend, got {other:?}"),
        })
        .collect();
    assert_eq!(nodes.len(), 2, "{err}");
    assert!(nodes.iter().all(|(op, _)| *op == "Det") && nodes[0].1 != nodes[1].1, "{err}");
    assert!(err.to_string().starts_with("2 nodes are not supported\n  - "), "{err}");
}

/// `Pow` by a constant 2 or 3 (GELU's tanh form cubes its input) is computed as products on the
/// GPU; other exponents keep `powf`.
#[test]
fn a_small_constant_power_is_a_product_on_the_gpu() {
    let source = |exponent: f32| {
        let mut b = ModelBuilder::new(17);
        b.input("x", DType::F32, &[Dim::symbolic("n")]);
        b.initializer("e", &Tensor::new(vec![], TensorData::F32(vec![exponent])).unwrap());
        b.node("Pow", &["x", "e"], &["y"], &[]);
        b.output("y", DType::F32, &[Dim::symbolic("n")]);
        let model = OnnxModel::from_bytes(&b.to_bytes(), "pow", &ImportLimits::default()).unwrap();
        OnnxCompiler::new(model, OnnxOptions::default()).gpu_source(&[vec![8]]).unwrap()
    };
    let cube = source(3.0);
    assert!(cube.contains("(a0 * a0 * a0)") && !cube.contains("powf("), "{cube}");
    assert!(source(2.0).contains("(a0 * a0)"));
    assert!(source(2.5).contains("powf("));
}

#[test]
#[ignore = "writes the generated source of every model to target/onnx-gpu-sources for inspection"]
fn dump_sources() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/onnx-gpu-sources");
    std::fs::create_dir_all(&dir).unwrap();
    for name in MODELS {
        let c = compiler(name);
        std::fs::write(dir.join(format!("{name}.cu")), c.gpu_source(&dims(&c, 3)).unwrap()).unwrap();
    }
}

/// At every precision one source serves every batch, so a grid of buckets compiles device code once
/// (a source per bucket would be an NVRTC compile per bucket at start-up).
#[test]
fn every_precision_has_one_gpu_source_for_all_batches() {
    // int8 needs calibration data on these f32 models (tests/precision.rs covers it).
    for precision in saggar_onnx::Precision::ALL.into_iter().filter(|&p| p != saggar_onnx::Precision::Int8) {
        for name in MODELS {
            let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("models").join(name).join("model.onnx");
            let c = OnnxCompiler::new(OnnxModel::load(path).unwrap(), OnnxOptions::default().with_precision(precision));
            let source = c.gpu_source(&dims(&c, 1)).unwrap_or_else(|e| panic!("{name} at {precision}: {e}"));
            for batch in [2, 17, 64] {
                assert!(
                    c.gpu_source(&dims(&c, batch)).unwrap() == source,
                    "{name} at {precision}: the source differs at batch {batch}"
                );
            }
        }
    }
}
