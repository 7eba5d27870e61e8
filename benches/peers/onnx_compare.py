#!/usr/bin/env python3
"""One table of `saggar perf --onnx` against its PyTorch peers (onnx_peers.py), with the issue's targets.

Usage: onnx_compare.py --runs DIR --out peers-onnx.md --json summary.json
DIR holds, per run TAG, saggar-TAG.json (saggar perf --json) and torch-TAG.json (onnx_peers.py --json).
"""
import argparse
import glob
import json
import os

# (model, trace, concurrency, metric, peer variants, needed ratio): saggar / peer, above 1 is saggar faster.
TARGETS = [
    ("bert", "const:1", 1, "p50", ["graphs"], 1.5),
    ("bert-base", "const:1", 1, "p50", ["graphs"], 1.5),
    ("bert", "const:64", 1, "p50", ["graphs"], 1.0),
    ("bert-base", "const:64", 1, "p50", ["graphs"], 1.0),
    ("dlrm", "const:1", 1, "p50", ["graphs"], 1.5),
    ("dlrm", "uniform:1..64", 8, "throughput", ["eager", "graphs"], 1.5),
    ("cnn", "const:1", 1, "p50", ["graphs"], 1.0),
]


def f(x, fmt="{:.1f}"):
    return "n/a" if x is None else fmt.format(x)


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--runs", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--json", required=True)
    a = p.parse_args(argv)
    rows, index = [], {}
    for path in sorted(glob.glob(os.path.join(a.runs, "saggar-*.json"))):
        tag = os.path.basename(path)[len("saggar-"):-len(".json")]
        saggar = json.load(open(path))
        peer_path = os.path.join(a.runs, f"torch-{tag}.json")
        peer = json.load(open(peer_path)) if os.path.isfile(peer_path) else {"variants": {}}
        suffix = "-{}-c{}".format(saggar["trace"].replace(":", "_").replace(".", "_"), saggar["concurrency"])
        model = peer.get("model") or (tag[: -len(suffix)] if tag.endswith(suffix) else tag)
        key = (model, saggar["trace"], saggar["concurrency"])
        index[key] = (saggar, peer)
        rows.append((key, saggar, peer))
    lines = ["# saggar perf --onnx against PyTorch on the same models, weights, inputs and traces", "",
             "| model | trace | conc. | system | p50 us | p99 us | req/s | vs saggar out (max abs) | notes |",
             "|---|---|---|---|---|---|---|---|---|"]
    for (model, trace, conc), s, peer in rows:
        st = s.get("stages", {})
        mean, split = st.get("mean") or {}, st.get("device_split") or {}
        su = s.get("startup", {})
        if mean.get("device_us") is None:
            split_note = f"stages not separated (split, axis-padded or per-shape requests), queue {f(mean.get('queue_wait_us'))};"
        else:
            split_note = (f"gather {f(mean.get('gather_us'))}, enqueue {f(mean.get('enqueue_us'))}, device {f(mean.get('device_us'))}"
                          f" (h2d {f(split.get('h2d_us'))}, compute {f(split.get('compute_us'))}, d2h {f(split.get('d2h_us'))}),"
                          f" sync {f(mean.get('sync_us'))}, scatter {f(mean.get('scatter_us'))}, queue {f(mean.get('queue_wait_us'))};")
        firsts = sum(r["us"] for r in su.get("first_runs", [])) / 1e6
        note = (f"{split_note} startup: import {f(su.get('import_s'), '{:.2f}')} s, session {f(su.get('session_s'), '{:.2f}')} s,"
                f" first runs {firsts:.2f} s, warmup {f(su.get('warmup_s'), '{:.2f}')} s, timed captures {su.get('timed_captures')}")
        l = s["latency_us"]
        lines.append(f"| {model} | {trace} | {conc} | saggar | {f(l['p50'])} | {f(l['p99'])} | {f(s['throughput_rps'])} | "
                     f"verify max rel {s['verify']['max_rel_error']:.1e} | {note} |")
        for name, v in peer.get("variants", {}).items():
            if v.get("status") != "ok":
                lines.append(f"| | | | {name} | | | | | {v.get('status')} |")
                continue
            extra = f"compile {v['compile_s']:.1f} s" if "compile_s" in v else ""
            lines.append(f"| | | | {name} | {f(v.get('p50_us'))} | {f(v.get('p99_us'))} | {f(v.get('throughput_rps'))} | "
                         f"{f(v.get('max_abs_diff_vs_saggar'), '{:.1e}')} | {extra} |")
    lines += ["", "## Targets", "", "| target | saggar | peer | ratio | needed | result |", "|---|---|---|---|---|---|"]
    targets = []
    for model, trace, conc, metric, variants, needed in TARGETS:
        got = index.get((model, trace, conc))
        name = f"{model} {trace} c{conc} {metric} vs {'best of ' if len(variants) > 1 else ''}{'/'.join(variants)}"
        if not got:
            targets.append({"target": name, "result": "not run"})
            continue
        s, peer = got
        oks = [peer["variants"][v] for v in variants if peer["variants"].get(v, {}).get("status") == "ok"]
        if not oks:
            targets.append({"target": name, "result": "no peer result"})
            continue
        if metric == "p50":
            mine, theirs = s["latency_us"]["p50"], min(v["p50_us"] for v in oks)
            ratio = theirs / mine
        else:
            mine, theirs = s["throughput_rps"], max(v["throughput_rps"] for v in oks)
            ratio = mine / theirs
        res = "met" if ratio >= needed else f"missed by {100 * (1 - ratio / needed):.0f}%"
        targets.append({"target": name, "saggar": mine, "peer": theirs, "ratio": ratio, "needed": needed, "result": res})
    # Startup: saggar's cold start (session creation and warmup captures) against max-autotune's compile.
    for (model, trace, conc), s, peer in rows:
        cm = peer.get("variants", {}).get("compile-max", {})
        compile_s = cm.get("compile_s") or cm.get("compile_s_at_least")
        if compile_s:
            # Session creation (every bucket compiled) plus each distinct batch's first run (its capture).
            cold = s["startup"]["session_s"] + sum(r["us"] for r in s["startup"]["first_runs"]) / 1e6
            ratio = compile_s / cold
            targets.append({"target": f"{model} cold start vs max-autotune compile", "saggar": cold, "peer": compile_s,
                            "ratio": ratio, "needed": 10.0,
                            "result": "met" if ratio >= 10 else f"missed by {100 * (1 - ratio / 10):.0f}%"})
    for t in targets:
        lines.append(f"| {t['target']} | {f(t.get('saggar'), '{:.3f}')} | {f(t.get('peer'), '{:.3f}')} | "
                     f"{f(t.get('ratio'), '{:.2f}x')} | {f(t.get('needed'), '{:.1f}x')} | {t['result']} |")
        print(f"target {t['target']}: {t['result']}")
    with open(a.out, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    with open(a.json, "w") as fh:
        json.dump({"runs": [{"model": k[0], "trace": k[1], "concurrency": k[2], "saggar": s, "peers": pr}
                            for k, s, pr in rows], "targets": targets}, fh, indent=1)


if __name__ == "__main__":
    main()
