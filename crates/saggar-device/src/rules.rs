//! The checks every backend makes before work reaches a device, host backend included: allocation
//! sizes, pinned ranges, copy lengths, and launches (arguments against the signature, the
//! configuration against the common and the kernel's own limits). One copy, so the backends cannot
//! drift apart; the conformance suite checks that they agree.

use crate::error::{Error, Result};
use crate::types::{KernelArg, KernelSignature, LaunchConfig};

/// Rust allocations are limited to `isize::MAX` bytes; sizes past it cannot be addressed.
pub const MAX_BYTES: u64 = isize::MAX as u64;

/// What a device allows, read once at open so launches are checked without a driver call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceLimits {
    /// Threads a block may have.
    pub max_threads_per_block: u32,
    /// Block extents.
    pub max_block: [u32; 3],
    /// Grid extents (in blocks).
    pub max_grid: [u32; 3],
    /// Dynamic shared memory a block may use, where the device reports it (else `u32::MAX`).
    pub max_shared_bytes: u32,
    /// Threads (grid times block) a launch may have in one dimension: AMD GPUs count work-items per
    /// dimension in 32 bits; NVIDIA GPUs have no such limit (`u64::MAX`).
    pub max_threads_per_dim: u64,
    /// Whether launches may overlap the kernel before them ([`crate::LaunchConfig::programmatic`]):
    /// CUDA devices of compute capability 9.0 and up.
    pub programmatic_launch: bool,
}

/// What one kernel may be launched with: the device's limits, narrowed by the kernel's own (register
/// use lowers the threads a block may have; dynamic shared memory beyond a default needs an opt-in).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelLimits {
    /// Threads a block of this kernel may have.
    pub max_threads_per_block: u32,
    /// Dynamic shared memory a block of this kernel may use.
    pub max_dynamic_shared_bytes: u32,
    /// Block extents.
    pub max_block: [u32; 3],
    /// Grid extents.
    pub max_grid: [u32; 3],
    /// See [`DeviceLimits::max_threads_per_dim`].
    pub max_threads_per_dim: u64,
    /// See [`DeviceLimits::programmatic_launch`].
    pub programmatic_launch: bool,
}

impl KernelLimits {
    /// A kernel's limits: the device's, with the threads per block and the dynamic shared memory the
    /// kernel reports (where it reports them) taken if lower.
    pub fn narrow(device: &DeviceLimits, threads_per_block: Option<u32>, dynamic_shared: Option<u32>) -> Self {
        KernelLimits {
            max_threads_per_block: threads_per_block
                .map_or(device.max_threads_per_block, |v| v.min(device.max_threads_per_block)),
            max_dynamic_shared_bytes: dynamic_shared
                .map_or(device.max_shared_bytes, |v| v.min(device.max_shared_bytes)),
            max_block: device.max_block,
            max_grid: device.max_grid,
            max_threads_per_dim: device.max_threads_per_dim,
            programmatic_launch: device.programmatic_launch,
        }
    }

    /// Why `config` cannot be launched under these limits, if it cannot (after [`LaunchConfig::check`]).
    pub fn violation(&self, config: &LaunchConfig) -> Option<String> {
        let (b, g) = (config.block, config.grid);
        let (bd, gd) = ([b.x, b.y, b.z], [g.x, g.y, g.z]);
        if bd.iter().zip(&self.max_block).any(|(v, max)| v > max) {
            return Some(format!(
                "block ({}, {}, {}) exceeds the device's maximum block dimensions ({}, {}, {})",
                b.x, b.y, b.z, self.max_block[0], self.max_block[1], self.max_block[2]
            ));
        }
        if b.volume() > u64::from(self.max_threads_per_block) {
            return Some(format!(
                "{} threads per block exceeds this kernel's limit of {}",
                b.volume(),
                self.max_threads_per_block
            ));
        }
        if gd.iter().zip(&self.max_grid).any(|(v, max)| v > max) {
            return Some(format!(
                "grid ({}, {}, {}) exceeds the device's maximum grid dimensions ({}, {}, {})",
                g.x, g.y, g.z, self.max_grid[0], self.max_grid[1], self.max_grid[2]
            ));
        }
        if gd.iter().zip(&bd).any(|(&g, &b)| u64::from(g) * u64::from(b) > self.max_threads_per_dim) {
            return Some(format!(
                "grid ({}, {}, {}) of blocks ({}, {}, {}) exceeds {} threads in a dimension, the device's limit",
                g.x, g.y, g.z, b.x, b.y, b.z, self.max_threads_per_dim
            ));
        }
        if config.shared_mem_bytes > self.max_dynamic_shared_bytes {
            return Some(format!(
                "{} bytes of dynamic shared memory exceed this kernel's limit of {}",
                config.shared_mem_bytes, self.max_dynamic_shared_bytes
            ));
        }
        None
    }
}

#[cold]
fn invalid_size(op: &'static str, bytes: usize, reason: &'static str) -> Error {
    Error::InvalidSize { op, bytes: bytes as u128, reason }
}

/// A device allocation of `bytes` is possible at all: not zero, not past `max` (the address space).
#[inline]
pub fn check_alloc_size(op: &'static str, bytes: usize, max: u64) -> Result<()> {
    if bytes == 0 {
        return Err(invalid_size(op, bytes, "zero-sized allocations are not allowed"));
    }
    if bytes as u64 > max {
        return Err(invalid_size(op, bytes, "larger than the device address space"));
    }
    Ok(())
}

/// A pinned allocation of `bytes` is possible: not zero, and not more than the device holds
/// (`total_memory`): pinning that much host memory can stall the whole machine, so it is refused
/// before any driver tries.
#[inline]
pub fn check_pinned_size(op: &'static str, bytes: usize, total_memory: u64) -> Result<()> {
    check_alloc_size(op, bytes, MAX_BYTES)?;
    if bytes as u64 > total_memory {
        return Err(Error::OutOfMemory { op, requested: bytes as u64, available: total_memory });
    }
    Ok(())
}

/// `offset..offset + len` lies inside a pinned buffer of `capacity` bytes.
#[inline]
pub fn check_pinned_range(op: &'static str, capacity: usize, offset: usize, len: usize) -> Result<()> {
    if offset.checked_add(len).is_some_and(|end| end <= capacity) {
        Ok(())
    } else {
        Err(Error::OutOfBounds { op, offset: offset as u64, len: len as u64, capacity: capacity as u64 })
    }
}

/// Source and destination of a copy have the same length.
#[inline]
pub fn check_same_len(op: &'static str, src: usize, dst: usize) -> Result<()> {
    if src == dst { Ok(()) } else { Err(Error::LengthMismatch { op, src: src as u64, dst: dst as u64 }) }
}

/// Objects of two devices are not mixed in one call.
#[inline]
pub fn check_same_device(op: &'static str, ordinal: usize, other: usize) -> Result<()> {
    if ordinal == other { Ok(()) } else { Err(Error::DeviceMismatch { op, ordinal, other }) }
}

/// A launch of a kernel of `signature` with `config` and `args`: the arguments match the signature in
/// number and kind, and the configuration keeps the common limits ([`LaunchConfig::check`]) and, when
/// the backend knows them, the kernel's own (`limits`).
///
/// This check stays on every eager launch even under a dispatcher that validated its request: the
/// request's checks are about tensors, not about a kernel's parameter list, and a launch whose
/// arguments do not match its kernel makes the driver read past the argument array (host memory
/// unsafety), which no layer above can rule out for the kernel it is handed.
#[inline]
pub fn check_launch(
    signature: &KernelSignature,
    limits: Option<&KernelLimits>,
    config: &LaunchConfig,
    args: &[KernelArg],
) -> Result<()> {
    signature.check_args(args)?;
    config.check(&signature.name)?;
    match limits.and_then(|l| l.violation(config)) {
        None => Ok(()),
        Some(reason) => Err(Error::InvalidLaunchConfig { kernel: signature.name.clone(), reason }),
    }
}

/// The largest matrix dimension and batch count a matmul may have: both vendors take them as 32-bit
/// signed integers in places.
pub const MAX_MATMUL_DIM: u64 = i32::MAX as u64;

fn matmul_error(desc: &crate::blas::MatmulDesc, reason: String) -> Error {
    Error::InvalidMatmul { m: desc.m, n: desc.n, k: desc.k, batch: desc.batch, reason }
}

/// A matmul description any backend can plan: element types of a pair in
/// [`MATMUL_TYPES`](crate::blas::MATMUL_TYPES), every dimension and the batch count in
/// `1..=MAX_MATMUL_DIM`, strides whose byte offsets fit 64 bits, and batches of `C` that do not overlap.
pub fn check_matmul_desc(desc: &crate::blas::MatmulDesc) -> Result<()> {
    let fail = |reason: String| matmul_error(desc, reason);
    if !crate::blas::MATMUL_TYPES.contains(&(desc.inputs, desc.output)) {
        let pairs: Vec<String> =
            crate::blas::MATMUL_TYPES.iter().map(|(i, o)| format!("{} -> {}", i.name(), o.name())).collect();
        return Err(fail(format!(
            "{} inputs with {} output are not supported; the (inputs -> output) types are {}",
            desc.inputs.name(),
            desc.output.name(),
            pairs.join(", ")
        )));
    }
    if desc.epilogue == crate::blas::Epilogue::GeluTanh && desc.output != crate::blas::MatmulType::F32 {
        // Measured on an H100 and via the HIP fixture: cuBLASLt's GELU epilogue into a bf16 output
        // was off by 15 units of bf16 where the reference is not.
        return Err(fail(format!(
            "the GELU epilogue writes f32 only, not {}: write f32, or apply GELU as its own kernel",
            desc.output.name()
        )));
    }
    if desc.inputs == crate::blas::MatmulType::I8 {
        check_i8_matmul_desc(desc)?;
    }
    let (input, output) = (desc.inputs.bytes() as u64, desc.output.bytes() as u64);
    for (name, value) in [("m", desc.m), ("n", desc.n), ("k", desc.k), ("batch", desc.batch)] {
        if value == 0 || value > MAX_MATMUL_DIM {
            return Err(fail(format!("{name} = {value} is outside 1..={MAX_MATMUL_DIM}")));
        }
    }
    for (name, value, element) in
        [("stride_a", desc.stride_a, input), ("stride_b", desc.stride_b, input), ("stride_c", desc.stride_c, output)]
    {
        if value > i64::MAX as u64 / element {
            return Err(fail(format!("{name} = {value} elements does not fit a 64-bit byte offset")));
        }
    }
    if desc.batch > 1 && desc.stride_c < desc.m * desc.n {
        return Err(fail(format!(
            "stride_c = {} makes the batches of C overlap (m * n = {})",
            desc.stride_c,
            desc.m * desc.n
        )));
    }
    Ok(())
}

/// The form an `i8` product must have (the module docs of [`crate::blas`]): what the integer kernels of
/// cuBLASLt and hipBLASLt take, refused otherwise so the caller runs its own kernel instead.
fn check_i8_matmul_desc(desc: &crate::blas::MatmulDesc) -> Result<()> {
    let fail =
        |reason: &str| matmul_error(desc, format!("an i8 product {reason}; run this product with another kernel"));
    if desc.trans_a || !desc.trans_b {
        return Err(fail("takes A stored [m, k] and B stored [n, k] only (trans_a off, trans_b on)"));
    }
    if !desc.k.is_multiple_of(4) || !desc.n.is_multiple_of(4) {
        return Err(fail("needs k and n to be multiples of 4"));
    }
    if desc.batch > 1 && !(desc.stride_a.is_multiple_of(4) && desc.stride_b.is_multiple_of(4)) {
        return Err(fail("needs batch strides of A and B that are multiples of 4 elements"));
    }
    if desc.bias || desc.epilogue != crate::blas::Epilogue::None {
        return Err(fail("has no bias or epilogue (apply them to the i32 result)"));
    }
    if desc.alpha() != 1.0 || !(desc.beta() == 0.0 || desc.beta() == 1.0) {
        return Err(fail("takes alpha 1 and beta 0 or 1 only (scale the i32 result afterwards)"));
    }
    Ok(())
}

/// A matmul `desc` on `operands` with a handle whose calls need `workspace_bytes`: the description
/// ([`check_matmul_desc`]), each buffer at least as long as its last batch ends (in bytes of its
/// element type), a bias vector of `n` output elements exactly when the description has one, and
/// enough workspace. Every backend calls this before it touches a library.
pub fn check_matmul(
    desc: &crate::blas::MatmulDesc,
    operands: &crate::blas::MatmulOperands,
    workspace_bytes: usize,
) -> Result<()> {
    check_matmul_desc(desc)?;
    let fail = |reason: String| matmul_error(desc, reason);
    let needed = |stride: u64, elements: u64, element: usize| -> Option<u64> {
        (desc.batch - 1).checked_mul(stride)?.checked_add(elements)?.checked_mul(element as u64)
    };
    let (input, output) = (desc.inputs, desc.output);
    for (name, slice, stride, elements, ty) in [
        ("A", operands.a, desc.stride_a, desc.m * desc.k, input),
        ("B", operands.b, desc.stride_b, desc.k * desc.n, input),
        ("C", operands.c, desc.stride_c, desc.m * desc.n, output),
    ] {
        match needed(stride, elements, ty.bytes()) {
            Some(bytes) if bytes <= slice.len() as u64 => {}
            Some(bytes) => {
                let len = slice.len();
                return Err(fail(format!("{name} holds {len} bytes, {bytes} needed ({} elements)", ty.name())));
            }
            None => return Err(fail(format!("{name} would span more than 2^64 bytes"))),
        }
    }
    if input == crate::blas::MatmulType::I8 {
        for (name, slice) in [("A", operands.a), ("B", operands.b), ("C", operands.c)] {
            if !slice.ptr().0.is_multiple_of(4) {
                return Err(fail(format!("{name} is not 4-byte aligned, which an i8 product needs")));
            }
        }
    }
    let bias_bytes = desc.n * output.bytes() as u64;
    match (desc.bias, operands.bias) {
        (false, None) => {}
        (true, Some(bias)) if bias.len() as u64 >= bias_bytes => {}
        (true, Some(bias)) => {
            let len = bias.len();
            return Err(fail(format!("the bias holds {len} bytes, {bias_bytes} needed ({} elements)", output.name())));
        }
        (true, None) => return Err(fail("the description has a bias but no bias buffer was given".into())),
        (false, Some(_)) => return Err(fail("a bias buffer was given but the description has no bias".into())),
    }
    if operands.workspace.len() < workspace_bytes {
        return Err(fail(format!(
            "the workspace holds {} bytes, the handle was made for {workspace_bytes}",
            operands.workspace.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blas::{MatmulDesc, MatmulOperands};
    use crate::types::{DevicePtr, Dim3};

    fn slice(len: usize) -> crate::types::DeviceSlice {
        crate::types::DeviceSlice::from_raw(DevicePtr(0x1000), len)
    }

    #[test]
    fn matmuls_are_checked_against_their_buffers() {
        let desc = MatmulDesc::gemm(2, 3, 4);
        let ok = MatmulOperands { a: slice(32), b: slice(48), c: slice(24), bias: None, workspace: slice(0) };
        assert!(check_matmul(&desc, &ok, 0).is_ok());
        let short_c = MatmulOperands { c: slice(20), ..ok };
        let err = check_matmul(&desc, &short_c, 0).unwrap_err();
        assert!(err.to_string().contains("C holds 20 bytes, 24 needed"), "{err}");
        assert!(check_matmul(&MatmulDesc::gemm(0, 3, 4), &ok, 0).unwrap_err().to_string().contains("m = 0"));
        let huge = MatmulDesc { m: 1 << 40, ..desc };
        assert!(matches!(check_matmul(&huge, &ok, 0), Err(Error::InvalidMatmul { .. })));
        assert!(check_matmul(&desc, &ok, 16).unwrap_err().to_string().contains("workspace"));
        let biased = MatmulDesc { bias: true, ..desc };
        assert!(check_matmul(&biased, &ok, 0).unwrap_err().to_string().contains("no bias buffer"));
        assert!(check_matmul(&biased, &MatmulOperands { bias: Some(slice(12)), ..ok }, 0).is_ok());
        assert!(check_matmul(&biased, &MatmulOperands { bias: Some(slice(8)), ..ok }, 0).is_err());
        assert!(check_matmul(&desc, &MatmulOperands { bias: Some(slice(12)), ..ok }, 0).is_err());
        // Batches: B broadcast (stride 0), C batches must not overlap.
        let batched = MatmulDesc { batch: 3, stride_b: 0, ..desc };
        let ops = MatmulOperands { a: slice(96), b: slice(48), c: slice(72), ..ok };
        assert!(check_matmul(&batched, &ops, 0).is_ok());
        assert!(check_matmul(&batched, &MatmulOperands { a: slice(95), ..ops }, 0).is_err());
        let overlapping = MatmulDesc { stride_c: 5, ..batched };
        assert!(check_matmul(&overlapping, &ops, 0).unwrap_err().to_string().contains("overlap"));
        let wrapping = MatmulDesc { stride_a: u64::MAX / 8, ..batched };
        assert!(check_matmul(&wrapping, &ops, 0).is_err(), "an overflowing extent is refused");
    }

    #[test]
    fn half_matmuls_are_checked_in_their_element_sizes() {
        use crate::blas::MatmulType::{BF16, F16, F32};
        let desc = MatmulDesc { bias: true, ..MatmulDesc::gemm(2, 3, 4) };
        // f16 in, f16 out: A 16 bytes, B 24, C 12, bias 6.
        let half = desc.with_types(F16, F16);
        let ops =
            MatmulOperands { a: slice(16), b: slice(24), c: slice(12), bias: Some(slice(6)), workspace: slice(0) };
        assert!(check_matmul(&half, &ops, 0).is_ok());
        assert!(check_matmul(&half, &MatmulOperands { a: slice(15), ..ops }, 0).is_err());
        assert!(check_matmul(&half, &MatmulOperands { bias: Some(slice(5)), ..ops }, 0).is_err());
        // f16 in, f32 out: C and the bias are f32.
        let err = check_matmul(&desc.with_types(F16, F32), &ops, 0).unwrap_err().to_string();
        assert!(err.contains("C holds 12 bytes, 24 needed (f32 elements)"), "{err}");
        // Buffers sized for f16 described as f32 are refused.
        assert!(check_matmul(&desc, &ops, 0).unwrap_err().to_string().contains("A holds 16 bytes, 32 needed"));
        // The pairs outside MATMUL_TYPES are refused, by the description alone, naming those that exist.
        for (inputs, output) in [(F32, F16), (F32, BF16), (F16, BF16), (BF16, F16)] {
            let err = check_matmul_desc(&desc.with_types(inputs, output)).unwrap_err();
            assert!(matches!(err, Error::InvalidMatmul { .. }), "{err:?}");
            assert!(err.to_string().contains("f16 -> f16, bf16 -> f32"), "{err}");
        }
        for (inputs, output) in crate::blas::MATMUL_TYPES.into_iter().filter(|(i, _)| !i.is_integer()) {
            assert!(check_matmul_desc(&desc.with_types(inputs, output)).is_ok());
            let gelu = MatmulDesc { epilogue: crate::blas::Epilogue::GeluTanh, ..desc.with_types(inputs, output) };
            assert_eq!(check_matmul_desc(&gelu).is_ok(), output == F32, "GELU into {}", output.name());
        }
        // Byte offsets of 2-byte strides reach twice as far before overflowing.
        let strided = MatmulDesc { batch: 2, stride_a: i64::MAX as u64 / 3, ..half };
        assert!(check_matmul_desc(&strided).is_ok());
        assert!(check_matmul_desc(&strided.with_types(F32, F32)).is_err());
    }

    #[test]
    fn i8_matmuls_take_the_integer_kernels_form_only() {
        use crate::blas::{Epilogue, MatmulType::I8};
        let desc = MatmulDesc::gemm_i8(3, 8, 12);
        assert!(check_matmul_desc(&desc).is_ok());
        assert!(check_matmul_desc(&desc.with_scales(1.0, 1.0)).is_ok(), "beta 1 accumulates into C");
        let refused = [
            ("takes A stored [m, k]", MatmulDesc { trans_a: true, ..desc }),
            ("takes A stored [m, k]", MatmulDesc { trans_b: false, ..desc }),
            ("multiples of 4", MatmulDesc { k: 10, ..desc }),
            ("multiples of 4", MatmulDesc { n: 6, ..desc }),
            ("batch strides", MatmulDesc { batch: 2, stride_a: 38, ..desc }),
            ("no bias or epilogue", MatmulDesc { bias: true, ..desc }),
            ("no bias or epilogue", MatmulDesc { epilogue: Epilogue::Relu, ..desc }),
            ("alpha 1", desc.with_scales(0.5, 0.0)),
            ("alpha 1", desc.with_scales(1.0, 2.0)),
            ("inputs with f32 output are not supported", desc.with_types(I8, crate::blas::MatmulType::F32)),
        ];
        for (reason, bad) in refused {
            let err = check_matmul_desc(&bad).unwrap_err();
            assert!(matches!(err, Error::InvalidMatmul { .. }) && err.to_string().contains(reason), "{reason}: {err}");
        }
        // A [3, 12] i8 = 36 bytes, B [8, 12] i8 = 96 bytes, C [3, 8] i32 = 96 bytes.
        let ops = MatmulOperands { a: slice(36), b: slice(96), c: slice(96), bias: None, workspace: slice(0) };
        assert!(check_matmul(&desc, &ops, 0).is_ok());
        assert!(check_matmul(&desc, &MatmulOperands { a: slice(35), ..ops }, 0).is_err());
        assert!(check_matmul(&desc, &MatmulOperands { c: slice(95), ..ops }, 0).is_err());
        let odd = crate::types::DeviceSlice::from_raw(DevicePtr(0x1002), 96);
        let err = check_matmul(&desc, &MatmulOperands { b: odd, ..ops }, 0).unwrap_err();
        assert!(err.to_string().contains("B is not 4-byte aligned"), "{err}");
    }

    #[test]
    fn launch_limits_include_the_threads_per_dimension_limit() {
        let limits = KernelLimits {
            max_threads_per_block: 1024,
            max_dynamic_shared_bytes: 65536,
            max_block: [1024, 1024, 1024],
            max_grid: [u32::MAX >> 1, 65536, 65536],
            max_threads_per_dim: u64::from(u32::MAX),
            programmatic_launch: false,
        };
        let ok = LaunchConfig::for_elements(1 << 20, 256);
        assert_eq!(limits.violation(&ok), None);
        let huge =
            LaunchConfig { grid: Dim3::x(1 << 30), block: Dim3::x(1024), shared_mem_bytes: 0, programmatic: false };
        assert!(limits.violation(&huge).unwrap().contains("4294967295 threads in a dimension"));
        let nvidia = KernelLimits { max_threads_per_dim: u64::MAX, ..limits };
        assert_eq!(nvidia.violation(&huge), None, "NVIDIA GPUs have no per-dimension thread limit");
        let wide = LaunchConfig { grid: Dim3::x(1), block: Dim3 { x: 2048, y: 1, z: 1 }, ..ok };
        assert!(limits.violation(&wide).unwrap().contains("maximum block dimensions"));
        let lds = LaunchConfig { shared_mem_bytes: 65537, ..ok };
        assert!(limits.violation(&lds).unwrap().contains("shared memory"));
        let narrow = KernelLimits { max_threads_per_block: 256, ..limits };
        let block512 = LaunchConfig::for_elements(4096, 512);
        assert!(narrow.violation(&block512).unwrap().contains("limit of 256"));
    }

    #[test]
    fn sizes_ranges_and_lengths_are_checked_alike_everywhere() {
        assert!(matches!(check_alloc_size("a", 0, MAX_BYTES), Err(Error::InvalidSize { bytes: 0, .. })));
        assert!(matches!(check_alloc_size("a", usize::MAX, MAX_BYTES), Err(Error::InvalidSize { .. })));
        assert!(check_alloc_size("a", 1, MAX_BYTES).is_ok());
        assert!(matches!(check_pinned_size("p", 65, 64), Err(Error::OutOfMemory { available: 64, .. })));
        assert!(check_pinned_range("r", 8, 4, 4).is_ok());
        assert!(matches!(check_pinned_range("r", 8, 5, 4), Err(Error::OutOfBounds { capacity: 8, .. })));
        assert!(check_pinned_range("r", 8, usize::MAX, 2).is_err(), "an overflowing range is refused");
        assert!(matches!(check_same_len("c", 1, 2), Err(Error::LengthMismatch { src: 1, dst: 2, .. })));
        assert!(matches!(check_same_device("d", 0, 1), Err(Error::DeviceMismatch { ordinal: 0, other: 1, .. })));
    }
}
