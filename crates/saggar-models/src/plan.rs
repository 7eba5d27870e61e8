//! What one program does, independent of the backend's API: the layout of the weights on the device,
//! the layout of scratch memory, and the launches in order with their arguments.
//!
//! The plan is a pure function of the model config, the batch, the target (host or GPU) and the GEMM
//! variant, so `load` rebuilds it from the artifact header instead of storing it.
//!
//! # Scratch layout
//! Regions in this order, each starting at a multiple of [`ALIGN`] bytes:
//! 1. recommender only: the feature matrix, `[batch, feature_width]` f32;
//! 2. one region per hidden layer, `[batch, hidden[l]]` f32, except that with `two_outputs` the last
//!    hidden layer writes straight into the `features` output instead.
//!
//! The last layer writes straight into `score` (or `y`). The scratch size is at least [`ALIGN`] so a
//! scratch buffer can always be allocated, even for a one-layer MLP that needs none.
//!
//! # Weight layout
//! One device buffer: [`ALIGN`] bytes of residency marker (see [`crate::compiler`]), then the embedding
//! tables back to back as one `[sparse_inputs, table_rows, embedding_dim]` array, then each layer's
//! weight and bias `[out]`, every tensor but the tables starting at a multiple of [`ALIGN`]. GPU
//! weights are `[in, out]` row-major; host weights are packed in column panels ([`WeightPacking`]).

use saggar_device::{Dim3, KernelSignature, LaunchConfig, ParamKind};
use saggar_dispatch::steps::{ArgSource, LaunchStep};

use crate::config::ModelConfig;
use crate::host_kernels;
use crate::weights::Weights;

/// Alignment of every scratch region and weight tensor, in bytes (a GPU allocation's alignment).
pub const ALIGN: usize = 256;

/// Which GEMM kernel the GPU code uses. The host backend always runs its own host GEMM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum GemmVariant {
    /// One thread per output element, the K loop in the thread. Simple; slow at small batches.
    Naive,
    /// Blocks of 32 output columns x 32 slices of K, 1 to 8 rows per block (about eight row blocks per
    /// column tile), partial sums reduced in shared memory: 1024 threads share each column tile, so
    /// small batches still spread over the GPU.
    #[default]
    SplitK,
}

impl GemmVariant {
    /// The name used in the compiler identity's `gemm` option.
    pub const fn name(self) -> &'static str {
        match self {
            GemmVariant::Naive => "naive",
            GemmVariant::SplitK => "splitk32",
        }
    }

    pub(crate) const fn tag(self) -> u8 {
        match self {
            GemmVariant::Naive => 1,
            GemmVariant::SplitK => 2,
        }
    }

    pub(crate) fn from_tag(tag: u8) -> Option<GemmVariant> {
        match tag {
            1 => Some(GemmVariant::Naive),
            2 => Some(GemmVariant::SplitK),
            _ => None,
        }
    }
}

impl std::str::FromStr for GemmVariant {
    type Err = String;
    fn from_str(s: &str) -> Result<GemmVariant, String> {
        match s {
            "naive" => Ok(GemmVariant::Naive),
            "splitk32" | "splitk" => Ok(GemmVariant::SplitK),
            other => Err(format!("unknown GEMM variant `{other}` (expected naive or splitk32)")),
        }
    }
}

/// Where a program runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// Host kernels.
    Host,
    /// Generated CUDA/HIP kernels.
    Gpu(GemmVariant),
}

/// Columns of output per split-K block.
pub(crate) const SPLITK_TILE: usize = 32;
/// Slices of K per split-K block.
pub(crate) const SPLITK_SLICES: usize = 32;
/// Most rows per split-K block.
pub(crate) const SPLITK_MAX_ROWS: usize = 8;
/// The rows-per-block variants of the split-K GEMM the GPU code holds (one kernel per layer each).
pub(crate) const SPLITK_ROW_VARIANTS: [usize; 4] = [1, 2, 4, 8];
/// Threads per block of the feature kernel and the naive GEMM.
pub(crate) const BLOCK: usize = 256;

/// How layer weights are laid out in the device buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum WeightPacking {
    /// `[in, out]` row-major, as exported (GPU kernels).
    RowMajor,
    /// Panels of [`host_kernels::PANEL`] columns: panel `p` is the contiguous `[in, PANEL]` block of
    /// columns `PANEL * p ..`, zero past `out` (the host GEMM streams it sequentially).
    Panels,
}

impl WeightPacking {
    pub(crate) fn for_target(target: Target) -> WeightPacking {
        match target {
            Target::Host => WeightPacking::Panels,
            Target::Gpu(_) => WeightPacking::RowMajor,
        }
    }

    fn weight_elements(self, inputs: usize, outputs: usize) -> usize {
        match self {
            WeightPacking::RowMajor => inputs * outputs,
            WeightPacking::Panels => inputs * outputs.div_ceil(host_kernels::PANEL) * host_kernels::PANEL,
        }
    }
}

/// Byte offsets of the weights in their device buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WeightLayout {
    /// How layer weights are laid out.
    pub(crate) packing: WeightPacking,
    /// The embedding tables, back to back.
    pub(crate) tables: usize,
    /// Per layer, the weight's and the bias's offsets.
    pub(crate) layers: Vec<(usize, usize)>,
    /// Total bytes.
    pub(crate) total: usize,
}

fn align(offset: usize) -> usize {
    offset.div_ceil(ALIGN) * ALIGN
}

impl WeightLayout {
    pub(crate) fn new(config: &ModelConfig, packing: WeightPacking) -> WeightLayout {
        let tables = ALIGN;
        let mut end = tables;
        if let ModelConfig::Recsys(c) = config {
            end += c.sparse_inputs * c.table_rows * c.embedding_dim * 4;
        }
        let mut layers = Vec::new();
        for layer in config.layers() {
            let w = align(end);
            let b = align(w + packing.weight_elements(layer.inputs, layer.outputs) * 4);
            end = b + layer.outputs * 4;
            layers.push((w, b));
        }
        WeightLayout { packing, tables, layers, total: align(end) }
    }

    /// The weights packed into this layout, little-endian; the marker region is zero.
    pub(crate) fn pack(&self, config: &ModelConfig, weights: &Weights) -> Vec<u8> {
        let mut out = vec![0u8; self.total];
        let mut put = |offset: usize, values: &[f32]| {
            for (dst, v) in out[offset..offset + values.len() * 4].chunks_exact_mut(4).zip(values) {
                dst.copy_from_slice(&v.to_le_bytes());
            }
        };
        if let ModelConfig::Recsys(c) = config {
            let table_bytes = c.table_rows * c.embedding_dim * 4;
            for j in 0..c.sparse_inputs {
                put(self.tables + j * table_bytes, weights.embedding(j));
            }
        }
        for (l, ((w, b), layer)) in self.layers.iter().zip(config.layers()).enumerate() {
            match self.packing {
                WeightPacking::RowMajor => put(*w, weights.layer_weight(l)),
                WeightPacking::Panels => {
                    put(*w, &host_kernels::pack_panels(weights.layer_weight(l), layer.inputs, layer.outputs))
                }
            }
            put(*b, weights.layer_bias(l));
        }
        out
    }
}

/// Everything one program does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Plan {
    /// Launches in order.
    pub(crate) steps: Vec<LaunchStep>,
    /// The kernels the code object must contain.
    pub(crate) kernels: Vec<KernelSignature>,
    /// Scratch bytes one run needs.
    pub(crate) scratch_bytes: usize,
}

/// Name of the generated GPU feature kernel.
pub(crate) const GPU_FEATURES: &str = "saggar_models_features";

/// Name of the generated GPU kernel of layer `l` (`rows` per block for split-K).
pub(crate) fn gpu_layer_name(l: usize, gemm: GemmVariant, rows: usize) -> String {
    match gemm {
        GemmVariant::Naive => format!("saggar_models_layer_{l}"),
        GemmVariant::SplitK => format!("saggar_models_layer_{l}_r{rows}"),
    }
}

/// Rows per block of the split-K GEMM for `batch`: as few as keep about eight row blocks per column
/// tile (so a 512-wide layer still spreads over ~128 blocks, one per SM, at small batches), rounded
/// up to a variant the code holds ([`SPLITK_ROW_VARIANTS`]), at most 8.
pub(crate) fn splitk_rows(batch: usize) -> usize {
    batch.div_ceil(8).clamp(1, SPLITK_MAX_ROWS).next_power_of_two()
}

/// The signature of the GPU feature kernel of a recommender with `inputs` inputs.
fn gpu_features_signature(inputs: usize) -> KernelSignature {
    let mut params = vec![ParamKind::Ptr; 2 + inputs];
    params.push(ParamKind::U32);
    KernelSignature { name: GPU_FEATURES.into(), params }
}

/// The signature of a GPU layer kernel: `out, a, w, bias, batch`.
fn gpu_layer_signature(name: String) -> KernelSignature {
    KernelSignature {
        name,
        params: vec![ParamKind::Ptr, ParamKind::Ptr, ParamKind::Ptr, ParamKind::Ptr, ParamKind::U32],
    }
}

/// Every kernel the GPU code of `config` with `gemm` holds, for every batch.
pub(crate) fn gpu_kernels(config: &ModelConfig, gemm: GemmVariant) -> Vec<KernelSignature> {
    let mut kernels = Vec::new();
    if let ModelConfig::Recsys(c) = config {
        kernels.push(gpu_features_signature(c.dense_inputs + c.sparse_inputs));
    }
    for l in 0..config.layers().len() {
        match gemm {
            GemmVariant::Naive => kernels.push(gpu_layer_signature(gpu_layer_name(l, gemm, 1))),
            GemmVariant::SplitK => kernels
                .extend(SPLITK_ROW_VARIANTS.iter().map(|&rows| gpu_layer_signature(gpu_layer_name(l, gemm, rows)))),
        }
    }
    kernels
}

fn grid_blocks(elements: usize, per_block: usize) -> u32 {
    elements.div_ceil(per_block).clamp(1, u32::MAX as usize) as u32
}

/// The plan of `config` for `batch` rows on `target`. The config must be valid and
/// `1 <= batch <= MAX_BATCH`.
pub(crate) fn plan(config: &ModelConfig, batch: usize, target: Target) -> Plan {
    let weights = WeightLayout::new(config, WeightPacking::for_target(target));
    let mut steps = Vec::new();
    let mut kernels = Vec::new();
    let mut scratch_end = 0usize;
    let mut reserve = |bytes: usize| {
        let offset = align(scratch_end);
        scratch_end = offset + bytes;
        offset
    };

    let mut layer_input = ArgSource::Input(0);
    if let ModelConfig::Recsys(c) = config {
        let features = reserve(batch * c.feature_width() * 4);
        layer_input = ArgSource::Scratch(features);
        let inputs = c.dense_inputs + c.sparse_inputs;
        let mut args = vec![ArgSource::Scratch(features), ArgSource::Weights(weights.tables)];
        args.extend((0..inputs).map(ArgSource::Input));
        match target {
            Target::Host => {
                let scalars = [batch, c.dense_width, c.bag_size, c.table_rows, c.embedding_dim];
                args.extend(scalars.iter().map(|v| ArgSource::U32(*v as u32)));
                let signature = host_kernels::features_signature(c.dense_inputs, c.sparse_inputs);
                steps.push(LaunchStep {
                    kernel: signature.name.clone(),
                    config: LaunchConfig::for_elements((batch * c.feature_width()) as u64, BLOCK as u32),
                    args,
                });
                kernels.push(signature);
            }
            Target::Gpu(_) => {
                let widest = if c.dense_inputs > 0 { c.dense_width } else { 0 }.max(if c.sparse_inputs > 0 {
                    c.embedding_dim
                } else {
                    0
                });
                let per_input = batch * widest;
                let block = per_input.div_ceil(32).clamp(1, BLOCK / 32) * 32;
                args.push(ArgSource::U32(batch as u32));
                steps.push(LaunchStep {
                    kernel: GPU_FEATURES.into(),
                    config: LaunchConfig {
                        grid: Dim3 { x: grid_blocks(per_input, block), y: inputs as u32, z: 1 },
                        block: Dim3::x(block as u32),
                        shared_mem_bytes: 0,
                        programmatic: false,
                    },
                    args,
                });
                kernels.push(gpu_features_signature(inputs));
            }
        }
    }

    let layers = config.layers();
    let two_outputs = matches!(config, ModelConfig::Recsys(c) if c.two_outputs);
    if target == Target::Host {
        kernels.push(host_kernels::gemm_signature());
    }
    for (l, layer) in layers.iter().enumerate() {
        let output = if l + 1 == layers.len() {
            ArgSource::Output(0)
        } else if two_outputs && l + 2 == layers.len() {
            ArgSource::Output(1)
        } else {
            ArgSource::Scratch(reserve(batch * layer.outputs * 4))
        };
        let (w, b) = weights.layers[l];
        let mut args = vec![output, layer_input, ArgSource::Weights(w), ArgSource::Weights(b)];
        match target {
            Target::Host => {
                let act = if layer.relu { saggar_device::builtin::ACT_RELU } else { saggar_device::builtin::ACT_NONE };
                args.extend([batch as u32, layer.outputs as u32, layer.inputs as u32, act].map(ArgSource::U32));
                steps.push(LaunchStep {
                    kernel: host_kernels::GEMM.into(),
                    config: LaunchConfig::for_elements((batch * layer.outputs) as u64, BLOCK as u32),
                    args,
                });
            }
            Target::Gpu(variant) => {
                let config = match variant {
                    GemmVariant::Naive => LaunchConfig::for_elements((batch * layer.outputs) as u64, BLOCK as u32),
                    GemmVariant::SplitK => LaunchConfig {
                        grid: Dim3 {
                            x: grid_blocks(layer.outputs, SPLITK_TILE),
                            y: grid_blocks(batch, splitk_rows(batch)),
                            z: 1,
                        },
                        block: Dim3 { x: SPLITK_TILE as u32, y: SPLITK_SLICES as u32, z: 1 },
                        shared_mem_bytes: 0,
                        programmatic: false,
                    },
                };
                let name = gpu_layer_name(l, variant, splitk_rows(batch));
                args.push(ArgSource::U32(batch as u32));
                steps.push(LaunchStep { kernel: name.clone(), config, args });
                kernels.push(gpu_layer_signature(name));
            }
        }
        layer_input = output;
    }
    Plan { steps, kernels, scratch_bytes: align(scratch_end).max(ALIGN) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ModelKind, RecsysConfig};

    #[test]
    fn default_recsys_scratch_and_weights() {
        let config = ModelKind::Recsys.default_config();
        let p = plan(&config, 8, Target::Host);
        // features 8 x 1840, hidden 8 x 512 and 8 x 256, each region 256-aligned.
        assert_eq!(p.scratch_bytes, 8 * 1840 * 4 + 8 * 512 * 4 + 8 * 256 * 4);
        assert_eq!(p.steps.len(), 4);
        assert_eq!(p.steps[3].args[0], ArgSource::Output(0));
        assert_eq!(p.steps[0].args.len(), 2 + 190 + 5);
        let w = WeightLayout::new(&config, WeightPacking::RowMajor);
        assert_eq!(w.tables, ALIGN);
        assert_eq!(w.layers[0].0, align(ALIGN + 40 * 1000 * 16 * 4));
        assert_eq!(w.layers[2].1, align(w.layers[2].0 + 256 * 4));
        assert!(w.total >= w.layers[2].1 + 4);
        // Panels pad the last layer's single column to a full panel.
        let p = WeightLayout::new(&config, WeightPacking::Panels);
        assert_eq!(p.layers[2].1, align(p.layers[2].0 + 256 * host_kernels::PANEL * 4));
    }

    #[test]
    fn two_outputs_write_the_last_hidden_layer_to_output_one() {
        let config = ModelConfig::Recsys(RecsysConfig { two_outputs: true, ..RecsysConfig::default() });
        for target in [Target::Host, Target::Gpu(GemmVariant::SplitK)] {
            let p = plan(&config, 3, target);
            assert_eq!(p.steps[2].args[0], ArgSource::Output(1));
            assert_eq!(p.steps[3].args[1], ArgSource::Output(1));
            assert_eq!(p.scratch_bytes, align(3 * 1840 * 4) + align(3 * 512 * 4));
        }
    }

    #[test]
    fn gpu_launch_shapes() {
        let config = ModelKind::Recsys.default_config();
        let p = plan(&config, 1, Target::Gpu(GemmVariant::SplitK));
        assert_eq!(p.steps[0].config.grid.y, 190);
        assert_eq!(p.steps[0].config.block.x, 32);
        assert_eq!(p.steps[1].config.grid.x, 16);
        assert_eq!(p.steps[1].config.grid.y, 1);
        let p8 = plan(&config, 8, Target::Gpu(GemmVariant::SplitK));
        assert_eq!(p8.steps[1].config.grid.y, 8, "one row per block at batch 8");
        let p64 = plan(&config, 64, Target::Gpu(GemmVariant::SplitK));
        assert_eq!(p64.steps[1].config.grid.y, 8, "8 rows per block at batch 64");
        let p9 = plan(&config, 9, Target::Gpu(GemmVariant::SplitK));
        assert_eq!(p9.steps[1].config.grid.y, 5, "2 rows per block at batch 9, the last block half full");
        assert_eq!(p.steps[1].config.block.volume(), 1024);
        assert_eq!(p.kernels.len(), 4);
        for step in &p.steps {
            step.config.check(&step.kernel).unwrap();
        }
    }
}
