"""Summarise a kiln GPU run: REPORT_DIR/report.json and report.txt (written by cargo xtask gpu-bundle)."""
import datetime, json, os, re, sys

report = sys.argv[1]
logs = os.path.join(report, "logs")
here = os.path.dirname(os.path.abspath(__file__))
gpus = [line.strip() for line in open(os.path.join(report, "gpus.csv")) if line.strip()]
out = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "gpus": gpus, "tests": [], "benches": []}
# Tests run with this label used kiln's HIP backend on an NVIDIA GPU through kiln-hip-fixture.
FIXTURE_RUN = "hip-fixture"
FIXTURE_NOTE = "HIP backend on CUDA via fixture"
for line in open(os.path.join(report, "tests.index")):
    label, name, rc = line.split()
    log = open(os.path.join(logs, f"test-{name}-{label}.log"), errors="replace").read()
    skipped = {m.group(1) for m in re.finditer(r"^SKIPPED \S+::(\S+): ", log, re.M)}
    for m in re.finditer(r"^test (\S+) \.\.\. (ok|FAILED|ignored)", log, re.M):
        test, result = m.group(1), m.group(2)
        if result == "ok" and test in skipped:
            result = "skipped"
        entry = {"binary": name, "run": label, "test": test, "result": result}
        if label == FIXTURE_RUN:
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
fixture_tests = [t for t in out["tests"] if t["run"] == FIXTURE_RUN]
if os.path.isdir(fixture_dir):
    fixture = {"note": FIXTURE_NOTE + ": kiln's HIP backend run on an NVIDIA GPU through kiln-hip-fixture, a test-only "
                       "library implementing the hip*/hiprtc* symbols over the CUDA driver API and NVRTC. It checks the "
                       "HIP backend's logic and call sequences; it is not an AMD GPU or ROCm result.",
               "ran": bool(fixture_tests)}
    try:
        import ctypes
        lib = ctypes.CDLL(os.path.join(fixture_dir, "libhiprtc.so"))
        lib.kiln_hip_fixture_version.restype = ctypes.c_char_p
        lib.kiln_hip_fixture_symbols.restype = ctypes.c_char_p
        fixture["version"] = lib.kiln_hip_fixture_version().decode()
        fixture["symbols"] = [dict(zip(("symbol", "kind", "detail"), line.split("\t")))
                              for line in lib.kiln_hip_fixture_symbols().decode().splitlines()]
    except OSError as e:
        fixture["symbols_error"] = str(e)
    out["hip_fixture"] = fixture
json.dump(out, open(os.path.join(report, "report.json"), "w"), indent=2)


def count(tests):
    counts = {}
    for t in tests:
        counts[t["result"]] = counts.get(t["result"], 0) + 1
    return ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) or "none"


native_tests = [t for t in out["tests"] if t["run"] != FIXTURE_RUN]
lines = [f"kiln GPU run {out['date']}", "GPUs: " + ("; ".join(gpus) or "none"), "",
         "tests: " + count(native_tests)]
for t in native_tests:
    lines.append(f"  {t['result']:8} {t['run']:5} {t['binary']}::{t['test']}")
if "hip_fixture" in out:
    lines.append("")
    lines.append(f"{FIXTURE_NOTE} (kiln-hip-fixture {out['hip_fixture'].get('version', '?')}; NOT an AMD GPU result): "
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
open(os.path.join(report, "report.txt"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines[:4]))
if "hip_fixture" in out:
    print(f"{FIXTURE_NOTE} (not an AMD GPU result): " + count(fixture_tests))
failed = [t for t in out["tests"] if t["result"] == "FAILED"] + [b for b in out.get("binaries", []) if b["exit_code"] != 0]
failed += [s for s in out["sanitizer"] if (s["exit_code"] != 86 if s["tool"] == "selftest" else s["exit_code"] != 0)]
sys.exit(1 if failed else 0)
