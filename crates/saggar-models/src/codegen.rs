//! CUDA/HIP C++ source for one model: every dimension but the batch is a compile-time constant; the
//! batch is each kernel's last argument, so one code object serves every bucket.
//!
//! The source starts with [`saggar_device::builtin::PRELUDE`], which makes it compile unchanged under
//! NVRTC and hipRTC. Kernels (names and launch shapes in [`crate::plan`]):
//! - `saggar_models_features(out, tables, dense_0.., sparse_0.., batch)`: one block row (`blockIdx.y`) per input;
//!   dense inputs are copied into their columns of the feature matrix, sparse inputs are embedding-bag
//!   summed (f32, in index order; an index outside `[0, table_rows)` is skipped, so it contributes zero
//!   and never reads out of bounds).
//! - `saggar_models_layer_{l}(out, a, w, bias, batch)` (naive) or `saggar_models_layer_{l}_r{rows}`
//!   (split-K, one kernel per rows-per-block variant of [`plan::SPLITK_ROW_VARIANTS`]): `out = act(a @
//!   w + bias)` for layer `l` ([`GemmVariant`]).

use std::fmt::Write as _;

use saggar_device::KernelSource;

use crate::config::ModelConfig;
use crate::plan::{self, GemmVariant, SPLITK_SLICES, SPLITK_TILE};

/// The kernel source of `config` with `gemm`, for every batch.
pub(crate) fn gpu_source(config: &ModelConfig, gemm: GemmVariant) -> KernelSource {
    let mut code = String::new();
    let _ = writeln!(
        code,
        "// saggar-models {}: model `{}`, every batch, gemm {}",
        env!("CARGO_PKG_VERSION"),
        config.name(),
        gemm.name()
    );
    let _ = writeln!(code, "// architecture: {}", config.canonical_json());
    code.push_str(saggar_device::builtin::PRELUDE);
    if let ModelConfig::Recsys(c) = config {
        features_kernel(&mut code, c);
    }
    for (l, layer) in config.layers().iter().enumerate() {
        match gemm {
            GemmVariant::Naive => {
                naive_layer(&mut code, &plan::gpu_layer_name(l, gemm, 1), layer.outputs, layer.inputs, layer.relu)
            }
            GemmVariant::SplitK => {
                for rows in plan::SPLITK_ROW_VARIANTS {
                    let name = plan::gpu_layer_name(l, gemm, rows);
                    splitk_layer(&mut code, &name, rows, layer.outputs, layer.inputs, layer.relu);
                }
            }
        }
    }
    KernelSource::new(format!("saggar_models_{}.cu", config.kind()), code, plan::gpu_kernels(config, gemm))
}

fn features_kernel(code: &mut String, c: &crate::config::RecsysConfig) {
    let (d, s) = (c.dense_inputs, c.sparse_inputs);
    let features = c.feature_width();
    let mut params = vec!["float* __restrict__ out".to_string(), "const float* __restrict__ tables".to_string()];
    params.extend((0..d).map(|i| format!("const float* __restrict__ dense_{i}")));
    params.extend((0..s).map(|j| format!("const int* __restrict__ sparse_{j}")));
    params.push("const saggar_u32 batch".to_string());
    let _ = write!(
        code,
        r#"
SAGGAR_GLOBAL void {name}({params}) {{
  const saggar_u32 input = blockIdx.y;
  const saggar_u64 i = (saggar_u64)blockIdx.x * blockDim.x + threadIdx.x;
  const saggar_u64 FEATURES = {features}ull;
"#,
        name = plan::GPU_FEATURES,
        params = params.join(", "),
    );
    if d > 0 {
        let _ = write!(
            code,
            r#"  if (input < {d}u) {{
    const saggar_u64 WIDTH = {w}ull;
    if (i >= (saggar_u64)batch * WIDTH) return;
    const float* src;
    switch (input) {{
"#,
            w = c.dense_width,
        );
        for i in 0..d {
            let _ = writeln!(code, "      case {i}u: src = dense_{i}; break;");
        }
        code.push_str(
            r#"      default: return;
    }
    const saggar_u64 row = i / WIDTH;
    const saggar_u64 col = i - row * WIDTH;
    out[row * FEATURES + (saggar_u64)input * WIDTH + col] = src[i];
    return;
  }
"#,
        );
    }
    if s > 0 {
        let _ = write!(
            code,
            r#"  {{
    const saggar_u32 j = input - {d}u;
    const saggar_u64 DIM = {dim}ull;
    const saggar_u32 BAG = {bag}u;
    const int ROWS = {rows};
    if (i >= (saggar_u64)batch * DIM) return;
    const int* idx;
    switch (j) {{
"#,
            dim = c.embedding_dim,
            bag = c.bag_size,
            rows = c.table_rows,
        );
        for j in 0..s {
            let _ = writeln!(code, "      case {j}u: idx = sparse_{j}; break;");
        }
        let _ = write!(
            code,
            r#"      default: return;
    }}
    const saggar_u64 row = i / DIM;
    const saggar_u64 col = i - row * DIM;
    const float* table = tables + (saggar_u64)j * ((saggar_u64)ROWS * DIM);
    float acc = 0.0f;
    for (saggar_u32 t = 0; t < BAG; ++t) {{
      const int ix = idx[row * BAG + t];
      if (ix >= 0 && ix < ROWS) acc += table[(saggar_u64)ix * DIM + col];
    }}
    out[row * FEATURES + {dense_cols}ull + (saggar_u64)j * DIM + col] = acc;
  }}
"#,
            dense_cols = d * c.dense_width,
        );
    }
    code.push_str("}\n");
}

fn relu_expr(relu: bool, value: &str) -> String {
    if relu { format!("({value} > 0.0f ? {value} : 0.0f)") } else { value.to_string() }
}

fn naive_layer(code: &mut String, name: &str, n: usize, k: usize, relu: bool) {
    let _ = write!(
        code,
        r#"
SAGGAR_GLOBAL void {name}(float* __restrict__ out, const float* __restrict__ a, const float* __restrict__ w,
                        const float* __restrict__ bias, const saggar_u32 batch) {{
  const saggar_u64 M = batch, N = {n}ull, K = {k}ull;
  const saggar_u64 idx = (saggar_u64)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= M * N) return;
  const saggar_u64 row = idx / N;
  const saggar_u64 col = idx - row * N;
  float s = bias[col];
  for (saggar_u64 t = 0; t < K; ++t) s += a[row * K + t] * w[t * N + col];
  out[idx] = {result};
}}
"#,
        result = relu_expr(relu, "s"),
    );
}

/// The split-K GEMM of one layer with `rows` rows per block (a compile-time constant: it sizes the
/// shared partial sums and unrolls the row loops).
fn splitk_layer(code: &mut String, name: &str, rows: usize, n: usize, k: usize, relu: bool) {
    let _ = write!(
        code,
        r#"
SAGGAR_GLOBAL void {name}(float* __restrict__ out, const float* __restrict__ a, const float* __restrict__ w,
                        const float* __restrict__ bias, const saggar_u32 batch) {{
  const saggar_u64 M = batch, N = {n}ull, K = {k}ull;
  const saggar_u32 TILE = {tile}u, SLICES = {slices}u, RB = {rows}u;
  __shared__ float partial[{slices}][{rows}][{tile}];
  const saggar_u64 col = (saggar_u64)blockIdx.x * TILE + threadIdx.x;
  const saggar_u64 row0 = (saggar_u64)blockIdx.y * RB;
  float acc[{rows}];
#pragma unroll
  for (saggar_u32 r = 0; r < RB; ++r) acc[r] = 0.0f;
  if (col < N) {{
#pragma unroll 4
    for (saggar_u64 t = threadIdx.y; t < K; t += SLICES) {{
      const float wv = w[t * N + col];
#pragma unroll
      for (saggar_u32 r = 0; r < RB; ++r) {{
        if (row0 + r < M) acc[r] += a[(row0 + r) * K + t] * wv;
      }}
    }}
  }}
#pragma unroll
  for (saggar_u32 r = 0; r < RB; ++r) partial[threadIdx.y][r][threadIdx.x] = acc[r];
  __syncthreads();
  if (threadIdx.y < RB) {{
    const saggar_u64 row = row0 + threadIdx.y;
    if (row < M && col < N) {{
      float s = bias[col];
      for (saggar_u32 q = 0; q < SLICES; ++q) s += partial[q][threadIdx.y][threadIdx.x];
      out[row * N + col] = {result};
    }}
  }}
}}
"#,
        tile = SPLITK_TILE,
        slices = SPLITK_SLICES,
        result = relu_expr(relu, "s"),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ModelKind, RecsysConfig};
    use crate::plan::Target;

    #[test]
    fn one_source_serves_every_batch() {
        let config = ModelKind::Recsys.default_config();
        let a = gpu_source(&config, GemmVariant::SplitK);
        assert!(a.code.contains("M = batch, N = 512ull, K = 1840ull"));
        assert!(a.code.contains("case 149u: src = dense_149; break;"));
        assert!(a.code.contains("case 39u: idx = sparse_39; break;"));
        assert!(a.code.contains("ix >= 0 && ix < ROWS"), "out-of-range indices are skipped");
        // The feature kernel and every layer in each rows-per-block variant, the batch last.
        assert_eq!(a.kernels.len(), 1 + 3 * plan::SPLITK_ROW_VARIANTS.len());
        assert_eq!(a.kernels[0].params.len(), 2 + 190 + 1);
        assert!(a.kernels.iter().all(|k| k.params.last() == Some(&saggar_device::ParamKind::U32)));
        for rows in plan::SPLITK_ROW_VARIANTS {
            assert!(a.code.contains(&format!("void saggar_models_layer_0_r{rows}(")), "variant r{rows}");
        }
        let naive = gpu_source(&config, GemmVariant::Naive);
        assert!(naive.code.contains("if (idx >= M * N) return;"));
        assert_eq!(naive.kernels.len(), 4);
    }

    #[test]
    fn every_batch_plans_kernels_the_source_holds_with_their_signatures() {
        let config = ModelKind::Recsys.default_config();
        for gemm in [GemmVariant::SplitK, GemmVariant::Naive] {
            let source = gpu_source(&config, gemm);
            for batch in (1..=80).chain([1000, 65_536]) {
                let plan = plan::plan(&config, batch, Target::Gpu(gemm));
                for step in &plan.steps {
                    let signature = source.kernels.iter().find(|k| k.name == step.kernel);
                    let signature =
                        signature.unwrap_or_else(|| panic!("batch {batch}: `{}` is not in the source", step.kernel));
                    assert!(plan.kernels.contains(signature), "batch {batch}: `{}` signature", step.kernel);
                    assert_eq!(step.args.len(), signature.params.len(), "batch {batch}: `{}` arguments", step.kernel);
                    assert_eq!(
                        step.args.last(),
                        Some(&saggar_dispatch::steps::ArgSource::U32(batch as u32)),
                        "the batch is the last argument"
                    );
                }
            }
        }
    }

    /// The generated C++ compiles (hipRTC needs no GPU; CI has it through `--features hip`), in
    /// both GEMM variants, every kernel it declares defined.
    #[cfg(feature = "hip")]
    #[test]
    fn the_source_compiles_with_hiprtc() {
        if let Err(e) = saggar_device::hip::hiprtc_library() {
            eprintln!("SKIPPED saggar-models codegen: {e}");
            return;
        }
        let config = ModelKind::Recsys.default_config();
        for gemm in [GemmVariant::SplitK, GemmVariant::Naive] {
            let source = gpu_source(&config, gemm);
            let code = saggar_device::hip::compile_for_arch(&source, "gfx90a")
                .unwrap_or_else(|e| panic!("{} does not compile: {e}", gemm.name()));
            assert_eq!(code.kernels, source.kernels);
        }
    }

    #[test]
    fn dense_only_and_sparse_only_models_generate() {
        for (dense, sparse) in [(3, 0), (0, 2)] {
            let config =
                ModelConfig::Recsys(RecsysConfig { dense_inputs: dense, sparse_inputs: sparse, ..Default::default() });
            let src = gpu_source(&config, GemmVariant::SplitK);
            assert_eq!(src.code.contains("switch (input)"), dense > 0);
            assert_eq!(src.code.contains("switch (j)"), sparse > 0);
        }
    }
}
