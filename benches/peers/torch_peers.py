#!/usr/bin/env python3
"""PyTorch peers of saggar's reference models: the same model, weights and batch-size traces, run four ways.

Usage (the data folder comes from saggar's `export_peer_data` example, see README.md beside this file):

    python3 torch_peers.py --data DIR --trace const:1 --requests 2000 --concurrency 1 --json OUT.json
    python3 torch_peers.py --data DIR --trace const:1,uniform:1..64,zipf:1.1:64 --requests 2000,1000,1000 \
        --concurrency 1,8 --json OUT.json

What it loads from DIR: `config.json` (the saggar model config), `weights.safetensors` (`emb.{j}.weight`
[rows, dim]; `mlp.{l}.weight` [in, out], the TRANSPOSE of nn.Linear.weight; `mlp.{l}.bias`),
`inputs.safetensors` (saggar's `generate_inputs` for --max-batch rows and --seed: the exact data `saggar perf`
feeds; a request of b rows uses the first b rows) and `verify.safetensors` (inputs and saggar's CPU
`reference_forward` outputs for batches 1 and 8).

The model (class PeerModel): recsys = dense inputs concatenated, then for each sparse input an embedding-bag
SUM over its table, then Linear layers with ReLU after every hidden layer; outputs `score` (and `features`
with two_outputs). saggar skips out-of-range indices; here every table has one extra all-zero row used as
`padding_idx`, and indices outside [0, rows) are mapped to it with one `torch.where`: EmbeddingBag excludes
padding_idx entries from the sum, so the results are identical (the same rows summed in the same order).
`--embedding per-table` (default) uses one nn.EmbeddingBag per table, as a user writes it;
`--embedding fused` uses one F.embedding_bag over all tables concatenated (TorchRec style). FP32 matmuls are
pinned to IEEE FP32 (no TF32), as saggar computes in FP32.

Variants (each request: host inputs in pinned memory in, host outputs in pinned memory out, the stream
synchronized before the clock stops; the same contract as `saggar perf --binding pinned`):
  a  eager: every input copied on its own (`.to(device, non_blocking=True)` from pinned memory), the model,
     the outputs copied back.
  b  CUDA graphs per power-of-two bucket (1..--max-batch), static input buffers, one copy per input into the
     first b rows, replay, slice out (as vLLM does). Padding rows repeat the last real row: the graph gathers
     its rows through a row map (a device index vector [bucket] = min(r, b-1), updated only when b changes),
     so padding costs no extra copies per input.
  c  the expert variant: CUDA graphs per bucket, ALL inputs packed on the host (two torch.cat(out=...)
     calls) into ONE pinned buffer laid out [row map | sparse block | dense block], batch-major, ONE copy
     into one device buffer whose views are the static inputs, replay, ONE copy out. The embedding is
     always fused and reads the packed indices in place. Each bucket has two graphs on the same buffers:
     "exact" for a request that fills the bucket (no row gather at all: every const:1 request) and
     "padded" (row-map gather) for smaller ones. Two forms are measured, the H2D/D2H copies inside the
     graph ("inside": one launch per request, the whole bucket copied) or outside it ("outside": three
     launches, only the real rows copied); the reported c is the one with the lower p50, and both are in
     the JSON under "alternatives".
  d  torch.compile(mode="reduce-overhead") (Inductor + CUDA graph trees) on the same model as a/b, inputs
     copied as in a. Run in a child process bounded by --compile-timeout; failures are reported as
     "failed: <reason>". Only for const traces by default (--compile-traces): every new batch size means a
     recompile and another recorded graph, which explodes on uniform/Zipf traces.

Concurrency C: C Python threads, each with its own CUDA stream and its own static buffers, graphs and pinned
buffers, sharing the model weights, pulling requests from one shared counter (as `saggar perf --concurrency`).
The GIL serialises all Python-side work (copies issued, packing, replay calls): only the GPU work and the
C++ parts that release the GIL overlap, so concurrency helps PyTorch far less than it helps a native runtime.

Traces: const:B, uniform:A..B, zipf:S:MAX with the SAME sampler as `saggar perf` (SplitMix64 seeded with
seed ^ 0x7472_6163_655f_6b6c; uniform by multiply-shift; Zipf by inverse CDF over 1..MAX, P(b) ~ b^-S), so
for the same --seed and --requests the sequence of batch sizes is identical to saggar's; the JSON records the
total rows of each trace so a comparison can check it.

Per variant, trace and concurrency the JSON has: p50_us, p90_us, p99_us, max_us, mean_us, throughput_rps,
rows_per_s, wall_s, replay_gpu_us (CUDA events around ONE replay of the batch-1 graph; for a, around one eager
forward, launch gaps included; for d, around one call of the compiled function), max_abs_diff and
max_rel_diff (against saggar's CPU reference on the verification set: batches 1 and 8 and, through the first
rows of batch 8, batches 3 and 5, which exercise padding; saggar perf cannot dump its GPU outputs), and at
concurrency 1 phases_us (mean host time to issue the inputs, to launch the compute, and to copy out and
synchronize). `--device cpu` runs a, b and c without CUDA (graphs emulated) as a smoke test only.
"""
import argparse
import bisect
import datetime
import itertools
import json
import math
import os
import platform
import subprocess
import sys
import threading
import time

import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import load_file

MASK64 = (1 << 64) - 1
TRACE_SEED_XOR = 0x7472_6163_655F_6B6C
VARIANTS = {
    "a": "eager, per-input copies",
    "b": "graphs/bucket, per-input copies",
    "c": "graphs/bucket, one packed copy",
    "d": "torch.compile reduce-overhead",
}
GIL_NOTE = ("concurrency C = C Python threads, each with its own CUDA stream, static buffers and graphs, sharing "
            "the weights; the GIL serialises the Python-side work of all threads, only GPU work and GIL-free C++ "
            "overlap")


# ---------------------------------------------------------------------------------------------- traces
class SplitMix64:
    """saggar's trace generator (crates/saggar-cli/src/trace.rs), bit for bit."""

    def __init__(self, seed):
        self.state = seed & MASK64

    def next_u64(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def below(self, n):
        return (self.next_u64() * n) >> 64

    def unit(self):
        return (self.next_u64() >> 11) / float(1 << 53)


def parse_trace(spec):
    kind, _, rest = spec.partition(":")
    if kind == "const":
        return ("const", int(rest))
    if kind == "uniform":
        lo, _, hi = rest.partition("..")
        if int(lo) < 1 or int(lo) > int(hi):
            raise ValueError(f"trace {spec}: expected uniform:A..B with 1 <= A <= B")
        return ("uniform", int(lo), int(hi))
    if kind == "zipf":
        s, _, mx = rest.partition(":")
        if float(s) < 0 or int(mx) < 1:
            raise ValueError(f"trace {spec}: expected zipf:S:MAX with S >= 0, MAX >= 1")
        return ("zipf", float(s), int(mx))
    raise ValueError(f"trace {spec}: expected const:B, uniform:A..B or zipf:S:MAX")


def generate_trace(spec, requests, seed):
    """The batch sizes `saggar perf --trace spec --requests requests --seed seed` runs, in order."""
    parsed = parse_trace(spec)
    rng = SplitMix64(seed ^ TRACE_SEED_XOR)
    if parsed[0] == "const":
        return [parsed[1]] * requests
    if parsed[0] == "uniform":
        lo, hi = parsed[1], parsed[2]
        return [lo + rng.below(hi - lo + 1) for _ in range(requests)]
    s, mx = parsed[1], parsed[2]
    cdf, total = [], 0.0
    for b in range(1, mx + 1):
        total += float(b) ** (-s)
        cdf.append(total)
    cdf = [c / total for c in cdf]
    return [min(bisect.bisect_right(cdf, rng.unit()), mx - 1) + 1 for _ in range(requests)]


def percentile(sorted_ns, q):
    """Nearest rank, as saggar perf computes it."""
    n = len(sorted_ns)
    return sorted_ns[min(max(math.ceil(q * n), 1), n) - 1] / 1000.0


# ---------------------------------------------------------------------------------------------- data
class Data:
    def __init__(self, folder):
        self.folder = folder
        with open(os.path.join(folder, "config.json")) as f:
            self.config = json.load(f)
        self.weights = load_file(os.path.join(folder, "weights.safetensors"))
        with safe_open(os.path.join(folder, "inputs.safetensors"), "pt") as f:
            meta = f.metadata()
            self.input_names = meta["inputs"].split(",")
            self.output_names = meta["outputs"].split(",")
            self.seed = int(meta["seed"])
            self.inputs = [f.get_tensor(n) for n in self.input_names]
        self.rows = self.inputs[0].shape[0]
        with safe_open(os.path.join(folder, "verify.safetensors"), "pt") as f:
            self.verify = {}
            for b in (int(x) for x in f.metadata()["batches"].split(",")):
                self.verify[b] = ([f.get_tensor(f"input.{b}.{n}") for n in self.input_names],
                                  [f.get_tensor(f"output.{b}.{n}") for n in self.output_names])
        self.model = self.config["model"]

    def verify_sets(self):
        """(batch, inputs, expected outputs): the exported batches plus 3 and 5 from the first rows of 8."""
        sets = [(b, xs, ys) for b, (xs, ys) in sorted(self.verify.items())]
        big = max(self.verify)
        xs, ys = self.verify[big]
        for b in (3, 5):
            if b < big and b not in self.verify:
                sets.append((b, [x[:b] for x in xs], [y[:b] for y in ys]))
        return sorted(sets, key=lambda s: s[0])


# ---------------------------------------------------------------------------------------------- model
class PeerModel(torch.nn.Module):
    """saggar's recsys / mlp in PyTorch, from the exported config and weights."""

    def __init__(self, cfg, w, embedding):
        super().__init__()
        self.recsys = cfg["model"] == "recsys"
        self.embedding = embedding
        layers = sorted(int(k.split(".")[1]) for k in w if k.startswith("mlp.") and k.endswith(".weight"))
        self.linears = torch.nn.ModuleList()
        for l in layers:
            weight = w[f"mlp.{l}.weight"]  # [in, out]: y = x @ W + b, so nn.Linear.weight = W.T
            lin = torch.nn.Linear(weight.shape[0], weight.shape[1])
            with torch.no_grad():
                lin.weight.copy_(weight.t())
                lin.bias.copy_(w[f"mlp.{l}.bias"])
            self.linears.append(lin)
        self.two_outputs = bool(cfg.get("two_outputs", False)) and self.recsys
        if not self.recsys:
            return
        self.D = int(cfg.get("dense_inputs", 150))
        self.dw = int(cfg.get("dense_width", 8))
        self.S = int(cfg.get("sparse_inputs", 40))
        self.bag = int(cfg.get("bag_size", 4))
        self.rows = int(cfg.get("table_rows", 1000))
        self.dim = int(cfg.get("embedding_dim", 16))
        embs = [w[f"emb.{j}.weight"] for j in range(self.S)]
        if embedding == "per-table":
            self.tables = torch.nn.ModuleList()
            for e in embs:
                eb = torch.nn.EmbeddingBag(self.rows + 1, self.dim, mode="sum", padding_idx=self.rows)
                with torch.no_grad():
                    eb.weight[: self.rows].copy_(e)
                    eb.weight[self.rows].zero_()
                self.tables.append(eb)
        # The fused table (used by --embedding fused and always by variant c): every table back to back,
        # then one zero row, the padding index of out-of-range entries.
        self.pad = self.S * self.rows
        self.index_dtype = torch.int32 if self.pad < 2**31 - 1 else torch.int64
        big = torch.zeros(self.pad + 1, self.dim)
        if self.S:
            big[: self.pad] = torch.cat(embs, 0)
        self.register_buffer("big_table", big)
        self.register_buffer("table_base", (torch.arange(self.S, dtype=torch.int64) * self.rows)
                             .to(self.index_dtype).view(self.S, 1))

    def head(self, h):
        hidden = None
        last = len(self.linears) - 1
        for l, lin in enumerate(self.linears):
            h = lin(h)
            if l < last:
                h = torch.relu(h)
                hidden = h
        return (h, hidden) if self.two_outputs else (h,)

    def forward(self, xs, rowmap=None):
        """xs: the inputs in binding order; rowmap: optional row gather (bucket padding)."""
        if not self.recsys:
            x = xs[0]
            return self.head(x if rowmap is None else x.index_select(0, rowmap))
        D, S = self.D, self.S
        if self.embedding == "fused":
            dense = torch.cat(xs[:D], 1) if D else None
            idx = torch.cat(xs[D:], 1) if S else None  # [B, S*bag], batch-major as in the packed layout
            return self.forward_packed(dense, idx, rowmap)
        parts = []
        if D:
            dense = torch.cat(xs[:D], 1)
            parts.append(dense if rowmap is None else dense.index_select(0, rowmap))
        if S:
            idx = torch.stack(xs[D:], 0)  # [S, B, bag]
            if rowmap is not None:
                idx = idx.index_select(1, rowmap)
            idx = torch.where((idx >= 0) & (idx < self.rows), idx, self.rows)  # out of range -> padding_idx
            for j, table in enumerate(self.tables):
                parts.append(table(idx[j]))
        return self.head(torch.cat(parts, 1) if len(parts) > 1 else parts[0])

    def forward_packed(self, dense, idx, rowmap=None):
        """dense [B, D*dw] f32, idx [B, S*bag] int32 (batch-major), the fused embedding."""
        if not self.recsys:
            return self.head(dense if rowmap is None else dense.index_select(0, rowmap))
        parts = []
        if dense is not None:
            parts.append(dense if rowmap is None else dense.index_select(0, rowmap))
        if idx is not None:
            if rowmap is not None:
                idx = idx.index_select(0, rowmap)
            b = idx.shape[0]
            idx = idx.reshape(b, self.S, self.bag)
            if self.index_dtype != idx.dtype:
                idx = idx.to(self.index_dtype)
            glob = torch.where((idx >= 0) & (idx < self.rows), idx + self.table_base, self.pad)
            bags = F.embedding_bag(glob.view(b * self.S, self.bag), self.big_table, mode="sum",
                                   padding_idx=self.pad)
            parts.append(bags.view(b, self.S * self.dim))
        return self.head(torch.cat(parts, 1) if len(parts) > 1 else parts[0])


# ---------------------------------------------------------------------------------------------- runtime
class Runtime:
    """CUDA, or an emulation on the CPU (smoke tests: no streams, graphs replayed by calling the body)."""

    def __init__(self, device):
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"

    def stream(self):
        return torch.cuda.Stream(self.device) if self.cuda else None

    def set_stream(self, stream):
        if self.cuda:
            torch.cuda.set_stream(stream)

    def sync(self, stream):
        if self.cuda:
            stream.synchronize()

    def pinned(self, shape, dtype):
        return torch.zeros(shape, dtype=dtype, pin_memory=self.cuda)

    def pool(self):
        return torch.cuda.graph_pool_handle() if self.cuda else None

    def capture(self, body, stream, pool):
        """Captures body() on stream; returns (replay, outputs of the capture)."""
        if not self.cuda:
            outs = body()
            statics = [o.clone() for o in outs]

            def replay():
                for s, o in zip(statics, body()):
                    s.copy_(o)
            return replay, statics
        with torch.cuda.stream(stream):
            for _ in range(3):  # warm up cuBLAS handles and the allocator before capture
                body()
        stream.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool, stream=stream):
            outs = body()
        stream.synchronize()
        return graph.replay, outs

    def gpu_time_us(self, stream, fn, samples=100, warm=10):
        """Median over `samples` of CUDA events around one fn() on stream (perf_counter on the CPU)."""
        times = []
        for i in range(samples + warm):
            if self.cuda:
                with torch.cuda.stream(stream):
                    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    e0.record(stream)
                    fn()
                    e1.record(stream)
                e1.synchronize()
                t = e0.elapsed_time(e1) * 1000.0
            else:
                t0 = time.perf_counter()
                fn()
                t = (time.perf_counter() - t0) * 1e6
            if i >= warm:
                times.append(t)
        times.sort()
        return times[len(times) // 2]


class Request:
    """One request's host inputs: b rows of every input (views of the pinned timing inputs)."""
    __slots__ = ("b", "xs", "dense", "sparse")

    def __init__(self, b, xs, model):
        self.b = b
        self.xs = xs
        if model.recsys:
            self.dense, self.sparse = xs[: model.D], xs[model.D:]
        else:
            self.dense, self.sparse = xs, []


def pow2_buckets(max_batch):
    out, b = [], 1
    while b < max_batch:
        out.append(b)
        b *= 2
    out.append(max_batch)
    return out


class Ctx:
    """One thread's state for one variant."""

    def __init__(self, rt, out_widths, max_batch):
        self.rt = rt
        self.stream = rt.stream()
        self.pool = rt.pool()
        self.out_host = [rt.pinned((max_batch, w), torch.float32) for w in out_widths]
        self._views = {}
        self.entries = {}

    def out_views(self, b):
        v = self._views.get(b)
        if v is None:
            v = self._views[b] = [o[:b] for o in self.out_host]
        return v


class Variant:
    key = "?"

    def __init__(self, rt, model, data, buckets):
        self.rt, self.model, self.data, self.buckets = rt, model, data, buckets
        self.max_batch = buckets[-1]
        self.bucket_of = {}
        for b in range(1, self.max_batch + 1):
            self.bucket_of[b] = next(k for k in buckets if k >= b)
        self.out_widths = [t.shape[1] for t in data.verify[min(data.verify)][1]]
        self.input_specs = [(x.shape[1], x.dtype) for x in data.inputs]
        self.notes = []
        # Row maps, per real batch b: [bucket] indices min(r, b-1) (the last real row repeated).
        self.maps_dev = {}
        self.maps_host = {}
        for b in range(1, self.max_batch + 1):
            m = torch.clamp(torch.arange(self.bucket_of[b], dtype=torch.int64), max=b - 1)
            self.maps_host[b] = m.to(torch.int32)
            self.maps_dev[b] = m.to(rt.device)

    def make_ctx(self):
        return Ctx(self.rt, self.out_widths, self.max_batch)

    def replay_note(self):
        return ""


class Eager(Variant):
    key = "a"

    def run(self, ctx, req, stamps=None):
        dev = self.rt.device
        xs = [h.to(dev, non_blocking=True) for h in req.xs]
        if stamps is not None:
            stamps.append(time.perf_counter_ns())
        outs = self.model(xs)
        if stamps is not None:
            stamps.append(time.perf_counter_ns())
        host = ctx.out_views(req.b)
        for h, o in zip(host, outs):
            h.copy_(o, non_blocking=True)
        self.rt.sync(ctx.stream)
        return host

    def replay_gpu_us(self, ctx):
        xs = [x[:1].to(self.rt.device) for x in self.data.inputs]
        return self.rt.gpu_time_us(ctx.stream, lambda: self.model(xs))

    def replay_note(self):
        return "CUDA events around one eager forward at batch 1 (launch gaps included)"


class BucketEntry:
    __slots__ = ("replay", "outs", "statics", "rowmap", "last", "views", "extra", "bucket")


class PerInputGraphs(Variant):
    key = "b"

    def make_ctx(self):
        ctx = super().make_ctx()
        dev = self.rt.device
        for bk in reversed(self.buckets):  # largest first, so smaller graphs reuse its pool memory
            e = BucketEntry()
            e.statics = [torch.zeros((bk, w), dtype=dt, device=dev) for w, dt in self.input_specs]
            e.rowmap = torch.arange(bk, dtype=torch.int64, device=dev)
            e.last = bk
            e.views = {}
            e.replay, e.outs = self.rt.capture(lambda e=e: self.model(e.statics, e.rowmap), ctx.stream, ctx.pool)
            ctx.entries[bk] = e
        return ctx

    def run(self, ctx, req, stamps=None):
        b = req.b
        e = ctx.entries[self.bucket_of[b]]
        v = e.views.get(b)
        if v is None:
            v = e.views[b] = ([s[:b] for s in e.statics], [o[:b] for o in e.outs])
        for d, h in zip(v[0], req.xs):
            d.copy_(h, non_blocking=True)
        if e.last != b:
            e.rowmap.copy_(self.maps_dev[b], non_blocking=True)
            e.last = b
        if stamps is not None:
            stamps.append(time.perf_counter_ns())
        e.replay()
        if stamps is not None:
            stamps.append(time.perf_counter_ns())
        host = ctx.out_views(b)
        for h, o in zip(host, v[1]):
            h.copy_(o, non_blocking=True)
        self.rt.sync(ctx.stream)
        return host

    def replay_gpu_us(self, ctx):
        return self.rt.gpu_time_us(ctx.stream, ctx.entries[self.bucket_of[1]].replay)

    def replay_note(self):
        return "CUDA events around one replay of the batch-1 graph"


def align(n, a=256):
    return (n + a - 1) // a * a


class PackedGraphs(Variant):
    """Variant c: one pinned host buffer [row map | sparse block | dense block] per bucket, one copy."""
    key = "c"

    def __init__(self, rt, model, data, buckets, inside, host_memory="torch"):
        super().__init__(rt, model, data, buckets)
        self.inside = inside
        self.host_memory = host_memory
        self._keep = []
        m = model
        self.dense_w = m.D * m.dw if m.recsys else self.input_specs[0][0]
        self.sparse_w = m.S * m.bag if m.recsys else 0
        self.out_w = sum(self.out_widths)

    def host_bytes(self, nbytes):
        if self.host_memory == "registered" and self.rt.cuda:
            # Plain CPU memory registered with cudaHostRegister: pinned, but unknown to PyTorch's pinned
            # allocator (which records events on every async copy, something stream capture may refuse).
            t = torch.zeros(nbytes, dtype=torch.uint8)
            rc = torch.cuda.cudart().cudaHostRegister(t.data_ptr(), nbytes, 0)
            if int(rc) != 0:
                raise RuntimeError(f"cudaHostRegister failed: {rc}")
            self._keep.append(t)
            return t
        return self.rt.pinned((nbytes,), torch.uint8)

    def make_ctx(self):
        ctx = super().make_ctx()
        dev = self.rt.device
        for bk in reversed(self.buckets):
            e = BucketEntry()
            off_sparse = align(bk * 4)
            off_dense = align(off_sparse + bk * self.sparse_w * 4)
            total = off_dense + bk * self.dense_w * 4
            host = self.host_bytes(total)
            devbuf = torch.zeros(total, dtype=torch.uint8, device=dev)

            def views(buf):
                rowmap = buf[: bk * 4].view(torch.int32)
                sparse = buf[off_sparse: off_sparse + bk * self.sparse_w * 4].view(torch.int32).view(bk, self.sparse_w)
                dense = buf[off_dense: total].view(torch.float32).view(bk, self.dense_w)
                return rowmap, sparse, dense

            h_map, h_sparse, h_dense = views(host)
            d_map, d_sparse, d_dense = views(devbuf)
            h_map.copy_(torch.arange(bk, dtype=torch.int32))
            devbuf.copy_(host)
            host_out = self.host_bytes(bk * self.out_w * 4).view(torch.float32).view(bk, self.out_w)
            model, inside, recsys = self.model, self.inside, self.model.recsys

            def body(rowmap, devbuf=devbuf, host=host, host_out=host_out, d_sparse=d_sparse, d_dense=d_dense):
                if inside:
                    devbuf.copy_(host, non_blocking=True)
                outs = model.forward_packed(d_dense if (not recsys or model.D) else None,
                                            d_sparse if (recsys and model.S) else None, rowmap)
                out = outs[0] if len(outs) == 1 else torch.cat(outs, 1)
                if inside:
                    host_out.copy_(out, non_blocking=True)
                return (out,)

            # Two graphs per bucket on the same buffers: "exact" for a request that fills the bucket (no
            # row gather at all) and "padded" (gathers rows through the row map) for smaller ones.
            replay_exact, outs_exact = self.rt.capture(lambda body=body: body(None), ctx.stream, ctx.pool)
            e.extra = (replay_exact, outs_exact[0])
            if bk > 1:
                e.replay, outs = self.rt.capture(lambda body=body, m=d_map: body(m), ctx.stream, ctx.pool)
                e.outs = outs[0]
            else:
                e.replay, e.outs = e.extra
            e.statics = (host, devbuf, h_map, h_sparse, h_dense, host_out, off_dense)
            e.bucket = bk
            e.last = bk
            e.views = {}
            ctx.entries[bk] = e
        return ctx

    def _views(self, e, b):
        host, devbuf, h_map, h_sparse, h_dense, host_out, off_dense = e.statics
        n = off_dense + b * self.dense_w * 4  # row map, the whole sparse block, the real dense rows
        split, col = [], 0
        for w in self.out_widths:
            split.append(host_out[:b, col: col + w])
            col += w
        exact = b == e.bucket
        out = e.extra[1] if exact else e.outs
        v = (h_dense[:b], h_sparse[:b], devbuf[:n], host[:n], out[:b], host_out[:b], split,
             e.extra[0] if exact else e.replay, exact)
        e.views[b] = v
        return v

    def run(self, ctx, req, stamps=None):
        b = req.b
        e = ctx.entries[self.bucket_of[b]]
        v = e.views.get(b) or self._views(e, b)
        if req.dense:
            torch.cat(req.dense, 1, out=v[0])
        if req.sparse:
            torch.cat(req.sparse, 1, out=v[1])
        if e.last != b and not v[8]:  # only the padded graph reads the row map
            e.statics[2].copy_(self.maps_host[b])
            e.last = b
        if not self.inside:
            v[2].copy_(v[3], non_blocking=True)
        if stamps is not None:
            stamps.append(time.perf_counter_ns())
        v[7]()
        if stamps is not None:
            stamps.append(time.perf_counter_ns())
        if not self.inside:
            v[5].copy_(v[4], non_blocking=True)
        self.rt.sync(ctx.stream)
        return v[6]

    def replay_gpu_us(self, ctx):
        return self.rt.gpu_time_us(ctx.stream, ctx.entries[self.bucket_of[1]].extra[0])

    def copy_gpu_us(self, ctx):
        """CUDA events around the one packed host-to-device copy of a batch-1 request."""
        e = ctx.entries[self.bucket_of[1]]
        v = e.views.get(1) or self._views(e, 1)
        return self.rt.gpu_time_us(ctx.stream, lambda: v[2].copy_(v[3], non_blocking=True))

    def replay_note(self):
        return ("CUDA events around one replay of the batch-1 graph"
                + (" (its H2D and D2H copies inside)" if self.inside else ""))


class Compiled(Variant):
    key = "d"

    def __init__(self, rt, model, data, buckets):
        super().__init__(rt, model, data, buckets)
        self.fn = torch.compile(lambda *xs: model(list(xs)), mode="reduce-overhead", dynamic=False)

    def run(self, ctx, req, stamps=None):
        dev = self.rt.device
        xs = [h.to(dev, non_blocking=True) for h in req.xs]
        if stamps is not None:
            stamps.append(time.perf_counter_ns())
        torch.compiler.cudagraph_mark_step_begin()
        outs = self.fn(*xs)
        if stamps is not None:
            stamps.append(time.perf_counter_ns())
        host = ctx.out_views(req.b)
        for h, o in zip(host, outs):
            h.copy_(o, non_blocking=True)
        self.rt.sync(ctx.stream)
        return host

    def replay_gpu_us(self, ctx):
        xs = [x[:1].to(self.rt.device) for x in self.data.inputs]

        def call():
            torch.compiler.cudagraph_mark_step_begin()
            self.fn(*xs)
        return self.rt.gpu_time_us(ctx.stream, call)

    def replay_note(self):
        return "CUDA events around one call of the compiled function at batch 1 (CUDA graph tree replay and its input copies)"


# ---------------------------------------------------------------------------------------------- measuring
def host_request(rt, model, b, xs):
    pinned = []
    for x in xs:
        p = rt.pinned(tuple(x.shape), x.dtype)
        p.copy_(x)
        pinned.append(p)
    return Request(b, pinned, model)


def max_diffs(variant, ctx, sets):
    """Largest |actual - expected| and |actual - expected| / max(1, |expected|) over the verification sets."""
    abs_d, rel_d = 0.0, 0.0
    checked = []
    for b, req, expected in sets:
        got = [g.clone() for g in variant.run(ctx, req)]
        for g, want in zip(got, expected):
            d = (g.float() - want).abs()
            if torch.isnan(d).any():
                return math.inf, math.inf, checked
            abs_d = max(abs_d, d.max().item())
            rel_d = max(rel_d, (d / want.abs().clamp(min=1.0)).max().item())
        checked.append(b)
    return abs_d, rel_d, checked


def timed_run(variant, ctxs, reqs, trace, concurrency):
    """Runs the trace on `concurrency` threads; returns (per-request ns, wall seconds)."""
    rt = variant.rt
    n = len(trace)
    counter = itertools.count()
    lat = [[] for _ in range(concurrency)]
    errors = []
    barrier = threading.Barrier(concurrency + 1) if concurrency > 1 else None

    def worker(t):
        ctx = ctxs[t]
        mine = lat[t]
        run = variant.run
        perf = time.perf_counter_ns
        try:
            with torch.inference_mode():
                rt.set_stream(ctx.stream)
                if barrier is not None:
                    barrier.wait()
                while True:
                    i = next(counter)
                    if i >= n:
                        break
                    req = reqs[trace[i]]
                    t0 = perf()
                    run(ctx, req)
                    mine.append(perf() - t0)
        except BaseException as e:  # noqa: BLE001 - reported, never swallowed
            errors.append(e)
            if barrier is not None:
                barrier.abort()

    if concurrency == 1:
        start = time.perf_counter()
        worker(0)
        wall = time.perf_counter() - start
    else:
        threads = [threading.Thread(target=worker, args=(t,)) for t in range(concurrency)]
        for th in threads:
            th.start()
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            pass
        start = time.perf_counter()
        for th in threads:
            th.join()
        wall = time.perf_counter() - start
    if errors:
        raise errors[0]
    return [x for l in lat for x in l], wall


def phases(variant, ctx, reqs, trace, count=200):
    """Mean host time of the three phases of a request at concurrency 1."""
    sums = [0, 0, 0]
    k = 0
    with torch.inference_mode():
        variant.rt.set_stream(ctx.stream)
        for b in trace[:count]:
            stamps = [time.perf_counter_ns()]
            variant.run(ctx, reqs[b], stamps)
            stamps.append(time.perf_counter_ns())
            for i in range(3):
                sums[i] += stamps[i + 1] - stamps[i]
            k += 1
    return {"inputs": sums[0] / k / 1000.0, "compute_launch": sums[1] / k / 1000.0,
            "outputs_and_sync": sums[2] / k / 1000.0}


def warm(variant, ctxs, reqs, trace):
    with torch.inference_mode():
        for ctx in ctxs:
            variant.rt.set_stream(ctx.stream)
            for b in sorted(set(trace)):
                variant.run(ctx, reqs[b])
            for b in trace[:20]:
                variant.run(ctx, reqs[b])


def summarize(model_name, trace_spec, concurrency, key, ns, wall, trace):
    ns.sort()
    return {
        "model": model_name, "trace": trace_spec, "concurrency": concurrency, "variant": key,
        "variant_name": VARIANTS.get(key, key), "status": "ok", "requests": len(ns),
        "trace_rows": sum(trace),
        "p50_us": percentile(ns, 0.50), "p90_us": percentile(ns, 0.90), "p99_us": percentile(ns, 0.99),
        "max_us": ns[-1] / 1000.0, "min_us": ns[0] / 1000.0, "mean_us": sum(ns) / len(ns) / 1000.0,
        "throughput_rps": len(ns) / wall, "rows_per_s": sum(trace) / wall, "wall_s": wall,
    }


def failed_row(model_name, trace_spec, concurrency, key, status):
    return {"model": model_name, "trace": trace_spec, "concurrency": concurrency, "variant": key,
            "variant_name": VARIANTS.get(key, key), "status": status, "p50_us": None, "p99_us": None,
            "throughput_rps": None, "replay_gpu_us": None, "max_abs_diff": None}


def reason(e):
    text = f"{type(e).__name__}: {e}".strip().splitlines()
    return (text[0] if text else type(e).__name__)[:300]


def measure_variant(variant, n_ctx, data_reqs, traces, concurrencies, verify_sets, model_name, log):
    """Every (trace, concurrency) of one variant; returns result rows."""
    rows = []
    key = variant.key
    t0 = time.perf_counter()
    with torch.inference_mode():
        ctxs = [variant.make_ctx() for _ in range(n_ctx)]
    setup_s = time.perf_counter() - t0
    with torch.inference_mode():
        variant.rt.set_stream(ctxs[0].stream)
        abs_d, rel_d, checked = max_diffs(variant, ctxs[0], verify_sets)
        replay = variant.replay_gpu_us(ctxs[0])
    extra = {}
    if isinstance(variant, PackedGraphs) and variant.rt.cuda:
        with torch.inference_mode():
            extra["packed_copy_gpu_us"] = variant.copy_gpu_us(ctxs[0])
    for spec, trace in traces:
        for c in concurrencies:
            try:
                warm(variant, ctxs[:c], data_reqs, trace)
                ns, wall = timed_run(variant, ctxs, data_reqs, trace, c)
                row = summarize(model_name, spec, c, key, ns, wall, trace)
                if c == 1:
                    row["phases_us"] = phases(variant, ctxs[0], data_reqs, trace)
            except Exception as e:  # noqa: BLE001 - reported in the table
                row = failed_row(model_name, spec, c, key, "failed: " + reason(e))
            row.update({"replay_gpu_us": replay, "replay_note": variant.replay_note(), "max_abs_diff": abs_d,
                        "max_rel_diff": rel_d, "diff_batches": checked, "setup_s": setup_s, **extra})
            if variant.notes:
                row["notes"] = list(variant.notes)
            rows.append(row)
            log(row)
    variant.rt.set_stream(torch.cuda.default_stream() if variant.rt.cuda else None)
    del ctxs
    return rows


# ---------------------------------------------------------------------------------------------- main
def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="folder written by export_peer_data")
    p.add_argument("--trace", default="const:1", help="comma-separated trace specs (saggar perf syntax)")
    p.add_argument("--requests", default="2000", help="requests per trace: one number, or one per trace")
    p.add_argument("--concurrency", default="1", help="comma-separated thread counts, e.g. 1,8")
    p.add_argument("--variants", default="a,b,c,d", help="subset of a,b,c,d")
    p.add_argument("--embedding", choices=["per-table", "fused"], default="per-table",
                   help="embedding of variants a, b and d (c always uses the fused form)")
    p.add_argument("--max-batch", type=int, default=64, help="largest power-of-two bucket (saggar perf --max-batch)")
    p.add_argument("--seed", type=int, default=None, help="trace seed (default: the data's input seed, 1)")
    p.add_argument("--compile-traces", default="const",
                   help="traces variant d runs: 'const' (const:B only), 'all', or a comma list of specs")
    p.add_argument("--compile-timeout", type=float, default=150.0,
                   help="seconds for variant d's child process (compile + every run), then it is killed")
    p.add_argument("--device", default="cuda", help="cuda (default) or cpu (smoke test, graphs emulated)")
    p.add_argument("--label", default=None, help="model label in the results (default: the config's name)")
    p.add_argument("--json", default=None, help="write the results here")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def environment(rt):
    env = {"torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
           "device": str(rt.device), "host": platform.node()}
    if rt.cuda:
        env["gpu"] = torch.cuda.get_device_name(rt.device)
        cap = torch.cuda.get_device_capability(rt.device)
        env["compute_capability"] = f"{cap[0]}.{cap[1]}"
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader", "-i", "0"],
                                 capture_output=True, text=True, timeout=20)
            env["driver"] = out.stdout.strip() or None
        except (OSError, subprocess.SubprocessError):
            env["driver"] = None
    return env


def fp32_ieee():
    try:
        torch.backends.cuda.matmul.fp32_precision = "ieee"
        return "torch.backends.cuda.matmul.fp32_precision = 'ieee' (no TF32)"
    except (AttributeError, RuntimeError, TypeError):
        torch.backends.cuda.matmul.allow_tf32 = False
        return "torch.backends.cuda.matmul.allow_tf32 = False (no TF32)"


def print_table(rows, out=sys.stdout, header=True):
    if header:
        print(f"{'model':8} {'trace':14} {'C':>2} {'variant':42} {'p50 us':>9} {'p99 us':>9} {'req/s':>9} "
              f"{'gpu us':>8} {'max|diff|':>9}  status", file=out)

    def f(x, fmt, width):
        return format(x, fmt) if isinstance(x, (int, float)) else format("-", f">{width}")
    for r in rows:
        name = f"{r['variant']} {r.get('variant_name', '')}"
        if r.get("copy_mode"):
            name += f" [copy {r['copy_mode']}]"
        print(f"{r['model']:8} {r['trace']:14} {r['concurrency']:>2} {name[:42]:42} {f(r.get('p50_us'), '9.1f', 9)} "
              f"{f(r.get('p99_us'), '9.1f', 9)} {f(r.get('throughput_rps'), '9.0f', 9)} "
              f"{f(r.get('replay_gpu_us'), '8.1f', 8)} {f(r.get('max_abs_diff'), '9.2e', 9)}  {r['status']}", file=out)
    out.flush()


def compile_traces(args, traces):
    if args.compile_traces == "all":
        return traces
    if args.compile_traces == "const":
        return [(s, t) for s, t in traces if s.startswith("const:")]
    wanted = set(args.compile_traces.split(","))
    return [(s, t) for s, t in traces if s in wanted]


def run_compile_child(args, specs, requests, log):
    """Variant d in a child process, bounded by --compile-timeout; returns its rows or failures."""
    import tempfile
    fd, path = tempfile.mkstemp(suffix=".json", prefix="torch-peers-d-")
    os.close(fd)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--data", args.data, "--trace", ",".join(specs),
           "--requests", ",".join(str(r) for r in requests), "--concurrency", args.concurrency, "--variants", "d",
           "--embedding", args.embedding, "--max-batch", str(args.max_batch), "--device", args.device,
           "--json", path]
    if args.seed is not None:
        cmd += ["--seed", str(args.seed)]
    if args.label:
        cmd += ["--label", args.label]
    env = dict(os.environ, TORCHINDUCTOR_COMPILE_THREADS="1")
    started = time.perf_counter()
    status = None
    try:
        proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=args.compile_timeout)
        output = proc.stdout
        if proc.returncode != 0:
            status = f"failed: child exited {proc.returncode}: " + (output.strip().splitlines() or ["?"])[-1][:300]
    except subprocess.TimeoutExpired as e:
        output = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        status = f"failed: compile + runs exceeded --compile-timeout {args.compile_timeout:.0f} s (child killed)"
    for line in output.splitlines():
        log(f"  [d] {line}")
    rows = []
    if os.path.exists(path) and os.path.getsize(path) > 0:
        with open(path) as f:
            rows = json.load(f).get("results", [])
    os.unlink(path)
    done = {(r["trace"], r["concurrency"]) for r in rows}
    for spec in specs:
        for c in [int(x) for x in args.concurrency.split(",")]:
            if (spec, c) not in done:
                rows.append(failed_row(args.label, spec, c, "d", status or "failed: no result from the child"))
    for r in rows:
        r["child_wall_s"] = time.perf_counter() - started
    return rows


def main(argv=None):
    args = parse_args(argv if argv is not None else sys.argv[1:])
    rt = Runtime(args.device)
    if rt.cuda and not torch.cuda.is_available():
        sys.exit("torch_peers: CUDA is not available (use --device cpu for a smoke test)")
    precision = fp32_ieee()
    data = Data(args.data)
    label = args.label or data.config.get("name", data.model)
    args.label = label
    seed = data.seed if args.seed is None else args.seed
    specs = [s for s in args.trace.split(",") if s]
    req_list = [int(r) for r in args.requests.split(",")]
    if len(req_list) == 1:
        req_list *= len(specs)
    if len(req_list) != len(specs):
        sys.exit("torch_peers: --requests needs one number or one per trace")
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    buckets = pow2_buckets(args.max_batch)
    traces = [(s, generate_trace(s, n, seed)) for s, n in zip(specs, req_list)]
    for s, t in traces:
        if max(t) > min(args.max_batch, data.rows):
            sys.exit(f"torch_peers: trace {s} has a batch of {max(t)}, above --max-batch {args.max_batch} "
                     f"or the {data.rows} exported rows (re-export with export_peer_data --max-batch)")
    variants = [v for v in args.variants.split(",") if v]

    def log(row):
        if isinstance(row, str):
            print(row, flush=True)
        else:
            print_table([row], header=False)

    torch.manual_seed(0)
    with torch.inference_mode():
        model = PeerModel(data.config, data.weights, args.embedding).to(rt.device).eval()
        packed_model = model  # variant c calls forward_packed, which always uses the fused table
        timing = []
        for x in data.inputs:
            p = rt.pinned(tuple(x.shape), x.dtype)
            p.copy_(x)
            timing.append(p)
        distinct = sorted({b for _, t in traces for b in t} | set(data.verify) | {1, 3, 5})
        reqs = {b: Request(b, [x[:b] for x in timing], model) for b in distinct
                if b <= min(data.rows, args.max_batch)}
        verify_sets = [(b, host_request(rt, model, b, xs), ys) for b, xs, ys in data.verify_sets()
                       if b <= args.max_batch]

    n_ctx = max(concurrencies)
    rows = []
    meta = {"tool": "saggar benches/peers/torch_peers.py", "date": datetime.datetime.now(datetime.timezone.utc)
            .isoformat(timespec="seconds"), "data": os.path.abspath(args.data), "model": label,
            "family": data.model, "config": data.config, "embedding_abd": args.embedding,
            "embedding_c": "fused", "max_batch": args.max_batch, "buckets": buckets, "seed": seed,
            "precision": precision, "gil": GIL_NOTE,
            "trace_sampler": "saggar perf's: SplitMix64(seed ^ 0x7472_6163_655f_6b6c), same sequence",
            "diff_reference": "saggar's CPU reference_forward on the exported verification set (saggar perf cannot "
                              "dump its GPU outputs)",
            "latency": "per request: perf_counter around host inputs -> device -> host outputs -> stream sync",
            **environment(rt)}
    if not args.child:
        print(f"torch_peers: {label} ({data.model}, {len(data.input_names)} inputs) on {meta.get('gpu', rt.device)}, "
              f"torch {torch.__version__}, traces {specs}, concurrency {concurrencies}, variants {variants}",
              flush=True)
        print_table([])

    for key in variants:
        if key == "a":
            rows += measure_variant(Eager(rt, model, data, buckets), n_ctx, reqs, traces, concurrencies,
                                    verify_sets, label, log)
        elif key == "b":
            rows += measure_variant(PerInputGraphs(rt, model, data, buckets), n_ctx, reqs, traces, concurrencies,
                                    verify_sets, label, log)
        elif key == "c":
            alt = {}
            for inside in (True, False):
                mode = "inside" if inside else "outside"
                try:
                    part = measure_variant(PackedGraphs(rt, packed_model, data, buckets, inside), n_ctx, reqs,
                                           traces, concurrencies, verify_sets, label, log)
                except Exception as e:  # noqa: BLE001
                    if not (inside and rt.cuda):
                        raise
                    # Capturing the host copies failed with PyTorch's pinned allocator: retry on registered memory.
                    log(f"  c [inside]: capture with torch pinned memory failed ({reason(e)}); retrying with "
                        "cudaHostRegister memory")
                    torch.cuda.synchronize()
                    try:
                        part = measure_variant(PackedGraphs(rt, packed_model, data, buckets, inside, "registered"),
                                               n_ctx, reqs, traces, concurrencies, verify_sets, label, log)
                    except Exception as e2:  # noqa: BLE001
                        part = [failed_row(label, s, c, "c", "failed: " + reason(e2)) for s, _ in traces
                                for c in concurrencies]
                for r in part:
                    r["copy_mode"] = mode
                    alt[(r["trace"], r["concurrency"], mode)] = r
            for s, _ in traces:
                for c in concurrencies:
                    cands = [alt.get((s, c, m)) for m in ("inside", "outside")]
                    ok = [r for r in cands if r and r["status"] == "ok"]
                    best = dict(min(ok, key=lambda r: r["p50_us"]) if ok else cands[1] or cands[0])
                    best["alternatives"] = {m: {k: r.get(k) for k in ("status", "p50_us", "p99_us", "throughput_rps",
                                                                      "replay_gpu_us", "max_abs_diff")}
                                            for m, r in zip(("inside", "outside"), cands) if r}
                    rows.append(best)
        elif key == "d":
            dtraces = compile_traces(args, traces)
            skipped = [s for s, _ in traces if s not in {d[0] for d in dtraces}]
            for s in skipped:
                for c in concurrencies:
                    rows.append(failed_row(label, s, c, "d", "skipped: torch.compile records a graph and recompiles "
                                           "per distinct batch size; run with --compile-traces all to try"))
            if not dtraces:
                continue
            if args.child:
                try:
                    t0 = time.perf_counter()
                    v = Compiled(rt, model, data, buckets)
                    rows += measure_d(v, rt, n_ctx, reqs, dtraces, concurrencies, verify_sets, label, log, t0)
                except Exception as e:  # noqa: BLE001
                    rows += [failed_row(label, s, c, "d", "failed: " + reason(e)) for s, _ in dtraces
                             for c in concurrencies]
            else:
                log(f"  d: torch.compile in a child process (timeout {args.compile_timeout:.0f} s), traces "
                    f"{[s for s, _ in dtraces]}")
                drows = run_compile_child(args, [s for s, _ in dtraces],
                                          [n for (s, _), n in zip(traces, req_list) if s in {d[0] for d in dtraces}],
                                          log)
                rows += drows
        else:
            sys.exit(f"torch_peers: unknown variant {key} (expected a, b, c, d)")

    order = {k: i for i, k in enumerate("abcd")}
    rows.sort(key=lambda r: (specs.index(r["trace"]) if r["trace"] in specs else 99, r["concurrency"],
                             order.get(r["variant"], 9)))
    if not args.child:
        print("\nsummary")
        print_table(rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "results": rows}, f, indent=1)
    return 0


def measure_d(v, rt, n_ctx, reqs, dtraces, concurrencies, verify_sets, label, log, t0):
    """Variant d: compile (timed) on the first call per batch size, then as measure_variant."""
    with torch.inference_mode():
        ctx0 = v.make_ctx()
        rt.set_stream(ctx0.stream)
        batches = sorted({b for _, t in dtraces for b in t})
        for b in batches:
            for _ in range(3):  # compile, then CUDA graph tree warm-up and recording
                v.run(ctx0, reqs[b])
    compile_s = time.perf_counter() - t0
    v.notes.append(f"compile + graph recording {compile_s:.1f} s for batch sizes {batches}")
    # Only the verification batches the trace already compiled (others would recompile).
    sets = [s for s in verify_sets if s[0] in batches] or []
    v.notes.append("max_abs_diff over batches " + (",".join(str(s[0]) for s in sets) or "none"))

    rows = []
    with torch.inference_mode():
        abs_d, rel_d, checked = max_diffs(v, ctx0, sets) if sets else (None, None, [])
        replay = v.replay_gpu_us(ctx0) if 1 in batches else None
    ctxs = [ctx0] + [v.make_ctx() for _ in range(n_ctx - 1)]
    for spec, trace in dtraces:
        for c in concurrencies:
            try:
                warm(v, ctxs[:c], reqs, trace)
                ns, wall = timed_run(v, ctxs, reqs, trace, c)
                row = summarize(label, spec, c, "d", ns, wall, trace)
                if c == 1:
                    row["phases_us"] = phases(v, ctxs[0], reqs, trace)
            except Exception as e:  # noqa: BLE001
                row = failed_row(label, spec, c, "d", "failed: " + reason(e))
            row.update({"replay_gpu_us": replay, "replay_note": v.replay_note(), "max_abs_diff": abs_d,
                        "max_rel_diff": rel_d, "diff_batches": checked, "compile_s": compile_s,
                        "notes": list(v.notes)})
            rows.append(row)
            log(row)
    return rows


if __name__ == "__main__":
    sys.exit(main())
