//! The GPU kernels of the pooling family: max, average and Lp pooling (`pool.cu` and its bodies),
//! global pooling (`global_pool.cu`), MaxUnpool's scatter (`max_unpool.cu`) and LRN (`lrn.cu`).

use saggar_shape::DType;

use crate::ops::OpError;
use crate::ops::conv::Axis;
use crate::ops::conv::gpu::fits_i32;
use crate::ops::gpu::{
    BLOCK, GpuKernel, GpuLaunch, GpuNode, MAX_SPATIAL, Slot, Work, ctype, ext, float_literal, render,
};

/// What [`PoolKernel`] computes over each window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PoolMode {
    /// The largest element.
    Max,
    /// The largest element and its flat position (an i64 second output).
    MaxWithIndices,
    /// The mean.
    Average,
    /// The `p`-norm, `p` in the meta table.
    Lp,
}

/// Pooling, one thread per output element: the planar and the any-rank body, each in 32-bit and in
/// 64-bit indices (`pool.cu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PoolKernel {
    pub(crate) mode: PoolMode,
    /// The element type: f32, or i8 and u8 for max pooling (compared as their exact f32 values).
    pub(crate) dtype: DType,
    /// A channels-last input `[N, spatial..., C]` (two spatial axes, C last in `meta`).
    pub(crate) channels_last: bool,
}

/// The column-major position of row-major plane offset `best` (storage_order 1).
const COLUMN_MAJOR: &str = "onnx_i64 r = best, inner = 1; off = 0;
      for (int d = s - 1; d >= 0; --d) { inner *= in[d]; off += (r % in[d]) * (in_plane / inner); r /= in[d]; }";

impl GpuKernel for PoolKernel {
    fn prefix(&self) -> &'static str {
        "pool"
    }

    fn source(&self) -> String {
        const MAX: &str = "if (v > acc || (inside == 0 && v != v)) acc = v;";
        let indices_store = format!(
            "y[i] = acc;\n      onnx_i64 off = best;\n      if (param) {{ {COLUMN_MAJOR} }}\n      indices[i] = (onnx_i64)nc * in_plane + off;"
        );
        let (init, take, store, indices_param) = match self.mode {
            PoolMode::Max => ("ONNX_NEG_INF", MAX, "y[i] = acc;".to_string(), ""),
            PoolMode::MaxWithIndices => (
                "ONNX_NEG_INF",
                "if (v > acc || (inside == 0 && v != v)) { acc = v; best = at; }",
                indices_store,
                ", onnx_i64* __restrict__ indices",
            ),
            PoolMode::Average => (
                "0.0f",
                "acc += v;",
                "const onnx_i64 n = param ? inside + padded : inside;\n      y[i] = n ? acc / (float)n : 0.0f;".into(),
                "",
            ),
            PoolMode::Lp => (
                "0.0f",
                "const float a = fabsf(v); acc += param == 1 ? a : param == 2 ? a * a : powf(a, (float)param);",
                "y[i] = param == 1 ? acc : param == 2 ? sqrtf(acc) : powf(acc, 1.0f / (float)param);".into(),
                "",
            ),
        };
        let spatial = MAX_SPATIAL.to_string();
        let t = ctype(self.dtype).unwrap_or("float");
        // Max pooling stores the greatest element as it is (an exact f32 for i8 and u8).
        let store = store.replace("y[i] = acc;", &format!("y[i] = ({t})acc;"));
        let body = |template: &str, i: &str| {
            let window = render(include_str!("pool_window.cuh"), &[("I", i)]);
            let values = [
                ("I", i),
                ("T", t),
                ("INIT", init),
                ("TAKE", take),
                ("STORE", &store),
                ("MAX_SPATIAL", &spatial),
                ("WINDOW", &window),
            ];
            render(template, &values)
        };
        let planar = if self.channels_last { include_str!("pool_nhwc.cuh") } else { include_str!("pool_planar.cuh") };
        let rank = include_str!("pool_rank.cuh");
        let t = ctype(self.dtype).unwrap_or("float");
        render(
            include_str!("pool.cu"),
            &[
                ("T", t),
                ("INDICES_PARAM", indices_param),
                ("PLANAR_NARROW", &body(planar, "int")),
                ("PLANAR_WIDE", &body(planar, "onnx_i64")),
                ("RANK_NARROW", &body(rank, "int")),
                ("RANK_WIDE", &body(rank, "onnx_i64")),
            ],
        )
    }
}

/// The launch of [`PoolKernel`] over `axes` (one axis runs as two, the first of extent 1) for the
/// `planes` (image, channel) planes of input 0 into output 0 (and the Indices into output 1 with
/// [`PoolMode::MaxWithIndices`]); `param` as `pool.cu` says. With `channels`, the input is
/// channels-last with that many channels (and `planes` is still images times channels).
pub(crate) fn pool_launch(
    axes: &[Axis],
    planes: usize,
    mode: PoolMode,
    param: i64,
    dtype: DType,
    channels: Option<usize>,
) -> Result<GpuNode, OpError> {
    if axes.len() > MAX_SPATIAL {
        return Err(OpError::eval(format!("pooling takes at most {MAX_SPATIAL} spatial axes on GPU")));
    }
    let axes = Axis::at_least_two(axes);
    let mut meta = vec![ext(axes.len()), ext(planes), param];
    for field in [
        (|a: &Axis| a.input) as fn(&Axis) -> usize,
        |a| a.output,
        |a| a.kernel,
        |a| a.stride,
        |a| a.pad_begin,
        |a| a.pad_end,
        |a| a.dilation,
    ] {
        meta.extend(axes.iter().map(|a| ext(field(a))));
    }
    meta.push(i64::from(fits_i32(&axes, Some(planes as u64), false)));
    meta.extend(channels.map(ext));
    let mut slots = vec![Slot::In(0), Slot::Out(0)];
    if mode == PoolMode::MaxWithIndices {
        slots.push(Slot::Out(1));
    }
    let outputs: u64 = axes.iter().map(|a| a.output as u64).product();
    let work = Work::Elements(outputs.saturating_mul(planes as u64));
    Ok(GpuNode::Launches(vec![GpuLaunch::new(
        PoolKernel { mode, dtype, channels_last: channels.is_some() },
        meta,
        work,
        slots,
    )]))
}

/// What [`GlobalPoolKernel`] computes over each plane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GlobalMode {
    /// The mean.
    Average,
    /// The largest element.
    Max,
    /// The `p`-norm, `p` in the meta table.
    Lp,
}

/// Global pooling, a group of threads per plane (`global_pool.cu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GlobalPoolKernel {
    pub(crate) mode: GlobalMode,
}

impl GpuKernel for GlobalPoolKernel {
    fn prefix(&self) -> &'static str {
        "global_pool"
    }

    fn source(&self) -> String {
        let (init, take, max, finish) = match self.mode {
            GlobalMode::Average => ("0.0f", "acc += v;", "false", "acc / (float)n"),
            GlobalMode::Max => ("ONNX_NEG_INF", "acc = gpu_max(acc, v);", "true", "acc"),
            GlobalMode::Lp => (
                "0.0f",
                "acc += p == 1 ? fabsf(v) : p == 2 ? v * v : powf(fabsf(v), (float)p);",
                "false",
                "p == 1 ? acc : p == 2 ? sqrtf(acc) : powf(acc, 1.0f / (float)p)",
            ),
        };
        let block = BLOCK.to_string();
        let values = [("INIT", init), ("TAKE", take), ("MAX", max), ("FINISH", finish), ("BLOCK", &block)];
        render(include_str!("global_pool.cu"), &values)
    }
}

/// The launch of [`GlobalPoolKernel`] over the `planes` planes of `n` elements of input 0 into
/// output 0, with `p` for [`GlobalMode::Lp`].
pub(crate) fn global_pool_launch(mode: GlobalMode, planes: usize, n: usize, p: u32) -> GpuNode {
    GpuNode::Launches(vec![GpuLaunch::new(
        GlobalPoolKernel { mode },
        vec![ext(planes), ext(n), i64::from(p)],
        Work::RowGroups { rows: planes as u64, cols: n as u64 },
        vec![Slot::In(0), Slot::Out(0)],
    )])
}

/// MaxUnpool: zero the output (`scatter` false), then scatter the input to its indices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MaxUnpoolKernel {
    pub(crate) scatter: bool,
}

impl GpuKernel for MaxUnpoolKernel {
    fn prefix(&self) -> &'static str {
        "max_unpool"
    }

    fn source(&self) -> String {
        let (params, body) = if self.scatter {
            (
                "const float* __restrict__ x, const onnx_i64* __restrict__ indices, float* __restrict__ y",
                "ONNX_LOOP(j, meta[0]) { const onnx_i64 at = indices[j]; if (at >= 0 && at < meta[1]) y[at] = x[j]; }",
            )
        } else {
            ("float* __restrict__ y", "ONNX_LOOP(i, meta[1]) y[i] = 0.0f;")
        };
        render(include_str!("max_unpool.cu"), &[("PARAMS", params), ("BODY", body)])
    }
}

/// LRN: `alpha / size` in `scale_bits`, `beta` and `bias` as f32 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LrnKernel {
    pub(crate) scale_bits: u32,
    pub(crate) beta_bits: u32,
    pub(crate) bias_bits: u32,
}

impl GpuKernel for LrnKernel {
    fn prefix(&self) -> &'static str {
        "lrn"
    }

    fn source(&self) -> String {
        render(
            include_str!("lrn.cu"),
            &[
                ("SCALE", &float_literal(self.scale_bits)),
                ("BETA", &float_literal(self.beta_bits)),
                ("BIAS", &float_literal(self.bias_bits)),
            ],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An axis of `input` elements read by `kernel` taps with `stride` and padding `pad` at each end.
    fn axis(input: usize, kernel: usize, stride: usize, pad: usize) -> Axis {
        let output = (input + 2 * pad - kernel) / stride + 1;
        Axis { input, kernel, stride, dilation: 1, pad_begin: pad, pad_end: pad, output }
    }

    /// The kernel, meta table and work of the pooling launch over `axes` and `planes` planes.
    fn launch(axes: &[Axis], planes: usize, mode: PoolMode) -> (PoolKernel, Vec<i64>, Work) {
        let GpuNode::Launches(launches) = pool_launch(axes, planes, mode, 1, DType::F32, None).unwrap() else {
            panic!("launches")
        };
        let l = &launches[0];
        (*l.kernel_as::<PoolKernel>().unwrap(), l.meta.clone(), l.work)
    }

    #[test]
    fn pools_take_32_bit_indices_where_every_count_and_coordinate_fits() {
        // ResNet's stem MaxPool: [32, 64, 112, 112] to [32, 64, 56, 56].
        let stem = [axis(112, 3, 2, 1), axis(112, 3, 2, 1)];
        let (kernel, meta, work) = launch(&stem, 32 * 64, PoolMode::Max);
        assert_eq!(kernel, PoolKernel { mode: PoolMode::Max, dtype: DType::F32, channels_last: false });
        assert_eq!(
            meta,
            [2, 2048, 1, 112, 112, 56, 56, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1],
            "s, N * C, param, the axes, narrow"
        );
        assert_eq!(work, Work::Elements(32 * 64 * 56 * 56));
        // One axis runs as two, the first of extent 1; three stay three.
        let (_, meta, _) = launch(&[axis(11, 3, 2, 1)], 6, PoolMode::Average);
        assert_eq!(meta, [2, 6, 1, 1, 11, 1, 6, 1, 3, 1, 2, 0, 1, 0, 1, 1, 1, 1]);
        let (_, meta, _) = launch(&[axis(4, 2, 1, 0); 3], 2, PoolMode::Lp);
        assert_eq!((meta[0], meta.len(), meta[24]), (3, 25, 1));
        // 50000 x 50000 elements a plane: more than 32-bit indices reach; the same kernel takes its
        // 64-bit body.
        let (_, meta, _) = launch(&[axis(50_000, 2, 2, 0); 2], 1, PoolMode::MaxWithIndices);
        assert_eq!(meta[17], 0);
        // Counts over all planes, and the end of the padding, even where each axis fits.
        let line = |input: usize, pad: usize| [Axis { pad_end: pad, ..axis(input, 1, 1, 0) }];
        let max = i32::MAX as usize;
        assert!(fits_i32(&line(max, 0), Some(1), false));
        assert!(!fits_i32(&line(max / 2 + 1, 0), Some(2), false), "the input of two planes");
        assert!(!fits_i32(&line(max, 1), Some(1), false), "the end of the padding");
        assert!(fits_i32(&line(max - 1, 1), Some(1), false));
        // Taps multiply the count only for a patch matrix.
        let taps = [Axis { kernel: 3, pad_begin: 1, pad_end: 1, ..axis(max / 2, 1, 1, 0) }];
        assert!(fits_i32(&taps, Some(1), false) && !fits_i32(&taps, Some(1), true));
    }

    #[test]
    fn global_pools_take_a_group_of_threads_a_plane() {
        let GpuNode::Launches(launches) = global_pool_launch(GlobalMode::Lp, 32 * 2048, 49, 3) else { panic!() };
        let l = &launches[0];
        assert_eq!(l.kernel_as::<GlobalPoolKernel>(), Some(&GlobalPoolKernel { mode: GlobalMode::Lp }));
        assert_eq!((&l.meta[..], l.work), (&[65_536, 49, 3][..], Work::RowGroups { rows: 65_536, cols: 49 }));
        assert_eq!(l.slots, [Slot::In(0), Slot::Out(0)]);
    }
}
