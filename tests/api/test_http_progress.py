#!/usr/bin/env python3
"""test_http_progress.py — prefill progress over the HTTP API (docs/API.md, "Streaming" and
"GET /api/status"), on test_http_api.py's server (the real pipeline on the demo model) and with
its helpers: a prompt prefilled in many steps gets `: prefill DONE/TOTAL` comments after each
step, on chat and completions, with the same answer as in fewer steps; a step that takes long
(the gpu-worker paused with SIGSTOP: the server has no delay knob) gets its progress again as the
keep-alive, and /api/status's `prefill` shows the same numbers meanwhile, null otherwise.
Standard library only.  Prints "N checks, N failed"; exits 1 on any failure.  Run from the
repository root (BUILD=build).
"""
import os
import signal
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__/ in the tree for the import below
from test_http_api import (chat, check, jcall, long_prompt, open_stream, prefill_report, read_events,  # noqa: E402
                           run_suite, status, stream, wait_for)


def check_reports(what, ev, n, chunk):
    """The stream's prefill comments: each (done, n), done never going back, each a whole number of
    steps (or the prompt's end), the last n, all of them before the first text; returns the dones."""
    reports, late, first_text = [], [], None
    for i, e in enumerate(ev):
        if e[0] == "comment" and prefill_report(e[1]):
            reports.append(prefill_report(e[1]))
            if first_text is not None:
                late.append(e[1])
        elif e[0] == "data" and isinstance(e[1], dict) and e[1].get("choices") and first_text is None:
            c = e[1]["choices"][0]
            if c.get("text") or c.get("delta", {}).get("content") or c.get("delta", {}).get("reasoning_content"):
                first_text = i
    check(not late, f"{what}: no prefill comment after the text began: {late[:3]}")
    dones = [d for d, _ in reports]
    check(reports and all(t == n for _, t in reports), f"{what}: every report's total is the prompt's {n}: {reports[:4]}")
    check(dones == sorted(dones) and dones and dones[-1] == n, f"{what}: done counts increase to {n}: {dones[:6]}…{dones[-3:]}")
    check(all(d % chunk == 0 or d == n for d in dones), f"{what}: done counts are whole steps of {chunk}: {dones[:6]}")
    check(all(e[0] in ("comment", "data") for e in ev), f"{what}: only comments and data lines: {[e for e in ev if e[0] == 'other'][:2]}")
    return dones


def stream_text(ev):
    """(reasoning, content) of a streamed chat completion; ("", text) of a completion."""
    r, c = "", ""
    for e in ev:
        if e[0] == "data" and isinstance(e[1], dict):
            for ch in e[1].get("choices", []):
                d = ch.get("delta")
                if d is None:
                    c += ch.get("text", "")
                else:
                    r += d.get("reasoning_content", "")
                    c += d.get("content", "")
    return r, c


def test_prefill_progress(tmp):
    idle = status().get("prefill", "absent")
    check(idle is None, f"prefill null in /api/status while idle: {idle}")
    # Chat, 16 tokens a step: tens of reports, the text unchanged.
    msgs = [{"role": "user", "content": "hello world " * 200}]
    st, ref = chat(messages=msgs, max_tokens=12, temperature=0)
    n = ref["usage"]["prompt_tokens"]
    check(st == 200 and n > 300, f"the reference chat: {st}, {n} prompt tokens")
    # cache_prompt false: the repeat prefills again (the reference's checkpoint after its generation prompt's role header would serve it)
    st, ctype, ev = stream("/v1/chat/completions", {"messages": msgs, "max_tokens": 12, "temperature": 0, "prefill_chunk": 16,
                                                    "stream": True, "cache_prompt": False})
    dones = check_reports("chat, 16 a step", ev, n, 16)
    check(len(set(dones)) >= n // 16 // 2, f"chat: a report for most of the {n // 16 + 1} steps: {len(set(dones))}")
    m = ref["choices"][0]["message"]
    check(stream_text(ev) == (m.get("reasoning_content", ""), m["content"]) and ev[-1] == ("data", "[DONE]"),
          f"chat prefilled 16 a step: the same answer as in one step: {stream_text(ev)!r} vs {m!r}")
    # Completions, prefill_chunk over --chunk (run at 512 a step), the gpu-worker paused for
    # 1.2 s in the middle: keep-alives repeat the progress, /api/status shows it.
    prompt, n = long_prompt(3900)
    body = {"prompt": prompt, "max_tokens": 8, "temperature": 0, "cache_prompt": False}  # the repeat prefills again
    st, ref = jcall("POST", "/v1/completions", body)
    gw = [w for w in status()["workers"] if w["role"] == "gpu-worker"][0]["pid"]
    c, r = open_stream("/v1/completions", dict(body, prefill_chunk=4096, stream=True))
    ev = []
    while not any(e[0] == "comment" and (prefill_report(e[1]) or (0, 0))[0] > 0 for e in ev):  # the first step is done
        got = read_events(r, limit=1)
        ev += got
        if not got or got[-1] == ("data", "[DONE]"):
            break
    os.kill(gw, signal.SIGSTOP)
    try:
        time.sleep(1.2)
        during = status().get("prefill")
    finally:
        os.kill(gw, signal.SIGCONT)
    ev += read_events(r)
    c.close()
    print(f"prefill progress: {sum(1 for e in ev if e[0] == 'comment')} comments for {n} tokens; /api/status during the pause: {during}",
          flush=True)
    dones = check_reports("completions, 512 a step", ev, n, 512)
    check(during and 0 < during["done"] < n and during["total"] == n and during["chunk"] == 512,
          f"/api/status during the prefill: done, total {n}, chunk 512 (the request's 4096 capped at --chunk): {during}")
    paused = during["done"] if during else -1
    check(dones.count(paused) >= 3, f"keep-alives during the long step repeat its progress ({paused}/{n}): {dones}")
    check(stream_text(ev)[1] == ref["choices"][0]["text"], f"completions: the same text: {stream_text(ev)[1]!r} vs {ref['choices'][0]['text']!r}")
    check(wait_for(lambda: status().get("prefill", "absent") is None), "prefill null in /api/status once the request is done")


if __name__ == "__main__":
    sys.exit(run_suite(test_prefill_progress))
