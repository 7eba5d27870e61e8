#!/usr/bin/env python3
"""Mixed precision side by side: saggar's fp32, tf32, fp16 and bf16 against PyTorch and ONNX Runtime.

saggar computes a model's products on tensor cores at `saggar perf --precision fp32|tf32|fp16|bf16`. Its
peers are PyTorch in half precision with CUDA graphs and ONNX Runtime's CUDA provider on an fp16 copy of the
file. This script runs all of them in one process on one GPU, on the same ONNX file and the same inputs, and
judges the targets. For each model of --models (default BERT-base and GPT-2 at sequence 128, ResNet-50 at
224x224: the zoo's builders, benches/zoo/architectures.py, weights re-initialised from --seed, the KV cache of
decoder models off) at --batch rows (default 32):

  export    the module in f32, once: torch.onnx.export with dynamo=False, opset 17, a dynamic batch (the
            zoo's export); the inputs: --batch rows drawn from --seed + 1 (token ids with the zoo's masked
            tail, or images), written as input_K.pb for saggar
  reference PyTorch f32 with TF32 off (matmul and cuDNN convolutions), eager, on those inputs: the truth
            every system's outputs are measured against
  saggar    `saggar perf --onnx MODEL --backend cuda --load-inputs DIR --buckets list:B --graphs on
            --binding request --precision P` for P in fp32, tf32, fp16, bf16, in a subprocess bounded by
            --saggar-timeout: p50 from its JSON, its outputs from --export-outputs (compared with the
            reference below), and with --saggar-verify N its own check of N requests (JSON
            verify.accuracy, against its strict-f32 host evaluation, seconds each at batch 32; 0 by
            default). A precision the binary has no flag for, or refuses with a usage error, is
            `skipped` with the CLI's message
  torch     the module in f32 (TF32 off), fp16 (.half()) and bf16 (.to(torch.bfloat16)), each as
            onnx_peers.py's expert `graphs` variant: the request's inputs packed into ONE pinned buffer,
            ONE copy to the device, one CUDA graph replay (which casts the f32 inputs to the half type and
            the outputs back to f32, so every system moves f32 in and f32 out), ONE copy back
  int8      the f32 file quantised by onnxruntime.quantization.quantize_static in the QDQ format
            (int8 activations, symmetric, calibrated on the benchmark's inputs; per-channel int8
            weights) on every MatMul, Gemm and Conv with constant weights, then `saggar perf
            --precision fp16` on it: its QDQ products run on int8 tensor cores, the rest as at fp16
  ort       ONNX Runtime's CUDA provider with {"use_tf32": 0}: f32 on the file, fp16 on
            onnxruntime.transformers.float16.convert_float_to_float16(model, keep_io_types=True); each as
            plain run() on numpy inputs, and as IO binding with enable_cuda_graph (the batch fixed by a
            free-dimension override so the whole graph is captured; the inputs copied into the bound
            device OrtValues and the outputs copied back every request: host in, host out). Skipped with
            the reason when onnxruntime or its CUDAExecutionProvider is missing

Latency is host in, host out: p50 (nearest rank) of --requests requests after --warmup untimed ones.
Accuracy: per output, max |out - ref| and that over max |ref|; a system's figure is its worst output.

Targets, per model (PASS/MISS; n/a with the reason when a system did not run):
  saggar fp16 vs PyTorch fp16      PyTorch p50 / saggar p50 >= 1.0
  saggar fp16 vs ORT fp16          ORT p50 (the faster of run() and CUDA graph) / saggar p50 >= 1.5
  saggar bf16 / saggar fp16 time   <= 1.10
  saggar vs PyTorch error          saggar max rel error / PyTorch's at the same precision <= 2 (fp16, bf16)
  saggar int8 vs saggar fp16       saggar fp16 p50 / saggar int8 (QDQ) p50 >= 1.3 (BERT-base, ResNet-50)
  BERT only: saggar fp32 p50 / saggar tf32 p50 >= 2; saggar fp16's achieved TFLOP/s >= 40% of
  --peak-tflops (989: an H100's, and an H200's, dense fp16 rate)
FLOPs are counted from the ONNX graph (MatMul, Gemm and Conv, shapes inferred at the batch).

Every system runs in try/except: a failure is `failed: <reason>` in the table and the run goes on. Writes
--md (default OUT/precision.md) and OUT/MODEL.json (every system of one model) and OUT/summary.json (the
run's card, versions, flags and every target); exits 0 once they are written, targets met or not.

Smoke test without a GPU: `--device cpu --tiny` runs the tiny configurations of the same architectures,
PyTorch in f32 on the CPU, ONNX Runtime's CPU provider (IO binding without a CUDA graph), and saggar on its
host backend when --saggar is given.
"""
import argparse
import copy
import datetime
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "zoo"))  # benches/zoo in the source tree, zoo/ in the GPU bundle

PRECISIONS = ["fp32", "tf32", "fp16", "bf16"]
SYSTEMS = ([f"saggar-{p}" for p in PRECISIONS] + ["saggar-int8", "torch-fp32", "torch-fp16", "torch-bf16"]
           + ["ort-fp32", "ort-fp32-graphs", "ort-fp16", "ort-fp16-graphs"])
LABELS = {"saggar-int8": "saggar int8 (QDQ by quantize_static)", "saggar-fp32": "saggar fp32", "saggar-tf32": "saggar tf32", "saggar-fp16": "saggar fp16",
          "saggar-bf16": "saggar bf16", "torch-fp32": "PyTorch f32 (TF32 off)", "torch-fp16": "PyTorch fp16",
          "torch-bf16": "PyTorch bf16", "ort-fp32": "ORT f32, run()", "ort-fp32-graphs": "ORT f32, IO binding + graph",
          "ort-fp16": "ORT fp16, run()", "ort-fp16-graphs": "ORT fp16, IO binding + graph"}


def percentile(sorted_ns, q):
    n = len(sorted_ns)
    return sorted_ns[min(max(math.ceil(q * n), 1), n) - 1] / 1000.0


def timed(run, requests, warmup):
    """Latency of `run()` over `requests` calls after `warmup` untimed ones, microseconds."""
    for _ in range(warmup):
        run()
    ns = []
    for _ in range(requests):
        t = time.perf_counter_ns()
        run()
        ns.append(time.perf_counter_ns() - t)
    ns.sort()
    return {"requests": requests, "p50_us": percentile(ns, 0.5), "p90_us": percentile(ns, 0.9),
            "p99_us": percentile(ns, 0.99), "min_us": ns[0] / 1000.0, "mean_us": sum(ns) / len(ns) / 1000.0}


def errors(outputs, reference, names):
    """Per output, max |out - ref| and that over max |ref|; the worst of each over the outputs."""
    import numpy as np

    if len(outputs) != len(reference):
        raise ValueError(f"{len(outputs)} outputs, PyTorch has {len(reference)}")
    per = []
    for name, out, ref in zip(names, outputs, reference):
        out, ref = np.asarray(out, dtype=np.float64), np.asarray(ref, dtype=np.float64)
        if out.shape != ref.shape:
            raise ValueError(f"output {name} has shape {out.shape}, PyTorch's {ref.shape}")
        worst = float(np.max(np.abs(out - ref))) if out.size else 0.0
        scale = float(np.max(np.abs(ref))) if ref.size else 0.0
        per.append({"output": name, "max_abs_error": worst, "max_rel_error": worst / scale if scale else worst})
    return {"max_abs_error": max(e["max_abs_error"] for e in per), "max_rel_error": max(e["max_rel_error"] for e in per),
            "per_output": per}


def why(e):
    text = " | ".join(line.strip() for line in str(e).strip().splitlines() if line.strip())
    return f"{type(e).__name__}: {text[:400]}"


# --- the model, its inputs, its FLOPs ------------------------------------------------------------

def build(arch, tiny, seed, batch):
    """(module, input names, batch-1 feeds for the export, --batch inputs) from the zoo's builder."""
    import torch
    from architectures import ARCHITECTURES, tokens

    module, names, feeds = ARCHITECTURES[arch][1](tiny, seed)
    config = getattr(getattr(module, "inner", None), "config", None)
    if getattr(config, "use_cache", False):
        config.use_cache = False  # one forward per request: a KV cache would only be written and dropped
    if names[0] == "input_ids":
        inputs = tokens(batch, feeds[0].shape[1], config.vocab_size, seed + 1, mask="attention_mask" in names)
    else:  # images and other float inputs, drawn as the zoo draws them
        g = torch.Generator().manual_seed(seed + 1)
        inputs = [torch.randn((batch,) + tuple(f.shape[1:]), generator=g) for f in feeds]
    return module, names, feeds, inputs


def product_flops(path, names, inputs):
    """FLOPs of one request in MatMul, Gemm and Conv nodes (2 per multiply-add), from the ONNX graph with the
    inputs' shapes fixed and inferred; `unknown` counts the product nodes whose shapes stayed symbolic."""
    import onnx
    from onnx import shape_inference

    model = onnx.load(path)
    given = {n: tuple(x.shape) for n, x in zip(names, inputs)}
    for value in model.graph.input:
        for d, n in zip(value.type.tensor_type.shape.dim, given.get(value.name, ())):
            d.dim_value = n
    model = shape_inference.infer_shapes(model, data_prop=True)
    shapes = {t.name: tuple(t.dims) for t in model.graph.initializer}
    for value in list(model.graph.value_info) + list(model.graph.input) + list(model.graph.output):
        dims = value.type.tensor_type.shape.dim
        if value.type.tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in dims):
            shapes[value.name] = tuple(d.dim_value for d in dims)
    flops, unknown, counted = 0, 0, {}
    for node in model.graph.node:
        if node.op_type not in ("MatMul", "Gemm", "Conv"):
            continue
        a, w, out = (shapes.get(node.input[0]), shapes.get(node.input[1]), shapes.get(node.output[0]))
        if a is None or w is None or out is None:
            unknown += 1
            continue
        if node.op_type == "MatMul":
            f = 2 * math.prod(out) * a[-1]
        elif node.op_type == "Gemm":
            trans_a = next((x.i for x in node.attribute if x.name == "transA"), 0)
            f = 2 * math.prod(out) * (a[0] if trans_a else a[1])
        else:
            f = 2 * math.prod(out) * math.prod(w[1:])
        flops += f
        counted[node.op_type] = counted.get(node.op_type, 0) + 1
    return {"flops": flops, "nodes": counted, "unknown": unknown}


# --- the systems ---------------------------------------------------------------------------------

def strict_f32(torch):
    """TF32 off for matmuls and cuDNN convolutions (the newer per-backend setting where it exists)."""
    try:
        torch.backends.cuda.matmul.fp32_precision = "ieee"
        torch.backends.cudnn.conv.fp32_precision = "ieee"
    except (AttributeError, RuntimeError, TypeError):
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False


class PackedGraph:
    """onnx_peers.py's expert variant at one batch: the request's inputs packed into ONE pinned buffer whose
    device twin holds the graph's static inputs, ONE copy in, replay, ONE copy of the packed outputs back.
    The graph casts floating inputs to `dtype` and the outputs to f32 (f32 in, f32 out, as saggar and ORT)."""

    def __init__(self, module, inputs, dtype):
        import torch

        self.torch, self.inputs = torch, inputs
        sizes = [x.numel() * x.element_size() for x in inputs]
        offsets, total = self.layout(sizes)
        self.host = torch.empty(total, dtype=torch.uint8).pin_memory()
        self.dev = torch.zeros(total, dtype=torch.uint8, device="cuda")
        views = lambda buf: [buf[o:o + n].view(x.dtype).view(x.shape) for o, n, x in zip(offsets, sizes, inputs)]
        self.h_in, d_in = views(self.host), views(self.dev)
        for h, x in zip(self.h_in, inputs):
            h.copy_(x)
        self.dev.copy_(self.host)
        self.stream = torch.cuda.Stream()

        def forward():
            # Tensors a forward makes without a device (transformers' mask constants) are made on the GPU:
            # a copy from unpinned host memory is not allowed in a capture.
            with torch.device("cuda"):
                out = module(*[d.to(dtype) if d.is_floating_point() else d for d in d_in])
            return [out] if isinstance(out, torch.Tensor) else list(out)

        self.forward = forward

        with torch.inference_mode(), torch.cuda.stream(self.stream):
            for _ in range(3):
                outs = forward()
            self.stream.synchronize()
            kinds = [(torch.float32 if o.is_floating_point() else o.dtype, o.shape) for o in outs]
            out_sizes = [math.prod(s) * torch.empty((), dtype=d).element_size() for d, s in kinds]
            out_offsets, out_total = self.layout(out_sizes)
            self.out_dev = torch.empty(out_total, dtype=torch.uint8, device="cuda")
            self.out_host = torch.empty(out_total, dtype=torch.uint8).pin_memory()
            self.graph, self.captured = self.capture(forward, (out_offsets, out_sizes, kinds))
            if self.graph is None:  # replayed eagerly instead, the same copies around it; the table says so
                self.offsets = (out_offsets, out_sizes, kinds)
        torch.cuda.synchronize()
        self.outputs = [self.out_host[off:off + n].view(d).view(s)
                        for off, n, (d, s) in zip(out_offsets, out_sizes, kinds)]

    def capture(self, forward, layout):
        """A CUDA graph of `forward` packing its outputs, or (None, why not).

        transformers' mask code makes scalar constants with `torch.tensor(0.0, device=mask.device)`: a copy
        from unpinned host memory, which no capture allows. While capturing, `torch.tensor` of a Python
        scalar is made by a fill kernel instead (`torch.full`, the same value and type). The masks' host
        tests (`padding_mask.all()`) are skipped by transformers itself while a stream captures."""
        torch = self.torch
        graph = torch.cuda.CUDAGraph()
        original = torch.tensor

        def scalar_by_fill(data, *args, dtype=None, device=None, **kwargs):
            if not args and not kwargs and isinstance(data, (bool, int, float)):
                kind = torch.bool if isinstance(data, bool) else torch.int64 if isinstance(data, int) else None
                return torch.full((), data, dtype=dtype or kind, device=device)
            return original(data, *args, dtype=dtype, device=device, **kwargs)

        try:
            torch.tensor = scalar_by_fill
            with torch.cuda.graph(graph, stream=self.stream):
                self.pack(forward(), *layout)
            return graph, None
        except RuntimeError as e:
            # Where in the module it failed: the innermost frame outside torch itself.
            frames = [f for f in traceback.extract_tb(e.__traceback__) if "/torch/" not in f.filename]
            at = f" at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno} {frames[-1].name}" if frames else ""
            torch.cuda.synchronize()
            return None, str(e).splitlines()[0][:120] + at
        finally:
            torch.tensor = original

    @staticmethod
    def layout(sizes):
        """Offsets of tensors of `sizes` bytes in one buffer, each 256-byte aligned, and its size."""
        offsets, total = [], 0
        for n in sizes:
            offsets.append(total)
            total += (n + 255) // 256 * 256
        return offsets, total

    def pack(self, outs, offsets, sizes, kinds):
        """Copies the forward's outputs, as f32, into the packed device output buffer."""
        for o, off, n, (d, s) in zip(outs, offsets, sizes, kinds):
            self.out_dev[off:off + n].view(d).view(s).copy_(o)

    def run(self):
        # The output buffers were made in inference mode: they are written in it too.
        with self.torch.inference_mode(), self.torch.cuda.stream(self.stream):
            for h, x in zip(self.h_in, self.inputs):
                h.copy_(x)
            self.dev.copy_(self.host, non_blocking=True)
            if self.graph is not None:
                self.graph.replay()
            else:
                self.pack(self.forward(), *self.offsets)
            self.out_host.copy_(self.out_dev, non_blocking=True)
        self.stream.synchronize()
        return self.outputs


def torch_system(module, inputs, dtype, device, args):
    """The module at `dtype`: CUDA graphs with one packed copy each way on CUDA, eager on the CPU."""
    import torch

    if device == "cpu":
        def run():
            with torch.inference_mode():
                out = module(*inputs)
            return [out] if isinstance(out, torch.Tensor) else list(out)
        variant = "eager on the CPU"
    else:
        module = copy.deepcopy(module).to(device="cuda", dtype=dtype)
        packed = PackedGraph(module, inputs, dtype)
        run = packed.run
        variant = "CUDA graph, one packed pinned copy in and one out"
        if packed.captured is not None:
            variant = f"eager, one packed pinned copy in and one out (the capture failed: {packed.captured})"
    outs = [o.float().numpy().copy() for o in run()]
    return dict(timed(run, args.requests, args.warmup), variant=variant), outs


def ort_system(ort, model, inputs, reference, device, graphs, args):
    """ONNX Runtime on `model` (a path or serialized bytes): plain run() on numpy inputs, or (graphs) IO binding
    with the batch fixed and, on CUDA, a captured CUDA graph; host in, host out either way."""
    import numpy as np

    options = ort.SessionOptions()
    if device == "cuda":
        cuda = {"use_tf32": "0"}
        if graphs:
            cuda["enable_cuda_graph"] = "1"
        providers = [("CUDAExecutionProvider", cuda), "CPUExecutionProvider"]
    else:
        providers = ["CPUExecutionProvider"]
    if graphs:
        options.add_free_dimension_override_by_name("batch", args.batch)
    session = ort.InferenceSession(model, options, providers=providers)
    if device == "cuda" and "CUDAExecutionProvider" not in session.get_providers():
        raise RuntimeError(f"the session runs on {session.get_providers()}, not the CUDA provider")
    names = [i.name for i in session.get_inputs()]
    feed = {n: np.ascontiguousarray(x) for n, x in zip(names, inputs)}
    if not graphs:
        run = lambda: session.run(None, feed)
        mode = "run() on numpy inputs"
    else:
        place = "cuda" if device == "cuda" else "cpu"
        bound_in = [ort.OrtValue.ortvalue_from_numpy(feed[n], place, 0) for n in names]
        bound_out = [ort.OrtValue.ortvalue_from_shape_and_type(r.shape, r.dtype, place, 0) for r in reference]
        binding = session.io_binding()
        for n, v in zip(names, bound_in):
            binding.bind_ortvalue_input(n, v)
        for o, v in zip(session.get_outputs(), bound_out):
            binding.bind_ortvalue_output(o.name, v)

        def run():
            for n, v in zip(names, bound_in):
                v.update_inplace(feed[n])
            session.run_with_iobinding(binding)
            return [v.numpy() for v in bound_out]
        mode = ("IO binding, enable_cuda_graph, batch fixed" if device == "cuda"
                else "IO binding on the CPU (no CUDA graph there), batch fixed")
    outs = [np.array(o) for o in run()]
    return dict(timed(run, args.requests, args.warmup), mode=mode), outs


def has_precision_flag(binary):
    """Whether this `saggar perf` takes --precision (its help lists it)."""
    p = subprocess.run([binary, "perf", "--help"], capture_output=True, text=True, timeout=60)
    return "--precision" in p.stdout


def saggar_system(args, has_flag, precision, model, inputs_dir, work, name):
    """`saggar perf` at one precision: a result dict and the outputs of its first request (or None)."""
    from zoo import read_pb

    if precision != "fp32" and not has_flag:
        return {"status": "skipped: this saggar perf has no --precision flag (strict f32 only)"}, None
    exported = os.path.join(work, f"saggar-outputs-{precision}")
    shutil.rmtree(exported, ignore_errors=True)
    report = os.path.join(args.out, f"saggar-{name}-{precision}.json")
    if os.path.exists(report):
        os.remove(report)  # a report left by an earlier run must not stand in for this one
    cmd = [args.saggar, "perf", "--onnx", model, "--backend", "host" if args.device == "cpu" else "cuda",
           "--load-inputs", inputs_dir, "--buckets", f"list:{args.batch}", "--max-batch", str(args.batch),
           "--requests", str(args.requests), "--warmup-runs", str(args.warmup), "--graphs", "on",
           "--binding", "request", "--verify", str(args.saggar_verify),
           "--cache-dir", os.path.join(work, "saggar-cache"),
           "--export-outputs", exported, "--quiet", "--json", report]
    if has_flag:
        cmd += ["--precision", precision]
    started = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.saggar_timeout)
    except subprocess.TimeoutExpired:
        return {"status": f"failed: over --saggar-timeout {args.saggar_timeout:.0f} s", "command": cmd}, None
    message = " | ".join(line.strip() for line in p.stderr.strip().splitlines()[-4:] if line.strip())[-500:]
    if not os.path.isfile(report):
        refused = p.returncode == 2 and precision != "fp32" and "precision" in p.stderr
        return {"status": f"{'skipped' if refused else 'failed'}: exit {p.returncode}: {message}",
                "command": cmd}, None
    perf = json.load(open(report))
    outs, k = [], 0
    while os.path.isfile(os.path.join(exported, f"batch_{args.batch}", f"output_{k}.pb")):
        outs.append(read_pb(os.path.join(exported, f"batch_{args.batch}", f"output_{k}.pb")))
        k += 1
    latency, verify = perf["latency_us"], perf.get("verify", {})
    row = {"requests": perf["requests"], "p50_us": latency["p50"], "p90_us": latency["p90"], "p99_us": latency["p99"],
           "min_us": latency["min"], "mean_us": latency["mean"], "precision_reported": perf.get("precision"),
           "cli_accuracy": verify.get("accuracy"), "cli_verify_mismatches": verify.get("mismatches"),
           "cli_compute": perf.get("compute"), "session_s": perf.get("warmup_s"),
           "seconds": round(time.time() - started, 1), "command": cmd}
    notes = [f"exit {p.returncode}: {message}" if p.returncode else "",
             f"ran at {row['precision_reported']}" if row["precision_reported"] not in (None, precision) else ""]
    if any(notes):
        row["note"] = "; ".join(n for n in notes if n)
    return row, outs or None


def qdq_model(path, names, arrays, out):
    """`path` quantised as onnxruntime.quantization.quantize_static writes QDQ models, into `out`: int8
    activations (symmetric, min-max calibrated on the benchmark's inputs) and per-channel int8 weights,
    on every MatMul, Gemm and Conv whose weights are constants (the attention's products of two
    activations stay f32, as saggar computes them)."""
    import onnx
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    graph = onnx.load(path, load_external_data=False).graph
    constants = {i.name for i in graph.initializer}
    constants |= {o for n in graph.node if n.op_type == "Constant" for o in n.output}
    exclude = [n.name for n in graph.node
               if n.op_type in ("MatMul", "Gemm", "Conv") and (len(n.input) < 2 or n.input[1] not in constants)]

    class Inputs(CalibrationDataReader):
        def __init__(self):
            self.sets = iter([dict(zip(names, arrays))])

        def get_next(self):
            return next(self.sets, None)

    quantize_static(path, out, Inputs(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                    op_types_to_quantize=["MatMul", "Gemm", "Conv"], nodes_to_exclude=exclude,
                    extra_options={"ActivationSymmetric": True, "WeightSymmetric": True})
    return out


# --- one model -----------------------------------------------------------------------------------

def run_model(name, arch, args, systems, has_flag, ort_state, work):
    import onnx
    import torch
    from zoo import export, reference, write_pb

    entry = {"model": name, "arch": arch, "batch": args.batch, "systems": {}}
    module, names, feeds, inputs = build(arch, args.tiny, args.seed, args.batch)
    entry["inputs"] = {n: list(x.shape) for n, x in zip(names, inputs)}
    folder = os.path.join(work, name)
    inputs_dir = os.path.join(folder, "inputs")
    os.makedirs(inputs_dir, exist_ok=True)
    path = os.path.join(folder, "model.onnx")
    export(module, names, feeds, path, "torchscript", dynamic_batch=True)
    arrays = [x.numpy() for x in inputs]
    for k, (n, a) in enumerate(zip(names, arrays)):
        write_pb(os.path.join(inputs_dir, f"input_{k}.pb"), n, a)
    try:
        entry["products"] = product_flops(path, names, inputs)
    except Exception as e:  # noqa: BLE001 - the FLOP count is a result too
        entry["products"] = {"flops": None, "reason": why(e)}
    strict_f32(torch)
    ref = reference(module, inputs, args.device)
    out_names = [o.name for o in onnx.load(path, load_external_data=False).graph.output]
    results = entry["systems"]

    def attempt(system, fn):
        if system not in systems:
            return
        started = time.time()
        try:
            row, outs = fn()
            row.setdefault("status", "ok")
        except Exception as e:  # noqa: BLE001 - one system never stops the run
            row, outs = {"status": f"failed: {why(e)}"}, None
        if outs is not None:
            try:
                row.update(errors(outs, ref, out_names))
            except ValueError as e:
                row["note"] = "; ".join(filter(None, [row.get("note"), f"outputs not compared: {e}"]))
        row.setdefault("seconds", round(time.time() - started, 1))
        results[system] = row
        if args.device == "cuda":
            torch.cuda.empty_cache()
        p50 = f"p50 {row['p50_us'] / 1000:.3f} ms" if "p50_us" in row else row["status"]
        err = f", max rel error {row['max_rel_error']:.2e}" if "max_rel_error" in row else ""
        print(f"precision: {name} {system}: {p50}{err}", flush=True)

    for dtype_name, dtype in (("fp32", torch.float32), ("fp16", torch.float16), ("bf16", torch.bfloat16)):
        if args.device == "cpu" and dtype_name != "fp32":
            attempt(f"torch-{dtype_name}", lambda: ({"status": "skipped: --device cpu runs PyTorch in f32 only"}, None))
        else:
            attempt(f"torch-{dtype_name}", lambda dtype=dtype: torch_system(module, inputs, dtype, args.device, args))
    for precision in PRECISIONS:
        if args.saggar:
            attempt(f"saggar-{precision}",
                    lambda p=precision: saggar_system(args, has_flag, p, path, inputs_dir, folder, name))
        else:
            attempt(f"saggar-{precision}", lambda: ({"status": "skipped: no --saggar"}, None))
    if args.saggar and "saggar-int8" in systems:
        def int8():
            qdq = qdq_model(path, names, arrays, os.path.join(folder, "model-qdq.onnx"))
            return saggar_system(args, has_flag, "fp16", qdq, inputs_dir, folder, f"{name}-qdq")
        attempt("saggar-int8", int8)
    else:
        attempt("saggar-int8", lambda: ({"status": "skipped: no --saggar"}, None))
    ort, ort_skip = ort_state
    for half in (False, True):
        kind = "fp16" if half else "fp32"
        if ort is None:
            for mode in ("", "-graphs"):
                attempt(f"ort-{kind}{mode}", lambda: ({"status": f"skipped: {ort_skip}"}, None))
            continue
        model = path
        if half and ({f"ort-{kind}", f"ort-{kind}-graphs"} & set(systems)):
            try:
                from onnxruntime.transformers.float16 import convert_float_to_float16

                model = convert_float_to_float16(onnx.load(path), keep_io_types=True).SerializeToString()
            except Exception as e:  # noqa: BLE001 - both fp16 systems report it
                model, reason = None, f"fp16 conversion: {why(e)}"
        for graphs in (False, True):
            system = f"ort-{kind}{'-graphs' if graphs else ''}"
            if model is None:
                attempt(system, lambda: ({"status": f"failed: {reason}"}, None))
            else:
                attempt(system, lambda g=graphs, m=model: ort_system(ort, m, arrays, ref, args.device, g, args))
    return entry


# --- the targets and the report ------------------------------------------------------------------

def p50(entry, system):
    row = entry["systems"].get(system) or {}
    return row.get("p50_us") if row.get("status") == "ok" else None


def missing(entry, *systems):
    """Why a target has no value: the status of each of its systems that did not run or has no figure."""
    parts = []
    for s in systems:
        row = entry["systems"].get(s)
        if row is None:
            parts.append(f"{s} not selected")
        elif row["status"] != "ok":
            parts.append(f"{s} {row['status']}")
        elif "max_rel_error" not in row:
            parts.append(f"{s} has no outputs to compare")
    return "n/a (" + "; ".join(parts)[:300] + ")"


def judge(entry, args):
    """The targets of one model: [{target, value, goal, result}]."""
    out = []

    def add(target, value, goal, ok, systems, fmt="{:.2f}x"):
        if value is None:
            out.append({"model": entry["model"], "target": target, "goal": goal, "value": None,
                        "result": missing(entry, *systems)})
        else:
            out.append({"model": entry["model"], "target": target, "goal": goal, "value": value,
                        "shown": fmt.format(value), "result": "PASS" if ok(value) else "MISS"})

    def ratio(num, den):
        a, b = p50(entry, num), p50(entry, den)
        return a / b if a and b else None

    # The target's peer is PyTorch with CUDA graphs; an eager fallback (the capture failed) is no figure for it.
    graphed = "capture failed" not in (entry["systems"].get("torch-fp16") or {}).get("variant", "")
    if graphed:
        add("saggar fp16 vs PyTorch fp16 graphs (PyTorch p50 / saggar p50)", ratio("torch-fp16", "saggar-fp16"),
            ">= 1.0x", lambda v: v >= 1.0, ["torch-fp16", "saggar-fp16"])
    else:
        out.append({"model": entry["model"], "target": "saggar fp16 vs PyTorch fp16 graphs", "goal": ">= 1.0x",
                    "value": None, "result": "n/a (PyTorch's CUDA graph capture failed; it ran eager, "
                                             f"{ratio('torch-fp16', 'saggar-fp16') or 0:.2f}x)"})
    orts = [s for s in ("ort-fp16", "ort-fp16-graphs") if p50(entry, s)]
    best = min(orts, key=lambda s: p50(entry, s)) if orts else None
    add(f"saggar fp16 vs ORT fp16 ({best or 'ORT'} p50 / saggar p50)",
        ratio(best, "saggar-fp16") if best else None, ">= 1.5x", lambda v: v >= 1.5,
        ["ort-fp16", "ort-fp16-graphs", "saggar-fp16"])
    if entry["arch"] in ("bert_base", "resnet50"):
        add("saggar int8 QDQ vs fp16 (fp16 p50 / int8 p50)", ratio("saggar-fp16", "saggar-int8"), ">= 1.3x",
            lambda v: v >= 1.3, ["saggar-fp16", "saggar-int8"])
    add("saggar bf16 p50 / saggar fp16 p50", ratio("saggar-bf16", "saggar-fp16"), "<= 1.10",
        lambda v: v <= 1.10, ["saggar-bf16", "saggar-fp16"], "{:.3f}")
    for half in ("fp16", "bf16"):
        s, t = (entry["systems"].get(f"saggar-{half}") or {}), (entry["systems"].get(f"torch-{half}") or {})
        value = (s["max_rel_error"] / t["max_rel_error"] if "max_rel_error" in s and t.get("max_rel_error") else None)
        add(f"saggar {half} max rel error / PyTorch {half}'s", value, "<= 2x", lambda v: v <= 2.0,
            [f"saggar-{half}", f"torch-{half}"])
    if entry["arch"] == "bert_base":
        add("saggar tf32 vs fp32 (fp32 p50 / tf32 p50)", ratio("saggar-fp32", "saggar-tf32"), ">= 2x",
            lambda v: v >= 2.0, ["saggar-fp32", "saggar-tf32"])
        flops, t = entry["products"].get("flops"), p50(entry, "saggar-fp16")
        value = flops / (t * 1e-6) / 1e12 / args.peak_tflops if flops and t else None
        add(f"saggar fp16 TFLOP/s share of {args.peak_tflops:g} (dense fp16 peak)", value, ">= 40%",
            lambda v: v >= 0.40, ["saggar-fp16"], "{:.1%}")
    return out


def fmt_us(us):
    return f"{us:,.0f} us" if us < 1000 else f"{us / 1000:,.2f} ms"


def markdown(entries, targets, meta, args):
    lines = ["# Mixed precision: saggar against PyTorch and ONNX Runtime", "",
             f"{meta['card']}, {meta['date']}. Batch {args.batch}, p50 of {args.requests} requests (after "
             f"{args.warmup} untimed), host in, host out, every system in one process on one device, on the same "
             f"ONNX file and inputs. saggar: `saggar perf --precision P`, graphs on, `--binding request` (inputs written into pinned staging, outputs read where the copy back left them, as PyTorch's packed buffers). PyTorch: "
             f"{meta['torch_variant']}. ONNX Runtime: {meta['ort_variant']}. Errors: max |out - ref| and that "
             f"over max |ref| (worst output) against PyTorch f32 with TF32 off. torch {meta['torch']}, onnxruntime "
             f"{meta['onnxruntime']}, saggar `{meta['saggar'] or 'not given'}` (--precision: "
             f"{meta['saggar_precision_flag']}).", "",
             "## Targets", "", "| model | target | measured | goal | result |", "|---|---|---:|---|---|"]
    for t in targets:
        lines.append(f"| {t['model']} | {t['target']} | {t.get('shown', '')} | {t['goal']} | {t['result']} |")
    for e in entries:
        lines += ["", f"## {e['model']}", ""]
        if "error" in e:
            lines.append(f"failed: {e['error']}")
            continue
        shapes = ", ".join(f"{n} {'x'.join(map(str, s))}" for n, s in e["inputs"].items())
        products = e.get("products") or {}
        flops = products.get("flops")
        if flops:
            nodes = ", ".join(f"{v} {k}" for k, v in sorted(products["nodes"].items()))
            unknown = f"; {products['unknown']} product nodes of unknown shape left out" if products["unknown"] else ""
            cli = next((r["cli_compute"] for r in e["systems"].values() if r.get("cli_compute")), None)
            cli_note = f" (saggar counts {cli['flops'] / 1e9:.4g})" if cli and cli.get("flops") else ""
            lines.append(f"Inputs {shapes}. {flops / 1e9:.4g} GFLOP of products a request{cli_note}: {nodes}{unknown}.")
        else:
            lines.append(f"Inputs {shapes}. FLOPs not counted: {products.get('reason', 'no shapes')}.")
        lines += ["", "| system | p50 | p90 | TFLOP/s | max abs error | max rel error | status, notes |",
                  "|---|---:|---:|---:|---:|---:|---|"]
        for system in SYSTEMS:
            r = e["systems"].get(system)
            if r is None:
                continue
            if r["status"] != "ok":
                lines.append(f"| {LABELS[system]} | | | | | | {r['status']} |")
                continue
            tflops = f"{flops / (r['p50_us'] * 1e-6) / 1e12:.3g}" if flops else ""
            notes = []
            if r.get("cli_accuracy"):
                worst = max(a["max_rel_error"] for a in r["cli_accuracy"])
                notes.append(f"saggar's own check: max rel error {worst:.2e} vs its strict f32")
            if r.get("note"):
                notes.append(r["note"])
            if "capture failed" in r.get("variant", ""):
                notes.append(r["variant"])
            err = (f"{r['max_abs_error']:.2e} | {r['max_rel_error']:.2e}" if "max_rel_error" in r else " | ")
            p90 = fmt_us(r["p90_us"]) if r.get("p90_us") else ""
            lines.append(f"| {LABELS[system]} | {fmt_us(r['p50_us'])} | {p90} | {tflops} | {err} | "
                         f"{'; '.join(['ok'] + notes)} |")
    return "\n".join(lines) + "\n"


def onnxruntime_for(device):
    """(the onnxruntime module, None) or (None, why it cannot run here)."""
    try:
        import onnxruntime as ort
    except ImportError as e:
        return None, f"python3 cannot import onnxruntime ({e})"
    if device == "cuda":
        if hasattr(ort, "preload_dlls"):
            ort.preload_dlls()
        providers = ort.get_available_providers()
        if "CUDAExecutionProvider" not in providers:
            return None, (f"onnxruntime {ort.__version__} has no CUDAExecutionProvider ({', '.join(providers)}): "
                          "onnxruntime-gpu brings it")
    return ort, None


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="folder for MODEL.json, summary.json and saggar's JSON reports")
    p.add_argument("--md", help="the markdown report [default: OUT/precision.md]")
    p.add_argument("--saggar", help="the saggar CLI (built with CUDA; on --device cpu its host backend runs)")
    p.add_argument("--models", default="bert-base,gpt2,resnet50",
                   help="comma-separated zoo architectures (benches/zoo/architectures.py; - and _ alike)")
    p.add_argument("--batch", type=int, default=32, help="rows of every request")
    p.add_argument("--requests", type=int, default=200, help="timed requests per system")
    p.add_argument("--warmup", type=int, default=10, help="untimed requests per system before the timed ones")
    p.add_argument("--only-systems", help="comma-separated systems or families (saggar, torch, ort) [default: all: "
                   + ", ".join(SYSTEMS) + "]")
    p.add_argument("--seed", type=int, default=7, help="weights from SEED, inputs from SEED + 1 (the zoo's)")
    p.add_argument("--saggar-timeout", type=float, default=300.0, help="seconds for one `saggar perf` run")
    p.add_argument("--saggar-verify", type=int, default=0,
                   help="requests `saggar perf` checks against its strict-f32 evaluation on the host (seconds each "
                        "at batch 32; the script compares every system with PyTorch f32 itself)")
    p.add_argument("--peak-tflops", type=float, default=989.0, help="the card's dense fp16 TFLOP/s (H100, H200: 989)")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu: the smoke test, no GPU needed")
    p.add_argument("--tiny", action="store_true", help="the zoo's tiny configurations (smoke test)")
    p.add_argument("--work", help="folder for the exported models, inputs and saggar's cache "
                   "[default: a temporary folder, removed at the end]")
    args = p.parse_args()
    import torch

    from architectures import ARCHITECTURES

    picked = [s for s in (args.only_systems or "").split(",") if s]
    systems = [s for s in SYSTEMS if not picked or any(s == x or s.startswith(x + "-") for x in picked)]
    unknown = [m for m in args.models.split(",") if m.replace("-", "_") not in ARCHITECTURES]
    if unknown or not systems:
        sys.exit(f"precision: unknown models {unknown} or no system in {picked} (systems: {', '.join(SYSTEMS)})")
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("precision: no CUDA device (torch.cuda.is_available() is False); --device cpu for the smoke test")
    os.makedirs(args.out, exist_ok=True)
    work = args.work or tempfile.mkdtemp(prefix="saggar-precision-")
    ort, ort_skip = onnxruntime_for(args.device) if any(s.startswith("ort-") for s in systems) else (None, "")
    try:
        has_flag = has_precision_flag(args.saggar) if args.saggar else False
    except (OSError, subprocess.SubprocessError) as e:
        sys.exit(f"precision: --saggar {args.saggar}: {why(e)}")
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "card": torch.cuda.get_device_name(0) if args.device == "cuda" else f"CPU ({platform.processor() or platform.machine()})",
            "torch": torch.__version__, "cuda": torch.version.cuda,
            "onnxruntime": getattr(ort, "__version__", None) or f"not used: {ort_skip}",
            "python": platform.python_version(), "host": platform.node(), "saggar": args.saggar,
            "saggar_precision_flag": "yes" if has_flag else "no", "argv": sys.argv[1:],
            "torch_variant": ("one CUDA graph, the inputs packed into one pinned buffer, one copy in and one out"
                              if args.device == "cuda" else "eager on the CPU, f32 only"),
            "ort_variant": ("CUDA provider, use_tf32 0, fp16 by convert_float_to_float16(keep_io_types); run() on "
                            "numpy inputs, or IO binding with enable_cuda_graph and the batch fixed"
                            if args.device == "cuda" else "CPU provider; run(), or IO binding (no CUDA graph)")}
    print(f"precision: {meta['card']}, {meta['date']}, systems {', '.join(systems)}", flush=True)
    entries, targets = [], []
    try:
        for name in args.models.split(","):
            arch = name.replace("-", "_")
            started = time.time()
            try:
                entry = run_model(name, arch, args, systems, has_flag, (ort, ort_skip), work)
                entry["targets"] = judge(entry, args)
                targets += entry["targets"]
            except Exception as e:  # noqa: BLE001 - one model never stops the others
                entry = {"model": name, "arch": arch, "error": why(e), "systems": {}}
            entry["seconds"] = round(time.time() - started, 1)
            entries.append(entry)
            with open(os.path.join(args.out, f"{name}.json"), "w") as f:
                json.dump(entry, f, indent=1, default=str)
            print(f"precision: {name} done in {entry['seconds']} s", flush=True)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump({"meta": meta, "batch": args.batch, "requests": args.requests, "targets": targets}, f, indent=1)
    md = markdown(entries, targets, meta, args)
    with open(args.md or os.path.join(args.out, "precision.md"), "w") as f:
        f.write(md)
    for t in targets:
        print(f"precision: target {t['model']}: {t['target']}: {t.get('shown', '')} (goal {t['goal']}) {t['result']}")


if __name__ == "__main__":
    main()
