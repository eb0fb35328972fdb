#!/usr/bin/env python3
"""test_http_coverage.py — coverage mode through the pipeline (issue 16 item 4): nebula-coordinator --spec mtp
--spec-coverage 0.5 on tiny-b (tiny-a's tokenizer) with a placement of half the experts in VRAM (nebula-prepare; the
rest in RAM, the cpu-moe-worker's): the gpu-worker verifies with its VRAM experts only (STEP_FLAG_COVERAGE), and
timings.speculative.coverage counts one case a window and the handoff rows, /metrics has nebula_spec_cases_total and
nebula_spec_handoff_rows_total, `nebulactl stats` prints the cases; a server without coverage mode counts no case;
--spec-coverage without --spec, a bad value and a bad engine.spec_coverage are refused.  Standard library only
(test_http_api.py's server and calls).  Prints "N checks, N failed"; exits 1 on any failure.  Run from the
repository root (BUILD=build); SPEC_BACKEND=cuda runs the gpu-worker on the CUDA backend (its slots the resident
experts: tests/cuda/run-verify-on-gpu.sh).
"""
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_http_api as h  # noqa: E402

HELLO = [{"role": "user", "content": "hello"}]
BACKEND = os.environ.get("SPEC_BACKEND", "cpu")


def ready():
    for _ in range(600):  # the workers start after HTTP is up
        if h.jcall("GET", "/api/status")[1].get("phase") == "ready":
            return True
        time.sleep(0.05)
    return False


def main():
    tmp = tempfile.mkdtemp()
    check = h.check
    try:
        model = h.tiny_b_demo(tmp)
        prep = os.path.join(tmp, "probe")
        subprocess.run([os.path.join(h.BIN, "nebula-prepare"), model, prep, "--vram-budget", "all", "--ram-budget", "0", "-q"], check=True)
        d = json.load(open(os.path.join(prep, "placement.json")))
        budget = d["model"]["vram_fixed_bytes"] + 18 * d["layers"][0]["blob_bytes"]
        half = os.path.join(tmp, "half")
        subprocess.run([os.path.join(h.BIN, "nebula-prepare"), model, half, "--vram-budget", str(budget), "--ram-budget", "all", "-q"],
                       check=True)
        h.srv = h.Server(tmp, model=model, args=("--spec", "mtp", "--backend", BACKEND, "--prepared", half, "--spec-coverage", "0.5"))
        check(ready(), "coverage server ready: " + open(h.srv.log).read()[-500:])
        st, d = h.jcall("POST", "/v1/chat/completions", {"messages": HELLO, "max_tokens": 32, "temperature": 0})
        s = ((d.get("timings") or {}).get("speculative")) or {}
        cv = s.get("coverage") or {}
        check(st == 200 and s.get("passes", 0) > 0, f"a chat in coverage mode: {st} {d}")
        check(cv and cv["case_a"] + cv["case_b"] + cv["case_c"] == s["passes"] and cv["handoff_rows"] > 0,
              f"timings.speculative.coverage: one case a window, handoff rows: {s}")
        st, _, raw = h.call("GET", "/metrics")
        m = {l.split()[0]: float(l.split()[1]) for l in raw.decode().splitlines() if l.startswith("nebula_spec_") and " " in l}
        cases = [m.get(f'nebula_spec_cases_total{{case="{c}"}}', -1) for c in "ABC"]
        check(st == 200 and min(cases) >= 0 and sum(cases) >= s.get("passes", 1) and m.get("nebula_spec_handoff_rows_total", 0) > 0,
              f"/metrics: cases {cases}, handoff rows {m.get('nebula_spec_handoff_rows_total')}")
        out = subprocess.run([os.path.join(h.BIN, "nebulactl"), "--runtime", h.srv.run, "stats"], capture_output=True, text=True)
        check(out.returncode == 0 and "coverage mode: cases A " in out.stdout, f"nebulactl stats: {out.stdout[-400:]} {out.stderr}")
        h.srv.stop()
        h.srv = h.Server(tmp, model=model, name="-exact", args=("--spec", "mtp", "--backend", BACKEND, "--prepared", half))
        check(ready(), "exact server ready")
        st, d = h.jcall("POST", "/v1/chat/completions", {"messages": HELLO, "max_tokens": 16, "temperature": 0})
        s = ((d.get("timings") or {}).get("speculative")) or {}
        check(st == 200 and s.get("passes", 0) > 0 and "coverage" not in s, f"exact mode counts no case: {s}")
        st, _, raw = h.call("GET", "/metrics")
        check('nebula_spec_cases_total{case="B"} 0' in raw.decode(), "exact mode: /metrics cases 0")
        h.srv.stop()
        h.srv = None
        conf = os.path.join(tmp, "bad.conf")
        open(conf, "w").write("[engine]\nspec_coverage = 1.5\n")
        for args, want in ((["--spec-coverage", "0.9"], "goes with --spec"), (["--spec", "mtp", "--spec-coverage", "2"], "fraction in (0, 1]"),
                           (["--spec", "mtp", "--config", conf], "engine.spec_coverage")):
            p = subprocess.run([os.path.join(h.BIN, "nebula-coordinator"), "--model", model, "--runtime", os.path.join(tmp, "run-x"),
                                "--http", "off", *args], capture_output=True, text=True, timeout=60)
            check(p.returncode != 0 and want in p.stderr, f"refused {args}: {p.returncode} {p.stderr[-300:]}")
    finally:
        h.finish_suite(tmp)
    print(f"{h.checks} checks, {len(h.failures)} failed")
    sys.exit(1 if h.failures else 0)


if __name__ == "__main__":
    main()
