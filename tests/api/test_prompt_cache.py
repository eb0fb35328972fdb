#!/usr/bin/env python3
"""test_prompt_cache.py — the prompt cache across turns (issue 17; docs/ARCHITECTURE.md, "Prompt
cache"), end to end on the demo model (tiny-a: GDN layers, so grid checkpoints sit at multiples of 64).

A 10-turn chat conversation through /v1/chat/completions, run three times on real coordinators
(test_http_api.py's Server): with --cache off (the reference), and with the cache on and a cache
directory, greedy (the gpu-worker's argmax path), then sampled (temperature 0.9, a seed) with
logprobs (every row's logits: the comparison is of the distribution, not only of the tokens).  Checks, per turn:
  - the output (the text, and the logprobs' tokens) equals the cache-off run's, its logprobs within
    LOGPROB_TOL (a resumed state is exact within float tolerance, not bit for bit: the largest
    difference is printed);
  - usage.prompt_tokens_details.cached_tokens (and timings.prompt_cached) is what the rule gives:
    the longest earlier checkpoint that is a prefix of this prompt, a request's checkpoints being its
    prompt's last multiple of 64 above what it resumed from and at or below its last <|im_start|>,
    and the end of its generation prompt's "<|im_start|>assistant\n" (ids from /api/tokenize) — the
    saves counted, none at the end of a chat without tools (its history re-renders the answer);
  - from the second turn on, the prefill is only the new tokens: cached_tokens is what the prompt
    shares with the turn before's (the history renders the answer after "<|im_start|>assistant\n",
    without the generation prompt's empty think block), timings.prompt_prefilled the rest, and the
    gpu-worker evaluated exactly (prompt − cached) + (completion − 1) rows (its tokens counter):
    nothing cached is computed again;
  - with --cache-resume grid (4 turns of each): checkpoints only on the grid, the output the cache-off
    run's bit for bit (the logprobs to the last digit), a turn prefilling its new tokens, the turn
    before's generation prompt and fewer than 64 more;
  - nebulactl stats and /metrics count the hits, misses, tokens reused and prefilled; cache_prompt
    false leaves the cache untouched (a non-boolean is a 400); a streamed /v1/messages turn's
    message_start reports the cached tokens (as its message_delta does); a think_budget's second leg
    resumes from the first leg's end checkpoint.
The end-of-request checkpoint (the state after the answer's last token fed back): through ctl.sock
(nebula generate --server, token ids), a prompt that is an earlier prompt, its generated ids and more
resumes from it (prefill = the ids after the answer), with the cache-off server's ids; the first
generated row's max|Δlogit| against the cache-off server's, for it and for chat turns resumed from a
role-header checkpoint, is printed and held under LOGIT_TOL.
Then the coordinator is stopped and started again on the same directory: the next turn resumes from
the checkpoint written before the restart (prefill = only what follows it) with the reference's
output; the gpu-worker killed with -9, the turn after resumes from a file with the reference's output; a checkpoint file corrupted in its state is refused by the gpu-worker (a log line), the turn
is prefilled from the start with the same output; a file with a broken header is ignored at start.
Standard library only.  Prints "N checks, N failed"; exits 1 on any failure.  Run from the
repository root (BUILD=build)."""
import array
import glob
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

sys.dont_write_bytecode = True
import test_http_api as H  # noqa: E402
from test_http_api import BIN, Server, check, jcall, status, wait_for  # noqa: E402

ALIGN = 64
TURNS = 10
LOGPROB_TOL = 1e-3  # a resumed state's logprobs against the uncached run's (fp32; measured: docs/BENCHMARKS.md)
LOGIT_TOL = 1e-3
max_dlogprob = [0.0]
WORDS = ("river stone cloud lantern orchard copper meadow harbor violet signal quiet amber north "
         "window garden silver thunder paper candle marble").split()


def user_text(k):
    return "Turn %d: " % k + " ".join(WORDS[(k * 7 + i * 3) % len(WORDS)] for i in range(14 + k % 4))


def use(s):
    H.srv = s
    ok = wait_for(lambda: status().get("phase") == "ready", timeout=40)
    check(ok, "the coordinator is ready")
    return ok


def gw_tokens(s):
    out = subprocess.run([os.path.join(BIN, "nebulactl"), "--runtime", s.run, "--json", "stats"], capture_output=True, text=True)
    d = json.loads(out.stdout)
    gw = [w for w in d["workers"] if w["name"] == "gpu-worker"]
    return gw[0]["counters"]["tokens"] if gw else -1, d.get("prompt_cache", {})


def settled(s):
    """The gpu-worker's counters once the last request's end checkpoint is saved (it is saved after the answer
    is sent): two reads 0.2 s apart agree."""
    last = None
    for _ in range(50):
        cur = gw_tokens(s)
        if cur == last:
            return cur
        last = cur
        time.sleep(0.2)
    return last


def metric(name, labels=""):
    body = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % H.srv.port, timeout=10).read().decode()
    for line in body.splitlines():
        if line.startswith(name + labels + " "):
            return float(line.split()[-1])
    return None


_im_start = []


def im_start():
    if not _im_start:
        st, d = jcall("POST", "/api/tokenize", {"text": "<|im_start|>"})
        check(st == 200 and d.get("count") == 1, f"<|im_start|> is one token: {d}")
        _im_start.append(d["tokens"][0])
        st, d = jcall("POST", "/api/tokenize", {"text": "<|im_start|>assistant\n"})
        check(st == 200 and d.get("count", 0) > 1, f"the role header: {d}")
        _im_start.append(d["tokens"])
    return _im_start[0]


def role_header():
    im_start()
    return _im_start[1]


def same_output(out, ref):
    """The text and the logprobs' tokens exactly; the logprob values within LOGPROB_TOL (the largest kept)."""
    if out["content"] != ref["content"] or (out["logprobs"] is None) != (ref["logprobs"] is None):
        return False
    if out["logprobs"] is None:
        return True
    a, b = out["logprobs"].get("content") or [], ref["logprobs"].get("content") or []
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x["token"] != y["token"] or [t["token"] for t in x["top_logprobs"]] != [t["token"] for t in y["top_logprobs"]]:
            return False
        for u, v in zip([x] + x["top_logprobs"], [y] + y["top_logprobs"]):
            d = abs(u["logprob"] - v["logprob"])
            max_dlogprob[0] = max(max_dlogprob[0], d)
            if d > LOGPROB_TOL:
                return False
    return True


def prompt_ids(messages):
    st, d = jcall("POST", "/api/tokenize", {"messages": messages, "think": False})
    check(st == 200, f"tokenize: {st} {d}")
    return d.get("tokens", [])


def request(messages, sampled, logprobs):
    body = {"messages": messages, "max_tokens": 12, "think": False}
    body.update({"temperature": 0.9, "seed": 7} if sampled else {"temperature": 0})
    if logprobs:
        body.update({"logprobs": True, "top_logprobs": 3})
    st, d = jcall("POST", "/v1/chat/completions", body)
    check(st == 200, f"chat: {st} {str(d)[:300]}")
    return d


def conversation(s, sampled, logprobs, reference=None, turns=range(TURNS), history=None, ckpts=None, label="", grid=False):
    """Runs the turns; returns (outputs, history, checkpoints).  With a reference, checks each turn.  grid: the
    server runs with --cache-resume grid (checkpoints at multiples of 64 only, the output bit for bit)."""
    history = list(history or [])
    ckpts = list(ckpts or [])  # the token prefixes the server should hold
    outs = []
    prev_ids = None
    settled(s)  # an end checkpoint of a request before (ctl.sock's) saved
    for k in turns:
        history.append({"role": "user", "content": user_text(k)})
        ids = prompt_ids(history)
        before, pc0 = gw_tokens(s)
        d = request(history, sampled, logprobs)
        after, pc1 = gw_tokens(s)
        n_ckpts = len(ckpts)
        msg = d["choices"][0]["message"]
        out = {"content": msg.get("content"), "logprobs": d["choices"][0].get("logprobs")}
        outs.append(out)
        usage, timings = d.get("usage", {}), d.get("timings", {})
        cached = usage.get("prompt_tokens_details", {}).get("cached_tokens")
        n = usage.get("prompt_tokens")
        check(n == len(ids), f"{label} turn {k}: prompt_tokens {n}, /api/tokenize {len(ids)}")
        if reference is not None:
            want = max([len(p) for p in ckpts if len(p) < len(ids) and ids[:len(p)] == p] + [0])
            check(cached == want, f"{label} turn {k}: cached_tokens {cached}, the rule says {want}")
            check(timings.get("prompt_cached") == cached, f"{label} turn {k}: timings.prompt_cached {timings.get('prompt_cached')}")
            check(timings.get("prompt_prefilled") == len(ids) - (cached or 0), f"{label} turn {k}: timings.prompt_prefilled "
                                                                               f"{timings.get('prompt_prefilled')}")
            made = usage.get("completion_tokens", 0)
            rows = (len(ids) - (cached or 0)) + max(made - 1, 0)
            check(after - before == rows, f"{label} turn {k}: the gpu-worker evaluated {after - before} rows, "
                                          f"want {len(ids)} - {cached} prompt + {max(made - 1, 0)} decode")
            ref = reference[k - turns.start]
            check(out == ref if grid else same_output(out, ref),
                  f"{label} turn {k}: output differs from the cache-off run: {str(out)[:200]} vs {str(ref)[:200]}")
            start = cached or 0
            # on the grid: at or below the prompt's last turn opening (the generation prompt is rendered otherwise next turn)
            stable = max(i for i, t in enumerate(ids) if t == im_start()) if im_start() in ids[1:] else len(ids)
            cut = next((p for p in range(stable, start, -1) if p % ALIGN == 0), 0)
            if cut and ids[:cut] not in ckpts:
                ckpts.append(ids[:cut])
            # anywhere: after the generation prompt's role header, where the next turn's history goes on otherwise
            rh = role_header()
            head = stable + len(rh) if ids[stable:stable + len(rh)] == rh and stable + len(rh) < len(ids) else 0
            if head > start and head != cut and ids[:head] not in ckpts and not grid:
                ckpts.append(ids[:head])
            if prev_ids is not None and grid:  # the new tokens, the turn before's generation prompt and fewer than 64 more
                common = next((i for i, (x, y) in enumerate(zip(ids, prev_ids)) if x != y), min(len(ids), len(prev_ids)))
                pre = len(ids) - (cached or 0)
                check(pre < len(ids) - common + (len(prev_ids) - prev_stable) + ALIGN,
                      f"{label} turn {k}: prefilled {pre}, {len(ids) - common} new tokens (+ {len(prev_ids) - prev_stable} "
                      f"of the last generation prompt)")
            elif prev_ids is not None:  # only the new tokens: past what this prompt shares with the turn before's
                common = next((i for i, (x, y) in enumerate(zip(ids, prev_ids)) if x != y), min(len(ids), len(prev_ids)))
                pre = len(ids) - (cached or 0)
                check(cached == common and pre == len(ids) - common,
                      f"{label} turn {k}: prefilled {pre}, cached {cached}; the new tokens: {len(ids) - common} (past {common})")
                if os.environ.get("VERBOSE"):
                    print(f"{label} turn {k}: {len(ids)} prompt tokens, {len(ids) - common} new, {cached} cached, {pre} prefilled")
            prev_ids, prev_stable = ids, stable
            # the checkpoints the rule gives, and none at the end (a chat without tools: no prompt extends its answer)
            check(pc1.get("saves", 0) - pc0.get("saves", 0) == len(ckpts) - n_ckpts,
                  f"{label} turn {k}: {pc1.get('saves', 0) - pc0.get('saves', 0)} checkpoints saved, the rule gives {len(ckpts) - n_ckpts}")
        history.append({"role": "assistant", "content": msg.get("content") or ""})
    return outs, history, ckpts


def ctl_generate(s, ids, tag, n=8):
    """A greedy generation through ctl.sock (nebula generate --server) from token ids: (ids made, first row's logits, all rows)."""
    tf, lf = os.path.join(s.run, tag + ".ids"), os.path.join(s.run, tag + ".f32")
    with open(tf, "w") as f:
        f.write(" ".join(map(str, ids)))
    out = subprocess.run([os.path.join(BIN, "nebula"), "generate", "--server", s.run, "--tokens-file", tf, "-n", str(n), "--greedy",
                          "--print-ids", "--dump-logits", lf], capture_output=True, text=True, timeout=120)
    check(out.returncode == 0, f"nebula generate --server ({tag}): {out.stderr[-300:]}")
    lines = out.stdout.rstrip("\n").split("\n")
    made = [int(x) for x in lines[-1].split()] if out.returncode == 0 and lines[-1].strip() else []
    rows = array.array("f")
    if os.path.exists(lf):
        with open(lf, "rb") as f:
            rows.frombytes(f.read())
    return made, rows


def logit_runs(s, hist):
    """For chat turns 1, 5 and 9 of the greedy conversation: the turn's prompt (A: it resumes from the turn's own
    role-header checkpoint), then that prompt + its generated ids + 5 more (B: from A's end checkpoint)."""
    runs = []
    for k in (1, 5, 9):
        ids = prompt_ids(hist[:2 * k + 1])
        before, _ = gw_tokens(s)
        made, rows = ctl_generate(s, ids, "a%d" % k)
        mid, _ = gw_tokens(s)
        cont = ids + made + ids[-5:]
        made_b, rows_b = ctl_generate(s, cont, "b%d" % k)
        after, _ = gw_tokens(s)
        runs.append({"k": k, "ids": ids, "made": made, "rows": rows, "cont": cont, "made_b": made_b, "rows_b": rows_b,
                     "rows_a_eval": mid - before, "rows_b_eval": after - mid})
    return runs


def max_dlogit(a, b, n):
    """max|a - b| over the first n values (the first generated position's row when n = n_vocab)."""
    return max((abs(x - y) for x, y in zip(a[:n], b[:n])), default=float("inf")) if len(a) >= n and len(b) >= n else float("inf")


def compare_logit_runs(on, off):
    """The cache's runs against the cache-off server's: the same ids; the end checkpoint resumed (B's prefill is
    only the ids after the answer's last fed token); the first rows' max|Δlogit| printed and under LOGIT_TOL."""
    resumed_end = 0
    for x, y in zip(on, off):
        k = x["k"]
        check(x["made"] == y["made"] and x["made_b"] == y["made_b"], f"ctl turn {k}: ids differ from the cache-off server's: "
                                                                      f"{x['made']} {x['made_b']} vs {y['made']} {y['made_b']}")
        V = len(y["rows"]) // max(len(y["made"]), 1)
        da, db = max_dlogit(x["rows"], y["rows"], V), max_dlogit(x["rows_b"], y["rows_b"], V)
        dall = max(max_dlogit(x["rows"], y["rows"], len(y["rows"])), max_dlogit(x["rows_b"], y["rows_b"], len(y["rows_b"])))
        print(f"max|dlogit| turn {k}: first row {da:.3g} (the turn's prompt, from its role-header checkpoint), "
              f"{db:.3g} (prompt + answer + 5, from the end checkpoint); every row {dall:.3g}")
        check(da <= LOGIT_TOL and db <= LOGIT_TOL and dall <= LOGIT_TOL, f"ctl turn {k}: max|dlogit| {da} {db} {dall} > {LOGIT_TOL}")
        if len(x["made"]) >= 2:  # the end checkpoint holds the prompt and every generated id but the last
            resumed_end += 1
            want = (len(x["cont"]) - (len(x["ids"]) + len(x["made"]) - 1)) + max(len(x["made_b"]) - 1, 0)
            check(x["rows_b_eval"] == want, f"ctl turn {k}: from the end checkpoint the gpu-worker evaluated {x['rows_b_eval']} "
                                            f"rows, want {want} (the ids after the answer, then the decode steps)")
    check(resumed_end > 0, "at least one generation made 2 ids or more (an end checkpoint to resume from)")


def think_budget_leg(s):
    """think_budget: the answer's second leg (the prompt, the reasoning so far, the close) resumes from the first
    leg's end checkpoint: it prefills only the close and what follows the reasoning's last fed token."""
    body = {"messages": [{"role": "user", "content": user_text(2)}], "max_tokens": 12, "temperature": 0, "think": True, "think_budget": 3}
    st, d = jcall("POST", "/v1/chat/completions", body)
    log = open(s.log, errors="replace").read()
    legs = [l for l in log.splitlines() if "thinking reached its budget" in l]
    check(st == 200 and legs, f"think_budget 3: a second leg: {st} {str(d)[:200]}")
    after = log[log.rfind(legs[-1]):] if legs else ""
    m = re.search(r"prompt cache: (\d+) of the prompt's (\d+) tokens", after)
    n = d.get("usage", {}).get("prompt_tokens", 0)
    check(m and int(m.group(1)) > n + 1 and int(m.group(2)) - int(m.group(1)) < 8,
          f"the second leg resumes from the first's end checkpoint (past the prompt's {n}): {m.group(0) if m else after[:300]}")


def anthropic_stream():
    """/v1/messages streamed, a second turn: message_start (sent once the cache's lookup is done) and message_delta
    report the cached part as the response's usage does: input_tokens + cache_read_input_tokens = the prompt."""
    msgs = [{"role": "user", "content": user_text(3)}]
    st, d = jcall("POST", "/v1/messages", {"model": "any", "max_tokens": 8, "messages": msgs, "temperature": 0})
    check(st == 200, f"/v1/messages: {st} {str(d)[:200]}")
    text = "".join(b.get("text", "") for b in d.get("content", []) if b.get("type") == "text")
    msgs += [{"role": "assistant", "content": text or "ok"}, {"role": "user", "content": user_text(4)}]
    c, r = H.open_stream("/v1/messages", {"model": "any", "max_tokens": 8, "messages": msgs, "temperature": 0, "stream": True})
    ev = [v for k, v in H.read_events(r) if k == "data" and isinstance(v, dict)]
    c.close()
    start = next((e["message"]["usage"] for e in ev if e.get("type") == "message_start"), {})
    delta = next((e["usage"] for e in ev if e.get("type") == "message_delta"), {})
    n = len(prompt_ids([{"role": m["role"], "content": m["content"]} for m in msgs]))
    check(start.get("cache_read_input_tokens", 0) > 0, f"the Anthropic stream's message_start reports the cached tokens: {start}")
    check(start.get("cache_read_input_tokens") == delta.get("cache_read_input_tokens") and
          start.get("input_tokens") == delta.get("input_tokens"), f"message_start {start} and message_delta {delta} agree")
    check(start.get("input_tokens", 0) + start.get("cache_read_input_tokens", 0) == n or n == 0,
          f"input_tokens + cache_read_input_tokens = the prompt's {n}: {start}")


def main(tmp):
    model = os.path.join(tmp, "demo.gguf")
    subprocess.run([os.path.join(BIN, "nebula-convert"), "tests/fixtures/tiny-a", model, "--type", "f32", "--name", "nebula-demo",
                    "-q"], check=True)
    cdir = os.path.join(tmp, "kv")
    servers = []

    def start(name, *args):
        s = Server(tmp, model=model, name=name, args=args)
        servers.append(s)
        return s if use(s) else None

    try:
        ref = {}
        s = start("off", "--cache", "off")
        for mode in ("greedy", "sampled"):
            ref[mode], ref_hist, _ = conversation(s, mode == "sampled", mode == "sampled", label="off " + mode)
            if mode == "greedy":
                off_runs = logit_runs(s, ref_hist)
        _, pc = gw_tokens(s)
        check(pc.get("enabled") is False and pc.get("hits") == 0, f"cache off: stats say {pc}")
        s.stop()

        s = start("on", "--cache", "on", "--cache-dir", cdir, "--cache-ram-entries", "3")
        outs, hist, ckpts = conversation(s, False, False, reference=ref["greedy"], label="on greedy")
        _, pc = settled(s)
        check(pc.get("hits", 0) >= TURNS - 3 and pc.get("tokens_reused", 0) > 0, f"stats after 10 turns: {pc}")
        check(pc.get("ram_entries", 99) <= 3, f"at most 3 checkpoints in RAM: {pc}")
        check(metric("nebula_prompt_cache_hits_total") == pc.get("hits"), "/metrics counts the hits")
        check(metric("nebula_prompt_cache_tokens_reused_total") == pc.get("tokens_reused"), "/metrics counts the tokens reused")
        check((metric("nebula_prompt_cache_bytes", '{where="disk"}') or 0) > 0, "/metrics shows the checkpoints' disk bytes")
        check(metric("nebula_prompt_cache_tokens_prefilled_total") == pc.get("tokens_prefilled") and pc.get("tokens_prefilled", 0) > 0,
              f"/metrics counts the tokens prefilled: {pc}")
        compare_logit_runs(logit_runs(s, hist), off_runs)
        # cache_prompt false: neither resumed nor saved; a value that is not a boolean is a 400
        _, before = settled(s)
        st, d = jcall("POST", "/v1/chat/completions", {"messages": hist, "max_tokens": 4, "temperature": 0, "think": False,
                                                       "cache_prompt": False})
        _, after = gw_tokens(s)
        check(st == 200 and d["usage"]["prompt_tokens_details"]["cached_tokens"] == 0, f"cache_prompt false: nothing reused: {d.get('usage')}")
        check(after.get("saves") == before.get("saves") and after.get("hits") == before.get("hits")
              and after.get("misses") == before.get("misses"), f"cache_prompt false: the cache untouched: {before} → {after}")
        st, d = jcall("POST", "/v1/chat/completions", {"messages": hist, "max_tokens": 4, "cache_prompt": "yes"})
        check(st == 400 and d.get("error", {}).get("param") == "cache_prompt", f"cache_prompt \"yes\": 400 naming it: {st} {d}")
        # sampled: its own conversation, same rule (the greedy one's checkpoints are no prefix of it after turn 0's answer)
        souts, _, _ = conversation(s, True, True, reference=ref["sampled"], ckpts=ckpts, label="on sampled")
        anthropic_stream()
        think_budget_leg(s)
        s.stop()

        # --cache-resume grid: checkpoints at multiples of 64 only, and the output the cache-off run's bit for bit
        s = start("grid", "--cache", "on", "--cache-resume", "grid")
        gk = []
        for mode in ("greedy", "sampled"):
            _, _, gk = conversation(s, mode == "sampled", mode == "sampled", reference=ref[mode][:4], turns=range(4), ckpts=gk,
                                    label="grid " + mode, grid=True)
        s.stop()
        files = sorted(glob.glob(os.path.join(cdir, "*.nbkv")))
        check(len(files) >= 4, f"checkpoint files written: {len(files)}")

        # the reference for turn 10 of the greedy conversation
        s = start("off2", "--cache", "off")
        ref10, _, _ = conversation(s, False, False, turns=range(TURNS, TURNS + 2), history=hist, label="off turn 10")
        s.stop()

        # a restart: the files are the index; turn 10 resumes from the one written before
        with open(os.path.join(cdir, "0badbeef.nbkv"), "wb") as f:
            f.write(b"not a checkpoint at all")
        s = start("re", "--cache", "on", "--cache-dir", cdir)
        log = open(s.log, errors="replace").read()
        check("ignoring" in log and "0badbeef" in log, "a file with a broken header is ignored with a log line")
        out, hist2, _ = conversation(s, False, False, reference=ref10[:1], turns=range(TURNS, TURNS + 1), history=hist,
                                     ckpts=ckpts, label="after restart")
        _, pc = gw_tokens(s)
        check(pc.get("hits") == 1, f"after the restart: resumed from a file: {pc}")
        # the gpu-worker killed: its RAM copies are gone, the files remain; the next turn resumes from one
        time.sleep(0.5)  # the writer thread's file of turn 10's checkpoint
        pid = [w for w in status()["workers"] if w["role"] == "gpu-worker"][0]["pid"]
        os.kill(pid, signal.SIGKILL)
        check(wait_for(lambda: any(w["role"] == "gpu-worker" and w["state"] == "ready" and w["pid"] != pid
                                   for w in status()["workers"]), timeout=30), "the gpu-worker is restarted")
        history = hist2[:] + [{"role": "user", "content": user_text(TURNS + 1)}]
        d = request(history, False, False)
        check(same_output({"content": d["choices"][0]["message"].get("content"), "logprobs": d["choices"][0].get("logprobs")}, ref10[1]),
              "after the gpu-worker's death: the output is the cache-off run's")
        check(d["usage"]["prompt_tokens_details"]["cached_tokens"] > 0, f"after the gpu-worker's death: resumed from a file: {d['usage']}")
        check("did not load" not in open(s.log, errors="replace").read(), "no checkpoint failed to load after the death")
        s.stop()

        # every checkpoint's state corrupted (a byte past the header): the turn is prefilled from the start, same output
        for f in glob.glob(os.path.join(cdir, "*.nbkv")):
            if os.path.basename(f) == "0badbeef.nbkv":
                continue
            with open(f, "r+b") as fh:
                fh.seek(os.path.getsize(f) - 5)
                b = fh.read(1)
                fh.seek(-1, 1)
                fh.write(bytes([b[0] ^ 0x5a]))
        s = start("bad", "--cache", "on", "--cache-dir", cdir)
        history = hist[:]
        history.append({"role": "user", "content": user_text(TURNS)})
        history.append({"role": "assistant", "content": ref10[0]["content"] or ""})
        history.append({"role": "user", "content": user_text(TURNS + 1)})
        d = request(history, False, False)
        check(same_output({"content": d["choices"][0]["message"].get("content"), "logprobs": d["choices"][0].get("logprobs")}, ref10[1]),
              "a corrupt checkpoint: the output is the cache-off run's")
        check(d["usage"]["prompt_tokens_details"]["cached_tokens"] == 0, f"a corrupt checkpoint: nothing reused: {d['usage']}")
        _, pc = gw_tokens(s)
        check(pc.get("load_failures") == 1, f"one load failure counted: {pc}")
        log = open(s.log, errors="replace").read()
        check("did not load" in log and "corrupt" in log, "the refused checkpoint is logged")
        alive_st, _ = jcall("GET", "/v1/models")
        check(alive_st == 200, "the server answers after a corrupt checkpoint")
        s.stop()
        for sv in servers:
            log = open(sv.log, errors="replace").read()
            check(sv.proc.returncode == 0, f"coordinator {sv.run} exit status {sv.proc.returncode}")
            check("Sanitizer" not in log and "runtime error:" not in log, "no sanitizer report")
    finally:
        for sv in servers:
            if sv.proc.poll() is None:
                os.killpg(sv.proc.pid, signal.SIGKILL)
                sv.proc.wait()
        if H.failures:
            for sv in servers[-2:]:
                print("--- %s (tail) ---" % sv.log)
                print("".join(open(sv.log, errors="replace").readlines()[-25:]))


if __name__ == "__main__":
    tmp = tempfile.mkdtemp(prefix="nebula-pcache-")
    try:
        main(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"max|dlogprob| over the chat turns' logprobs against the cache-off run's: {max_dlogprob[0]:.3g}")
    print(f"{H.checks} checks, {len(H.failures)} failed")
    sys.exit(1 if H.failures else 0)
