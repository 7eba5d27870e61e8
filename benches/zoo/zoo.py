#!/usr/bin/env python3
"""The zoo: real architectures exported as users export them, run by saggar and checked against PyTorch.

For each architecture of architectures.py and each exporter (`torchscript`: torch.onnx.export with
dynamo=False at opset 17; `dynamo`: the default exporter, where it succeeds) this script:
  1. builds the module with re-initialised weights and its inputs, exports it to OUT/<arch>/<exporter>/,
     and writes PyTorch's fp32 outputs (TF32 off) beside the inputs as test_data_set_0/{input,output}_K.pb;
  2. asks `saggar check` whether each backend supports it (every refused node listed);
  3. runs `saggar perf --onnx` on CUDA (p50 of --requests runs at batch 1, outputs exported) and, with
     --saggar-hip and --hip-fixture, on the HIP backend via the fixture (correctness only);
  4. runs ONNX Runtime's CUDA execution provider on the same file (plain `run()`, p50), when importable;
  5. compares every output with PyTorch's: within rtol 1e-3 and atol 2e-4 x max|output| (detection
     outputs as sets of boxes above the score threshold).
It writes OUT/zoo.json and OUT/zoo.md. `--tiny --export-only` writes the tiny configurations (the ones
checked into crates/saggar-onnx/tests/zoo/) without running anything.
"""
import argparse
import json
import os
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

RTOL, ATOL_SHARE, SCORE_THRESHOLD = 1e-3, 2e-4, 0.3


def write_pb(path, name, array):
    from onnx import numpy_helper

    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(array, name).SerializeToString())


def read_pb(path):
    import onnx
    from onnx import numpy_helper

    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def as_tuple(out):
    import torch

    return (out,) if isinstance(out, torch.Tensor) else tuple(out)


def export(module, names, feeds, path, exporter, dynamic_batch):
    import torch

    kwargs = {}
    if exporter == "torchscript":
        if dynamic_batch:
            kwargs["dynamic_axes"] = {n: {0: "batch"} for n in names}
        torch.onnx.export(module, tuple(feeds), path, input_names=names, opset_version=17, dynamo=False, **kwargs)
    else:
        if dynamic_batch:
            import inspect

            # AUTO: dynamic where the program allows it, specialised (not an error) where it does not.
            dims = tuple({0: torch.export.Dim.AUTO} for _ in names)
            varargs = any(p.kind == p.VAR_POSITIONAL for p in inspect.signature(module.forward).parameters.values())
            kwargs["dynamic_shapes"] = (dims,) if varargs else dims
        torch.onnx.export(module, tuple(feeds), path, input_names=names, dynamo=True, external_data=False, **kwargs)


def reference(module, feeds, device):
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    with torch.no_grad():
        m = module.to(device)
        outs = as_tuple(m(*[f.to(device) for f in feeds]))
        module.to("cpu")
    return [o.detach().cpu().numpy() for o in outs]


def compare(family, expected, actual):
    """(ok, worst relative error description) of actual against expected."""
    import numpy as np

    if len(expected) != len(actual):
        return False, f"{len(actual)} outputs, expected {len(expected)}"
    if family == "detection":
        return compare_boxes(expected, actual)
    worst = 0.0
    for e, a in zip(expected, actual):
        if e.shape != a.shape:
            return False, f"shape {a.shape}, expected {e.shape}"
        if e.dtype.kind not in "fc":
            if not np.array_equal(e, a):
                return False, "integer outputs differ"
            continue
        atol = ATOL_SHARE * float(np.max(np.abs(e))) if e.size else 0.0
        excess = np.abs(a.astype(np.float64) - e) - (atol + RTOL * np.abs(e))
        if not np.all(np.isfinite(a)) and np.all(np.isfinite(e)):
            return False, "non-finite outputs"
        worst = max(worst, float(np.max(excess)) if excess.size else -1.0)
        if np.any(excess > 0):
            return False, f"max excess over the tolerance {worst:.3g}"
    return True, "within rtol 1e-3, atol 2e-4 x max|output|"


def compare_boxes(expected, actual):
    import numpy as np

    (eb, es, el), (ab, as_, al) = expected[:3], actual[:3]
    keep_e, keep_a = es > SCORE_THRESHOLD, as_ > SCORE_THRESHOLD
    eb, el, ab, al = eb[keep_e], el[keep_e], ab[keep_a], al[keep_a]
    if len(eb) != len(ab):
        return False, f"{len(ab)} boxes above {SCORE_THRESHOLD}, expected {len(eb)}"
    used = set()
    for box, label in zip(eb, el):
        match = [i for i in range(len(ab)) if i not in used and al[i] == label
                 and np.allclose(ab[i], box, rtol=RTOL, atol=1e-2)]
        if not match:
            return False, f"no box matches {box.tolist()} (label {label})"
        used.add(match[0])
    return True, f"{len(eb)} boxes above {SCORE_THRESHOLD} match"


def failure(e):
    """An exporter's exception as its type and the lines that say why (the cause, not the banner)."""
    lines = [l.strip() for l in str(e).splitlines() if l.strip()]
    why = [l for l in lines if "Error" in l or "error" in l or "not supported" in l][:4] or lines[:2]
    cause = e.__cause__
    if cause is not None:
        why.append(f"caused by {type(cause).__name__}: {str(cause).strip().splitlines()[0][:300] if str(cause).strip() else ''}")
    return f"{type(e).__name__}: " + " | ".join(w[:300] for w in why)


def run(cmd, env=None, timeout=900):
    start = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    return p, time.time() - start


def saggar_run(binary, backend, model, data, outdir, requests, family, env=None):
    """`saggar check` then `saggar perf` at batch 1; returns a result dict.

    A detector's outputs are checked against PyTorch's as sets of boxes only: `perf`'s own check
    against saggar's eager evaluation compares them in order, and boxes of equal scores may swap."""
    result = {"backend": backend}
    check, _ = run([binary, "check", "--onnx", model, "--backend", backend, "--json", "-"], env=env)
    try:
        verdict = json.loads(check.stdout)["backends"][0]
    except (ValueError, KeyError, IndexError):
        return dict(result, status="error", reason=(check.stderr or check.stdout).strip()[-400:])
    if not verdict["supported"]:
        ops = sorted({r["op"] for r in verdict["refused"]})
        return dict(result, status="refused", ops=ops, refused=verdict["refused"][:20])
    report = os.path.join(outdir, f"perf-{backend}.json")
    exported = os.path.join(outdir, f"outputs-{backend}")
    # Batch 1 only: --max-batch 1 compiles that bucket alone (a UNet's larger buckets need more memory).
    cmd = [binary, "perf", "--backend", backend, "--onnx", model, "--load-inputs", data, "--trace", "const:1",
           "--max-batch", "1",
           "--requests", str(requests), "--export-outputs", exported, "--quiet", "--json", report]
    if family == "detection":
        cmd += ["--verify", "0"]
    p, seconds = run(cmd, env=env)
    if p.returncode != 0:
        return dict(result, status="failed", reason=p.stderr.strip()[-600:])
    perf = json.load(open(report))
    outs, k = [], 0
    while os.path.isfile(os.path.join(exported, "batch_1", f"output_{k}.pb")):
        outs.append(read_pb(os.path.join(exported, "batch_1", f"output_{k}.pb")))
        k += 1
    return dict(result, status="ran", p50_us=perf["latency_us"]["p50"], seconds=round(seconds, 1), outputs=outs)


def ort_run(model, feeds, requests):
    import numpy as np
    import onnxruntime as ort

    if hasattr(ort, "preload_dlls"):
        ort.preload_dlls()
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return {"status": "skipped", "reason": "no CUDAExecutionProvider"}
    s = ort.InferenceSession(model, providers=[("CUDAExecutionProvider", {"use_tf32": 0}), "CPUExecutionProvider"])
    names = [i.name for i in s.get_inputs()]
    feed = {n: np.ascontiguousarray(f) for n, f in zip(names, feeds)}
    for _ in range(10):
        outs = s.run(None, feed)
    times = []
    for _ in range(requests):
        t = time.perf_counter_ns()
        s.run(None, feed)
        times.append(time.perf_counter_ns() - t)
    times.sort()
    return {"status": "ran", "p50_us": times[len(times) // 2] / 1000.0, "outputs": outs}


def one(arch, family, build, exporter, args):
    import torch

    out = os.path.join(args.out, arch, exporter)
    data = os.path.join(out, "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    entry = {"arch": arch, "family": family, "exporter": exporter}
    module, names, feeds = build(args.tiny, args.seed)
    model = os.path.join(out, "model.onnx")
    try:
        export(module, names, feeds, model, exporter, dynamic_batch=family != "detection")
    except Exception as e:  # noqa: BLE001 - an exporter failure is a result
        return dict(entry, export="failed", reason=failure(e))
    entry["export"] = "ok"
    entry["model_bytes"] = os.path.getsize(model)
    device = "cuda" if torch.cuda.is_available() and not args.tiny else "cpu"
    expected = reference(module, feeds, device)
    arrays = [f.numpy() for f in feeds]
    for k, (n, a) in enumerate(zip(names, arrays)):
        write_pb(os.path.join(data, f"input_{k}.pb"), n, a)
    for k, e in enumerate(expected):
        write_pb(os.path.join(data, f"output_{k}.pb"), f"output_{k}", e)
    if args.export_only:
        return entry
    runs = []
    if args.saggar:
        runs.append(saggar_run(args.saggar, "cuda", model, data, out, args.requests, family))
    if args.saggar_hip and args.hip_fixture:
        env = dict(os.environ, LD_LIBRARY_PATH=args.hip_fixture + ":" + os.environ.get("LD_LIBRARY_PATH", ""))
        runs.append(saggar_run(args.saggar_hip, "hip", model, data, out, max(3, args.requests // 20), family, env=env))
    for r in runs:
        if r.get("status") == "ran":
            ok, why = compare(family, expected, r.pop("outputs"))
            r.update(correct=ok, check=why)
        entry[f"saggar_{r['backend']}"] = r
    if not args.no_ort:
        try:
            r = ort_run(model, arrays, args.requests)
            if r["status"] == "ran":
                ok, why = compare(family, expected, r.pop("outputs"))
                r.update(correct=ok, check=why)
        except Exception as e:  # noqa: BLE001
            r = {"status": "failed", "reason": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
        entry["ort_cuda"] = r
    return entry


def markdown(entries):
    lines = ["| arch | exporter | saggar CUDA | via HIP fixture | saggar p50 us | ORT CUDA p50 us | ratio |",
             "|---|---|---|---|---:|---:|---:|"]
    for e in entries:
        if e.get("export") != "ok":
            lines.append(f"| {e['arch']} | {e['exporter']} | export failed | | | | |")
            continue
        def verdict(r):
            if not r:
                return "-"
            if r["status"] == "ran":
                return "correct" if r.get("correct") else f"WRONG ({r.get('check')})"
            if r["status"] == "refused":
                return "refused: " + ", ".join(r["ops"][:6])
            return r["status"]
        s, h, o = e.get("saggar_cuda"), e.get("saggar_hip"), e.get("ort_cuda")
        sp = s.get("p50_us") if s else None
        op = o.get("p50_us") if o else None
        ratio = f"{sp / op:.2f}" if sp and op else ""
        lines.append(f"| {e['arch']} | {e['exporter']} | {verdict(s)} | {verdict(h)} | {sp or ''} | "
                     f"{f'{op:.0f}' if op else ''} | {ratio} |")
    return "\n".join(lines) + "\n"


def main():
    from architectures import ARCHITECTURES

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--saggar", help="the saggar CLI built with CUDA")
    p.add_argument("--saggar-hip", help="the saggar CLI built with --features hip")
    p.add_argument("--hip-fixture", help="the folder of saggar-hip-fixture's libraries")
    p.add_argument("--only", help="comma-separated architectures")
    p.add_argument("--exporters", default="torchscript,dynamo")
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--tiny", action="store_true", help="the tiny configurations")
    p.add_argument("--export-only", action="store_true")
    p.add_argument("--no-ort", action="store_true")
    args = p.parse_args()
    chosen = args.only.split(",") if args.only else list(ARCHITECTURES)
    entries = []
    for arch in chosen:
        family, build = ARCHITECTURES[arch]
        for exporter in args.exporters.split(","):
            start = time.time()
            try:
                entry = one(arch, family, build, exporter, args)
            except Exception as e:  # noqa: BLE001 - one architecture never stops the zoo
                entry = {"arch": arch, "family": family, "exporter": exporter, "export": "error",
                         "reason": f"{type(e).__name__}: {e}"[:400], "trace": traceback.format_exc()[-800:]}
            entry["seconds"] = round(time.time() - start, 1)
            entries.append(entry)
            print(f"zoo: {arch} [{exporter}] {entry.get('export')} "
                  f"{(entry.get('saggar_cuda') or {}).get('status', '')} in {entry['seconds']} s", flush=True)
            with open(os.path.join(args.out, "zoo.json"), "w") as f:
                json.dump(entries, f, indent=1, default=str)
    with open(os.path.join(args.out, "zoo.md"), "w") as f:
        f.write(markdown(entries))
    print(markdown(entries))


if __name__ == "__main__":
    main()
