//! GEMMs as matmul steps through the backend's BLAS-Lt handle ([`crate::fuse::blas_epilogue`] says
//! which can be, and with which epilogue), and the library's workspace in a run's scratch.

use std::collections::HashMap;

use saggar_device::MatmulPrecision;

use crate::error::OnnxError;
use crate::fuse::blas_epilogue::{EpilogueFusion, blas_gemm, gemm_slots};
use crate::graph::ir::{Graph, ValueId};
use crate::ops::gpu::Slot;
use crate::plan::nodes::NodeInfo;
use crate::plan::{ArgSource, MatmulStep, PlanStep};

/// Alignment of the BLAS-Lt workspace in a run's scratch.
const WORKSPACE_ALIGN: usize = 256;

/// How GEMMs are lowered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum GemmEngine {
    /// Through the backend's BLAS-Lt library (cuBLASLt, hipBLASLt; the host backend's own GEMM),
    /// where the operands allow; the generated kernel otherwise.
    #[default]
    BlasLt,
    /// Always the generated GEMM kernel (the baseline the BLAS path is measured against).
    Generated,
}

impl GemmEngine {
    /// The name used in options and cache keys.
    pub const fn name(self) -> &'static str {
        match self {
            GemmEngine::BlasLt => "blaslt",
            GemmEngine::Generated => "generated",
        }
    }
}

/// What the lowering needs to emit BLAS steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BlasLowering {
    /// Whether TF32 is allowed.
    pub(crate) precision: MatmulPrecision,
    /// Scratch reserved for the library's workspace (0 on the host backend, which needs none).
    pub(crate) workspace_bytes: usize,
}

/// Places the library's workspace past the memory plan (`high_water` bytes of scratch), so no step's
/// operands overlap it, and points every matmul step at it; returns the scratch a run needs. No
/// workspace without matmul steps.
pub(crate) fn reserve_workspace(
    steps: &mut [PlanStep],
    high_water: usize,
    blas: Option<BlasLowering>,
    limit: u64,
) -> Result<usize, OnnxError> {
    let Some(blas) = blas.filter(|_| steps.iter().any(|s| matches!(s, PlanStep::Matmul(_)))) else {
        return Ok(high_water);
    };
    // cuBLASLt and hipBLASLt want a workspace aligned to 256 bytes.
    let offset = high_water.checked_next_multiple_of(WORKSPACE_ALIGN).unwrap_or(usize::MAX);
    let scratch_bytes = offset.saturating_add(blas.workspace_bytes);
    if scratch_bytes as u64 > limit {
        return Err(OnnxError::TooLarge {
            what: "scratch memory with the BLAS workspace".into(),
            size: scratch_bytes as u64,
            limit,
            field: "max_program_bytes",
        });
    }
    for step in steps {
        if let PlanStep::Matmul(m) = step {
            m.workspace = offset;
        }
    }
    Ok(scratch_bytes)
}

/// The matmul step of GEMM node `node` when the libraries can express it: reading its operands where
/// `location` placed them and writing its output, or, with `fused`, also computing the group of
/// that [`EpilogueFusion`] and writing to the destination given with it.
pub(crate) fn matmul_step(
    graph: &Graph,
    info: &NodeInfo,
    node: usize,
    location: &HashMap<ValueId, ArgSource>,
    precision: MatmulPrecision,
    fused: Option<(&EpilogueFusion, ArgSource)>,
) -> Option<MatmulStep> {
    let (launch, mut desc) = blas_gemm(info, precision)?;
    let (a, b, bias, out) = gemm_slots(launch)?;
    let n = &graph.nodes[node];
    let at = |slot: Slot| match slot {
        Slot::In(i) => n.inputs.get(i).copied().flatten().and_then(|id| location.get(&id).copied()),
        Slot::Out(i) => n.outputs.get(i).and_then(|id| location.get(id).copied()),
    };
    let mut bias = match bias {
        Some(slot) => Some(at(slot)?),
        None => None,
    };
    let mut c = at(out)?;
    if let Some((fusion, dest)) = fused {
        if let Some(id) = fusion.bias {
            bias = Some(*location.get(&id)?);
        }
        desc.bias = bias.is_some();
        desc.epilogue = fusion.epilogue;
        c = dest;
    }
    Some(MatmulStep { desc, a: at(a)?, b: at(b)?, c, bias, workspace: 0 })
}
