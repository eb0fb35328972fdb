#!/usr/bin/env python3
"""test_http_api.py — the coordinator's HTTP API end to end (docs/API.md).

Starts the real pipeline (nebula-coordinator + nebula-gpu-worker) on the demo
model (tests/fixtures/tiny-a converted to GGUF, as `make run` does) with HTTP
on a free port (--http 127.0.0.1:0; the port comes from the coordinator's
"http on" line), a queue of one (--max-queue 1) and short keep-alives, then
checks every endpoint: schemas, usage against /api/tokenize, greedy and
seeded determinism, streaming equal to non-streaming, the think split, stop
strings, max_tokens, completions, metrics, every kind of invalid request
(and that the server answers after each), queue full, client disconnects
(streaming and not) cancelling the generation, keep-alive comments during a
long prefill and while queued (prefill progress: test_http_progress.py), a gpu-worker killed mid-request (retried: the
same text), ctl.sock during an HTTP job (status answers at once, a generate
waits for the job, then gives the same text as HTTP), and the loading phase
(a second coordinator whose gpu-worker is slow to start: /api/status says
loading, generation gets 503, then ready), and SIGTERM with requests running
and queued (each gets an error event, the coordinator exits 0 at once).  Standard library only.  Prints "N checks, N failed";
exits 1 on any failure.  Run from the repository root (BUILD=build).
"""
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

BUILD = os.environ.get("BUILD", "build")
BIN = os.path.join(BUILD, "bin")
checks = 0
failures = []


def check(cond, what):
    global checks
    checks += 1
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)
    return cond


class Server:
    def __init__(self, tmp, model=None, bindir=BIN, name="", args=()):
        self.tmp = tmp
        self.model = model or os.path.join(tmp, "demo.gguf")
        if not model:
            subprocess.run([os.path.join(BIN, "nebula-convert"), "tests/fixtures/tiny-a", self.model, "--type", "f32",
                            "--name", "nebula-demo", "-q"], check=True)
        self.run = os.path.join(tmp, "run" + name)
        self.log = os.path.join(tmp, "coord" + name + ".log")
        self.proc = subprocess.Popen([os.path.join(bindir, "nebula-coordinator"), "--model", self.model, "--runtime", self.run,
                                      "--threads", "2", "--http", "127.0.0.1:0", "--max-queue", "1",
                                      "--sse-keepalive", "0.25", "--demo", *args],
                                     stderr=open(self.log, "wb"), start_new_session=True)
        self.port = None
        for _ in range(200):
            m = re.search(rb"nebula-coordinator: http on http://127\.0\.0\.1:(\d+)", open(self.log, "rb").read())
            if m:
                self.port = int(m.group(1))
                break
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        if not self.port:
            raise SystemExit("FAIL: the coordinator did not start HTTP:\n" + open(self.log).read())

    def stop(self):
        if self.proc.poll() is None:
            subprocess.run([os.path.join(BIN, "nebulactl"), "--runtime", self.run, "shutdown"], capture_output=True, timeout=10)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


srv = None


def tiny_b_demo(tmp):
    """tiny-b (an MTP block) with tiny-a's tokenizer as TMP/b.gguf named nebula-demo: the speculative tests' model."""
    src = os.path.join(tmp, "tiny-b")
    shutil.copytree("tests/fixtures/tiny-b", src)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join("tests/fixtures/tiny-a", f), src)
    model = os.path.join(tmp, "b.gguf")
    subprocess.run([os.path.join(BIN, "nebula-convert"), src, model, "--type", "f32", "--name", "nebula-demo", "-q"], check=True)
    return model


def conn(timeout=60):
    return http.client.HTTPConnection("127.0.0.1", srv.port, timeout=timeout)


def call(method, path, body=None, headers=None, timeout=60):
    """(status, headers dict, bytes)"""
    c = conn(timeout)
    data = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    c.request(method, path, body=data, headers=h)
    r = c.getresponse()
    raw = r.read()
    c.close()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, raw


def jcall(method, path, body=None):
    st, h, raw = call(method, path, body)
    try:
        return st, json.loads(raw)
    except ValueError:
        return st, {"_raw": raw}


def status():
    return jcall("GET", "/api/status")[1]


def alive(after):
    st, d = jcall("GET", "/v1/models")
    check(st == 200 and d.get("data"), f"the server answers after {after}: {st}")


def open_stream(path, body):
    """Sends a streaming request; returns (connection, response)."""
    c = conn()
    c.request("POST", path, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    return c, c.getresponse()


def read_events(r, until_done=True, limit=None):
    """SSE lines of the response: ('comment', text) and ('data', parsed or '[DONE]')."""
    out = []
    while True:
        line = r.readline()
        if not line:
            break
        line = line.decode().rstrip("\r\n")
        if not line:
            continue
        if line.startswith(":"):
            out.append(("comment", line))
        elif line.startswith("data: "):
            payload = line[6:]
            out.append(("data", payload if payload == "[DONE]" else json.loads(payload)))
            if payload == "[DONE]" and until_done:
                break
        else:
            out.append(("other", line))
        if limit and len(out) >= limit:
            break
    return out


def stream(path, body):
    c, r = open_stream(path, body)
    ctype = r.getheader("Content-Type")
    ev = read_events(r)
    c.close()
    return r.status, ctype, ev


def wait_for(pred, timeout=10.0):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if pred():
            return True
        time.sleep(0.02)
    return False


def metric(name, labels=None):
    st, h, raw = call("GET", "/metrics")
    want = name + ("{" + labels + "}" if labels else "")
    for line in raw.decode().splitlines():
        if line.startswith(want + " "):
            return float(line.split()[-1])
    return None


HELLO = [{"role": "user", "content": "Hello"}]


def chat(**kw):
    body = {"messages": HELLO}
    body.update(kw)
    return jcall("POST", "/v1/chat/completions", body)


def test_models_and_status():
    st, d = jcall("GET", "/v1/models")
    check(st == 200 and d.get("object") == "list", f"/v1/models: {st} {d}")
    m = (d.get("data") or [{}])[0]
    check(m.get("id") == "nebula-demo" and m.get("object") == "model" and m.get("owned_by") == "nebula"
          and isinstance(m.get("created"), int), f"/v1/models entry: {m}")
    check(m.get("nebula", {}).get("demo") is True and "noise" in m["nebula"].get("notice", "")
          and m["nebula"].get("context_length") == 4096, f"/v1/models says it is the demo: {m}")
    check(jcall("GET", "/v1/models/nebula-demo")[0] == 200, "/v1/models/nebula-demo")
    st, d = jcall("GET", "/v1/models/other")
    check(st == 404 and d["error"]["code"] == "model_not_found", f"/v1/models/other: {st} {d}")
    s = status()
    check(s["phase"] == "ready" and s["progress"] == 1, f"status phase: {s['phase']} {s['progress']}")
    mo = s["model"]
    check(mo["id"] == "nebula-demo" and mo["demo"] is True and "noise" in mo["notice"] and mo["path"] == srv.model,
          f"status model: {mo}")
    check(mo["context_length"] == 4096 and mo["vocab"] == 512 and mo["layers"] == 4 and mo["has_mtp"] is False,
          f"status model sizes: {mo}")
    w = s["workers"]
    check(len(w) == 1 and w[0]["role"] == "gpu-worker" and w[0]["state"] == "ready" and w[0]["pid"] > 0
          and w[0]["restarts"] == 0, f"status workers: {w}")
    check(s["queue"] == {"running": 0, "waiting": 0, "capacity": 1}, f"status queue: {s['queue']}")
    check(s["limits"]["max_body_bytes"] == 4194304 and s["limits"]["context_length"] == 4096, f"limits: {s['limits']}")
    for k in ("requests", "tokens_generated", "last_tokens_per_s", "last_ttft_ms", "vram_hit_rate"):
        check(isinstance(s["stats"].get(k), (int, float)), f"stats.{k}: {s['stats']}")
    # HTTP was up before the worker was ready (the order of the log lines).
    log = open(srv.log).read()
    check(0 <= log.find("http on http://") < log.find("gpu-worker ready"), "http is up before the worker is ready")


def test_chat_nonstream():
    st, d = chat(temperature=0, max_tokens=24, think=False)
    check(st == 200, f"chat: {st} {d}")
    check(d["id"].startswith("chatcmpl-") and d["object"] == "chat.completion" and d["model"] == "nebula-demo"
          and isinstance(d["created"], int), f"chat envelope: {d}")
    ch = d["choices"][0]
    msg = ch["message"]
    check(ch["index"] == 0 and msg["role"] == "assistant" and isinstance(msg["content"], str) and msg["content"],
          f"chat choice: {ch}")
    check("reasoning_content" not in msg, f"think off: no reasoning_content: {msg}")
    check(ch["finish_reason"] in ("stop", "length"), f"finish_reason: {ch['finish_reason']}")
    u = d["usage"]
    st, tk = jcall("POST", "/api/tokenize", {"messages": HELLO, "think": False})
    check(st == 200 and u["prompt_tokens"] == tk["count"] == len(tk["tokens"]), f"usage.prompt_tokens {u} vs tokenize {tk}")
    check(u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"] and 1 <= u["completion_tokens"] <= 24, f"usage: {u}")
    t = d["timings"]
    for k in ("prompt_tokens", "prompt_ms", "ttft_ms", "completion_tokens", "decode_ms", "tokens_per_s", "queue_ms"):
        check(isinstance(t.get(k), (int, float)) and t[k] >= 0, f"timings.{k}: {t}")
    check(t["prompt_tokens"] == u["prompt_tokens"] and t["completion_tokens"] == u["completion_tokens"], f"timings counts: {t}")
    check(d["nebula"] == {"accuracy_level": 3, "accuracy_level_effective": 3, "think": False}, f"nebula: {d['nebula']}")
    # Greedy is deterministic, and equals the ctl.sock path (nebula generate --server).
    st2, d2 = chat(temperature=0, max_tokens=24, think=False, seed=123)
    check(d2["choices"][0]["message"]["content"] == msg["content"], "greedy: the same text twice (any seed)")
    cli = subprocess.run([os.path.join(BIN, "nebula"), "generate", "--server", srv.run, "--chat", "Hello", "--think", "off",
                          "--greedy", "-n", "24"], capture_output=True, timeout=60)
    check(cli.returncode == 0 and cli.stdout.decode().rstrip("\n") == msg["content"],
          f"HTTP greedy text equals nebula generate --server's: {cli.stdout!r} vs {msg['content']!r}")
    # Sampling: a seed gives the same text; other seeds give other texts.
    a = chat(temperature=0.9, max_tokens=16, seed=7, think=False)[1]["choices"][0]["message"]["content"]
    b = chat(temperature=0.9, max_tokens=16, seed=7, think=False)[1]["choices"][0]["message"]["content"]
    others = [chat(temperature=0.9, max_tokens=16, seed=s, think=False)[1]["choices"][0]["message"]["content"] for s in (8, 9, 10)]
    check(a == b, f"seed 7 twice: {a!r} vs {b!r}")
    check(any(o != a for o in others), f"seeds 8-10 all gave seed 7's text {a!r}")
    # top_k 1 is greedy whatever the temperature.
    g = chat(temperature=1.5, top_k=1, max_tokens=24, seed=99, think=False)[1]["choices"][0]["message"]["content"]
    check(g == msg["content"], f"top_k 1 = greedy: {g!r}")
    # The model field: any id is served by our model and echoed back (as llama.cpp's server does),
    # an id that is not ours logged once.
    st, d = chat(model="nebula-demo", max_tokens=2)
    check(st == 200 and d["model"] == "nebula-demo", "model = our name")
    for _ in range(2):
        st, d = chat(model="gpt-4o-mini", max_tokens=2)
        check(st == 200 and d["model"] == "gpt-4o-mini", f"another model id is served and echoed: {st} {d.get('model')}")
    log = open(srv.log, errors="replace").read()
    check(log.count("names the model 'gpt-4o-mini'") == 1, "an unknown model id is logged once")
    return msg["content"]


def concat(events, field):
    return "".join(e[1]["choices"][0]["delta"].get(field) or "" for e in events
                   if e[0] == "data" and isinstance(e[1], dict) and e[1].get("choices"))


def test_chat_stream(greedy_text):
    body = {"messages": HELLO, "temperature": 0, "max_tokens": 24, "think": False, "stream": True,
            "stream_options": {"include_usage": True}}
    st, ctype, ev = stream("/v1/chat/completions", body)
    check(st == 200 and ctype.startswith("text/event-stream"), f"stream: {st} {ctype}")
    data = [e[1] for e in ev if e[0] == "data"]
    check(data and data[-1] == "[DONE]", f"stream ends with [DONE]: {data[-1:]}")
    first = data[0]
    check(first["object"] == "chat.completion.chunk" and first["choices"][0]["delta"] == {"role": "assistant", "content": ""},
          f"first chunk: {first}")
    check(len({d["id"] for d in data[:-1]}) == 1, "one id for every chunk")
    check(concat(ev, "content") == greedy_text, f"streamed content {concat(ev, 'content')!r} vs {greedy_text!r}")
    fin = [d for d in data[:-1] if d["choices"] and d["choices"][0].get("finish_reason")]
    check(len(fin) == 1 and fin[0]["choices"][0]["delta"] == {} and "timings" in fin[0], f"final chunk: {fin}")
    usage = data[-2]
    n = chat(temperature=0, max_tokens=24, think=False)[1]
    check(usage["choices"] == [] and usage["usage"] == n["usage"], f"usage chunk {usage} vs {n['usage']}")
    check(fin[0]["choices"][0]["finish_reason"] == n["choices"][0]["finish_reason"], "stream and non-stream finish alike")
    # Without include_usage: no usage chunk.
    body.pop("stream_options")
    _, _, ev = stream("/v1/chat/completions", body)
    check(not any(e[0] == "data" and isinstance(e[1], dict) and "usage" in e[1] for e in ev), "no usage chunk unless asked")
    # Seeded sampling streams the same text as non-streaming.
    body = {"messages": HELLO, "temperature": 0.9, "max_tokens": 16, "seed": 7, "think": False}
    want = chat(**{k: v for k, v in body.items() if k != "messages"})[1]["choices"][0]["message"]["content"]
    _, _, ev = stream("/v1/chat/completions", dict(body, stream=True))
    check(concat(ev, "content") == want, f"seeded stream {concat(ev, 'content')!r} vs {want!r}")


def test_think():
    st, d = chat(temperature=0, max_tokens=20)
    msg = d["choices"][0]["message"]
    check(st == 200 and "reasoning_content" in msg and d["nebula"]["think"] is True, f"think on: {d}")
    # The demo model never closes its think block in 20 greedy tokens: all of it is reasoning.
    check(msg["reasoning_content"] and msg["content"] == "", f"think on: text is reasoning_content: {msg}")
    st, tk_on = jcall("POST", "/api/tokenize", {"messages": HELLO})
    st, tk_off = jcall("POST", "/api/tokenize", {"messages": HELLO, "think": "off"})
    check(d["usage"]["prompt_tokens"] == tk_on["count"] != tk_off["count"], f"think on/off prompts differ: {tk_on['count']} {tk_off['count']}")
    _, _, ev = stream("/v1/chat/completions", {"messages": HELLO, "temperature": 0, "max_tokens": 20, "stream": True})
    check(concat(ev, "reasoning_content") == msg["reasoning_content"] and concat(ev, "content") == "",
          f"streamed reasoning {concat(ev, 'reasoning_content')!r} vs {msg['reasoning_content']!r}")
    # An assistant turn that closes its think block: the split happens on the model's text; with a
    # prompt that already holds "</think>" the template's own markers are not generated text.
    check(jcall("POST", "/v1/chat/completions", {"messages": HELLO, "think": "maybe"})[0] == 400, "think: bad value → 400")


def test_stop_and_length(greedy_text):
    # A stop string from the middle of the greedy text: the text before it, finish "stop".
    k = max(1, len(greedy_text) // 2)
    stop = greedy_text[k:k + 3]
    want = greedy_text[:greedy_text.find(stop)]
    st, d = chat(temperature=0, max_tokens=24, think=False, stop=[stop, "never-seen-xyz"])
    ch = d["choices"][0]
    check(st == 200 and ch["message"]["content"] == want and ch["finish_reason"] == "stop",
          f"stop {stop!r}: {ch} want {want!r}")
    _, _, ev = stream("/v1/chat/completions", {"messages": HELLO, "temperature": 0, "max_tokens": 24, "think": False,
                                                "stop": stop, "stream": True})
    check(concat(ev, "content") == want, f"streamed with stop: {concat(ev, 'content')!r} vs {want!r}")
    # max_tokens: finish "length" with exactly that many tokens.
    st, d = chat(temperature=0, max_tokens=3, think=False)
    check(st == 200 and d["choices"][0]["finish_reason"] == "length" and d["usage"]["completion_tokens"] == 3,
          f"max_tokens 3: {d}")
    check(greedy_text.startswith(d["choices"][0]["message"]["content"]), "max_tokens 3: a prefix of the greedy text")
    st, d = chat(temperature=0, max_completion_tokens=2, think=False)
    check(st == 200 and d["usage"]["completion_tokens"] == 2, f"max_completion_tokens 2: {d}")
    # ignore_eos: the greedy answer ends with a stop token after a few tokens; with it, only max_tokens ends it.
    st, d = chat(temperature=0, max_tokens=300, think=False, ignore_eos=True)
    check(st == 200 and d["usage"]["completion_tokens"] == 300 and d["choices"][0]["finish_reason"] == "length"
          and d["choices"][0]["message"]["content"].startswith(greedy_text), f"ignore_eos: {d['usage']} {d['choices'][0]['finish_reason']}")


def test_completions():
    body = {"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0}
    st, d = jcall("POST", "/v1/completions", body)
    check(st == 200 and d["object"] == "text_completion" and d["id"].startswith("cmpl-"), f"completions: {st} {d}")
    text = d["choices"][0]["text"]
    check(isinstance(text, str) and d["choices"][0]["finish_reason"] in ("stop", "length"), f"completion choice: {d['choices']}")
    st, tk = jcall("POST", "/api/tokenize", {"text": "Once upon a time"})
    check(d["usage"]["prompt_tokens"] == tk["count"], f"completion prompt tokens {d['usage']} vs {tk}")
    _, ctype, ev = stream("/v1/completions", dict(body, stream=True))
    streamed = "".join(e[1]["choices"][0]["text"] for e in ev if e[0] == "data" and isinstance(e[1], dict) and e[1]["choices"])
    check(streamed == text and ev[-1] == ("data", "[DONE]"), f"streamed completion {streamed!r} vs {text!r}")
    check(jcall("POST", "/v1/completions", {"prompt": ""})[0] == 400, "empty prompt → 400")


def test_tokenize_and_metrics():
    st, d = jcall("POST", "/api/tokenize", {"text": "Hello world"})
    check(st == 200 and d["count"] == len(d["tokens"]) > 0 and all(isinstance(t, int) and 0 <= t < 512 for t in d["tokens"]),
          f"tokenize: {d}")
    st, d = jcall("POST", "/api/tokenize", {"think": True})
    check(st == 400 and d["error"]["param"] == "text", f"tokenize without text: {st} {d}")
    st, d = jcall("POST", "/api/tokenize", {"text": "a", "nothing": 1})
    check(st == 400 and d["error"]["param"] == "nothing" and d["error"]["code"] == "unknown_parameter", f"tokenize, unknown field: {st} {d}")
    st, h, raw = call("GET", "/metrics")
    check(st == 200 and h["content-type"].startswith("text/plain"), f"/metrics: {st} {h.get('content-type')}")
    names = set()
    sample = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[a-zA-Z_][a-zA-Z0-9_]*="[^"]*"(,[a-zA-Z_][a-zA-Z0-9_]*="[^"]*")*\})? '
                        r'(-?[0-9.]+(e[+-]?[0-9]+)?|NaN|[+-]Inf)$')
    for line in raw.decode().splitlines():
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            continue
        m = sample.match(line)
        if not check(m, f"metrics line parses: {line!r}"):
            continue
        names.add(m.group(1))
    for n in ("nebula_tokens_generated_total", "nebula_requests_total", "nebula_tokens_per_second",
              "nebula_time_to_first_token_seconds", "nebula_queue_waiting", "nebula_queue_running", "nebula_vram_hit_rate",
              "nebula_ram_hit_rate", "nebula_ssd_bytes_per_token", "nebula_worker_up", "nebula_slot_hit_rate",
              "nebula_slot_swaps_total", "nebula_slot_bytes_total", "nebula_slot_waited_steps_total"):
        check(n in names, f"metric {n} present")
    check(metric("nebula_requests_total", 'status="ok"') >= 10, "requests_total{ok} counts the requests so far")
    check(metric("nebula_tokens_generated_total") > 0 and metric("nebula_worker_up", 'role="gpu-worker"') == 1, "metric values")


def raw_request(head, body, chunks=False):
    """Sends head + body on a socket (the server may stop reading); returns the status line and body."""
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
    s.sendall(head)
    try:
        if chunks:
            piece = b"a" * 65536
            for _ in range(len(body) // len(piece)):
                s.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
            s.sendall(b"0\r\n\r\n")
        else:
            s.sendall(body)
    except (BrokenPipeError, ConnectionResetError):
        pass
    data = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
            if b"\r\n\r\n" in data and len(data) > data.find(b"\r\n\r\n") + 20 and data.rstrip().endswith(b"}"):
                break
    except (ConnectionResetError, socket.timeout):
        pass
    s.close()
    return data


def test_invalid():
    big = b"a" * (10 * 1000 * 1000)
    data = raw_request(b"POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                       b"Content-Length: %d\r\n\r\n" % len(big), big)
    check(data.startswith(b"HTTP/1.1 413") and b'"request_too_large"' in data, f"10 MB body → 413: {data[:120]!r}")
    alive("a 10 MB body")
    data = raw_request(b"POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                       b"Transfer-Encoding: chunked\r\n\r\n", big, chunks=True)
    check(data.startswith(b"HTTP/1.1 413"), f"10 MB chunked body → 413: {data[:120]!r}")
    alive("a 10 MB chunked body")
    cases = [
        (b'{"messages": [', None, "invalid_json"),
        (b'not json', None, "invalid_json"),
        (b'', None, "invalid_json"),
        (b'[1,2]', None, "invalid_json"),
        ({"messages": "hello"}, "messages", "invalid_type"),
        ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content", "invalid_type"),
        ({"messages": HELLO, "temperature": "hot"}, "temperature", "invalid_type"),
        ({"messages": HELLO, "max_tokens": "5"}, "max_tokens", "invalid_type"),
        ({"messages": HELLO, "stream": "yes"}, "stream", "invalid_type"),
        ({"messages": HELLO, "stop": ["a", "b", "c", "d", "e"]}, "stop", "invalid_value"),
        ({"messages": HELLO, "top_p": 7}, "top_p", "invalid_value"),
        ({"messages": HELLO, "accuracy_level": 9}, "accuracy_level", "invalid_value"),
        ({"messages": HELLO, "prefill_chunk": 0}, "prefill_chunk", "invalid_value"),
        ({"messages": HELLO, "context_length": 100000}, "context_length", "invalid_value"),
        ({"messages": HELLO, "max_tokens": 5000}, "max_tokens", "context_length_exceeded"),
        ({"messages": [{"role": "user", "content": "word " * 5000}]}, "messages", "context_length_exceeded"),
        ({"messages": HELLO, "context_length": 16}, "messages", "context_length_exceeded"),
        ({"messages": [{"role": "user", "content": "a"}, {"role": "system", "content": "late"}]}, "messages", "invalid_value"),
        ({"messages": [{"role": "user", "content": "a\u0000b"}]}, "messages[0].content", "invalid_value"),
        (b'{"messages": [{"role": "user", "content": "caf\xe9"}]}', "messages[0].content", "invalid_value"),
        ({"messages": HELLO, "nebula_test_script": "x"}, "nebula_test_script", "unknown_parameter"),
        ({"messages": HELLO, "logit_bias": {"1": 5}}, "logit_bias", "unsupported_parameter"),
    ]
    for body, param, code in cases:
        st, h, raw = call("POST", "/v1/chat/completions", body)
        try:
            e = json.loads(raw)["error"]
        except (ValueError, KeyError, TypeError):
            e = {}
        check(st == 400 and e.get("param") == param and e.get("code") == code and e.get("message")
              and e.get("type") == "invalid_request_error", f"{str(body)[:60]} → 400 {param} {code}: {st} {raw[:200]!r}")
        check(h.get("content-type") == "application/json", "errors are JSON")
        alive(f"{str(body)[:40]}")
    # Unknown fields are a 400 (OpenAI's "Unrecognized request argument"), never ignored.
    st, d = chat(max_tokens=2, frobnicate={"x": [1]}, temperature=0)
    check(st == 400 and d["error"]["code"] == "unknown_parameter" and d["error"]["param"] == "frobnicate", f"unknown field → 400: {st} {d}")
    st, h, raw = call("GET", "/v1/nothing")
    check(st == 404 and json.loads(raw)["error"]["code"] == "not_found", f"unknown path → 404: {st}")
    st, h, raw = call("POST", "/nope", {"x": 1})
    check(st == 404, f"POST to an unknown path → 404: {st}")
    st, h, raw = call("GET", "/v1/chat/completions")
    check(st == 405 and h.get("allow") == "POST" and json.loads(raw)["error"]["code"] == "method_not_allowed", f"GET chat → 405: {st} {h}")
    st, h, raw = call("DELETE", "/api/status")
    check(st == 405 and "GET" in h.get("allow", ""), f"DELETE status → 405: {st}")
    alive("404 and 405")
    check(metric("nebula_requests_total", 'status="invalid"') >= len(cases) + 5, "invalid requests are counted")


def long_prompt(target):
    """A completion prompt of about target tokens (the demo tokenizer: measured, not assumed)."""
    n = jcall("POST", "/api/tokenize", {"text": "hello world " * 100})[1]["count"]
    words = int(100 * target / n)
    text = "hello world " * words
    return text, jcall("POST", "/api/tokenize", {"text": text})[1]["count"]


PREFILL_COMMENT = re.compile(r"^: prefill (\d+)/(\d+)$")


def prefill_report(line):
    """(done, total) of a `: prefill DONE/TOTAL` comment line, else None."""
    m = PREFILL_COMMENT.match(line)
    return (int(m.group(1)), int(m.group(2))) if m else None


def test_queue_cancel_keepalive():
    prompt, n = long_prompt(3900)
    check(3500 < n < 4096, f"long prompt of {n} tokens")
    slow = {"prompt": prompt, "max_tokens": 4, "temperature": 0, "prefill_chunk": 1, "stream": True, "cache_prompt": False}
    t0 = time.time()
    st, ctype, ev = stream("/v1/completions", slow)
    t_slow = time.time() - t0
    check(st == 200 and ev and ev[-1] == ("data", "[DONE]"), "a slow request (prefill one token a step) completes")
    kinds = [e[0] for e in ev]
    first_data = [i for i, e in enumerate(ev) if e[0] == "data" and isinstance(e[1], dict)
                  and e[1]["choices"] and e[1]["choices"][0].get("text")]
    print(f"slow request: {n} prompt tokens one a step: {t_slow:.2f} s, {kinds.count('comment')} comments", flush=True)
    check(t_slow > 0.5, f"the slow request takes {t_slow:.2f} s (need > 0.5 s for the timing checks)")
    check("comment" in kinds and (not first_data or kinds.index("comment") < first_data[0]),
          f"keep-alive comments during the prefill ({t_slow:.2f} s): {kinds[:6]}")
    check(all(e[1] == ": keep-alive" or prefill_report(e[1]) for e in ev if e[0] == "comment"), "keep-alive comment text")

    # Queue full: one running, one waiting (--max-queue 1), the third is refused.
    ca, ra = open_stream("/v1/completions", slow)
    check(wait_for(lambda: status()["queue"]["running"] == 1), "the first slow request runs")
    cb, rb = open_stream("/v1/completions", slow)
    check(wait_for(lambda: status()["queue"]["waiting"] == 1), "the second waits")
    st, h, raw = call("POST", "/v1/chat/completions", {"messages": HELLO, "max_tokens": 2})
    d = json.loads(raw)
    check(st == 429 and d["error"]["code"] == "queue_full" and d["error"]["type"] == "rate_limit_exceeded", f"queue full → 429: {st} {d}")
    check(h.get("retry-after") == "1", f"a 429 says Retry-After: {h}")
    check(metric("nebula_queue_waiting") == 1 and metric("nebula_queue_running") == 1, "metrics show the queue")
    eb = read_events(rb)
    ea = read_events(ra)
    ca.close(), cb.close()
    check(ea[-1] == ("data", "[DONE]") and eb[-1] == ("data", "[DONE]"), "both queued requests complete")
    wait_b = [e for e in eb if e[0] == "comment"]
    check(len(wait_b) >= 2, f"keep-alives while queued and prefilling: {len(wait_b)}")
    alive("a full queue")

    # A streaming client that goes away mid-prefill cancels its generation.
    cancelled0 = metric("nebula_requests_total", 'status="cancelled"')
    c, r = open_stream("/v1/completions", slow)
    read_events(r, limit=1)
    check(wait_for(lambda: status()["queue"]["running"] == 1), "the request to cancel runs")
    c.sock.shutdown(socket.SHUT_RDWR)
    c.close()
    t0 = time.time()
    check(wait_for(lambda: status()["queue"]["running"] == 0, timeout=t_slow), "the disconnected stream stops")
    t_stop = time.time() - t0
    print(f"a disconnected stream stopped {t_stop:.3f} s after the client left", flush=True)
    check(t_stop < t_slow * 0.8, f"stopped in {t_stop:.2f} s, well before the {t_slow:.2f} s it would take")
    check(metric("nebula_requests_total", 'status="cancelled"') == cancelled0 + 1, "counted as cancelled")
    t0 = time.time()
    check(chat(max_tokens=2, temperature=0)[0] == 200 and time.time() - t0 < 1.0, "the next request starts at once")
    check(status()["stats"]["requests_cancelled"] == cancelled0 + 1, "status counts the cancel")

    # A non-streaming client that goes away cancels too.
    s = socket.create_connection(("127.0.0.1", srv.port))
    body = json.dumps(dict(slow, stream=False)).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
              % (len(body), body))
    check(wait_for(lambda: status()["queue"]["running"] == 1), "the non-streaming request runs")
    s.shutdown(socket.SHUT_RDWR)
    s.close()
    check(wait_for(lambda: status()["queue"]["running"] == 0, timeout=t_slow * 0.8), "the disconnected request stops early")
    check(metric("nebula_requests_total", 'status="cancelled"') == cancelled0 + 2, "counted as cancelled")

    # A queued request whose client leaves never runs.
    ca, ra = open_stream("/v1/completions", slow)
    check(wait_for(lambda: status()["queue"]["running"] == 1), "first runs")
    cb, rb = open_stream("/v1/completions", slow)
    read_events(rb, limit=1)
    check(wait_for(lambda: status()["queue"]["waiting"] == 1), "second waits")
    cb.sock.shutdown(socket.SHUT_RDWR)
    cb.close()
    ea = read_events(ra)
    ca.close()
    check(ea[-1] == ("data", "[DONE]"), "the first completes")
    check(wait_for(lambda: metric("nebula_requests_total", 'status="cancelled"') == cancelled0 + 3), "the queued one is cancelled")
    check(wait_for(lambda: status()["queue"] == {"running": 0, "waiting": 0, "capacity": 1}), "queue empty")


def test_worker_dies_mid_generation():
    prompt, n = long_prompt(2500)
    # cache_prompt false: the repeat must prefill again for the kill to land in it (the prompt cache would resume it)
    body = {"prompt": prompt, "max_tokens": 8, "temperature": 0, "prefill_chunk": 1, "cache_prompt": False}
    st, d = jcall("POST", "/v1/completions", body)
    want = d["choices"][0]["text"]
    check(st == 200, f"the reference run: {st} {d}")
    pid = status()["workers"][0]["pid"]
    c, r = open_stream("/v1/completions", dict(body, stream=True))
    check(wait_for(lambda: status()["queue"]["running"] == 1), "the request runs")
    time.sleep(0.3)
    os.kill(pid, signal.SIGKILL)
    ev = read_events(r)
    c.close()
    got = "".join(e[1]["choices"][0]["text"] for e in ev if e[0] == "data" and isinstance(e[1], dict) and e[1].get("choices"))
    check(ev and ev[-1] == ("data", "[DONE]") and got == want,
          f"kill -9 of the gpu-worker mid-request: retried, same text: {got!r} vs {want!r} ({ev[-3:]})")
    check("a worker died: retrying once" in open(srv.log).read(), "the kill hit the running request (the log says it was retried)")
    w = status()["workers"][0]
    check(w["restarts"] == 1 and w["pid"] != pid and w["state"] == "ready", f"the worker was replaced: {w}")
    check(metric("nebula_worker_restarts_total", 'role="gpu-worker"') == 1, "metrics count the restart")


def test_ctl_during_http_job(greedy_text):
    """ctl.sock during an HTTP job: status answers at once, a generate waits for the job and then runs."""
    prompt, n = long_prompt(3900)
    slow = {"prompt": prompt, "max_tokens": 4, "temperature": 0, "prefill_chunk": 1, "stream": True, "cache_prompt": False}
    c, r = open_stream("/v1/completions", slow)
    check(wait_for(lambda: status()["queue"]["running"] == 1), "the slow request runs")
    t0 = time.time()
    st = subprocess.run([os.path.join(BIN, "nebulactl"), "--runtime", srv.run, "status"], capture_output=True, timeout=30)
    t_status = time.time() - t0
    check(st.returncode == 0 and b"gpu-worker" in st.stdout, f"nebulactl status during an HTTP job: {st.stderr!r}")
    check(status()["queue"]["running"] == 1, f"nebulactl status answered while the job still ran ({t_status:.2f} s)")
    gen = subprocess.Popen([os.path.join(BIN, "nebula"), "generate", "--server", srv.run, "--chat", "Hello", "--think", "off",
                            "--greedy", "-n", "24"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    ev = read_events(r)
    c.close()
    check(ev and ev[-1] == ("data", "[DONE]"), "the HTTP job completes")
    out, err = gen.communicate(timeout=60)
    check(gen.returncode == 0 and out.decode().rstrip("\n") == greedy_text,
          f"a ctl generate sent during the HTTP job ran after it: {out!r} {err[-200:]!r}")
    alive("ctl requests during an HTTP job")


def test_restart_during_http_job():
    """nebulactl restart during an HTTP job: the job is not killed under it (it completes
    without a retry), then the worker is replaced and the restart answered; the next job runs."""
    prompt, n = long_prompt(2500)
    body = {"prompt": prompt, "max_tokens": 4, "temperature": 0, "prefill_chunk": 1}
    st, d = jcall("POST", "/v1/completions", body)
    want = d["choices"][0]["text"]
    retries = open(srv.log).read().count("retrying once")
    pid = status()["workers"][0]["pid"]
    c, r = open_stream("/v1/completions", dict(body, stream=True))
    check(wait_for(lambda: status()["queue"]["running"] == 1), "the slow request runs")
    rs = subprocess.Popen([os.path.join(BIN, "nebulactl"), "--runtime", srv.run, "restart", "gpu-worker"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    ev = read_events(r)
    c.close()
    got = "".join(e[1]["choices"][0]["text"] for e in ev if e[0] == "data" and isinstance(e[1], dict) and e[1].get("choices"))
    check(ev and ev[-1] == ("data", "[DONE]") and got == want, f"the job completes with its text: {got!r} vs {want!r}")
    out, err = rs.communicate(timeout=90)
    check(rs.returncode == 0, f"nebulactl restart answered: {out!r} {err!r}")
    check(open(srv.log).read().count("retrying once") == retries, "the job was not retried: the restart waited for it")
    w = status()["workers"][0]
    check(w["pid"] != pid and w["state"] == "ready", f"the worker was replaced: {w}")
    st, d = jcall("POST", "/v1/completions", body)
    check(st == 200 and d["choices"][0]["text"] == want, f"a job after the restart: {st}")


def put_back(main_srv):
    """Stops a test's own server (killed if it does not stop) and returns the suite's, to put back in srv."""
    srv.stop()
    if srv.proc.poll() is None:
        os.killpg(srv.proc.pid, signal.SIGKILL)
        srv.proc.wait()
    return main_srv


def finish_suite(tmp):
    """The cleanup of a suite that runs its own servers (test_http_spec.py, test_http_coverage.py): stops the
    last one and removes tmp."""
    if srv:
        srv.stop()
    shutil.rmtree(tmp, ignore_errors=True)


def test_loading_phase(tmp):
    """HTTP answers before the workers are ready: a gpu-worker that takes 1.5 s to start (a
    wrapper script next to a copy of the coordinator) shows the loading phase, and generation
    requests get 503 until it is ready."""
    global srv
    main_srv = srv
    slow = os.path.join(tmp, "slowbin")
    os.mkdir(slow)
    shutil.copy(os.path.join(BIN, "nebula-coordinator"), slow)
    with open(os.path.join(slow, "nebula-gpu-worker"), "w") as f:
        f.write("#!/bin/sh\nsleep 1.5\nexec %s \"$@\"\n" % os.path.abspath(os.path.join(BIN, "nebula-gpu-worker")))
    os.chmod(os.path.join(slow, "nebula-gpu-worker"), 0o755)
    srv = Server(tmp, model=main_srv.model, bindir=slow, name="-slow")
    try:
        check(wait_for(lambda: status()["workers"], timeout=1), "the workers are listed at once")
        s = status()
        check(s["phase"] == "loading" and 0 < s["progress"] < 1 and s["workers"][0]["state"] in ("starting", "configuring")
              and s["model"]["id"] == "nebula-demo", f"status while the worker starts: {s['phase']} {s['progress']} {s['workers']}")
        check(jcall("GET", "/v1/models")[0] == 200 and jcall("POST", "/api/tokenize", {"text": "hi"})[0] == 200,
              "models and tokenize answer while loading")
        st, d = chat(max_tokens=2)
        check(st == 503 and d["error"]["code"] == "model_not_ready", f"chat while loading → 503: {st} {d}")
        check(metric("nebula_up") == 0, "nebula_up 0 while loading")
        # A ctl request waits while loading (ctl.sock is served once ready); the loop must
        # sleep meanwhile, not spin on ZMQ_FD (it stays readable until ZMQ_EVENTS is asked).
        waiter = subprocess.Popen([os.path.join(BIN, "nebulactl"), "--runtime", srv.run, "status"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        def cpu_s():
            f = open(f"/proc/{srv.proc.pid}/stat").read().rsplit(")", 1)[1].split()
            return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
        t0, c0 = time.time(), cpu_s()
        time.sleep(0.6)
        if status()["phase"] == "loading":
            used = cpu_s() - c0
            check(used < 0.25 * (time.time() - t0), f"the coordinator sleeps while loading with a ctl request waiting ({used:.2f} s CPU)")
        check(wait_for(lambda: status()["phase"] == "ready", timeout=30), "then ready")
        check(waiter.wait(timeout=30) == 0, "the ctl request waiting while loading is answered once ready")
        check(status()["progress"] == 1 and chat(max_tokens=2)[0] == 200, "and it generates")
    finally:
        srv = put_back(main_srv)


def test_described_demo(tmp):
    """A demo model that says what it is (nebula-convert --description: the trained demo model's
    general.description) gets that notice in /v1/models and /api/status instead of the random one's."""
    global srv
    main_srv = srv
    desc = "A small test model described by its GGUF: not Qwen3.8-Flash-Next."
    model = os.path.join(tmp, "described.gguf")
    subprocess.run([os.path.join(BIN, "nebula-convert"), "tests/fixtures/tiny-a", model, "--type", "f32", "--name",
                    "nebula-demo-docs", "--description", desc, "-q"], check=True)
    srv = Server(tmp, model=model, name="-described")
    try:
        m = jcall("GET", "/v1/models")[1]["data"][0]
        check(m["id"] == "nebula-demo-docs" and m["nebula"]["demo"] is True and m["nebula"]["notice"] == desc,
              f"/v1/models: the described demo's notice: {m}")
        mo = status()["model"]
        check(mo["demo"] is True and mo["notice"] == desc, f"/api/status: the described demo's notice: {mo}")
    finally:
        srv = put_back(main_srv)


def test_shutdown_in_flight():
    """SIGTERM with one request running and one queued: both get an error event and [DONE], and the
    coordinator exits 0 at once (no thread waits for a job that will never run)."""
    prompt, n = long_prompt(3900)
    slow = {"prompt": prompt, "max_tokens": 4, "temperature": 0, "prefill_chunk": 1, "stream": True, "cache_prompt": False}
    ca, ra = open_stream("/v1/completions", slow)
    check(wait_for(lambda: status()["queue"]["running"] == 1), "running before the shutdown")
    cb, rb = open_stream("/v1/completions", slow)
    check(wait_for(lambda: status()["queue"]["waiting"] == 1), "queued before the shutdown")
    t0 = time.time()
    srv.proc.send_signal(signal.SIGTERM)
    for name, r in (("running", ra), ("queued", rb)):
        ev = read_events(r)
        errs = [e[1]["error"] for e in ev if e[0] == "data" and isinstance(e[1], dict) and "error" in e[1]]
        check(ev and ev[-1] == ("data", "[DONE]") and errs and errs[0]["code"] == "cancelled",
              f"the {name} request ends with an error event at shutdown: {ev[-2:]}")
    ca.close(), cb.close()
    try:
        srv.proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    check(srv.proc.poll() is not None and time.time() - t0 < 5, f"the coordinator stopped in {time.time() - t0:.2f} s")


def run_suite(tests, args=()):
    """Starts the coordinator in a temporary directory, runs tests(tmp) against it, stops it unless
    they did, and checks that it exited cleanly; prints "N checks, N failed" and returns the exit
    status (test_http_progress.py runs its own tests with it)."""
    global srv
    tmp = tempfile.mkdtemp(prefix="nebula-api-")
    try:
        srv = Server(tmp, args=args)
        if not wait_for(lambda: status()["phase"] == "ready", timeout=30):
            print("FAIL: never ready:", open(srv.log).read())
            return 1
        tests(tmp)
        srv.stop()
        check(srv.proc.returncode == 0, f"coordinator exit status {srv.proc.returncode}")
        log = open(srv.log, errors="replace").read()
        check("Sanitizer" not in log and "runtime error:" not in log, "no sanitizer report in the coordinator's log")
    finally:
        if srv and srv.proc.poll() is None:
            os.killpg(srv.proc.pid, signal.SIGKILL)
            srv.proc.wait()
        if failures and srv:
            print("--- coordinator log (tail) ---")
            print("".join(open(srv.log).readlines()[-30:]))
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{checks} checks, {len(failures)} failed")
    return 1 if failures else 0


def main(tmp):
    test_models_and_status()
    greedy = test_chat_nonstream()
    test_chat_stream(greedy)
    test_think()
    test_stop_and_length(greedy)
    test_completions()
    test_tokenize_and_metrics()
    test_invalid()
    test_queue_cancel_keepalive()
    test_worker_dies_mid_generation()
    test_ctl_during_http_job(greedy)
    test_restart_during_http_job()
    test_loading_phase(tmp)
    test_described_demo(tmp)
    test_shutdown_in_flight()


if __name__ == "__main__":
    sys.exit(run_suite(main))
