"""torch.matmul on cuBLAS against cuBLASLt (`torch.backends.cuda.preferred_blas_library`), strict
f32 (TF32 off), at BERT-base's GEMM shapes at 128 rows (batch 1) and 8192 rows (batch 64) and the
BERT test model's at 8192 rows: NN (`x @ w`, w row-major [k, n]), TN (`x @ w.t()`) and
`F.linear` with a bias, each captured as 20 calls in one CUDA graph and replayed five times; prints
the median microseconds per call. It shows what each library's own heuristic picks at these shapes
(saggar's BLAS path is cuBLASLt). Usage: python3 torch_blas_libraries.py"""
import torch

from torch_gemm import median_us

torch.backends.cuda.matmul.allow_tf32 = False

# (rows, inner, columns) of x [rows, inner] @ w [inner, columns].
SHAPES = [(128, 768, 768), (128, 768, 3072), (128, 3072, 768), (8192, 768, 768), (8192, 768, 3072),
          (8192, 3072, 768), (8192, 64, 64), (8192, 64, 256), (8192, 256, 64)]


def main():
    for lib in ["cublas", "cublaslt"]:
        torch.backends.cuda.preferred_blas_library(lib)
        for m, k, n in SHAPES:
            x = torch.randn(m, k, device="cuda")
            w = torch.randn(k, n, device="cuda")
            wt = w.t().contiguous()
            bias = torch.randn(n, device="cuda")
            nn_ = median_us(lambda: torch.matmul(x, w))
            tn = median_us(lambda: torch.matmul(x, wt.t()))
            lin = median_us(lambda: torch.nn.functional.linear(x, wt, bias))
            print(f"{lib} {m}x{n}x{k}: NN {nn_:.2f} us, TN {tn:.2f} us, linear+bias {lin:.2f} us", flush=True)


if __name__ == "__main__":
    main()
