//! Tests that run the CUDA/HIP plan of the checked-in models on the CPU: the generated source is
//! compiled by g++ with a shim (a block's threads are OS threads meeting at a barrier for
//! `__syncthreads`; they run the blocks one after another, so `__shared__` statics are per block), driven by
//! a generated `main` that makes every launch of the plan with its launch shape, `meta` tables and
//! memory plan; the outputs must match the host backend's. Skipped with a message when g++ is absent.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use saggar_device::BackendKind;

use crate::lowering::ArgSource;
use crate::{OnnxCompiler, OnnxModel, OnnxOptions, Tensor, TensorData, read_tensor_pb, run_on_host};

const SHIM: &str = r#"
#include <barrier>
#include <math.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>
#define __global__
#define __device__
#define __shared__ static
#define __restrict__ __restrict
struct saggar_dim3 { unsigned x, y, z; };
static thread_local saggar_dim3 blockIdx, threadIdx;
static saggar_dim3 blockDim, gridDim;
static std::barrier<>* saggar_bar;
inline void __syncthreads() { saggar_bar->arrive_and_wait(); }
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
"#;

const DRIVER: &str = r#"
template <typename... P, size_t... I>
static void saggar_call(void (*f)(P...), void** a, std::index_sequence<I...>) { f((P)a[I]...); }
template <typename... P>
static void launch(void (*f)(P...), unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, std::vector<void*> a) {
  gridDim = {gx, gy, gz}; blockDim = {bx, by, 1};
  std::barrier<> bar(bx * by); saggar_bar = &bar;
  std::vector<std::thread> ts;
  for (unsigned ty = 0; ty < by; ++ty) for (unsigned tx = 0; tx < bx; ++tx)
    ts.emplace_back([&, tx, ty] {
      threadIdx = {tx, ty, 0};
      for (unsigned z = 0; z < gz; ++z) for (unsigned y = 0; y < gy; ++y) for (unsigned x = 0; x < gx; ++x) {
        blockIdx = {x, y, z};
        saggar_call(f, a.data(), std::index_sequence_for<P...>{});
        bar.arrive_and_wait();  // the block is done before the next one reuses __shared__
      }
    });
  for (auto& t : ts) t.join();
}
static unsigned char* load(const char* path, size_t size) {
  unsigned char* p = (unsigned char*)std::aligned_alloc(64, (size + 64) / 64 * 64);
  std::memset(p, 0, (size + 64) / 64 * 64);
  if (path) { FILE* f = std::fopen(path, "rb"); if (!f || std::fread(p, 1, size, f) != size) std::abort(); std::fclose(f); }
  return p;
}
static void store(const char* path, const unsigned char* p, size_t size) {
  FILE* f = std::fopen(path, "wb"); if (!f || std::fwrite(p, 1, size, f) != size) std::abort(); std::fclose(f);
}
"#;

/// Runs `compiler` on `inputs` through its CUDA plan compiled for the CPU in `dir`; `None` without g++.
fn run_emulated(compiler: &OnnxCompiler, inputs: &[Tensor], dir: &Path) -> Option<Vec<Vec<u8>>> {
    let dims: Vec<Vec<u64>> = inputs.iter().map(|t| t.dims().iter().map(|&d| d as u64).collect()).collect();
    let lowered = compiler.lower(&dims, BackendKind::Cuda).unwrap();
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
    for step in &lowered.steps {
        let args: Vec<String> = step
            .args
            .iter()
            .map(|a| match *a {
                ArgSource::Input(i) => format!("(void*)in{i}"),
                ArgSource::Output(i) => format!("(void*)out{i}"),
                ArgSource::Scratch(o) => format!("(void*)(scratch + {o})"),
                ArgSource::Weights(o) => format!("(void*)(weights + {o})"),
                ArgSource::Local(o) => format!("(void*)(local + {o})"),
                ArgSource::Bytes(n) => panic!("a GPU plan passes no byte counts ({n})"),
            })
            .collect();
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
    std::fs::write(file("plan.cpp"), format!("{SHIM}\n{source}\n{DRIVER}\n{main}")).unwrap();
    let built = Command::new("g++")
        .args(["-std=c++20", "-O1", "-pthread", "-w", "-o", &file("plan"), &file("plan.cpp")])
        .output();
    let Ok(built) = built else {
        println!("g++ not found: the CPU run of the GPU plan is skipped");
        return None;
    };
    assert!(built.status.success(), "g++: {}", String::from_utf8_lossy(&built.stderr));
    let ran = Command::new(file("plan")).output().unwrap();
    assert!(ran.status.success(), "the emulated plan failed: {}", String::from_utf8_lossy(&ran.stderr));
    Some((0..lowered.output_bytes.len()).map(|i| std::fs::read(file(&format!("out{i}.bin"))).unwrap()).collect())
}

fn assert_close(got: &[u8], want: &Tensor, what: &str) {
    assert_eq!(got.len(), want.to_le_bytes().len(), "{what}: byte length");
    let got = Tensor::from_le_bytes(want.dtype(), want.dims().to_vec(), got).unwrap();
    match (got.data(), want.data()) {
        (TensorData::F32(g), TensorData::F32(w)) => {
            for (k, (a, b)) in g.iter().zip(w).enumerate() {
                assert!((a - b).abs() <= 1e-4 + 1e-3 * b.abs(), "{what}: element {k}: {a} vs {b}");
            }
        }
        (g, w) => assert_eq!(g, w, "{what}"),
    }
}

#[test]
fn the_gpu_plans_of_the_checked_in_models_match_the_host_when_run_on_the_cpu() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("models");
    // Data set 1 is batch 1, data set 0 batch 3.
    for (name, set) in [("mlp", 1), ("cnn", 1), ("dlrm", 1), ("bert", 1), ("bert", 0)] {
        let model = OnnxModel::load(root.join(name).join("model.onnx")).unwrap();
        let compiler = OnnxCompiler::new(model, OnnxOptions::default());
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
            assert_close(g, w, &format!("{name} {} output {k}", set.display()));
        }
    }
}
