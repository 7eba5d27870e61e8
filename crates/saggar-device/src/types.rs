//! Plain values shared by every backend: device identity, device addresses, kernel arguments,
//! launch configurations and capture modes.

use std::fmt;

use crate::error::{Error, Result};

/// The backends saggar-device knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BackendKind {
    /// NVIDIA GPUs through the CUDA driver API (libcuda loaded at run time).
    Cuda,
    /// AMD GPUs through HIP (libamdhip64).
    Hip,
    /// The CPU simulator that reproduces GPU hazards; always built.
    Host,
}

impl BackendKind {
    /// Lower-case name, as used on the command line and in cache keys.
    pub const fn name(self) -> &'static str {
        match self {
            BackendKind::Cuda => "cuda",
            BackendKind::Hip => "hip",
            BackendKind::Host => "host",
        }
    }

    /// The order in which `auto` tries backends.
    pub const AUTO_ORDER: [BackendKind; 3] = [BackendKind::Cuda, BackendKind::Hip, BackendKind::Host];
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for BackendKind {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "cuda" => Ok(BackendKind::Cuda),
            "hip" => Ok(BackendKind::Hip),
            "host" => Ok(BackendKind::Host),
            other => Err(format!("unknown backend `{other}` (expected cuda, hip or host)")),
        }
    }
}

/// What a device is, as far as saggar needs to know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// The backend that drives it.
    pub backend: BackendKind,
    /// Its ordinal within the backend.
    pub ordinal: usize,
    /// The vendor's marketing name, e.g. "NVIDIA H200".
    pub name: String,
    /// An architecture string fit for cache keys: code compiled for one architecture string runs on
    /// every device with the same string (`sm_90`, `gfx942`, `host-v1`).
    pub arch: String,
    /// Total device memory in bytes.
    pub total_memory: u64,
    /// The driver or runtime version as the vendor reports it.
    pub driver_version: String,
}

/// A device address. On a GPU it is the virtual address the driver handed out; on the host backend it
/// is an opaque number in a simulated address space. It is never a host pointer.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct DevicePtr(pub u64);

impl DevicePtr {
    /// The null device address.
    pub const NULL: DevicePtr = DevicePtr(0);

    /// The address `bytes` further on, or `None` on overflow.
    pub fn checked_add(self, bytes: u64) -> Option<DevicePtr> {
        self.0.checked_add(bytes).map(DevicePtr)
    }
}

impl fmt::Debug for DevicePtr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

impl fmt::Display for DevicePtr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// A range of device memory: an address and a length. It is `Copy` and carries no lifetime, exactly
/// like the pointers a graph bakes in; a slice can outlive the buffer it came from, which is the hazard
/// the host backend exists to show. Slices made from a buffer are bounds-checked at creation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DeviceSlice {
    ptr: DevicePtr,
    len: usize,
}

impl DeviceSlice {
    /// A slice from a raw address and length. Nothing is checked: the host backend will report an
    /// invalid address when the slice is used, a GPU may fault or corrupt its own memory.
    pub const fn from_raw(ptr: DevicePtr, len: usize) -> DeviceSlice {
        DeviceSlice { ptr, len }
    }

    /// The first address.
    pub const fn ptr(&self) -> DevicePtr {
        self.ptr
    }

    /// The length in bytes.
    pub const fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-length slice.
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The sub-range `offset..offset + len`, checked against this slice.
    pub fn sub(&self, offset: usize, len: usize) -> Result<DeviceSlice> {
        let fits = offset.checked_add(len).is_some_and(|end| end <= self.len);
        if !fits {
            return Err(Error::OutOfBounds {
                op: "device slice",
                offset: offset as u64,
                len: len as u64,
                capacity: self.len as u64,
            });
        }
        Ok(DeviceSlice { ptr: DevicePtr(self.ptr.0 + offset as u64), len })
    }
}

/// The kind of one kernel parameter. Pointers are a kind of their own so the graph layer knows which
/// parameters are device addresses (the ones that drift).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ParamKind {
    /// A device address.
    Ptr,
    /// `uint32_t`.
    U32,
    /// `int32_t`.
    I32,
    /// `uint64_t`.
    U64,
    /// `int64_t`.
    I64,
    /// `float`.
    F32,
    /// `double`.
    F64,
}

impl ParamKind {
    /// Size in bytes of the parameter as the kernel receives it.
    pub const fn size(self) -> usize {
        match self {
            ParamKind::U32 | ParamKind::I32 | ParamKind::F32 => 4,
            ParamKind::Ptr | ParamKind::U64 | ParamKind::I64 | ParamKind::F64 => 8,
        }
    }

    /// The name used in code-object metadata.
    pub const fn name(self) -> &'static str {
        match self {
            ParamKind::Ptr => "ptr",
            ParamKind::U32 => "u32",
            ParamKind::I32 => "i32",
            ParamKind::U64 => "u64",
            ParamKind::I64 => "i64",
            ParamKind::F32 => "f32",
            ParamKind::F64 => "f64",
        }
    }

    /// Parses [`ParamKind::name`].
    pub fn parse(s: &str) -> Option<ParamKind> {
        Some(match s {
            "ptr" => ParamKind::Ptr,
            "u32" => ParamKind::U32,
            "i32" => ParamKind::I32,
            "u64" => ParamKind::U64,
            "i64" => ParamKind::I64,
            "f32" => ParamKind::F32,
            "f64" => ParamKind::F64,
            _ => return None,
        })
    }
}

/// One kernel argument, typed. Device addresses are explicit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KernelArg {
    /// A device address.
    Ptr(DevicePtr),
    /// `uint32_t`.
    U32(u32),
    /// `int32_t`.
    I32(i32),
    /// `uint64_t`.
    U64(u64),
    /// `int64_t`.
    I64(i64),
    /// `float`.
    F32(f32),
    /// `double`.
    F64(f64),
}

impl KernelArg {
    /// The kind of this argument.
    pub const fn kind(&self) -> ParamKind {
        match self {
            KernelArg::Ptr(_) => ParamKind::Ptr,
            KernelArg::U32(_) => ParamKind::U32,
            KernelArg::I32(_) => ParamKind::I32,
            KernelArg::U64(_) => ParamKind::U64,
            KernelArg::I64(_) => ParamKind::I64,
            KernelArg::F32(_) => ParamKind::F32,
            KernelArg::F64(_) => ParamKind::F64,
        }
    }

    /// The device address, if this is a pointer argument.
    pub const fn as_ptr(&self) -> Option<DevicePtr> {
        match self {
            KernelArg::Ptr(p) => Some(*p),
            _ => None,
        }
    }

    /// The little-endian bytes the kernel receives (pointers as 64-bit addresses).
    pub fn to_bytes(&self) -> [u8; 8] {
        let mut out = [0u8; 8];
        match *self {
            KernelArg::Ptr(p) => out.copy_from_slice(&p.0.to_le_bytes()),
            KernelArg::U32(v) => out[..4].copy_from_slice(&v.to_le_bytes()),
            KernelArg::I32(v) => out[..4].copy_from_slice(&v.to_le_bytes()),
            KernelArg::U64(v) => out.copy_from_slice(&v.to_le_bytes()),
            KernelArg::I64(v) => out.copy_from_slice(&v.to_le_bytes()),
            KernelArg::F32(v) => out[..4].copy_from_slice(&v.to_le_bytes()),
            KernelArg::F64(v) => out.copy_from_slice(&v.to_le_bytes()),
        }
        out
    }
}

/// A kernel's name and parameter kinds, carried by code objects so every backend can check launches.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KernelSignature {
    /// The kernel's (unmangled, `extern "C"`) name.
    pub name: String,
    /// Its parameters in order.
    pub params: Vec<ParamKind>,
}

impl KernelSignature {
    /// A signature from a name and parameter kinds.
    pub fn new(name: impl Into<String>, params: &[ParamKind]) -> KernelSignature {
        KernelSignature { name: name.into(), params: params.to_vec() }
    }

    /// Checks that `args` match this signature in number and kind. Every backend calls this before it
    /// touches the vendor API, so a wrong launch is a typed error everywhere.
    pub fn check_args(&self, args: &[KernelArg]) -> Result<()> {
        if args.len() != self.params.len() {
            return Err(Error::ArgumentCount {
                kernel: self.name.clone(),
                expected: self.params.len(),
                got: args.len(),
            });
        }
        for (index, (param, arg)) in self.params.iter().zip(args).enumerate() {
            if *param != arg.kind() {
                return Err(Error::ArgumentKind {
                    kernel: self.name.clone(),
                    index,
                    expected: *param,
                    got: arg.kind(),
                });
            }
        }
        Ok(())
    }
}

/// Three dimensions of a grid or block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Dim3 {
    /// x extent.
    pub x: u32,
    /// y extent.
    pub y: u32,
    /// z extent.
    pub z: u32,
}

impl Dim3 {
    /// A one-dimensional extent.
    pub const fn x(x: u32) -> Dim3 {
        Dim3 { x, y: 1, z: 1 }
    }

    /// The product of the three extents.
    pub const fn volume(&self) -> u64 {
        self.x as u64 * self.y as u64 * self.z as u64
    }
}

/// How a kernel is launched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LaunchConfig {
    /// Blocks in the grid.
    pub grid: Dim3,
    /// Threads in a block.
    pub block: Dim3,
    /// Dynamic shared memory per block, in bytes.
    pub shared_mem_bytes: u32,
    /// The kernel waits for the work before it on the stream (`griddepcontrol.wait`, CUDA's
    /// `cudaGridDependencySynchronize`) before it reads or writes any memory that work touches. Where
    /// the device takes it (CUDA, compute capability 9.0 and up), the launch may then start while
    /// the kernel before it finishes: programmatic dependent launch, in streams and captured graphs
    /// alike, which hides most of the gap between two short kernels. Elsewhere it is ignored, and so
    /// is the kernel's wait. Setting it for a kernel that does not wait is a data race.
    pub programmatic: bool,
}

impl LaunchConfig {
    /// Enough blocks of `block` threads to cover `n` elements, one thread each.
    pub fn for_elements(n: u64, block: u32) -> LaunchConfig {
        let blocks = n.div_ceil(block.max(1) as u64).clamp(1, u32::MAX as u64) as u32;
        LaunchConfig { grid: Dim3::x(blocks), block: Dim3::x(block), shared_mem_bytes: 0, programmatic: false }
    }

    /// Checks the limits common to CUDA and HIP (non-zero extents, at most 1024 threads a block).
    /// Backends check device-specific limits on top.
    pub fn check(&self, kernel: &str) -> Result<()> {
        let reason = if self.grid.volume() == 0 {
            Some("grid has a zero extent".to_string())
        } else if self.block.volume() == 0 {
            Some("block has a zero extent".to_string())
        } else if self.block.volume() > 1024 {
            Some(format!("{} threads per block exceeds the limit of 1024", self.block.volume()))
        } else {
            None
        };
        match reason {
            Some(reason) => Err(Error::InvalidLaunchConfig { kernel: kernel.to_string(), reason }),
            None => Ok(()),
        }
    }
}

/// Which calls from other threads a stream capture forbids (CUDA's `cudaStreamCaptureMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CaptureMode {
    /// Unsafe calls from any thread fail while this capture is active.
    Global,
    /// Unsafe calls from the capturing thread fail; other threads are unaffected. saggar's default,
    /// because a dispatcher serving several requests captures on one thread while others run.
    #[default]
    ThreadLocal,
    /// Nothing is forbidden; the caller promises not to make unsafe calls.
    Relaxed,
}

impl CaptureMode {
    /// The mode's name as used in error messages.
    pub const fn name(self) -> &'static str {
        match self {
            CaptureMode::Global => "global capture mode",
            CaptureMode::ThreadLocal => "thread-local capture mode",
            CaptureMode::Relaxed => "relaxed capture mode",
        }
    }
}

/// Free and total device memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryInfo {
    /// Bytes free.
    pub free: u64,
    /// Bytes in total.
    pub total: u64,
}
