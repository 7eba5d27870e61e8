//! Attention fusion: the pattern `MatMul(Q, Kᵀ) → scale → + mask → Softmax → MatMul(·, V)` found in
//! a specialised graph and run as one kernel ([`kernel`]).
//!
//! Recognised, from the second MatMul backwards (every intermediate read only inside the pattern):
//! - `P' = Where(IsNaN(P), 0, P)` (exporters' guard for rows masked entirely) or `P' = P`;
//! - `P = Softmax(S', axis = last)`;
//! - `S' = S + mask` (either operand order, the mask broadcasting to `S` without enlarging it), or `S`;
//! - `S = S0 · c` or `S0 / c` any number of times (`c` a scalar f32 constant), `S0 = MatMul(Q', K')`;
//! - `Q' = Q · c`, `K' = K · c` the same way (the scales multiply into one);
//! - Q, Kᵀ and V are read through the views and transposes that produced them where the layout allows
//!   it without a copy ([`views`]), so the head split of a projection (`Reshape` then `Transpose`)
//!   and the key transpose cost no launch; a `Transpose` reading the result is absorbed by writing
//!   through strides, and views after it by writing their binding.
//!
//! Every f32 tensor the pattern touches, head sizes up to [`MAX_HEAD`]; Q, K and V may be read
//! through a Cast widening a half value (a half product's result,
//! [`crate::graph::passes::half_outputs`]), which the kernels then read in half. The result is an
//! [`Attention`]: the member nodes (which launch nothing of their own), the external operands with
//! their strides, and the extents. The host backend runs the same group with a host kernel computing
//! the same online softmax ([`kernel::run_host`]), so CI checks the recognition and the numerics.

pub(crate) mod kernel;
pub(crate) mod lower;
mod operands;
mod views;

use std::collections::HashSet;

use saggar_shape::DType;

use self::operands::{Walk, through_views};
use crate::graph::ir::{Graph, ValueId};
use crate::ops::Attribute;
use crate::ops::gpu::{broadcast, contiguous, ext};
use crate::plan::nodes::NodeInfo;
use crate::tensor::TensorData;

/// The GPU kernel of a fused attention pattern.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum AttentionKernel {
    /// The tiled kernel where a shape has enough query tiles to fill the GPU, else the row kernel
    /// (chosen per bucket; both kernels are in the model's one code object).
    #[default]
    Auto,
    /// One block per query row, reading keys and values from global memory: the most parallelism
    /// at small batches.
    Rows,
    /// One block per tile of query rows, sharing each tile of keys and values in shared memory:
    /// each key and value is read once per tile instead of once per row.
    Tiled,
}

impl AttentionKernel {
    /// `auto`, `rows` or `tiled`.
    pub fn name(self) -> &'static str {
        match self {
            AttentionKernel::Auto => "auto",
            AttentionKernel::Rows => "rows",
            AttentionKernel::Tiled => "tiled",
        }
    }
}

impl std::str::FromStr for AttentionKernel {
    type Err = String;

    fn from_str(s: &str) -> Result<AttentionKernel, String> {
        match s {
            "auto" => Ok(AttentionKernel::Auto),
            "rows" => Ok(AttentionKernel::Rows),
            "tiled" => Ok(AttentionKernel::Tiled),
            other => Err(format!("unknown attention kernel `{other}`: use auto, rows or tiled")),
        }
    }
}

/// Largest head size (`D` of Q and K, `Dv` of V) the fused kernel keeps in shared memory.
pub(crate) const MAX_HEAD: usize = 256;

/// An operand read through strides: `strides` has one entry per batch axis of the scores (0 where
/// broadcast), then the row and the column stride, in elements.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Strided {
    pub(crate) value: ValueId,
    /// The element type of `value`: f32, or for Q, K and V a half product's result read through
    /// the Cast that widened it.
    pub(crate) dtype: DType,
    /// Where the operand starts in `value`, in elements.
    pub(crate) offset: i64,
    pub(crate) strides: Vec<i64>,
}

/// A recognised attention pattern.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Attention {
    /// Member nodes in graph order; the last is the group's root, whose output 0 is the result.
    pub(crate) members: Vec<usize>,
    /// `[.., Sq, D]`.
    pub(crate) q: Strided,
    /// Kᵀ: `[.., D, Sk]`.
    pub(crate) k: Strided,
    /// `[.., Sk, Dv]`.
    pub(crate) v: Strided,
    /// Added to the scaled scores `[.., Sq, Sk]`.
    pub(crate) mask: Option<Strided>,
    /// Where `O[.., Sq, Dv]` is written (the root's output).
    pub(crate) out: Strided,
    /// Batch extents of the scores.
    pub(crate) batch: Vec<usize>,
    pub(crate) sq: usize,
    pub(crate) sk: usize,
    pub(crate) d: usize,
    pub(crate) dv: usize,
    /// Multiplies `Q·Kᵀ` before the mask is added.
    pub(crate) scale: f32,
    /// Rows whose softmax is not a number (every key masked) give zeros, as `Where(IsNaN(P), 0, P)`.
    pub(crate) nan_to_zero: bool,
}

impl Attention {
    /// The half type the result is stored in (`out`'s type when it is not f32): the group took in
    /// the Cast to it that was the result's only reader (the precision pass's Cast before the output
    /// projection).
    pub(crate) fn store(&self) -> Option<DType> {
        (self.out.dtype != DType::F32).then_some(self.out.dtype)
    }

    /// The kernel's `meta` table: `nb, Sq, Sk, D, Dv, scale bits, batch[nb]`, then for Q, Kᵀ, V,
    /// the mask (zeros when absent) and the output: `batch_strides[nb], row_stride, col_stride`.
    pub(crate) fn meta(&self) -> Vec<i64> {
        let mut meta = vec![
            ext(self.batch.len()),
            ext(self.sq),
            ext(self.sk),
            ext(self.d),
            ext(self.dv),
            i64::from(self.scale.to_bits()),
        ];
        meta.extend(self.batch.iter().map(|&b| ext(b)));
        let zeros = vec![0i64; self.batch.len() + 2];
        for s in [&self.q, &self.k, &self.v] {
            meta.extend_from_slice(&s.strides);
        }
        meta.extend_from_slice(self.mask.as_ref().map_or(&zeros, |m| &m.strides));
        meta.extend_from_slice(&self.out.strides);
        meta
    }

    /// The external inputs in kernel parameter order: Q, Kᵀ, V, then the mask when present.
    pub(crate) fn inputs(&self) -> Vec<ValueId> {
        self.operands().iter().map(|s| s.value).collect()
    }

    /// Q, Kᵀ, V, then the mask when present.
    pub(crate) fn operands(&self) -> Vec<&Strided> {
        let mut v = vec![&self.q, &self.k, &self.v];
        v.extend(self.mask.as_ref());
        v
    }
}

/// Who reads each value: node indices (a node reading twice appears twice) and graph outputs.
struct Uses {
    readers: Vec<Vec<usize>>,
    graph_output: Vec<bool>,
}

impl Uses {
    fn new(graph: &Graph) -> Uses {
        let readers = graph.readers();
        let mut graph_output = vec![false; graph.values.len()];
        for o in &graph.outputs {
            graph_output[o.value.0] = true;
        }
        Uses { readers, graph_output }
    }

    /// Whether `id` is read only by nodes in `inside` (and is no graph output).
    fn only_by(&self, id: ValueId, inside: &[usize]) -> bool {
        !self.graph_output[id.0] && self.readers[id.0].iter().all(|r| inside.contains(r))
    }
}

/// The node producing `id`, when a node does.
fn dims(graph: &Graph, id: ValueId) -> Option<(DType, Vec<usize>)> {
    let ty = graph.value(id).ty.as_ref()?;
    Some((ty.dtype, ty.fixed_dims()?))
}

/// The value of a one-element f32 constant.
fn scalar(graph: &Graph, id: Option<ValueId>) -> Option<f32> {
    let t = graph.value(id?).constant.as_ref()?;
    match t.data() {
        TensorData::F32(v) if v.len() == 1 => Some(v[0]),
        _ => None,
    }
}

/// `x` and the factor when node `n` is `x · c`, `c · x` or `x / c` with a scalar constant `c`.
fn scaled(graph: &Graph, n: usize) -> Option<(ValueId, f32)> {
    let node = &graph.nodes[n];
    let (a, b) = (node.inputs.first().copied().flatten()?, node.inputs.get(1).copied().flatten()?);
    match node.op_type.as_str() {
        "Mul" => match (scalar(graph, Some(a)), scalar(graph, Some(b))) {
            (_, Some(c)) => Some((a, c)),
            (Some(c), None) => Some((b, c)),
            _ => None,
        },
        "Div" => scalar(graph, Some(b)).filter(|c| *c != 0.0).map(|c| (a, 1.0 / c)),
        _ => None,
    }
}

/// Strips scalar scalings off `id` (each single-use, inside the pattern): the unscaled value and the
/// product of the factors, with the stripped nodes added to `members`.
fn strip_scales(graph: &Graph, uses: &Uses, mut id: ValueId, members: &mut Vec<usize>) -> (ValueId, f32) {
    let mut scale = 1.0f32;
    while let Some(p) = graph.producer(id)
        && uses.readers[id.0].len() == 1
        && uses.only_by(id, members)
        && let Some((x, c)) = scaled(graph, p)
        && dims(graph, x) == dims(graph, id)
    {
        members.push(p);
        scale *= c;
        id = x;
    }
    (id, scale)
}

/// The permutation of a Transpose node of rank `rank`.
fn perm(graph: &Graph, n: usize, rank: usize) -> Option<Vec<usize>> {
    let p: Vec<usize> = match graph.nodes[n].attrs.get("perm") {
        Some(Attribute::Ints(p)) => p.iter().map(|&v| usize::try_from(v).ok()).collect::<Option<_>>()?,
        None => (0..rank).rev().collect(),
        _ => return None,
    };
    let mut seen = vec![false; rank];
    (p.len() == rank && p.iter().all(|&a| a < rank && !std::mem::replace(&mut seen[a], true))).then_some(p)
}

/// Strides of an operand of `dims` (rank ≥ 2, own strides `own`) read at each batch position of
/// `batch`: 0 along broadcast axes, then its row and column strides.
fn batch_strides(dims: &[usize], own: &[i64], batch: &[usize]) -> Option<Vec<i64>> {
    let r = dims.len();
    let ob = &dims[..r - 2];
    if ob.len() > batch.len() {
        return None;
    }
    let lead = batch.len() - ob.len();
    let mut s: Vec<i64> = (0..batch.len())
        .map(|a| if a < lead || (ob[a - lead] == 1 && batch[a] != 1) { 0 } else { own[a - lead] })
        .collect();
    if (0..ob.len()).any(|a| ob[a] != 1 && ob[a] != batch[a + lead]) {
        return None;
    }
    s.extend_from_slice(&own[r - 2..]);
    Some(s)
}

/// Every attention pattern of `graph`, none sharing a node.
pub(crate) fn find(graph: &Graph, info: &[NodeInfo]) -> Vec<Attention> {
    let uses = Uses::new(graph);
    let mut claimed: HashSet<usize> = HashSet::new();
    let mut found = Vec::new();
    for pv in 0..graph.nodes.len() {
        if graph.nodes[pv].op_type != "MatMul" {
            continue;
        }
        // Through shared values and parts first; where that group is not closed, strictly.
        if let Some(a) =
            match_at(graph, info, &uses, pv, Walk::Shared).or_else(|| match_at(graph, info, &uses, pv, Walk::Strict))
            && a.members.iter().all(|m| !claimed.contains(m))
        {
            claimed.extend(a.members.iter().copied());
            found.push(a);
        }
    }
    found
}

fn input(graph: &Graph, n: usize, i: usize) -> Option<ValueId> {
    graph.nodes[n].inputs.get(i).copied().flatten()
}

/// The f32 dimensions of `id`, when it is an f32 tensor of rank 2 or more.
fn f32_dims(graph: &Graph, id: ValueId) -> Option<Vec<usize>> {
    dims(graph, id).filter(|(t, d)| *t == DType::F32 && d.len() >= 2).map(|(_, d)| d)
}

/// The pattern ending at the MatMul `pv`, when it is one.
fn match_at(graph: &Graph, info: &[NodeInfo], uses: &Uses, pv: usize, walk: Walk) -> Option<Attention> {
    let mut members = vec![pv];
    let (p_prime, v) = (input(graph, pv, 0)?, input(graph, pv, 1)?);
    let (p, nan_to_zero) = nan_guard(graph, uses, p_prime, &mut members)?;
    let s_prime = softmax_input(graph, uses, p, &mut members)?;
    let (s, mask) = masked_scores(graph, uses, s_prime, &mut members);
    if !uses.only_by(s, &members) {
        return None;
    }
    let (s0, mut scale) = strip_scales(graph, uses, s, &mut members);
    let qk = graph.producer(s0)?;
    if graph.nodes[qk].op_type != "MatMul" || !uses.only_by(s0, &members) {
        return None;
    }
    members.push(qk);
    let sd = f32_dims(graph, s0)?;
    let (q, qs) = strip_scales(graph, uses, input(graph, qk, 0)?, &mut members);
    let (k, ks) = strip_scales(graph, uses, input(graph, qk, 1)?, &mut members);
    scale *= qs * ks;
    let (qd, kd, vd) = (f32_dims(graph, q)?, f32_dims(graph, k)?, f32_dims(graph, v)?);
    let r = sd.len();
    let (batch, sq, sk) = (sd[..r - 2].to_vec(), sd[r - 2], sd[r - 1]);
    let (d, dv) = (qd[qd.len() - 1], vd[vd.len() - 1]);
    let od = f32_dims(graph, graph.nodes[pv].outputs[0])?;
    if kd[kd.len() - 2] != d
        || vd[vd.len() - 2] != sk
        || od[..od.len() - 2] != batch[..]
        || d > MAX_HEAD
        || dv > MAX_HEAD
    {
        return None;
    }
    // Operands through the views that made them; the nodes absorbed become members.
    let operand = |id: ValueId, members: &mut Vec<usize>| -> Option<Strided> {
        let reader = members.iter().copied().filter(|&m| graph.nodes[m].inputs.contains(&Some(id))).max()?;
        let through = through_views(graph, info, uses, id, reader, walk);
        let own_dims = f32_dims(graph, id)?;
        members.extend(through.absorbed);
        let strides = batch_strides(&own_dims, &through.strides, &batch)?;
        Some(Strided { value: through.base, dtype: through.dtype, offset: through.offset, strides })
    };
    let q = operand(q, &mut members)?;
    let k = operand(k, &mut members)?;
    let v = operand(v, &mut members)?;
    let mask = match mask {
        Some(m) => {
            let md = f32_dims(graph, m)?;
            if !broadcast_dims_fit(&md, &sd) {
                return None;
            }
            Some(Strided { value: m, dtype: DType::F32, offset: 0, strides: broadcast(&md, &sd) })
        }
        None => None,
    };
    let out = result(graph, uses, pv, &od, &mut members);
    closed(graph, uses, &mut members, out.value)?;
    Some(Attention { members, q, k, v, mask, out, batch, sq, sk, d, dv, scale, nan_to_zero })
}

/// `P' = Where(IsNaN(P), 0, P)`: `(P, true)` with the guard's nodes added to `members`, or
/// `(P', false)` when `P'` is not guarded; `None` when the guard's test is read elsewhere.
fn nan_guard(graph: &Graph, uses: &Uses, p_prime: ValueId, members: &mut Vec<usize>) -> Option<(ValueId, bool)> {
    if let Some(w) = graph.producer(p_prime)
        && graph.nodes[w].op_type == "Where"
        && uses.only_by(p_prime, members)
        && let (Some(isnan), Some(zero), Some(pw)) = (input(graph, w, 0), input(graph, w, 1), input(graph, w, 2))
        && scalar(graph, Some(zero)) == Some(0.0)
        && let Some(n) = graph.producer(isnan)
        && graph.nodes[n].op_type == "IsNaN"
        && input(graph, n, 0) == Some(pw)
        && dims(graph, pw) == dims(graph, p_prime)
    {
        members.extend([w, n]);
        return uses.only_by(isnan, members).then_some((pw, true));
    }
    Some((p_prime, false))
}

/// `P = Softmax(S')` over the last axis: `S'`, with the Softmax added to `members`.
fn softmax_input(graph: &Graph, uses: &Uses, p: ValueId, members: &mut Vec<usize>) -> Option<ValueId> {
    let sm = graph.producer(p)?;
    let node = &graph.nodes[sm];
    let pd = f32_dims(graph, p)?;
    let last_axis = match node.attrs.get("axis") {
        Some(Attribute::Int(a)) => *a == -1 || *a == ext(pd.len() - 1),
        None => graph.opset >= 13,
        _ => false,
    };
    if node.op_type != "Softmax" || !last_axis || !uses.only_by(p, members) {
        return None;
    }
    members.push(sm);
    input(graph, sm, 0)
}

/// `S' = S + mask` where `S` comes from a MatMul (through scales): `(S, Some(mask))` with the Add added
/// to `members`, or `(S', None)`.
fn masked_scores(graph: &Graph, uses: &Uses, s_prime: ValueId, members: &mut Vec<usize>) -> (ValueId, Option<ValueId>) {
    let Some(add) = graph.producer(s_prime) else { return (s_prime, None) };
    let (Some(a), Some(b)) = (input(graph, add, 0), input(graph, add, 1)) else { return (s_prime, None) };
    if graph.nodes[add].op_type != "Add" || !uses.only_by(s_prime, members) {
        return (s_prime, None);
    }
    let from_matmul = |id: ValueId| -> Option<bool> {
        let mut at = id;
        while let Some(n) = graph.producer(at) {
            if graph.nodes[n].op_type == "MatMul" {
                return Some(true);
            }
            at = scaled(graph, n)?.0;
        }
        Some(false)
    };
    let (scores, m) = if from_matmul(a) == Some(true) { (a, b) } else { (b, a) };
    if from_matmul(scores) == Some(true) && f32_dims(graph, m).is_some() && dims(graph, scores) == dims(graph, s_prime)
    {
        members.push(add);
        return (scores, Some(m));
    }
    (s_prime, None)
}

/// Where the result goes: `O` itself (of `od`), or a Transpose of it written through strides, then
/// the views of that contiguous result (the kernel writes the last of them, so a graph output is
/// written in place instead of copied), then a Cast to a half type (the type stored, the result's
/// `dtype`); the nodes absorbed are added to `members`.
fn result(graph: &Graph, uses: &Uses, pv: usize, od: &[usize], members: &mut Vec<usize>) -> Strided {
    let o = graph.nodes[pv].outputs[0];
    let mut out = Strided { value: o, dtype: DType::F32, offset: 0, strides: contiguous(od) };
    if uses.readers[o.0].len() == 1
        && !uses.graph_output[o.0]
        && let Some(&t) = uses.readers[o.0].first()
        && graph.nodes[t].op_type == "Transpose"
        && let Some(pm) = perm(graph, t, od.len())
        && let Some((_, td)) = dims(graph, graph.nodes[t].outputs[0])
    {
        let ts = contiguous(&td);
        let mut os = vec![0i64; od.len()];
        for (k, &a) in pm.iter().enumerate() {
            os[a] = ts[k];
        }
        members.push(t);
        out = Strided { value: graph.nodes[t].outputs[0], dtype: DType::F32, offset: 0, strides: os };
    }
    while let Some(n) = only_reader(graph, uses, out.value)
        && graph.nodes[n].op.is_view()
    {
        members.push(n);
        out.value = graph.nodes[n].outputs[0];
    }
    // A Cast to a half type: the kernel stores the rounded result instead.
    if let Some(n) = only_reader(graph, uses, out.value)
        && let Some(to) = graph.half_cast(n)
    {
        members.push(n);
        out.value = graph.nodes[n].outputs[0];
        out.dtype = to;
    }
    out
}

/// The node reading `id` as its first input and nothing else reading it, when `id` is no graph
/// output and that node has one output.
fn only_reader(graph: &Graph, uses: &Uses, id: ValueId) -> Option<usize> {
    let &n = uses.readers[id.0].first().filter(|_| uses.readers[id.0].len() == 1 && !uses.graph_output[id.0])?;
    (graph.nodes[n].outputs.len() == 1 && input(graph, n, 0) == Some(id)).then_some(n)
}

/// Sorts `members` and checks the group is closed: every intermediate is read only inside it, and
/// its root (the last member) produces `out` first.
fn closed(graph: &Graph, uses: &Uses, members: &mut Vec<usize>, out: ValueId) -> Option<()> {
    members.sort_unstable();
    members.dedup();
    let root = *members.last()?;
    for &m in members.iter() {
        if m != root && graph.nodes[m].outputs.iter().any(|o| !uses.only_by(*o, members)) {
            return None;
        }
    }
    (graph.nodes[root].outputs.first() == Some(&out)).then_some(())
}

/// Whether `dims` broadcasts to `to` (right-aligned, same or lower rank).
fn broadcast_dims_fit(dims: &[usize], to: &[usize]) -> bool {
    dims.len() <= to.len() && dims.iter().rev().zip(to.iter().rev()).all(|(&a, &b)| a == b || a == 1)
}
