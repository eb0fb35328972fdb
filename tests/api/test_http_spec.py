#!/usr/bin/env python3
"""test_http_spec.py — speculative decoding's faces in the HTTP API (issue 16 items 3 and 8).

The real pipeline with --spec mtp --backend cpu on tiny-b (an MTP block) given tiny-a's tokenizer:
accuracy_level in a chat request is echoed and runs (nebula.accuracy_level_effective), a structured
output runs exact (effective 3); timings.speculative carries the passes, tokens a pass, drafts,
acceptance by position and the window trajectory, streamed too; /v1/messages and /v1/responses take
accuracy_level and refuse one out of range with a 400 naming it; /metrics, /api/status and
`nebulactl stats` show the totals; and level 3's answers, greedy and sampled, are those of a
server without --spec, word for word.  Standard library only (test_http_api.py's server and calls).
Prints "N checks, N failed"; exits 1 on any failure.  Run from the repository root (BUILD=build).
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


def spec_of(d):
    return (d.get("timings") or {}).get("speculative")


def main():
    tmp = tempfile.mkdtemp()
    try:
        model = h.tiny_b_demo(tmp)
        h.srv = h.Server(tmp, model=model, args=("--spec", "mtp", "--backend", "cpu"))
        check = h.check
        for _ in range(600):  # the workers start after HTTP is up
            if h.jcall("GET", "/api/status")[1].get("phase") == "ready":
                break
            time.sleep(0.05)
        st, d = h.jcall("POST", "/v1/chat/completions", {"messages": HELLO, "max_tokens": 24, "temperature": 0, "accuracy_level": 1})
        check(st == 200, f"level 1 chat: {st} {d}")
        check(d.get("nebula", {}).get("accuracy_level") == 1 and d["nebula"].get("accuracy_level_effective") == 1,
              f"level 1 runs at level 1: {d.get('nebula')}")
        s = spec_of(d) or {}
        check(s.get("passes", 0) > 0 and s["tokens_per_pass"] >= 1 and s["drafted"] >= s["accepted"] >= s["nongreedy_accepted"] >= 0,
              f"timings.speculative: {s}")
        check(len(s.get("windows", [])) == s.get("passes") and s.get("drafters", {}).get("mtp") == s.get("passes"),
              f"the trajectory and the drafters: {s}")
        check(len(s.get("acceptance_by_position", [])) >= 4 and s["drafted_by_position"][0] == s["passes"],
              f"acceptance by position: {s}")
        check(s.get("tokens") == d["usage"]["completion_tokens"] - 1, f"the windows gave every token but the prefill's: {s} {d['usage']}")
        st, d = h.jcall("POST", "/v1/chat/completions", {"messages": HELLO, "max_tokens": 16, "temperature": 0, "accuracy_level": 2,
                                                         "response_format": {"type": "json_object"}})
        check(st == 200 and d.get("nebula", {}).get("accuracy_level_effective") == 3, f"a grammar runs exact: {st} {d.get('nebula')}")
        st, d = h.jcall("POST", "/v1/chat/completions", {"messages": HELLO, "max_tokens": 16, "temperature": 0})
        check(st == 200 and d["nebula"]["accuracy_level_effective"] == 3 and spec_of(d), f"default level 3: {d.get('nebula')}")
        st, _, raw = h.call("POST", "/v1/chat/completions", {"messages": HELLO, "max_tokens": 12, "stream": True, "accuracy_level": 2})
        events = [json.loads(l[6:]) for l in raw.decode().splitlines() if l.startswith("data: {")]
        last = [e for e in events if e.get("timings")]
        check(st == 200 and last and spec_of(last[-1]) and last[-1]["nebula"]["accuracy_level_effective"] == 2,
              f"streamed: the last chunk's timings.speculative ({raw[-400:]!r})")
        for path, body in (("/v1/messages", {"model": "nebula-demo", "max_tokens": 8, "messages": HELLO}),
                           ("/v1/responses", {"model": "nebula-demo", "max_output_tokens": 8, "input": "hello"})):
            st, d = h.jcall("POST", path, dict(body, accuracy_level=2))
            check(st == 200, f"{path} takes accuracy_level: {st} {d}")
            for bad in (0, 4, "2"):
                st, d = h.jcall("POST", path, dict(body, accuracy_level=bad))
                err = d.get("error", {})  # Anthropic's errors name no param: the message does
                check(st == 400 and (err.get("param") == "accuracy_level" or "'accuracy_level'" in err.get("message", "")),
                      f"{path} accuracy_level {bad!r}: {st} {d}")
        st, d = h.jcall("POST", "/v1/chat/completions", {"messages": HELLO, "accuracy_level": 1.5})
        check(st == 400 and d.get("error", {}).get("param") == "accuracy_level", f"chat accuracy_level 1.5: {st} {d}")
        st, _, raw = h.call("GET", "/metrics")
        m = raw.decode()
        passes = [l for l in m.splitlines() if l.startswith('nebula_spec_passes_total{drafter="mtp"}')]
        check(st == 200 and passes and int(passes[0].split()[-1]) > 0 and 'nebula_spec_drafts_total{outcome="proposed"}' in m
              and 'nebula_spec_acceptance_by_position{position="1"}' in m, f"/metrics: {passes}")
        st, d = h.jcall("GET", "/api/status")
        check(st == 200 and d["stats"]["speculative"]["passes"] > 0, f"/api/status stats.speculative: {d.get('stats')}")
        out = subprocess.run([os.path.join(h.BIN, "nebulactl"), "--runtime", h.srv.run, "stats"], capture_output=True, text=True)
        check(out.returncode == 0 and "speculative: " in out.stdout and "accepted by position: 1:" in out.stdout,
              f"nebulactl stats: {out.stdout[-300:]} {out.stderr}")
        # Level 3 is exact: the same answers as a server without speculation (same model, same seeds; the
        # prompt cache kept out: the earlier requests' checkpoints would make the usage's cached_tokens differ).
        bodies = [{"messages": HELLO, "max_tokens": 40, "temperature": 0, "accuracy_level": 3, "cache_prompt": False},
                  {"messages": HELLO, "max_tokens": 40, "temperature": 0.9, "seed": 3, "accuracy_level": 3, "cache_prompt": False},
                  {"prompt": "once upon a time", "max_tokens": 40, "temperature": 0, "cache_prompt": False}]
        spec = [h.jcall("POST", "/v1/completions" if "prompt" in b else "/v1/chat/completions", b)[1] for b in bodies]
        h.srv.stop()
        h.srv = h.Server(tmp, model=model, name="-off", args=("--backend", "cpu"))
        for _ in range(600):
            if h.jcall("GET", "/api/status")[1].get("phase") == "ready":
                break
            time.sleep(0.05)
        for b, d in zip(bodies, spec):
            st, p = h.jcall("POST", "/v1/completions" if "prompt" in b else "/v1/chat/completions", b)
            def text(x):  # the completion's text, or the chat's reasoning and answer
                c = x["choices"][0]
                return c["text"] if "text" in c else (c["message"].get("reasoning_content") or "") + "|" + (c["message"]["content"] or "")
            check(st == 200 and spec_of(d) and not spec_of(p) and text(d) == text(p) and text(d).strip("|")
                  and d["usage"] == p["usage"],
                  f"level 3 = no speculation ({b}): {text(d)!r} vs {text(p)!r}")
    finally:
        h.finish_suite(tmp)
    print(f"{h.checks} checks, {len(h.failures)} failed")
    sys.exit(1 if h.failures else 0)


if __name__ == "__main__":
    main()
