"""torch.matmul (cuBLAS, strict f32: TF32 off) at the GEMM shapes of BERT-base and of the BERT test
model's encoder layer, each captured as 20 calls in one CUDA graph and replayed five times; prints
the median microseconds per call. The peer for saggar's BLAS-Lt steps (`saggar perf --dump-profile`
lists their times per step, `gpu_gemm` times them alone). Usage: python3 torch_gemm.py"""
import torch

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False

SHAPES = [
    ("bert-base q/k/v/output 128x768x768", (128, 768), (768, 768)),
    ("bert-base ffn up 128x3072x768", (128, 768), (768, 3072)),
    ("bert-base ffn down 128x768x3072", (128, 3072), (3072, 768)),
    ("bert-base scores 12x128x128x64", (12, 128, 64), (12, 64, 128)),
    ("bert-base context 12x128x64x128", (12, 128, 128), (12, 128, 64)),
    ("hidden-256 projection 128x256x256", (128, 256), (256, 256)),
    ("hidden-256 ffn up 128x1024x256", (128, 256), (256, 1024)),
    ("bert-base q/k/v/output, batch 64: 8192x768x768", (8192, 768), (768, 768)),
    ("bert-base ffn up, batch 64: 8192x3072x768", (8192, 768), (768, 3072)),
]


def median_us(fn, calls=20):
    """Median microseconds per call of `fn`: `calls` calls captured in one CUDA graph, replayed five
    times (after three eager calls to warm the library up)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(calls):
                fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(5):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1000 / calls)
    times.sort()
    return times[2]


def main():
    for name, sa, sb in SHAPES:
        a = torch.randn(*sa, device="cuda")
        b = torch.randn(*sb, device="cuda")
        print(f"torch graph {name}: {median_us(lambda: torch.matmul(a, b)):.2f} us per matmul")


if __name__ == "__main__":
    main()
