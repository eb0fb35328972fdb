#!/usr/bin/env python3
"""test_http_progress.py — prefill progress over the HTTP API (docs/API.md, "Streaming" and
"GET /api/status"), on test_http_api.py's server (the real pipeline on the demo model) and with
its helpers: a prompt prefilled in many steps gets `: prefill DONE/TOTAL` comments after each
step, on chat and completions, with the same answer as in fewer steps; a step that takes long
(the gpu-worker paused with SIGSTOP: the server has no delay knob) gets its progress again as the
keep-alive, and /api/status's `prefill` shows the same numbers meanwhile, null otherwise.  The
Anthropic (/v1/messages) and Responses (/v1/responses) streams carry the same comments.  A second
server at --chunk 8192 (the largest prefill step, issue 14 item 1) on the demo model converted with
a 16K context prefills a 9,000-token prompt in two steps, reported as such, with the text of 512
tokens a step; --chunk and prefill_chunk above 8192 are refused.
Standard library only.  Prints "N checks, N failed"; exits 1 on any failure.  Run from the
repository root (BUILD=build).
"""
import json
import os
import signal
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__/ in the tree for the import below
import test_http_api as api  # noqa: E402
from test_http_api import (BIN, Server, chat, check, jcall, long_prompt, open_stream, prefill_report,  # noqa: E402
                           read_events, run_suite, status, stream, wait_for)


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


def dialect_reports(what, ev, n):
    """The `: prefill` comments of an Anthropic or Responses stream (event:/data: pairs): each
    total n, the dones increasing to n, all before the first text delta."""
    reports, first_text = [], None
    for i, e in enumerate(ev):
        if e[0] == "comment" and prefill_report(e[1]):
            reports.append((i, prefill_report(e[1])))
        elif e[0] == "data" and isinstance(e[1], dict) and first_text is None and e[1].get("type") in (
                "content_block_delta", "response.output_text.delta", "response.reasoning_text.delta"):
            first_text = i
    dones = [d for _, (d, _) in reports]
    check(len(reports) >= 2 and all(t == n for _, (_, t) in reports), f"{what}: reports of the prompt's {n} tokens: {reports[:4]}")
    check(dones == sorted(dones) and dones and dones[-1] == n, f"{what}: done counts increase to {n}: {dones}")
    check(first_text is not None and all(i < first_text for i, _ in reports), f"{what}: every report before the first text")


def test_dialect_progress():
    """The same comments on /v1/messages and /v1/responses (their own prompts: no cache hit), at
    the server's 512 a step."""
    words = "progress report " * 120
    st, ctype, ev = stream("/v1/messages", {"model": "nebula-demo", "max_tokens": 4, "stream": True,
                                            "messages": [{"role": "user", "content": words}]})
    start = [e[1] for e in ev if e[0] == "data" and isinstance(e[1], dict) and e[1].get("type") == "message_start"]
    u = start[0]["message"]["usage"] if start else {}
    n = u.get("input_tokens", 0) + u.get("cache_read_input_tokens", 0)
    check(st == 200 and n > 1024, f"/v1/messages streamed, {n} prompt tokens: {st} {u}")
    dialect_reports("/v1/messages", ev, n)
    st, ctype, ev = stream("/v1/responses", {"model": "nebula-demo", "max_output_tokens": 4, "stream": True,
                                             "input": "report of progress " * 110})
    done = [e[1] for e in ev if e[0] == "data" and isinstance(e[1], dict) and e[1].get("type") in ("response.completed", "response.incomplete")]
    n = done[0]["response"]["usage"]["input_tokens"] if done else 0
    check(st == 200 and n > 1024, f"/v1/responses streamed, {n} prompt tokens: {st}")
    dialect_reports("/v1/responses", ev, n)


def test_big_chunk(tmp):
    """--chunk 8192: a 9,000-token prompt in two steps (8192, then the rest), the same text as in
    steps of 512; above 8192 is a 400 for a request and a usage error for the coordinator."""
    st, d = jcall("POST", "/v1/completions", {"prompt": "x", "max_tokens": 1, "prefill_chunk": 8193})
    check(st == 400 and d.get("error", {}).get("param") == "prefill_chunk", f"prefill_chunk 8193: 400 naming it: {st} {d}")
    r = subprocess.run([os.path.join(BIN, "nebula-coordinator"), "--chunk", "8193", "--model", "x"], capture_output=True, text=True,
                       timeout=30)
    check(r.returncode == 2 and "8192" in r.stderr, f"--chunk 8193: exit 2 naming the limit: {r.returncode} {r.stderr[-200:]!r}")
    # The demo model with a 16K context (its config's max_position_embeddings; the weights the same).
    src, hf = "tests/fixtures/tiny-a", os.path.join(tmp, "tiny-16k")
    os.mkdir(hf)
    for f in os.listdir(src):
        if f != "config.json":
            os.symlink(os.path.abspath(os.path.join(src, f)), os.path.join(hf, f))
    cfg = json.load(open(os.path.join(src, "config.json")))
    cfg["max_position_embeddings"] = 16384
    json.dump(cfg, open(os.path.join(hf, "config.json"), "w"))
    model = os.path.join(tmp, "demo-16k.gguf")
    subprocess.run([os.path.join(BIN, "nebula-convert"), hf, model, "--type", "f32", "--name", "nebula-demo", "-q"], check=True)
    main_srv = api.srv
    big = api.srv = Server(tmp, model=model, name="-8k", args=("--chunk", "8192"))
    try:
        check(wait_for(lambda: status()["phase"] == "ready", timeout=30), "the --chunk 8192 server is ready")
        lim = status()["limits"]
        check(lim["max_prefill_chunk"] == 8192 and lim["context_length"] == 16384, f"/api/status limits: {lim}")
        prompt, n = long_prompt(9000)
        check(8192 < n < 16000, f"a prompt over one 8192 step: {n} tokens")
        body = {"prompt": prompt, "max_tokens": 6, "temperature": 0, "cache_prompt": False}
        st, ctype, ev = stream("/v1/completions", dict(body, prefill_chunk=512, stream=True))
        dones = check_reports("completions, 512 a step", ev, n, 512)
        check(len(set(dones)) >= n // 512 // 2, f"512 a step: most of the {n // 512 + 1} steps reported: {len(set(dones))}")
        ref = stream_text(ev)[1]
        # The default: --chunk's 8192; the gpu-worker paused at the first comment, /api/status meanwhile.
        c, r = open_stream("/v1/completions", dict(body, stream=True))
        ev = []
        while not any(e[0] == "comment" and prefill_report(e[1]) for e in ev):
            got = read_events(r, limit=1)
            ev += got
            if not got or got[-1] == ("data", "[DONE]"):
                break
        gw = [w for w in status()["workers"] if w["role"] == "gpu-worker"][0]["pid"]
        os.kill(gw, signal.SIGSTOP)
        try:
            during = status().get("prefill")
        finally:
            os.kill(gw, signal.SIGCONT)
        ev += read_events(r)
        c.close()
        check(during and during["total"] == n and during["chunk"] == 8192 and during["done"] in (0, 8192),
              f"/api/status during the prefill: total {n}, chunk 8192, done 0 or 8192: {during}")
        dones = check_reports("completions, 8192 a step", ev, n, 8192)
        steps = sorted(set(dones) - {0})  # 0/n: a keep-alive during the first step
        check(steps == [8192, n], f"8192 a step: two steps, 8192 then {n}: {sorted(set(dones))}")
        check(r.status == 200 and stream_text(ev)[1] == ref, f"the same text in steps of 8192 as of 512: {stream_text(ev)[1]!r} vs {ref!r}")
        big.stop()
        check(big.proc.returncode == 0, f"the --chunk 8192 server's exit status {big.proc.returncode}")
    finally:
        if big.proc.poll() is None:
            os.killpg(big.proc.pid, signal.SIGKILL)
            big.proc.wait()
        api.srv = main_srv


def main(tmp):
    test_prefill_progress(tmp)
    test_dialect_progress()
    test_big_chunk(tmp)


if __name__ == "__main__":
    sys.exit(run_suite(main))
