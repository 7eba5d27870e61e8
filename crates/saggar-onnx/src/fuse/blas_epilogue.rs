//! Which GEMMs of a plan run through the backend's BLAS-Lt handle, and which groups they take into
//! their epilogue.
//!
//! A MatMul or Gemm node's GPU form is one [`GemmKernel`] launch whose `meta` table holds every
//! extent and stride ([`crate::ops::gpu`]). [`matmul_desc`] reads that table back as a
//! [`MatmulDesc`] when the vendor libraries can express it: each operand stored row-major or
//! transposed with its natural leading dimension, batches that are either one contiguous run of
//! matrices or one matrix broadcast to all (stride 0), and Gemm's `C` only as a bias vector over the
//! columns added with `beta` 1 (the BLAS bias epilogue). A batched A times one shared B (the
//! transformer case) becomes one tall GEMM. An `i8` product ([`crate::graph::passes::qdq_products`])
//! must have the form the libraries' integer kernels take ([`saggar_device::rules::check_matmul_desc`])
//! and takes no epilogue. Anything else keeps the generated GEMM kernel.
//!
//! A GEMM whose only reader is an elementwise group of exactly `Add(gemm, bias)`, `Add` then `Relu`,
//! or `Relu`, with `bias` a constant vector over the output's columns, takes that group into its
//! epilogue ([`epilogue_fusions`]): one BLAS call computes `relu(A B + bias)`, and the group's output
//! is the GEMM's buffer.

use std::collections::HashMap;

use saggar_device::{Epilogue, MatmulDesc, MatmulPrecision, MatmulType};
use saggar_shape::DType;

use crate::graph::ir::{Graph, ValueId};
use crate::ops::gpu::{GpuLaunch, GpuNode, Slot, contiguous};
use crate::ops::linalg::gpu::GemmKernel;
use crate::plan::nodes::NodeInfo;

/// The slots of a GEMM launch: A, B, the optional bias, then the output.
pub(crate) fn gemm_slots(launch: &GpuLaunch) -> Option<(Slot, Slot, Option<Slot>, Slot)> {
    match launch.slots.as_slice() {
        [a, b, out] => Some((*a, *b, None, *out)),
        [a, b, bias, out] => Some((*a, *b, Some(*bias), *out)),
        _ => None,
    }
}

/// The BLAS description of a GEMM launch, or `None` when the generated kernel must run it. See the
/// module docs.
pub(crate) fn matmul_desc(launch: &GpuLaunch, precision: MatmulPrecision) -> Option<MatmulDesc> {
    let &GemmKernel { alpha_bits, beta_bits, bias, inputs, output } = launch.kernel_as::<GemmKernel>()?;
    let (inputs, output) = (matmul_type(inputs)?, matmul_type(output)?);
    let meta = &launch.meta;
    let head: &[i64; 10] = meta.get(..10)?.try_into().ok()?;
    let [m, n, k, brank, a_rs, a_cs, b_rs, b_cs, bias_rs, bias_cs] = *head;
    let brank = usize::try_from(brank).ok()?;
    let bdims = meta.get(10..10 + brank)?;
    let a_bstride = meta.get(10 + brank..10 + 2 * brank)?;
    let b_bstride = meta.get(10 + 2 * brank..10 + 3 * brank)?;
    if meta.len() != 10 + 3 * brank || [m, n, k].iter().any(|&d| d <= 0) {
        return None;
    }
    let trans_a = match (a_rs, a_cs) {
        (r, 1) if r == k => false,
        (1, c) if c == m => true,
        _ => return None,
    };
    let trans_b = match (b_rs, b_cs) {
        (r, 1) if r == n => false,
        (1, c) if c == k => true,
        _ => return None,
    };
    if bias && ((bias_rs, bias_cs) != (0, 1) || f32::from_bits(beta_bits) != 1.0) {
        return None;
    }
    let dims: Vec<usize> = bdims.iter().map(|&d| usize::try_from(d).ok()).collect::<Option<_>>()?;
    let batch: i64 = bdims.iter().product();
    let rows = contiguous(&dims);
    // A batch stride table is one contiguous run of `matrix`-sized matrices, or all zeros.
    let flat = |strides: &[i64], matrix: i64| -> Option<i64> {
        if strides.iter().all(|&s| s == 0) {
            Some(0)
        } else if strides.iter().zip(&rows).zip(&dims).all(|((&s, &r), &d)| d == 1 || s == r * matrix) {
            Some(matrix)
        } else {
            None
        }
    };
    let (stride_a, stride_b) = (flat(a_bstride, m * k)?, flat(b_bstride, k * n)?);
    let mut desc = MatmulDesc::gemm(m as u64, n as u64, k as u64).with_types(inputs, output);
    desc.trans_a = trans_a;
    desc.trans_b = trans_b;
    desc.bias = bias;
    desc.precision = precision;
    desc.alpha_bits = alpha_bits;
    desc.beta_bits = 0;
    if batch > 1 {
        if stride_b == 0 && stride_a != 0 && !trans_a {
            // Every batch of A against one B: one GEMM over the stacked rows.
            desc.m = (m * batch) as u64;
            desc.stride_a = desc.m * desc.k;
            desc.stride_c = desc.m * desc.n;
        } else {
            desc.batch = batch as u64;
            desc.stride_a = stride_a as u64;
            desc.stride_b = stride_b as u64;
            desc.stride_c = (m * n) as u64;
        }
    }
    // What no library takes (an i8 product in another form than its integer kernels') stays generated.
    saggar_device::rules::check_matmul_desc(&desc).ok().map(|()| desc)
}

/// The BLAS element type of a GEMM operand of type `d` (`None`: the libraries do not take it).
fn matmul_type(d: DType) -> Option<MatmulType> {
    match d {
        DType::F32 => Some(MatmulType::F32),
        DType::F16 => Some(MatmulType::F16),
        DType::BF16 => Some(MatmulType::BF16),
        DType::I8 => Some(MatmulType::I8),
        DType::I32 => Some(MatmulType::I32),
        _ => None,
    }
}

/// The launch of a node whose GPU form is one GEMM the libraries can express, with its description.
pub(crate) fn blas_gemm(info: &NodeInfo, precision: MatmulPrecision) -> Option<(&GpuLaunch, MatmulDesc)> {
    let Some(Ok(GpuNode::Launches(launches))) = &info.gpu else { return None };
    let [launch] = launches.as_slice() else { return None };
    Some((launch, matmul_desc(launch, precision)?))
}

/// An elementwise group a GEMM takes into its epilogue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EpilogueFusion {
    /// The constant bias vector the group adds, if it adds one.
    pub(crate) bias: Option<ValueId>,
    /// The activation the group applies last.
    pub(crate) epilogue: Epilogue,
    /// The group's root node (its output is the GEMM's result).
    pub(crate) group: usize,
}

/// The GEMM nodes (lone groups) whose single reader is a group the BLAS epilogue can compute, by GEMM
/// node. `root` is the grouping of [`crate::fuse::group`]. See the module docs.
pub(crate) fn epilogue_fusions(
    graph: &Graph,
    info: &[NodeInfo],
    root: &[usize],
    precision: MatmulPrecision,
) -> HashMap<usize, EpilogueFusion> {
    let uses = graph.use_counts();
    let outputs: std::collections::HashSet<ValueId> = graph.outputs.iter().map(|o| o.value).collect();
    let mut reader: HashMap<ValueId, usize> = HashMap::new();
    for (j, node) in graph.nodes.iter().enumerate() {
        for id in node.inputs.iter().flatten() {
            reader.insert(*id, j);
        }
    }
    let members = |g: usize| -> Vec<usize> { (0..graph.nodes.len()).filter(|&j| root[j] == g).collect() };
    let mut fusions = HashMap::new();
    for (j, node) in graph.nodes.iter().enumerate() {
        let ([out], true) = (node.outputs.as_slice(), root[j] == j && members(j).len() == 1) else { continue };
        let Some((_, desc)) = blas_gemm(&info[j], precision).filter(|(_, d)| !d.inputs.is_integer()) else { continue };
        if uses[out.0] != 1 || outputs.contains(out) {
            continue;
        }
        let Some(&u) = reader.get(out) else { continue };
        let group = members(root[u]);
        let ops: Vec<&str> = group.iter().map(|&k| graph.nodes[k].op_type.as_str()).collect();
        let (add, relu) = match ops.as_slice() {
            ["Add"] => (Some(group[0]), None),
            ["Add", "Relu"] => (Some(group[0]), Some(group[1])),
            ["Relu"] => (None, Some(group[0])),
            _ => continue,
        };
        // Relu reads the GEMM's (or the Add's) value, which nothing else reads.
        let into_relu = add.map_or(*out, |a| graph.nodes[a].outputs[0]);
        if let Some(r) = relu
            && (graph.nodes[r].inputs.first().copied().flatten() != Some(into_relu)
                || uses[into_relu.0] != 1
                || outputs.contains(&into_relu))
        {
            continue;
        }
        let bias = match add {
            None => None,
            // A constant vector over the columns, of the GEMM's output type (the libraries' bias type).
            Some(a) => match graph.bias_of(a, *out, desc.n) {
                Some((bias, t)) if matmul_type(t.dtype()) == Some(desc.output) => Some(bias),
                _ => continue,
            },
        };
        if bias.is_some() && desc.bias {
            continue;
        }
        let epilogue = if relu.is_some() { Epilogue::Relu } else { Epilogue::None };
        fusions.insert(j, EpilogueFusion { bias, epilogue, group: root[u] });
    }
    fusions
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::gpu::Work;

    fn gemm(meta: Vec<i64>, bias: bool, beta: f32) -> GpuLaunch {
        GpuLaunch::new(
            GemmKernel::f32(2f32.to_bits(), beta.to_bits(), bias),
            meta,
            Work::Tiles { m: 1, n: 1, batch: 1 },
            vec![Slot::In(0), Slot::In(1), Slot::Out(0)],
        )
    }

    #[test]
    fn plain_transposed_and_biased_gemms_map_onto_blas() {
        let strict = MatmulPrecision::StrictF32;
        let d = matmul_desc(&gemm(vec![4, 5, 6, 0, 6, 1, 5, 1, 0, 0], false, 0.0), strict).unwrap();
        assert_eq!((d.m, d.n, d.k, d.batch, d.trans_a, d.trans_b, d.alpha()), (4, 5, 6, 1, false, false, 2.0));
        let t = matmul_desc(&gemm(vec![4, 5, 6, 0, 1, 4, 1, 6, 0, 0], false, 0.0), strict).unwrap();
        assert!(t.trans_a && t.trans_b);
        let biased = matmul_desc(&gemm(vec![4, 5, 6, 0, 6, 1, 5, 1, 0, 1], true, 1.0), strict).unwrap();
        assert!(biased.bias);
        assert_eq!(matmul_desc(&gemm(vec![4, 5, 6, 0, 6, 1, 5, 1, 0, 1], true, 0.5), strict), None, "beta != 1");
        assert_eq!(matmul_desc(&gemm(vec![4, 5, 6, 0, 6, 1, 5, 1, 1, 0], true, 1.0), strict), None, "C per row");
        assert_eq!(matmul_desc(&gemm(vec![4, 5, 6, 0, 7, 1, 5, 1, 0, 0], false, 0.0), strict), None, "odd stride");
    }

    #[test]
    fn batches_flatten_broadcast_or_fall_back() {
        let strict = MatmulPrecision::StrictF32;
        // [2, 3] batches of 4x6 times one shared 6x5: one tall 24x5x6 GEMM.
        let tall = vec![4, 5, 6, 2, 6, 1, 5, 1, 0, 0, 2, 3, 72, 24, 0, 0];
        let d = matmul_desc(&gemm(tall, false, 0.0), strict).unwrap();
        assert_eq!((d.m, d.batch), (24, 1));
        // Both batched: a strided batch of 6.
        let both = vec![4, 5, 6, 2, 6, 1, 5, 1, 0, 0, 2, 3, 72, 24, 90, 30];
        let d = matmul_desc(&gemm(both, false, 0.0), strict).unwrap();
        assert_eq!((d.batch, d.stride_a, d.stride_b, d.stride_c), (6, 24, 30, 20));
        // A broadcast over one batch axis only: not expressible as one stride.
        let partial = vec![4, 5, 6, 2, 6, 1, 5, 1, 0, 0, 2, 3, 24, 0, 90, 30];
        assert_eq!(matmul_desc(&gemm(partial, false, 0.0), strict), None);
    }
}
