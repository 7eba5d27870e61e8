//! hipBLASLt as the shared GPU layer's BLAS-Lt library: its file names and numbering (from
//! `hipblaslt.h` and hipblas-common's `hipblas-common.h`; HIP's own operation numbers, not the CUDA ones
//! a `USE_CUDA_NAMES` build uses).

use crate::gpu::LtSpec;

/// hipBLASLt.
pub(crate) static HIPBLASLT: LtSpec = LtSpec {
    library: "hipBLASLt",
    candidates: &["libhipblaslt.so.1", "libhipblaslt.so.0", "libhipblaslt.so", "/opt/rocm/lib/libhipblaslt.so.1"],
    hint: "install ROCm's hipBLASLt (the `hipblaslt` package; libhipblaslt.so.1 under /opt/rocm/lib on the \
           library path), or set SAGGAR_BLASLT_LIBRARY to its path",
    prefix: "hipblasLt",
    // HIPBLAS_OP_N, HIPBLAS_OP_T.
    op: [111, 112],
    // HIPBLAS_COMPUTE_32F, HIPBLAS_COMPUTE_32F_FAST_TF32, HIPBLAS_COMPUTE_32I.
    compute: [2, 6, 9],
    // HIP_R_32F, HIP_R_16F, HIP_R_16BF, HIP_R_8I, HIP_R_32I (hip/library_types.h: the CUDA numbers).
    data_types: [0, 2, 14, 3, 10],
    // HIPBLASLT_MATMUL_DESC_TRANSA, _TRANSB, _EPILOGUE, _BIAS_POINTER, _BIAS_DATA_TYPE.
    desc_attrs: [0, 1, 2, 3, 4],
    // HIPBLASLT_MATRIX_LAYOUT_BATCH_COUNT, _STRIDED_BATCH_OFFSET.
    layout_attrs: [0, 1],
    // HIPBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES.
    pref_max_workspace: 1,
    // hipBLASLt has no alignment preferences.
    pref_min_alignment: None,
    heuristic_result_bytes: 56,
    // hipblasLtMatmulAlgo_t: uint8_t data[16], size_t max_workspace_bytes.
    algo_bytes: 24,
    statuses: &[
        (1, "HIPBLAS_STATUS_NOT_INITIALIZED"),
        (2, "HIPBLAS_STATUS_ALLOC_FAILED"),
        (3, "HIPBLAS_STATUS_INVALID_VALUE"),
        (4, "HIPBLAS_STATUS_MAPPING_ERROR"),
        (5, "HIPBLAS_STATUS_EXECUTION_FAILED"),
        (6, "HIPBLAS_STATUS_INTERNAL_ERROR"),
        (7, "HIPBLAS_STATUS_NOT_SUPPORTED"),
        (8, "HIPBLAS_STATUS_ARCH_MISMATCH"),
        (9, "HIPBLAS_STATUS_HANDLE_IS_NULLPTR"),
        (10, "HIPBLAS_STATUS_INVALID_ENUM"),
        (11, "HIPBLAS_STATUS_UNKNOWN"),
    ],
};
