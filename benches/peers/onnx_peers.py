#!/usr/bin/env python3
"""PyTorch peers of `saggar perf --onnx`: the module each ONNX file was exported from, same weights, inputs, trace.

The module comes from crates/saggar-onnx/models/export.py (`build(name, seed)`, deterministic weights), so
it is the very module the ONNX file was exported from. The inputs and the batch sequence are saggar's own:
`saggar perf --export-outputs DIR` writes DIR/batch_B/input_K.pb and output_K.pb for each distinct batch, and
`--export-times FILE` lists every timed request's batch in order. Variants (`--variants`):

  eager            inputs copied per tensor (non_blocking from pinned memory), the module, outputs copied
                   back to pinned memory, stream synchronized: the contract of `saggar perf --binding pinned`
  graphs           the expert variant: one CUDA graph per power-of-two bucket, ONE packed host-to-device
                   copy (every input of the request in one pinned buffer whose device twin holds the
                   graph's static inputs), replay, ONE copy of the packed outputs back
  compile-max      torch.compile(mode="max-autotune"), in a child process with a time limit, batch 1 only
  compile-ro       torch.compile(mode="reduce-overhead"), in a child process, const traces only
  compile-default  torch.compile() (default mode), in a child process, const traces only
  ort              ONNX Runtime (CPU) on the same inputs: an independent correctness check, not timed

Every variant's outputs are compared with saggar's (output_K.pb) for each distinct batch. Without CUDA
(or without torch) the GPU variants are reported `skipped: <reason>` and ORT still runs.
"""
import argparse
import importlib.util
import json
import math
import os
import subprocess
import sys
import threading
import time


def load_export(models_dir):
    spec = importlib.util.spec_from_file_location("saggar_export", os.path.join(models_dir, "export.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def read_sets(outputs_dir):
    """{batch: (inputs [np arrays], outputs [np arrays], input names)} from `saggar perf --export-outputs`."""
    import onnx
    from onnx import numpy_helper

    sets = {}
    for entry in sorted(os.listdir(outputs_dir)):
        if not entry.startswith("batch_"):
            continue
        folder = os.path.join(outputs_dir, entry)
        def tensors(prefix):
            out, k = [], 0
            while os.path.isfile(os.path.join(folder, f"{prefix}_{k}.pb")):
                t = onnx.TensorProto()
                with open(os.path.join(folder, f"{prefix}_{k}.pb"), "rb") as f:
                    t.ParseFromString(f.read())
                out.append((t.name, numpy_helper.to_array(t)))
                k += 1
            return out
        ins, outs = tensors("input"), tensors("output")
        sets[int(entry[len("batch_"):])] = ([a for _, a in ins], [a for _, a in outs], [n for n, _ in ins])
    return sets


def read_trace(times_file):
    with open(times_file) as f:
        return [json.loads(line)["batch"] for line in f if line.strip()]


def percentile(sorted_ns, q):
    n = len(sorted_ns)
    return sorted_ns[min(max(math.ceil(q * n), 1), n) - 1] / 1000.0


def summarize(ns, wall, trace):
    ns = sorted(ns)
    mean = sum(ns) / len(ns)
    return {"status": "ok", "requests": len(ns), "p50_us": percentile(ns, 0.5), "p90_us": percentile(ns, 0.9),
            "p95_us": percentile(ns, 0.95), "p99_us": percentile(ns, 0.99), "min_us": ns[0] / 1000.0,
            "max_us": ns[-1] / 1000.0, "mean_us": mean / 1000.0,
            "stddev_us": math.sqrt(sum((x - mean) ** 2 for x in ns) / len(ns)) / 1000.0,
            "throughput_rps": len(ns) / wall, "rows_per_s": sum(trace) / wall, "wall_s": wall}


def max_diff(got, want):
    import numpy as np

    worst = 0.0
    for g, w in zip(got, want):
        g, w = np.asarray(g, dtype=np.float64), np.asarray(w, dtype=np.float64)
        if g.shape != w.shape:
            return float("inf")
        if g.size:
            worst = max(worst, float(np.max(np.abs(g - w))))
    return worst


def timed(run, ctxs, trace, concurrency, warmup=3):
    """Runs `run(ctx, batch)` over the trace on `concurrency` threads; (latencies ns, wall s)."""
    import torch

    with torch.inference_mode():
        for ctx in ctxs:
            with torch.cuda.stream(ctx["stream"]):
                for b in sorted(set(trace)):
                    for _ in range(warmup):
                        run(ctx, b)
    torch.cuda.synchronize()
    counter, lock, lat, errors = [0], threading.Lock(), [[] for _ in ctxs], []

    def worker(t):
        try:
            with torch.inference_mode(), torch.cuda.stream(ctxs[t]["stream"]):
                while True:
                    with lock:
                        i = counter[0]
                        counter[0] += 1
                    if i >= len(trace):
                        return
                    t0 = time.perf_counter_ns()
                    run(ctxs[t], trace[i])
                    lat[t].append(time.perf_counter_ns() - t0)
        except BaseException as e:  # noqa: BLE001 - reported
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(concurrency)]
    start = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.perf_counter() - start
    if errors:
        raise errors[0]
    return [x for l in lat for x in l], wall


class Eager:
    def __init__(self, module, sets, device):
        import torch

        self.module, self.device = module, device
        self.host = {b: [torch.from_numpy(a).pin_memory() for a in ins] for b, (ins, _, _) in sets.items()}
        with torch.inference_mode():
            probe = {b: self._forward(self.host[b]) for b in sets}
        self.out_host = {b: [torch.empty(o.shape, dtype=o.dtype).pin_memory() for o in outs] for b, outs in probe.items()}

    def _forward(self, xs):
        out = self.module(*[x.to(self.device, non_blocking=True) for x in xs])
        return [out] if not isinstance(out, (tuple, list)) else list(out)

    def ctx(self):
        import torch

        return {"stream": torch.cuda.Stream()}

    def run(self, ctx, b):
        outs = self._forward(self.host[b])
        for o, h in zip(outs, self.out_host[b]):
            h.copy_(o, non_blocking=True)
        ctx["stream"].synchronize()
        return self.out_host[b]


class PackedGraphs:
    """One CUDA graph per pow2 bucket on static inputs that are views of ONE device buffer, fed by ONE copy from
    ONE pinned buffer per context; padding rows repeat the last real row (written on the host); the outputs are
    copied inside the graph into one packed device buffer, brought back with ONE copy."""

    def __init__(self, module, sets, max_batch):
        self.module, self.sets = module, sets
        self.buckets = [1 << k for k in range(max_batch.bit_length()) if (1 << k) <= max_batch]
        self.sample = next(iter(sets.values()))[0]

    def bucket(self, b):
        return next(k for k in self.buckets if k >= b)

    def ctx(self):
        import torch

        stream = torch.cuda.Stream()
        used = sorted({self.bucket(b) for b in self.sets})
        entries = {}
        for k in used:
            shapes = [(k,) + a.shape[1:] for a in self.sample]
            dtypes = [torch.from_numpy(a[:1]).dtype for a in self.sample]
            sizes = [int(math.prod(s)) * torch.empty((), dtype=d).element_size() for s, d in zip(shapes, dtypes)]
            offsets, total = [], 0
            for n in sizes:  # each input 256-byte aligned, so every dtype view of the bytes is legal
                offsets.append(total)
                total += (n + 255) // 256 * 256
            host = torch.empty(total, dtype=torch.uint8).pin_memory()
            dev = torch.zeros(total, dtype=torch.uint8, device="cuda")
            views = lambda buf: [buf[o:o + n].view(d).view(s) for o, n, d, s in zip(offsets, sizes, dtypes, shapes)]
            d_in, h_in = views(dev), views(host)
            for h, a in zip(h_in, self.sample):  # valid inputs (indices in range) before the capture
                h.copy_(torch.from_numpy(a[:1]).expand(h.shape))
            dev.copy_(host)
            with torch.inference_mode(), torch.cuda.stream(stream):
                for _ in range(2):
                    out = self.module(*d_in)
                torch.cuda.synchronize()
                outs = [out] if not isinstance(out, (tuple, list)) else list(out)
                out_sizes = [o.numel() * o.element_size() for o in outs]
                out_offsets, out_total = [], 0
                for n in out_sizes:  # 256-byte aligned, as the inputs
                    out_offsets.append(out_total)
                    out_total += (n + 255) // 256 * 256
                out_dev = torch.empty(out_total, dtype=torch.uint8, device="cuda")
                out_host = torch.empty(out_total, dtype=torch.uint8).pin_memory()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, stream=stream):
                    out = self.module(*d_in)
                    outs = [out] if not isinstance(out, (tuple, list)) else list(out)
                    for o, off, n in zip(outs, out_offsets, out_sizes):
                        out_dev[off:off + n].view(o.dtype).view(o.shape).copy_(o)
            o_views = [out_host[off:off + n].view(o.dtype).view(o.shape) for o, off, n in zip(outs, out_offsets, out_sizes)]
            entries[k] = {"graph": graph, "host": host, "dev": dev, "h_in": h_in, "out_dev": out_dev,
                          "out_host": out_host, "o_views": o_views}
        torch.cuda.synchronize()
        return {"stream": stream, "entries": entries,
                "inputs": {b: [torch.from_numpy(a) for a in ins] for b, (ins, _, _) in self.sets.items()}}

    def run(self, ctx, b):
        e = ctx["entries"][self.bucket(b)]
        for h, x in zip(e["h_in"], ctx["inputs"][b]):
            h[:b].copy_(x)
            if h.shape[0] > b:
                h[b:].copy_(x[b - 1:b].expand((h.shape[0] - b,) + tuple(x.shape[1:])))
        e["dev"].copy_(e["host"], non_blocking=True)
        e["graph"].replay()
        e["out_host"].copy_(e["out_dev"], non_blocking=True)
        ctx["stream"].synchronize()
        return [v[:b] for v in e["o_views"]]


def compile_child(args):
    """Child process: torch.compile in one mode, the const batch `args.compile_batch`; prints one JSON line."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    export = load_export(args.models)
    module = export.build(args.model, args.seed)[0].cuda().eval()
    sets = read_sets(args.saggar_outputs)
    b = args.compile_batch
    ins, want, _ = sets[b]
    mode = {"compile-max": "max-autotune", "compile-ro": "reduce-overhead", "compile-default": None}[args.child]
    fn = torch.compile(module, mode=mode) if mode else torch.compile(module)
    host = [torch.from_numpy(a).pin_memory() for a in ins]
    with torch.inference_mode():
        t0 = time.perf_counter()
        out = fn(*[x.cuda() for x in host])
        torch.cuda.synchronize()
        compile_s = time.perf_counter() - t0

        def run(ctx, _b):
            torch.compiler.cudagraph_mark_step_begin()
            o = fn(*[x.to("cuda", non_blocking=True) for x in host])
            o = [o] if not isinstance(o, (tuple, list)) else list(o)
            res = [t.to("cpu", non_blocking=True) for t in o]
            ctx["stream"].synchronize()
            return res

        ctx = {"stream": torch.cuda.Stream()}
        with torch.cuda.stream(ctx["stream"]):
            outs = run(ctx, b)
        ns, wall = timed(run, [ctx], [b] * args.requests, 1)
    row = summarize(ns, wall, [b] * args.requests)
    row.update(compile_s=compile_s, max_abs_diff_vs_saggar=max_diff([o.numpy() for o in outs], want))
    print("RESULT " + json.dumps(row))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", required=True, help="folder with export.py (crates/saggar-onnx/models)")
    p.add_argument("--model", required=True, choices=["bert", "dlrm", "mlp", "cnn", "bert-base"])
    p.add_argument("--onnx", help="the ONNX file, for ONNX Runtime [default: MODELS/MODEL/model.onnx]")
    p.add_argument("--saggar-outputs", required=True, help="saggar perf --export-outputs DIR")
    p.add_argument("--saggar-times", required=True, help="saggar perf --export-times FILE (the batch sequence)")
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--max-batch", type=int, default=64)
    p.add_argument("--seed", type=int, default=0, help="export.py's weight seed (the ONNX files use 0)")
    p.add_argument("--variants", default="eager,graphs,compile-max,compile-ro,ort")
    p.add_argument("--compile-timeout", type=float, default=150.0)
    p.add_argument("--compile-requests", type=int, default=200)
    p.add_argument("--label", default="", help="the trace label of the saggar run")
    p.add_argument("--json", required=True)
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--compile-batch", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--requests", type=int, default=200, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return compile_child(args)

    trace = read_trace(args.saggar_times)
    sets = read_sets(args.saggar_outputs)
    missing = sorted(set(trace) - set(sets))
    if missing:
        sys.exit(f"onnx_peers: no exported inputs for batches {missing[:5]} in {args.saggar_outputs}")
    result = {"model": args.model, "trace": args.label, "concurrency": args.concurrency, "requests": len(trace),
              "variants": {}}
    variants = [v for v in args.variants.split(",") if v]

    def skip_all(reason):
        for v in variants:
            if v != "ort":
                result["variants"][v] = {"status": f"skipped: {reason}"}

    try:
        import torch
        has_cuda = torch.cuda.is_available()
    except ImportError:
        torch, has_cuda = None, False
    if torch is None:
        skip_all("python3 cannot import torch")
    elif not has_cuda:
        skip_all("no CUDA device (torch.cuda.is_available() is False)")
    else:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        export = load_export(args.models)
        module = export.build(args.model, args.seed)[0].cuda().eval()
        for name in ("eager", "graphs"):
            if name not in variants:
                continue
            try:
                with torch.inference_mode():
                    v = Eager(module, sets, "cuda") if name == "eager" else PackedGraphs(module, sets, args.max_batch)
                    t0 = time.perf_counter()
                    ctxs = [v.ctx() for _ in range(args.concurrency)]
                    setup_s = time.perf_counter() - t0
                    with torch.cuda.stream(ctxs[0]["stream"]):
                        diffs = {b: max_diff([o.numpy() for o in v.run(ctxs[0], b)], sets[b][1]) for b in sorted(sets)}
                ns, wall = timed(v.run, ctxs, trace, args.concurrency)
                row = summarize(ns, wall, trace)
                row.update(setup_s=setup_s, max_abs_diff_vs_saggar=max(diffs.values()))
                result["variants"][name] = row
            except Exception as e:  # noqa: BLE001 - reported as the variant's status
                result["variants"][name] = {"status": f"failed: {type(e).__name__}: {str(e)[:300]}"}
            print(name, json.dumps(result["variants"][name]), flush=True)
        const = len(set(trace)) == 1
        for name in ("compile-max", "compile-ro", "compile-default"):
            if name not in variants:
                continue
            if name == "compile-max" and trace[0] != 1 or not const:
                result["variants"][name] = {"status": "skipped: torch.compile runs on const traces only "
                                            + ("(max-autotune at batch 1 only)" if name == "compile-max" else "")}
                continue
            cmd = [sys.executable, os.path.abspath(__file__), "--child", name, "--models", args.models, "--model",
                   args.model, "--saggar-outputs", args.saggar_outputs, "--saggar-times", args.saggar_times,
                   "--compile-batch", str(trace[0]), "--requests", str(args.compile_requests), "--seed",
                   str(args.seed), "--json", "-"]
            try:
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.compile_timeout)
                line = [l for l in done.stdout.splitlines() if l.startswith("RESULT ")]
                if line:
                    result["variants"][name] = json.loads(line[-1][len("RESULT "):])
                else:
                    tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
                    result["variants"][name] = {"status": f"failed: exit {done.returncode}: {tail[:300]}"}
            except subprocess.TimeoutExpired:
                result["variants"][name] = {"status": f"failed: over --compile-timeout {args.compile_timeout:.0f} s",
                                            "compile_s_at_least": args.compile_timeout}
            print(name, json.dumps(result["variants"][name]), flush=True)

    if "ort" in variants:
        try:
            import onnxruntime as ort

            path = args.onnx or os.path.join(args.models, args.model, "model.onnx")
            sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
            diffs = {}
            for b, (ins, want, names) in sorted(sets.items()):
                got = sess.run(None, dict(zip(names, ins)))
                diffs[b] = max_diff(got, want)
            result["variants"]["ort"] = {"status": "ok", "max_abs_diff_vs_saggar": max(diffs.values()),
                                         "per_batch": {str(b): d for b, d in diffs.items()}}
        except Exception as e:  # noqa: BLE001
            result["variants"]["ort"] = {"status": f"failed: {type(e).__name__}: {str(e)[:300]}"}
        print("ort", json.dumps(result["variants"]["ort"]), flush=True)
    with open(args.json, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
