#!/usr/bin/env python3
"""prompt-cache-ttft.py — time to first token per turn of a chat, with and without the prompt cache
(issue 17; docs/BENCHMARKS.md, "Prompt cache").

Starts nebula-coordinator twice on MODEL (default: the demo model, tests/fixtures/tiny-a converted to
f32), once with --cache off and once with --cache on (a fresh --cache-dir), and runs the same TURNS-turn
conversation through /v1/chat/completions on each (greedy, think off, MAX_TOKENS a turn, user
messages of about WORDS words).  Prints a markdown table: per turn the prompt tokens, the TTFT without
the cache, the tokens the cache held, the tokens prefilled with it (timings.prompt_prefilled) and the
TTFT with it, and whether the answers are the same (they must be: a resumed state is exact within
float tolerance, and the answers tested were always identical).  --append adds the table to docs/BENCHMARKS.md under a dated heading.

    tools/bench/prompt-cache-ttft.py [--model M.gguf] [--backend cpu|cuda] [--turns 10] [--words 60]
                                     [--max-tokens 16] [--threads N] [--label TEXT] [--append]
Run from the repository root (BUILD=build)."""
import argparse
import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

BUILD = os.environ.get("BUILD", "build")
BIN = os.path.join(BUILD, "bin")
WORDS = ("river stone cloud lantern orchard copper meadow harbor violet signal quiet amber north window garden silver "
         "thunder paper candle marble").split()


def start(model, run, log, args):
    p = subprocess.Popen([os.path.join(BIN, "nebula-coordinator"), "--model", model, "--runtime", run, "--http", "127.0.0.1:0",
                          *args], stderr=open(log, "wb"), start_new_session=True)
    port = None
    for _ in range(1200):
        m = re.search(rb"http on http://127\.0\.0\.1:(\d+)", open(log, "rb").read())
        if m:
            port = int(m.group(1))
            break
        if p.poll() is not None:
            break
        time.sleep(0.05)
    if not port:
        sys.exit("the coordinator did not start:\n" + open(log, errors="replace").read())
    for _ in range(6000):
        if post(port, "/api/status", None).get("phase") == "ready":
            return p, port
        time.sleep(0.1)
    sys.exit("the coordinator never became ready:\n" + open(log, errors="replace").read())


def post(port, path, body):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=3600) as r:
        return json.loads(r.read())


def stop(p, run):
    subprocess.run([os.path.join(BIN, "nebulactl"), "--runtime", run, "shutdown"], capture_output=True, timeout=60)
    try:
        p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def conversation(port, turns, words, max_tokens):
    hist, rows = [], []
    for k in range(turns):
        hist.append({"role": "user", "content": "Turn %d: " % k + " ".join(WORDS[(k * 7 + i * 3) % len(WORDS)] for i in range(words))})
        d = post(port, "/v1/chat/completions", {"messages": hist, "max_tokens": max_tokens, "temperature": 0, "think": False})
        text = d["choices"][0]["message"].get("content") or ""
        rows.append({"prompt": d["usage"]["prompt_tokens"], "cached": d["usage"]["prompt_tokens_details"]["cached_tokens"],
                     "prefilled": d["timings"].get("prompt_prefilled", d["usage"]["prompt_tokens"]),
                     "ttft_ms": d["timings"]["ttft_ms"], "prompt_ms": d["timings"]["prompt_ms"], "text": text})
        hist.append({"role": "assistant", "content": text})
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--words", type=int, default=60)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--label", default="")
    ap.add_argument("--append", action="store_true")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="nebula-pcache-bench-")
    try:
        model = a.model
        if not model:
            model = os.path.join(tmp, "demo.gguf")
            subprocess.run([os.path.join(BIN, "nebula-convert"), "tests/fixtures/tiny-a", model, "--type", "f32", "-q"], check=True)
        common = ["--backend", a.backend] + (["--threads", str(a.threads)] if a.threads else [])
        res = {}
        for name, extra in (("off", ["--cache", "off"]), ("on", ["--cache", "on", "--cache-dir", os.path.join(tmp, "kv")])):
            run = os.path.join(tmp, "run-" + name)
            p, port = start(model, run, os.path.join(tmp, name + ".log"), common + extra)
            try:
                res[name] = conversation(port, a.turns, a.words, a.max_tokens)
            finally:
                stop(p, run)
        lines = ["| turn | prompt tokens | TTFT, cache off (ms) | cached tokens | prefilled | TTFT, cache on (ms) | off / on | same answer |",
                 "|---:|---:|---:|---:|---:|---:|---:|:---:|"]
        for k, (o, n) in enumerate(zip(res["off"], res["on"])):
            lines.append("| %d | %d | %.1f | %d | %d | %.1f | %.2f | %s |" % (k, o["prompt"], o["ttft_ms"], n["cached"], n["prefilled"],
                                                                         n["ttft_ms"], o["ttft_ms"] / n["ttft_ms"] if n["ttft_ms"] else 0,
                                                                         "yes" if o["text"] == n["text"] else "**no**"))
        so, sn = sum(r["ttft_ms"] for r in res["off"]), sum(r["ttft_ms"] for r in res["on"])
        lines.append("| all | %d | %.1f | %d | %d | %.1f | %.2f | |" % (sum(r["prompt"] for r in res["off"]), so,
                                                                        sum(r["cached"] for r in res["on"]),
                                                                        sum(r["prefilled"] for r in res["on"]), sn, so / sn if sn else 0))
        table = "\n".join(lines)
        print(table)
        same = all(o["text"] == n["text"] for o, n in zip(res["off"], res["on"]))
        if not same:
            print("the answers differ with the cache: they must not (docs/ARCHITECTURE.md, \"Prompt cache\")", file=sys.stderr)
        if a.append:
            stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ")
            head = "\n## Prompt cache: TTFT per turn with and without (issue 17) — %s\n\n" % stamp
            desc = ("`tools/bench/prompt-cache-ttft.py --backend %s --turns %d --words %d --max-tokens %d` on %s%s. "
                    "TTFT is the server's `timings.ttft_ms` (queue to first token).\n\n"
                    % (a.backend, a.turns, a.words, a.max_tokens, a.model or "the demo model (tiny-a, f32)",
                       (", " + a.label) if a.label else ""))
            with open("docs/BENCHMARKS.md", "a") as f:
                f.write(head + desc + table + "\n")
        return 0 if same else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
