#!/usr/bin/env python3
"""Data-parallel scaling over 1, 2 and 4 GPUs: cold start of a session group and its throughput.

For each model (default BERT-base and ResNet-50 from the zoo, exported with the TorchScript exporter,
batch axis dynamic) and each GPU count N that the machine has (default 1, 2, 4):
  1. cold start: `saggar warmup --devices 0..N-1` on an empty cache directory with the CUDA driver's
     own JIT cache off (CUDA_CACHE_DISABLE=1): its `ready_s`, from process start to every session
     ready (import, N device contexts opened at once, one compile, N-1 loads), is the time a group
     needs to be ready; the process's whole run (with its exit) is kept as `cold_s`. The model file is read once before
     (`saggar check`), so no N pays for a cold page cache;
  2. throughput: `saggar perf --devices 0..N-1` on a warm cache, batch --batch requests, --per-gpu
     closed-loop workers per GPU for --seconds, each request on the least loaded device; rows/s.
Every run on one machine in one call, so the ratios to N=1 are side by side. Targets (issue 40):
throughput x1.9 on 2 GPUs and x3.7 on 4; group cold start at most 1.2x the one-GPU cold start.
Writes OUT/scaling.json and OUT/scaling.md; exits 1 when a target is missed.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TARGETS = {2: 1.9, 4: 3.7}
COLD_BOUND = 1.2


def sh(cmd, log, env=None):
    started = time.time()
    with open(log, "w") as f:
        p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=900, env=env)
    return p.returncode, time.time() - started


def gpu_count():
    p = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    return len([line for line in p.stdout.splitlines() if line.startswith("GPU ")])


def export(models, out):
    os.makedirs(out, exist_ok=True)
    cmd = [sys.executable, os.path.join(HERE, "zoo.py"), "--out", out, "--only", ",".join(models),
           "--exporters", "torchscript", "--export-only"]
    rc, _ = sh(cmd, os.path.join(out, "export.log"))
    if rc != 0:
        sys.exit(f"scaling: export failed, see {out}/export.log")
    return {m: os.path.join(out, m, "torchscript", "model.onnx") for m in models}


def measure(args, model, name, n, out):
    devices = ",".join(str(i) for i in range(n))
    common = ["--backend", "cuda", "--devices", devices, "--onnx", model, "--max-batch", str(args.batch)]
    cold_dir = os.path.join(out, f"cache-cold-{name}-{n}")
    warm_json = os.path.join(out, f"warmup-{name}-{n}.json")
    cold_env = dict(os.environ, CUDA_CACHE_DISABLE="1")
    rc, cold_s = sh([args.saggar, "warmup", *common, "--cache-dir", cold_dir, "--json", warm_json],
                    os.path.join(out, f"warmup-{name}-{n}.log"), env=cold_env)
    if rc != 0:
        return {"gpus": n, "status": "failed", "step": "warmup"}
    warm = json.load(open(warm_json))
    row = {
        "gpus": n,
        "status": "ran",
        "cold_s": round(cold_s, 2),
        "ready_s": round(warm["ready_s"], 2),
        "opened_s": warm["opened_s"],
        "device_ready_s": [d["ready_s"] for d in warm["devices"]],
        "compiles": warm["compiles"],
        "rows_per_s": 0.0,
        "device_requests": [],
        "mismatches": 0,
    }
    if args.cold_only:
        return row
    perf_json = os.path.join(out, f"perf-{name}-{n}.json")
    rc, _ = sh([args.saggar, "perf", *common, "--cache-dir", os.path.join(out, f"cache-warm-{name}"),
                "--trace", f"const:{args.batch}", "--concurrency", str(args.per_gpu * n),
                "--duration", str(args.seconds), "--warmup-time", "2", "--verify", "4", "--quiet", "--json", perf_json],
               os.path.join(out, f"perf-{name}-{n}.log"))
    if rc != 0:
        return dict(row, status="failed", step="perf")
    perf = json.load(open(perf_json))
    return dict(
        row,
        rows_per_s=round(perf["rows_per_s"], 1),
        p50_us=perf["latency_us"]["p50"],
        p99_us=perf["latency_us"]["p99"],
        device_requests=[d["requests"] for d in perf["devices"]],
        mismatches=perf["verify"]["mismatches"],
    )


def judge(rows):
    base = next((r for r in rows if r["gpus"] == 1 and r["status"] == "ran"), None)
    ok = base is not None
    for r in rows:
        if r["status"] != "ran" or base is None:
            ok = False
            continue
        r["speedup"] = round(r["rows_per_s"] / base["rows_per_s"], 2) if base["rows_per_s"] else None
        r["cold_ratio"] = round(r["ready_s"] / base["ready_s"], 2)
        fast = r["speedup"] is None or r["speedup"] >= TARGETS.get(r["gpus"], 0)
        r["meets"] = fast and r["cold_ratio"] <= COLD_BOUND and r["mismatches"] == 0
        ok &= r["meets"]
    return ok


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--saggar", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--models", default="bert_base,resnet50")
    p.add_argument("--gpus", default="1,2,4")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--per-gpu", type=int, default=4)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--cold-only", action="store_true", help="cold starts only, no throughput runs")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    have = gpu_count()
    counts = [n for n in (int(g) for g in args.gpus.split(",")) if n <= have]
    print(f"scaling: {have} GPU(s); measuring N = {counts}", flush=True)
    models = export(args.models.split(","), os.path.join(args.out, "models"))
    results, ok = {}, True
    for name, model in models.items():
        rows = []
        sh([args.saggar, "check", "--onnx", model], os.path.join(args.out, f"check-{name}.log"))
        for n in counts:
            row = measure(args, model, name, n, args.out)
            rows.append(row)
            print(f"scaling: {name} N={n}: {row}", flush=True)
        ok &= judge(rows)
        results[name] = rows
    lines = ["| model | GPUs | rows/s | speedup | exit s (ready s) | ready ratio | compiles | requests per device |",
             "|---|---|---|---|---|---|---|---|"]
    for name, rows in results.items():
        for r in rows:
            if r["status"] != "ran":
                lines.append(f"| {name} | {r['gpus']} | failed at {r['step']} | | | | | |")
                continue
            lines.append(f"| {name} | {r['gpus']} | {r['rows_per_s']:,.0f} | {r.get('speedup', '')}x | {r['cold_s']} "
                         f"({r['ready_s']}) | {r.get('cold_ratio', '')}x | {r['compiles']} | {r['device_requests']} |")
    config = {"batch": args.batch, "per_gpu_workers": args.per_gpu, "seconds": args.seconds, "gpus_seen": have}
    json.dump({"config": config, "results": results, "targets_met": ok}, open(os.path.join(args.out, "scaling.json"), "w"),
              indent=1)
    with open(os.path.join(args.out, "scaling.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"scaling: targets {'met' if ok else 'MISSED'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
