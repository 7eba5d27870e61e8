"""Summarise a saggar GPU run: REPORT_DIR/report.json and report.txt (written by cargo xtask gpu-bundle)."""
import datetime, json, os, re, sys

report = sys.argv[1]
logs = os.path.join(report, "logs")
here = os.path.dirname(os.path.abspath(__file__))
gpus = [line.strip() for line in open(os.path.join(report, "gpus.csv")) if line.strip()]
out = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "gpus": gpus, "tests": [], "benches": []}
# Tests run with this label used saggar's HIP backend on an NVIDIA GPU through saggar-hip-fixture.
FIXTURE_RUN = "hip-fixture"
FIXTURE_NOTE = "HIP backend on CUDA via fixture"
for line in open(os.path.join(report, "tests.index")):
    label, name, rc = line.split()
    log = open(os.path.join(logs, f"test-{name}-{label}.log"), errors="replace").read()
    # Tests run with --nocapture, so what a test prints lands between "test NAME ... " and its result
    # ("test x ... SKIPPED cuda::x: why\nok"): read each test's result from its own segment of the log.
    skipped = {m.group(1) for m in re.finditer(r"SKIPPED \S+::(\S+): ", log)}
    starts = list(re.finditer(r"^test (\S+) \.\.\. ", log, re.M))
    for i, m in enumerate(starts):
        segment = log[m.end():starts[i + 1].start() if i + 1 < len(starts) else len(log)]
        stop = re.search(r"^(test result:|failures:|running \d+ tests?$)", segment, re.M)
        segment = segment[:stop.start()] if stop else segment
        outcome = re.search(r"(?:^|\n)(ok|FAILED|ignored)[ \t]*(?:\n|$)", segment)
        test, result = m.group(1), outcome.group(1) if outcome else "unknown"
        if result == "ok" and test in skipped:
            result = "skipped"
        entry = {"binary": name, "run": label, "test": test, "result": result}
        if label.startswith(FIXTURE_RUN):
            entry["backend"] = FIXTURE_NOTE
        out["tests"].append(entry)
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
# The fixture's own table of what it maps onto CUDA and what it refuses (hipErrorNotSupported).
fixture_dir = os.path.join(here, "hip-fixture")
fixture_tests = [t for t in out["tests"] if t["run"].startswith(FIXTURE_RUN)]
if os.path.isdir(fixture_dir):
    fixture = {"note": FIXTURE_NOTE + ": saggar's HIP backend run on an NVIDIA GPU through saggar-hip-fixture, a test-only "
                       "library implementing the hip*/hiprtc* symbols over the CUDA driver API and NVRTC. It checks the "
                       "HIP backend's logic and call sequences; it is not an AMD GPU or ROCm result.",
               "ran": bool(fixture_tests)}
    try:
        import ctypes
        lib = ctypes.CDLL(os.path.join(fixture_dir, "libhiprtc.so"))
        lib.saggar_hip_fixture_version.restype = ctypes.c_char_p
        lib.saggar_hip_fixture_symbols.restype = ctypes.c_char_p
        fixture["version"] = lib.saggar_hip_fixture_version().decode()
        fixture["symbols"] = [dict(zip(("symbol", "kind", "detail"), line.split("\t")))
                              for line in lib.saggar_hip_fixture_symbols().decode().splitlines()]
    except OSError as e:
        fixture["symbols_error"] = str(e)
    out["hip_fixture"] = fixture
# The PyTorch peers step (run.sh "peers"): its steps' exit codes, and the targets compare.py checked.
peers_index = os.path.join(report, "peers.index")
if os.path.exists(peers_index):
    peers = {"steps": [], "skipped": None, "targets": [], "table": None}
    for line in open(peers_index):
        kind, _, rest = line.strip().partition(" ")
        if kind == "skipped":
            peers["skipped"] = rest
        elif kind == "step":
            name, rc = rest.rsplit(" ", 1)
            peers["steps"].append({"step": name, "exit_code": int(rc)})
    summary = os.path.join(report, "peers", "summary.json")
    if os.path.exists(summary):
        peers["targets"] = json.load(open(summary)).get("targets", [])
    if os.path.exists(os.path.join(report, "peers.md")):
        peers["table"] = "peers.md"
    out["peers"] = peers
json.dump(out, open(os.path.join(report, "report.json"), "w"), indent=2)


def count(tests):
    counts = {}
    for t in tests:
        counts[t["result"]] = counts.get(t["result"], 0) + 1
    return ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) or "none"


native_tests = [t for t in out["tests"] if not t["run"].startswith(FIXTURE_RUN)]
lines = [f"saggar GPU run {out['date']}", "GPUs: " + ("; ".join(gpus) or "none"), "",
         "tests: " + count(native_tests)]
for t in native_tests:
    lines.append(f"  {t['result']:8} {t['run']:5} {t['binary']}::{t['test']}")
if "hip_fixture" in out:
    lines.append("")
    lines.append(f"{FIXTURE_NOTE} (saggar-hip-fixture {out['hip_fixture'].get('version', '?')}; NOT an AMD GPU result): "
                 + count(fixture_tests))
    for t in fixture_tests:
        lines.append(f"  {t['result']:8} {t['run']} {t['binary']}::{t['test']}")
    unsupported = [s["symbol"] for s in out["hip_fixture"].get("symbols", []) if s.get("kind") == "not-supported"]
    mapped = [s["symbol"] for s in out["hip_fixture"].get("symbols", []) if s.get("kind") == "mapped"]
    lines.append(f"  fixture symbols: {len(mapped)} mapped onto CUDA/NVRTC; not supported: {', '.join(unsupported) or 'none'}")
    lines.append("")
for b in out["benches"]:
    lines.append(f"bench {b['bench']}: exit {b['exit_code']}")
for s in out["sanitizer"]:
    expect = "must fail" if s["tool"] == "selftest" else "must pass"
    lines.append(f"sanitizer {s['tool']:9} {s['binary']}: exit {s['exit_code']}, errors {s['errors']} ({expect})")
    for f in s["findings"]:
        lines.append(f"    {s['last_test']}: {f}")
if "peers" in out:
    p = out["peers"]
    if p["skipped"]:
        lines.append(f"peers: skipped ({p['skipped']})")
    else:
        bad = [st["step"] for st in p["steps"] if st["exit_code"] != 0]
        lines.append(f"peers: {len(p['steps'])} steps, {len(bad)} failed{': ' + ' '.join(bad) if bad else ''}; "
                     f"table in {p['table'] or 'nothing (compare.py did not run)'}")
        for t in p["targets"]:
            lines.append(f"  {t['result']:4} {t['target']} {t['detail']}")
open(os.path.join(report, "report.txt"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines[:4]))
if "hip_fixture" in out:
    print(f"{FIXTURE_NOTE} (not an AMD GPU result): " + count(fixture_tests))
failed = [t for t in out["tests"] if t["result"] == "FAILED"] + [b for b in out.get("binaries", []) if b["exit_code"] != 0]
failed += [s for s in out["sanitizer"] if (s["exit_code"] != 86 if s["tool"] == "selftest" else s["exit_code"] != 0)]
failed += [st for st in out.get("peers", {}).get("steps", []) if st["exit_code"] != 0]  # a MISS is not a failure
sys.exit(1 if failed else 0)
