"""Summarise a kiln GPU run: REPORT_DIR/report.json and report.txt (written by cargo xtask gpu-bundle)."""
import datetime, json, os, re, sys

report = sys.argv[1]
logs = os.path.join(report, "logs")
gpus = [line.strip() for line in open(os.path.join(report, "gpus.csv")) if line.strip()]
out = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "gpus": gpus, "tests": [], "benches": []}
for line in open(os.path.join(report, "tests.index")):
    label, name, rc = line.split()
    log = open(os.path.join(logs, f"test-{name}-{label}.log"), errors="replace").read()
    skipped = {m.group(1) for m in re.finditer(r"^SKIPPED \S+::(\S+): ", log, re.M)}
    for m in re.finditer(r"^test (\S+) \.\.\. (ok|FAILED|ignored)", log, re.M):
        test, result = m.group(1), m.group(2)
        if result == "ok" and test in skipped:
            result = "skipped"
        out["tests"].append({"binary": name, "run": label, "test": test, "result": result})
    out.setdefault("binaries", []).append({"binary": name, "run": label, "exit_code": int(rc)})
for line in open(os.path.join(report, "benches.index")):
    name, rc = line.split()
    path = os.path.join(report, f"bench-{name}.json")
    data = json.load(open(path)) if os.path.exists(path) else None
    out["benches"].append({"bench": name, "exit_code": int(rc), "results": data})
out["sanitizer"] = []
san_index = os.path.join(report, "sanitizer.index")
if os.path.exists(san_index):
    for line in open(san_index):
        tool, name, rc = line.split()
        log_name = "sanitizer-selftest.log" if tool == "selftest" else f"sanitizer-{tool}-{name}.log"
        log = open(os.path.join(logs, log_name), errors="replace").read()
        summary = re.findall(r"ERROR SUMMARY: (\d+) error", log)
        findings = re.findall(r"^========= (Invalid .*|.*[Hh]azard.*|Uninitialized .*|Barrier error.*)$", log, re.M)[:10]
        current = re.findall(r"^test (\S+) \.\.\. ", log, re.M)
        out["sanitizer"].append({"tool": tool, "binary": name, "exit_code": int(rc),
                                 "errors": int(summary[-1]) if summary else None, "findings": findings,
                                 "last_test": current[-1] if current else None})
json.dump(out, open(os.path.join(report, "report.json"), "w"), indent=2)
counts = {}
for t in out["tests"]:
    counts[t["result"]] = counts.get(t["result"], 0) + 1
lines = [f"kiln GPU run {out['date']}", "GPUs: " + ("; ".join(gpus) or "none"), "",
         "tests: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))]
for t in out["tests"]:
    lines.append(f"  {t['result']:8} {t['run']:5} {t['binary']}::{t['test']}")
for b in out["benches"]:
    lines.append(f"bench {b['bench']}: exit {b['exit_code']}")
for s in out["sanitizer"]:
    expect = "must fail" if s["tool"] == "selftest" else "must pass"
    lines.append(f"sanitizer {s['tool']:9} {s['binary']}: exit {s['exit_code']}, errors {s['errors']} ({expect})")
    for f in s["findings"]:
        lines.append(f"    {s['last_test']}: {f}")
open(os.path.join(report, "report.txt"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines[:4]))
failed = [t for t in out["tests"] if t["result"] == "FAILED"] + [b for b in out.get("binaries", []) if b["exit_code"] != 0]
failed += [s for s in out["sanitizer"] if (s["exit_code"] != 86 if s["tool"] == "selftest" else s["exit_code"] != 0)]
sys.exit(1 if failed else 0)
