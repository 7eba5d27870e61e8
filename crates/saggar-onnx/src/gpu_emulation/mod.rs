//! Tests that run the CUDA/HIP plan of the checked-in models on the CPU: the generated source is
//! compiled by g++ with a shim (a block's threads are fibers of one OS thread, each
//! running until it reaches `__syncthreads` or its end before the next runs, so a barrier is a round
//! of them; the blocks run one after another, so `__shared__` statics are per block), driven by
//! a generated `main` that makes every launch of the plan with its launch shape, `meta` tables and
//! memory plan; the outputs must match the host backend's. Skipped with a message when g++ is absent.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use saggar_device::BackendKind;

use crate::plan::{ArgSource, PlanStep};
use crate::{OnnxCompiler, OnnxModel, OnnxOptions, Tensor, TensorData, read_tensor_pb, run_on_host};

mod conv;
mod copy;
mod embedding_bag;
mod every_kind;
mod half_norm;
mod pool;
mod quantised;
mod segments;
mod single;

const SHIM: &str = r#"
#include <atomic>
#include <functional>
#include <math.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <setjmp.h>
#include <ucontext.h>
#include <utility>
#include <vector>
#define __global__
#define __device__
#define __shared__ static
#define __restrict__ __restrict
struct saggar_dim3 { unsigned x, y, z; };
static saggar_dim3 blockIdx, threadIdx, blockDim, gridDim;
// The block's threads as fibers: started with `makecontext`, switched with `_setjmp`/`_longjmp`
// (which save no signal mask: `swapcontext` makes a system call per switch). The scheduler's
// context, each thread's, and the one running.
struct saggar_context { jmp_buf at; };
static jmp_buf saggar_scheduler;
static std::vector<saggar_context> saggar_threads;
static unsigned saggar_running;
inline void __syncthreads() {
  if (!_setjmp(saggar_threads[saggar_running].at)) _longjmp(saggar_scheduler, 1);
}
// A shuffle among the block's threads through memory: every thread of the block calls it together
// (the kernels that shuffle keep their loops uniform across the block), so two barriers fence it.
static float saggar_lanes[1024];
static unsigned saggar_lanes_u32[1024];
inline float __shfl_xor_sync(unsigned, float v, int mask, int) {
  const unsigned t = threadIdx.x + threadIdx.y * blockDim.x;
  saggar_lanes[t] = v; __syncthreads();
  const float r = saggar_lanes[t ^ (unsigned)mask]; __syncthreads();
  return r;
}
inline unsigned __shfl_sync(unsigned, unsigned v, int src, int) {
  const unsigned t = threadIdx.x + threadIdx.y * blockDim.x;
  saggar_lanes_u32[t] = v; __syncthreads();
  const unsigned r = saggar_lanes_u32[(t & ~31u) + (unsigned)src]; __syncthreads();
  return r;
}
inline unsigned atomicAdd(unsigned* p, unsigned v) { return std::atomic_ref<unsigned>(*p).fetch_add(v); }
// Dynamic shared memory: one block's worth at the largest size a plan asks for, shared by the
// block's threads like a `__shared__` static.
alignas(16) static float saggar_dynamic_shared[49152 / 4];
#define ONNX_DYNAMIC_SHARED(name) float* const name = saggar_dynamic_shared
#define ONNX_FORCEINLINE inline
#define ONNX_NOINLINE
#define ONNX_BOUNDS(threads, blocks)
struct alignas(16) float4 { float x, y, z, w; };
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
struct alignas(8) ushort4 { unsigned short x, y, z, w; };
inline ushort4 make_ushort4(unsigned short x, unsigned short y, unsigned short z, unsigned short w) { return {x, y, z, w}; }
struct alignas(16) uint4 { unsigned x, y, z, w; };
struct alignas(16) int4 { int x, y, z, w; };
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
struct alignas(4) char4 { signed char x, y, z, w; };
inline char4 make_char4(signed char x, signed char y, signed char z, signed char w) { return {x, y, z, w}; }
struct alignas(4) uchar4 { unsigned char x, y, z, w; };
inline uchar4 make_uchar4(unsigned char x, unsigned char y, unsigned char z, unsigned char w) { return {x, y, z, w}; }
struct alignas(8) uint2 { unsigned x, y; };
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }
struct alignas(8) float2 { float x, y; };
inline float2 make_float2(float x, float y) { return {x, y}; }
struct alignas(4) ushort2 { unsigned short x, y; };
inline ushort2 make_ushort2(unsigned short x, unsigned short y) { return {x, y}; }
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline int __float_as_int(float f) { int i; std::memcpy(&i, &f, 4); return i; }
"#;

const DRIVER: &str = r#"
template <typename... P, size_t... I>
static void saggar_call(void (*f)(P...), void** a, std::index_sequence<I...>) { f((P)a[I]...); }
static std::function<void()> saggar_kernel;
static std::vector<char> saggar_finished;
// A thread's first run; it never returns (its context has no successor): it jumps back finished.
static void saggar_thread_main() {
  saggar_kernel();
  saggar_finished[saggar_running] = 1;
  _longjmp(saggar_scheduler, 1);
}
// Each block's threads run as fibers, in rounds: each runs until its next `__syncthreads` (or its
// end), then the next; a round over all of them is one barrier. Stacks are kept for later launches.
template <typename... P>
static void launch(void (*f)(P...), unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, std::vector<void*> a) {
  static std::vector<char*> stacks;
  const size_t stack = 256 << 10;
  const unsigned n = bx * by;
  gridDim = {gx, gy, gz}; blockDim = {bx, by, 1};
  while (stacks.size() < n) stacks.push_back((char*)std::malloc(stack));
  saggar_threads.resize(n);
  saggar_kernel = [&] { saggar_call(f, a.data(), std::index_sequence_for<P...>{}); };
  std::vector<char> started(n);
  ucontext_t start, from;
  for (unsigned z = 0; z < gz; ++z) for (unsigned y = 0; y < gy; ++y) for (unsigned x = 0; x < gx; ++x) {
    blockIdx = {x, y, z};
    saggar_finished.assign(n, 0);
    started.assign(n, 0);
    for (unsigned left = n; left > 0;) {
      for (unsigned t = 0; t < n; ++t) {
        if (saggar_finished[t]) continue;
        saggar_running = t;
        threadIdx = {t % bx, t / bx, 0};
        if (!_setjmp(saggar_scheduler)) {
          if (started[t]) _longjmp(saggar_threads[t].at, 1);
          started[t] = 1;
          getcontext(&start);
          start.uc_stack.ss_sp = stacks[t];
          start.uc_stack.ss_size = stack;
          start.uc_link = nullptr;
          makecontext(&start, saggar_thread_main, 0);
          swapcontext(&from, &start);
        }
        left -= saggar_finished[t];
      }
    }
  }
}
static unsigned char* load(const char* path, size_t size) {
  unsigned char* p = (unsigned char*)std::aligned_alloc(64, (size + 64) / 64 * 64);
  std::memset(p, 0, (size + 64) / 64 * 64);
  if (path) { FILE* f = std::fopen(path, "rb"); if (!f || std::fread(p, 1, size, f) != size) std::abort(); std::fclose(f); }
  return p;
}
// Elements of a matmul operand of type `t` (0 f32, 1 f16, 2 bf16, 3 i8, 4 i32) as float, and back
// (nearest even), through the generated source's own conversions (its prelude comes before this driver).
static float blas_get(const void* p, long i, int t) {
  if (t == 0) return ((const float*)p)[i];
  if (t == 3) return (float)((const signed char*)p)[i];
  if (t == 4) return (float)((const int*)p)[i];
  const unsigned short h = ((const unsigned short*)p)[i];
  return t == 2 ? onnx_bf16_to_f32(h) : onnx_f16_to_f32(h);
}
static void blas_set(void* p, long i, int t, float v) {
  if (t == 0) ((float*)p)[i] = v;
  else ((unsigned short*)p)[i] = t == 2 ? onnx_f32_to_bf16(v) : onnx_f32_to_f16(v);
}
// A matmul step of the plan (beta is always 0 in a plan), as the BLAS-Lt libraries define it: A and B
// of type `ti`, C and the bias of type `to`, f32 accumulation (here in double; exact for i8 inputs,
// whose i32 output wraps as the libraries' integer kernels do).
static void blas(const void* a, const void* b, void* c, const void* bias, long m, long n, long k, long batch,
                 long sa, long sb, long sc, int ta, int tb, float alpha, int epi, int ti, int to) {
  for (long q = 0; q < batch; ++q) for (long i = 0; i < m; ++i) for (long j = 0; j < n; ++j) {
    double acc = 0;
    for (long p = 0; p < k; ++p)
      acc += (double)blas_get(a, q * sa + (ta ? p * m + i : i * k + p), ti) * blas_get(b, q * sb + (tb ? j * k + p : p * n + j), ti);
    if (to == 4) { ((int*)c)[q * sc + i * n + j] = (int)(unsigned)(long long)acc; continue; }
    float v = alpha * (float)acc + (bias ? blas_get(bias, j, to) : 0.f);
    if (epi == 1) v = v > 0 ? v : 0;
    if (epi == 2) v = 0.5f * v * (1 + tanhf(0.7978846f * (v + 0.044715f * v * v * v)));
    blas_set(c, q * sc + i * n + j, to, v);
  }
}
static void store(const char* path, const unsigned char* p, size_t size) {
  FILE* f = std::fopen(path, "wb"); if (!f || std::fwrite(p, 1, size, f) != size) std::abort(); std::fclose(f);
}
"#;

/// Runs `compiler` on `inputs` through its CUDA plan compiled for the CPU in `dir`; `None` without g++.
pub(crate) fn run_emulated(compiler: &OnnxCompiler, inputs: &[Tensor], dir: &Path) -> Option<Vec<Vec<u8>>> {
    emulate(compiler, inputs, &[], dir).map(|(outputs, _)| outputs)
}

/// An emulated run's outputs (bytes) and their extents.
pub(crate) type Emulated = (Vec<Vec<u8>>, Vec<Vec<u64>>);

/// [`run_emulated`] with the value inputs' `values` (binding index, bytes) bound as a session binds
/// them; also returns the outputs' extents.
pub(crate) fn emulate(
    compiler: &OnnxCompiler,
    inputs: &[Tensor],
    values: &[(usize, Vec<u8>)],
    dir: &Path,
) -> Option<Emulated> {
    let dims: Vec<Vec<u64>> = inputs.iter().map(|t| t.dims().iter().map(|&d| d as u64).collect()).collect();
    let lowered = compiler.lower(&dims, values, BackendKind::Cuda).unwrap();
    let source = compiler.source(&lowered).code;
    let file = |name: &str| dir.join(name).to_string_lossy().into_owned();
    std::fs::write(file("weights.bin"), &compiler.weight_layout().bytes).unwrap();
    std::fs::write(file("local.bin"), &lowered.local_constants).unwrap();
    let mut main = String::from("int main() {\n");
    for (i, t) in inputs.iter().enumerate() {
        std::fs::write(file(&format!("in{i}.bin")), t.to_le_bytes()).unwrap();
        let _ = writeln!(
            main,
            "  unsigned char* in{i} = load(\"{}\", {});",
            file(&format!("in{i}.bin")),
            lowered.input_bytes[i]
        );
    }
    for (i, n) in lowered.output_bytes.iter().enumerate() {
        let _ = writeln!(main, "  unsigned char* out{i} = load(nullptr, {n});");
    }
    let _ = writeln!(
        main,
        "  unsigned char* weights = load(\"{}\", {});",
        file("weights.bin"),
        compiler.weight_layout().bytes.len()
    );
    let _ =
        writeln!(main, "  unsigned char* local = load(\"{}\", {});", file("local.bin"), lowered.local_constants.len());
    let _ = writeln!(main, "  unsigned char* scratch = load(nullptr, {});", lowered.scratch_bytes);
    let pointer = |a: ArgSource| match a {
        ArgSource::Input(i) => format!("(void*)in{i}"),
        ArgSource::Output(i) => format!("(void*)out{i}"),
        ArgSource::Scratch(o) => format!("(void*)(scratch + {o})"),
        ArgSource::Weights(o) => format!("(void*)(weights + {o})"),
        ArgSource::Local(o) => format!("(void*)(local + {o})"),
        ArgSource::Bytes(_) | ArgSource::U32(_) => panic!("a GPU plan passes no scalars ({a:?})"),
    };
    for step in &lowered.steps {
        let step = match step {
            PlanStep::Launch(step) => step,
            PlanStep::Matmul(mm) => {
                let d = &mm.desc;
                let epi = match d.epilogue {
                    saggar_device::Epilogue::None => 0,
                    saggar_device::Epilogue::Relu => 1,
                    saggar_device::Epilogue::GeluTanh => 2,
                };
                let bias = mm.bias.map_or("nullptr".to_string(), pointer);
                let code = |t: saggar_device::MatmulType| match t {
                    saggar_device::MatmulType::F32 => 0,
                    saggar_device::MatmulType::F16 => 1,
                    saggar_device::MatmulType::BF16 => 2,
                    saggar_device::MatmulType::I8 => 3,
                    saggar_device::MatmulType::I32 => 4,
                };
                let (ti, to) = (code(d.inputs), code(d.output));
                let _ = writeln!(
                    main,
                    "  blas({}, {}, {}, {bias}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {:?}f, {epi}, {ti}, {to});",
                    pointer(mm.a),
                    pointer(mm.b),
                    pointer(mm.c),
                    d.m,
                    d.n,
                    d.k,
                    d.batch,
                    d.stride_a,
                    d.stride_b,
                    d.stride_c,
                    i32::from(d.trans_a),
                    i32::from(d.trans_b),
                    d.alpha()
                );
                continue;
            }
        };
        // The device checks a launch's argument count against the kernel's signature; so does this.
        let signature =
            lowered.kernels.iter().find(|k| k.name == step.kernel).expect("every launched kernel is declared");
        assert_eq!(
            step.args.len(),
            signature.params.len(),
            "launch of `{}`: arguments against its signature",
            step.kernel
        );
        let args: Vec<String> = step.args.iter().map(|a| pointer(*a)).collect();
        let c = &step.config;
        let _ = writeln!(
            main,
            "  launch({}, {}, {}, {}, {}, {}, {{{}}});",
            step.kernel,
            c.grid.x,
            c.grid.y,
            c.grid.z,
            c.block.x,
            c.block.y,
            args.join(", ")
        );
    }
    for (i, n) in lowered.output_bytes.iter().enumerate() {
        let _ = writeln!(main, "  store(\"{}\", out{i}, {n});", file(&format!("out{i}.bin")));
    }
    main.push_str("  return 0;\n}\n");
    build_and_run(dir, &source, &main)?;
    let outputs = (0..lowered.output_bytes.len()).map(|i| std::fs::read(file(&format!("out{i}.bin"))).unwrap());
    Some((outputs.collect(), lowered.output_dims))
}

/// The flags every emulated plan, and the precompiled shim and preludes, are compiled with.
const FLAGS: [&str; 4] = ["-std=c++20", "-O1", "-U_FORTIFY_SOURCE", "-w"];

/// The shim and the preludes every generated source starts with, as a header precompiled once per
/// machine and compiler (`saggar-emulation-<digest>/pre.h` in the temporary folder; g++ takes
/// `pre.h.gch` beside it, or parses `pre.h` where it cannot): most of a small plan's compile time
/// was spent on them. `None` where g++ is absent or fails.
fn precompiled_head() -> Option<&'static Path> {
    static HEAD: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    HEAD.get_or_init(|| {
        let head = format!("{SHIM}\n{}{}", saggar_device::builtin::PRELUDE, crate::ops::gpu::PRELUDE);
        let version = Command::new("g++").arg("--version").output().ok()?.stdout;
        let digest = blake3::hash(format!("{head}{FLAGS:?}{}", String::from_utf8_lossy(&version)).as_bytes());
        let dir = std::env::temp_dir().join(format!("saggar-emulation-{}", &digest.to_hex()[..16]));
        if !dir.join("pre.h.gch").exists() {
            // Built aside and renamed into place: test processes may race to build it.
            let aside = tempfile::Builder::new().prefix("saggar-emulation-").tempdir().ok()?;
            std::fs::write(aside.path().join("pre.h"), &head).ok()?;
            let built = Command::new("g++")
                .args(FLAGS)
                .args(["-x", "c++-header", "-o"])
                .arg(aside.path().join("pre.h.gch"))
                .arg(aside.path().join("pre.h"))
                .output()
                .ok()?;
            if !built.status.success() {
                return None;
            }
            let _ = std::fs::rename(aside.keep(), &dir);
        }
        dir.join("pre.h.gch").exists().then(|| dir.join("pre.h"))
    })
    .as_deref()
}

/// Compiles `source` (a generated source: prelude and kernels) with the shim, the driver and `main`
/// in `dir`, and runs it; `None` without g++.
pub(crate) fn build_and_run(dir: &Path, source: &str, main: &str) -> Option<()> {
    let file = |name: &str| dir.join(name).to_string_lossy().into_owned();
    let preludes = [saggar_device::builtin::PRELUDE, crate::ops::gpu::PRELUDE].concat();
    let code = match (source.find(&preludes), precompiled_head()) {
        (Some(at), Some(head)) => {
            let rest = format!("{}{}", &source[..at], &source[at + preludes.len()..]);
            format!("#include \"{}\"\n{rest}\n{DRIVER}\n{main}", head.display())
        }
        _ => format!("{SHIM}\n{source}\n{DRIVER}\n{main}"),
    };
    std::fs::write(file("plan.cpp"), code).unwrap();
    let built = Command::new("g++").args(FLAGS).args(["-o", &file("plan"), &file("plan.cpp")]).output();
    let Ok(built) = built else {
        println!("g++ not found: the CPU run of the GPU plan is skipped");
        return None;
    };
    assert!(built.status.success(), "g++: {}", String::from_utf8_lossy(&built.stderr));
    let ran = Command::new(file("plan")).output().unwrap();
    assert!(ran.status.success(), "the emulated plan failed: {}", String::from_utf8_lossy(&ran.stderr));
    Some(())
}

pub(crate) fn assert_close(got: &[u8], want: &Tensor, what: &str) {
    assert_eq!(got.len(), want.to_le_bytes().len(), "{what}: byte length");
    let got = Tensor::from_le_bytes(want.dtype(), want.dims().to_vec(), got).unwrap();
    match (got.data(), want.data()) {
        (TensorData::F32(g), TensorData::F32(w)) => {
            for (k, (a, b)) in g.iter().zip(w).enumerate() {
                let both_nan = a.is_nan() && b.is_nan();
                assert!(
                    a == b || both_nan || (a - b).abs() <= 1e-4 + 1e-3 * b.abs(),
                    "{what}: element {k}: {a} vs {b}"
                );
            }
        }
        (TensorData::F64(g), TensorData::F64(w)) => {
            for (k, (a, b)) in g.iter().zip(w).enumerate() {
                let both_nan = a.is_nan() && b.is_nan();
                assert!(
                    a == b || both_nan || (a - b).abs() <= 1e-9 + 1e-9 * b.abs(),
                    "{what}: element {k}: {a} vs {b}"
                );
            }
        }
        (g, w) => assert_eq!(g, w, "{what}"),
    }
}

/// [`assert_close`], where at a half precision an element may also be off by four units of the
/// half type's rounding of the output's largest magnitude: plan and host round the same f32
/// values, but those differ in their last bits (summation order), so now and then one rounds the
/// other way, and the products after it carry that half unit on.
pub(crate) fn assert_close_at(got: &[u8], want: &Tensor, what: &str, precision: crate::Precision) {
    let unit = match precision.half() {
        Some(saggar_shape::DType::F16) => 2f32.powi(-11),
        Some(_) => 2f32.powi(-8),
        None => return assert_close(got, want, what),
    };
    let got = Tensor::from_le_bytes(want.dtype(), want.dims().to_vec(), got).unwrap();
    let (TensorData::F32(g), TensorData::F32(w)) = (got.data(), want.data()) else {
        return assert_eq!(got.data(), want.data(), "{what}");
    };
    let largest = w.iter().filter(|v| v.is_finite()).fold(0f32, |m, v| m.max(v.abs()));
    for (k, (a, b)) in g.iter().zip(w).enumerate() {
        let both_nan = a.is_nan() && b.is_nan();
        let near = (a - b).abs() <= 1e-4 + 1e-3 * b.abs() + 4.0 * unit * largest;
        assert!(both_nan || near, "{what}: element {k}: {a} vs {b} (largest {largest})");
    }
}

#[test]
fn the_gpu_plans_of_the_checked_in_models_match_the_host_when_run_on_the_cpu() {
    checked_in_models_match_the_host(&OnnxOptions::default());
}

/// At fp16 and bf16 the plans hold half weights, casts to half in the fused kernels, im2col over
/// half images and half BLAS steps writing f32; the host computes the same roundings.
#[test]
fn the_half_precision_plans_of_the_checked_in_models_match_the_host_when_run_on_the_cpu() {
    for precision in [crate::Precision::Fp16, crate::Precision::Bf16] {
        checked_in_models_match_the_host(&OnnxOptions::default().with_precision(precision));
    }
}

fn checked_in_models_match_the_host(options: &OnnxOptions) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("models");
    // Data set 1 is batch 1, data set 0 batch 3.
    for (name, set) in [("mlp", 1), ("cnn", 1), ("dlrm", 1), ("bert", 1), ("bert", 0)] {
        let model = OnnxModel::load(root.join(name).join("model.onnx")).unwrap();
        let compiler = OnnxCompiler::new(model, options.clone());
        let set = root.join(name).join(format!("test_data_set_{set}"));
        let inputs: Vec<Tensor> = (0..)
            .map(|k| set.join(format!("input_{k}.pb")))
            .take_while(|p| p.exists())
            .map(|p| read_tensor_pb(&p).unwrap().tensor)
            .collect();
        let want = run_on_host(&compiler, &inputs).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let Some(got) = run_emulated(&compiler, &inputs, dir.path()) else { return };
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            let what = format!("{name} {} output {k} at {}", set.display(), options.precision);
            assert_close_at(g, w, &what, options.precision);
        }
    }
}

#[test]
fn both_conv_engines_of_the_cnn_model_match_the_host_direct_conv_when_run_on_the_cpu() {
    use crate::ConvEngine;
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("models").join("cnn");
    let model = OnnxModel::load(root.join("model.onnx")).unwrap();
    // Batch 3: the im2col plan's matmul is a strided batch over the images.
    let x = read_tensor_pb(&root.join("test_data_set_0").join("input_0.pb")).unwrap().tensor;
    let direct = OnnxCompiler::new(model.clone(), OnnxOptions::default().with_conv(ConvEngine::Direct));
    let want = run_on_host(&direct, std::slice::from_ref(&x)).unwrap();
    for engine in ConvEngine::ALL {
        let compiler = OnnxCompiler::new(model.clone(), OnnxOptions::default().with_conv(engine));
        let dir = tempfile::tempdir().unwrap();
        let Some(got) = run_emulated(&compiler, std::slice::from_ref(&x), dir.path()) else { return };
        assert_close(&got[0], &want[0], &format!("cnn conv={}", engine.name()));
    }
}

/// One model holding a node of every GPU kernel kind with non-trivial attributes (negative slice
/// steps, every Pad mode, transposed Gemm with a broadcast bias, broadcast batched MatMul, grouped
/// dilated Conv, ceil-mode pooling, every reduction, ArgMax with select_last_index, ...), each a graph
/// output.
/// Columns of the emulation's wide LayerNormalization rows: one row is more than
/// `crate::ops::gpu::ROW_CACHE_BYTES`.
#[test]
fn fused_attention_kernels_match_the_host_when_run_on_the_cpu() {
    use crate::synthetic::{AttentionConfig, Projections, attention_block};
    use crate::{AttentionKernel, Precision};
    let base = AttentionConfig::default();
    // (config, batch, seq): the NaN guard with a row masked entirely, a Div scale without a guard,
    // no mask, more keys than one block-sized chunk (and than many key tiles), and head sizes of
    // each tile shape of the tiled kernel (up to 64, 128 and 256) with ragged last tiles.
    // The half precisions: every tensor-core key tile (64 and 32 keys), ragged tiles, many key
    // tiles, a fallback to f32 (head 136), blocks of one and of four warps.
    let (f16, bf16) = (Some(Precision::Fp16), Some(Precision::Bf16));
    for (cfg, batch, seq, half) in [
        (base, 3, 10, f16),
        (AttentionConfig { div_scale: true, nan_guard: false, ..base }, 2, 7, bf16),
        (AttentionConfig { mask: false, nan_guard: false, ..base }, 1, 5, None),
        (AttentionConfig { heads: 1, head_dim: 4, ..base }, 1, 260, f16),
        (AttentionConfig { heads: 2, head_dim: 80, ..base }, 2, 37, bf16),
        (AttentionConfig { heads: 1, head_dim: 136, nan_guard: false, ..base }, 1, 19, f16),
        // Enough blocks for the larger tiles: 512 tiles of 64 rows, 256 of 32.
        (AttentionConfig { heads: 4, head_dim: 8, ..base }, 64, 64, None),
        (AttentionConfig { heads: 2, head_dim: 72, nan_guard: false, ..base }, 128, 20, None),
        // Four warps a block in half, rows of their own: 256 tiles of 64 rows (ragged), a head above
        // the split-keys block's.
        (AttentionConfig { heads: 4, head_dim: 72, ..base }, 64, 16, f16),
        // Split keys: too few tiles of 16 rows to fill the GPU, so four warps share each tile's
        // keys: a head of 64 with a mask and rows whose keys are all masked here, and the head of 4
        // over 260 keys above (three rounds of four tiles, the last ragged).
        (AttentionConfig { heads: 2, head_dim: 64, ..base }, 2, 100, bf16),
        // Q, K and V read in place from one projection, at their offsets.
        (AttentionConfig { projections: Projections::Split, ..base }, 2, 9, f16),
        (AttentionConfig { projections: Projections::Stacked, heads: 1, head_dim: 64, ..base }, 1, 70, f16),
    ] {
        let bytes = attention_block(cfg).to_bytes();
        let h = cfg.heads * cfg.head_dim;
        let x = (0..batch * seq * h).map(|i| ((i * 7919 % 211) as f32 / 105.0) - 1.0).collect();
        let mut inputs = vec![Tensor::new(vec![batch, seq, h], TensorData::F32(x)).unwrap()];
        if cfg.mask {
            let m = (0..batch * seq)
                .map(|i| {
                    if i / seq == batch - 1 && batch > 1 || i % seq + i / seq >= seq { f32::NEG_INFINITY } else { 0.0 }
                })
                .collect();
            inputs.push(Tensor::new(vec![batch, 1, 1, seq], TensorData::F32(m)).unwrap());
        }
        let dims: Vec<Vec<u64>> = inputs.iter().map(|t| t.dims().iter().map(|&d| d as u64).collect()).collect();
        // f32 through each kernel; some cases in f16 or bf16 too, through the tensor-core kernel.
        let mut runs = vec![(AttentionKernel::Rows, Precision::Fp32), (AttentionKernel::Tiled, Precision::Fp32)];
        runs.extend(half.map(|p| (AttentionKernel::Auto, p)));
        for (kernel, precision) in runs {
            let model = OnnxModel::from_bytes(&bytes, "attention", &crate::ImportLimits::default()).unwrap();
            let options = OnnxOptions::default().with_attention(kernel).with_precision(precision);
            let compiler = OnnxCompiler::new(model, options);
            assert_eq!(compiler.plan_summary(&dims, BackendKind::Cuda).unwrap().attention_groups, 1, "{cfg:?}");
            let want = run_on_host(&compiler, &inputs).unwrap();
            let dir = tempfile::tempdir().unwrap();
            let Some(got) = run_emulated(&compiler, &inputs, dir.path()) else { return };
            for (k, (g, w)) in got.iter().zip(&want).enumerate() {
                let what = format!("{kernel:?} {precision} {cfg:?} batch {batch} seq {seq} output {k}");
                assert_close_at(g, w, &what, precision);
            }
        }
    }
}

#[test]
fn every_translation_unit_of_a_model_source_compiles_on_its_own() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("models");
    let model = OnnxModel::load(root.join("bert").join("model.onnx")).unwrap();
    let compiler = OnnxCompiler::new(model, OnnxOptions::default());
    let lowered = compiler.lower(&[vec![2, 16], vec![2, 16]], &[], BackendKind::Cuda).unwrap();
    let source = compiler.source(&lowered);
    let units = compiler.units(&lowered, &source);
    assert!(units.len() > 1, "the BERT source is split");
    let dir = tempfile::tempdir().unwrap();
    for (u, unit) in units.iter().enumerate() {
        let file = dir.path().join(format!("unit{u}.cpp"));
        std::fs::write(&file, format!("{SHIM}\n{}", unit.code)).unwrap();
        let Ok(out) = Command::new("g++").args(["-std=c++20", "-fsyntax-only", "-w"]).arg(&file).output() else {
            println!("g++ not found: the unit syntax check is skipped");
            return;
        };
        assert!(out.status.success(), "unit {u}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

/// The GPU prelude's conversions against the host's (`half`, round to nearest even): every f16 and
/// bf16 bit pattern widened, and f32 values narrowed at every kind of edge (ties to even at normal
/// and subnormal spacing, the overflow threshold, the smallest subnormal's half, infinities, NaN,
/// signed zeros), plus a spread of ordinary values. Bit for bit, NaNs as NaNs.
#[test]
fn half_precision_casts_match_the_host_bit_for_bit_when_run_on_the_cpu() {
    use saggar_shape::{DType, Dim};

    use crate::builder::ModelBuilder;
    use crate::ops::Attribute::Int;
    let mut edges: Vec<f32> = vec![
        0.0,
        -0.0,
        1.0,
        -2.5,
        65504.0,
        65519.99,
        65520.0,
        -65520.0,
        1e9,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::MIN_POSITIVE,
        6.0e-8,
        2.9802322e-8,
        2.9802326e-8,
        8.940697e-8,
        6.1035156e-5,
        6.097555e-5,
        3.0e38,
        f32::MAX,
    ];
    for k in 0..64u32 {
        // Exactly halfway between neighbouring f16 values (ties), and just either side of them.
        let tie = f32::from_bits(0x3f80_0000 + (2 * k + 1) * 0x1000);
        edges.extend([tie, f32::from_bits(tie.to_bits() + 1), f32::from_bits(tie.to_bits() - 1)]);
        // Halfway between bf16 neighbours.
        edges.push(f32::from_bits(0x4040_0000 + (2 * k + 1) * 0x8000));
        // Subnormal f16 ties: (2k + 1) * 2^-25.
        edges.push((2 * k + 1) as f32 * 2.9802322e-8);
    }
    edges.extend((0..2000u32).map(|i| f32::from_bits(i.wrapping_mul(2_654_435_761))));
    let n = edges.len();
    for (dtype, code) in [(DType::F16, 10i64), (DType::BF16, 16)] {
        let mut b = ModelBuilder::new(18);
        b.input("x", DType::F32, &[Dim::Fixed(n as u64)]);
        b.input("h", dtype, &[Dim::Fixed(65536)]);
        b.output("narrow", dtype, &[Dim::Fixed(n as u64)]);
        b.output("wide", DType::F32, &[Dim::Fixed(65536)]);
        b.node("Cast", &["x"], &["narrow"], &[("to", Int(code))]);
        b.node("Cast", &["h"], &["wide"], &[("to", Int(1))]);
        let model = OnnxModel::from_bytes(&b.to_bytes(), "casts", &crate::ImportLimits::default()).unwrap();
        let compiler = OnnxCompiler::new(model, OnnxOptions::default());
        let every: Vec<u16> = (0..=u16::MAX).collect();
        let h = if dtype == DType::F16 { TensorData::F16(every) } else { TensorData::BF16(every) };
        let inputs =
            vec![Tensor::new(vec![n], TensorData::F32(edges.clone())).unwrap(), Tensor::new(vec![65536], h).unwrap()];
        let want = run_on_host(&compiler, &inputs).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let Some(got) = run_emulated(&compiler, &inputs, dir.path()) else { return };
        let bits = |t: &Tensor| t.to_le_bytes();
        assert_eq!(got[0], bits(&want[0]), "{dtype}: f32 narrowed on the GPU plan against the host");
        let (g, w) = (
            Tensor::from_le_bytes(DType::F32, vec![65536], &got[1]).unwrap().to_f32s().unwrap(),
            want[1].to_f32s().unwrap(),
        );
        for (i, (a, b)) in g.iter().zip(&w).enumerate() {
            assert!(a.to_bits() == b.to_bits() || a.is_nan() && b.is_nan(), "{dtype} bits {i:#06x}: {a} vs {b}");
        }
    }
}

/// Half-precision exports of a BERT-style encoder and an attention block: their CUDA/HIP plans,
/// run on the CPU, against the host backend (both compute in f32; the outputs, rounded to the half
/// precision, within one or two of its units of the host's).
#[test]
fn half_models_gpu_plans_match_the_host_when_run_on_the_cpu() {
    use saggar_shape::DType;

    use crate::synthetic::{AttentionConfig, EncoderConfig, attention_block, bert_like_encoder, half_precision};
    let encoder =
        EncoderConfig { layers: 1, hidden: 32, heads: 2, intermediate: 64, vocab: 50, max_positions: 16, seq: None };
    let (batch, seq) = (2usize, 5usize);
    let ids = Tensor::new(vec![batch, seq], TensorData::I64((0..10).map(|i| i * 3 % 50).collect())).unwrap();
    let mask = Tensor::new(vec![batch, seq], TensorData::I64((0..10).map(|i| i64::from(i % 5 < 4)).collect())).unwrap();
    let cfg = AttentionConfig { div_scale: true, mask: false, nan_guard: false, ..AttentionConfig::default() };
    let x: Vec<f32> = (0..batch * seq * 16).map(|i| ((i * 7919 % 211) as f32 / 105.0) - 1.0).collect();
    for dtype in [DType::F16, DType::BF16] {
        let x = Tensor::new(vec![batch, seq, 16], TensorData::F32(x.clone())).unwrap().narrowed(dtype).unwrap();
        for (name, bytes, inputs) in [
            ("encoder", bert_like_encoder(encoder).to_bytes(), vec![ids.clone(), mask.clone()]),
            ("attention", attention_block(cfg).to_bytes(), vec![x]),
        ] {
            let half = half_precision(&bytes, dtype).unwrap();
            let model = OnnxModel::from_bytes(&half, name, &crate::ImportLimits::default()).unwrap();
            let compiler = OnnxCompiler::new(model, OnnxOptions::default());
            let want = run_on_host(&compiler, &inputs).unwrap();
            let dir = tempfile::tempdir().unwrap();
            let Some(got) = run_emulated(&compiler, &inputs, dir.path()) else { return };
            let unit = if dtype == DType::F16 { 1.0 / 1024.0 } else { 1.0 / 128.0 };
            for (k, (g, w)) in got.iter().zip(&want).enumerate() {
                let g = Tensor::from_le_bytes(dtype, w.dims().to_vec(), g).unwrap().to_f32s().unwrap();
                for (i, (a, b)) in g.iter().zip(w.to_f32s().unwrap()).enumerate() {
                    assert!(
                        (a - b).abs() <= 2.0 * unit * b.abs().max(1e-3),
                        "{name} {dtype} output {k} element {i}: {a} vs {b}"
                    );
                }
            }
        }
    }
}
