//! cuBLASLt as the shared GPU layer's BLAS-Lt library: its file names and numbering (from
//! `cublasLt.h` and `cublas_api.h`, as cudarc 0.19's `cublaslt::sys` spells them).

use crate::gpu::LtSpec;

/// cuBLASLt.
pub(crate) static CUBLASLT: LtSpec = LtSpec {
    library: "cuBLASLt",
    candidates: &[
        "libcublasLt.so.13",
        "libcublasLt.so.12",
        "libcublasLt.so.11",
        "libcublasLt.so",
        // The CUDA toolkit's default prefix, for machines whose loader path does not name it.
        "/usr/local/cuda/lib64/libcublasLt.so.13",
        "/usr/local/cuda/lib64/libcublasLt.so.12",
        "cublasLt64_13.dll",
        "cublasLt64_12.dll",
    ],
    hint: "install cuBLAS from the CUDA toolkit (libcublasLt.so.12 or .13: the `libcublas-12-x` package, or \
           the `nvidia-cublas` wheel's lib directory on LD_LIBRARY_PATH), or set SAGGAR_BLASLT_LIBRARY to its path",
    prefix: "cublasLt",
    // CUBLAS_OP_N, CUBLAS_OP_T.
    op: [0, 1],
    // CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_COMPUTE_32I.
    compute: [68, 77, 72],
    // CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF, CUDA_R_8I, CUDA_R_32I (library_types.h).
    data_types: [0, 2, 14, 3, 10],
    // CUBLASLT_MATMUL_DESC_TRANSA, _TRANSB, _EPILOGUE, _BIAS_POINTER, _BIAS_DATA_TYPE.
    desc_attrs: [3, 4, 7, 8, 26],
    // CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, _STRIDED_BATCH_OFFSET.
    layout_attrs: [5, 6],
    // CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES.
    pref_max_workspace: 1,
    // CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES .. _D_BYTES.
    pref_min_alignment: Some([5, 6, 7, 8]),
    heuristic_result_bytes: 96,
    // cublasLtMatmulAlgo_t: uint64_t data[8].
    algo_bytes: 64,
    statuses: &[
        (1, "CUBLAS_STATUS_NOT_INITIALIZED"),
        (3, "CUBLAS_STATUS_ALLOC_FAILED"),
        (7, "CUBLAS_STATUS_INVALID_VALUE"),
        (8, "CUBLAS_STATUS_ARCH_MISMATCH"),
        (11, "CUBLAS_STATUS_MAPPING_ERROR"),
        (13, "CUBLAS_STATUS_EXECUTION_FAILED"),
        (14, "CUBLAS_STATUS_INTERNAL_ERROR"),
        (15, "CUBLAS_STATUS_NOT_SUPPORTED"),
        (16, "CUBLAS_STATUS_LICENSE_ERROR"),
    ],
};
