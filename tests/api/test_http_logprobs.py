#!/usr/bin/env python3
"""test_http_logprobs.py — logprobs over the HTTP API (docs/API.md, "Logprobs"), on test_http_api.py's
server (the real pipeline on the demo model): chat `logprobs`/`top_logprobs` and completions'
legacy `logprobs: k`, streamed and not.  Checks: one entry per generated token (the end-of-turn
token excepted), each logprob ≤ 0, the alternatives sorted and their probabilities summing to at
most 1; under temperature 0 the token is the top alternative with the same logprob, and the text
is the same as without logprobs (the full-logits path samples as the argmax shortcut does); a
sampled token's logprob is at most the best one; the stream's entries are the response's; the
completion shape (tokens, token_logprobs, top_logprobs, text_offset) is coherent; top_logprobs 0
gives empty lists; top_logprobs without logprobs is a 400.  Standard library only.  Prints
"N checks, N failed"; exits 1 on any failure.  Run from the repository root (BUILD=build).
"""
import math
import sys

sys.dont_write_bytecode = True
from test_http_api import HELLO, check, jcall, run_suite, stream  # noqa: E402


def chat(**kw):
    body = {"messages": HELLO, "think": False}
    body.update(kw)
    return jcall("POST", "/v1/chat/completions", body)


def entries_ok(what, content, k):
    ok = True
    for e in content:
        tops = e["top_logprobs"]
        ok &= e["logprob"] <= 1e-6 and isinstance(e["token"], str) and all(isinstance(b, int) and 0 <= b < 256 for b in e["bytes"])
        ok &= len(tops) == k and all(tops[i]["logprob"] >= tops[i + 1]["logprob"] for i in range(len(tops) - 1))
        ok &= sum(math.exp(t["logprob"]) for t in tops) <= 1 + 1e-4
    check(ok, f"{what}: every entry's logprob ≤ 0, {k} alternatives sorted, their probabilities sum to ≤ 1")


def test_chat():
    st, plain = chat(temperature=0, max_tokens=24)
    st, d = chat(temperature=0, max_tokens=24, logprobs=True, top_logprobs=5)
    check(st == 200, f"chat with logprobs: {st} {d}")
    ch = d["choices"][0]
    content = ch["logprobs"]["content"]
    n = d["usage"]["completion_tokens"] - (1 if ch["finish_reason"] == "stop" else 0)
    check(len(content) == n, f"one entry per token: {len(content)} vs {n}")
    entries_ok("greedy chat", content, 5)
    check(all(e["token"] == e["top_logprobs"][0]["token"] and abs(e["logprob"] - e["top_logprobs"][0]["logprob"]) < 1e-6 for e in content),
          "temperature 0: each token is the top alternative, with its logprob")
    check(ch["message"]["content"] == plain["choices"][0]["message"]["content"], "greedy text is the same with and without logprobs")
    check(ch["logprobs"].get("refusal", 0) is None, "logprobs.refusal is null")
    # Sampled: the token's logprob is at most the best one, and equals its listed value when listed.
    st, d = chat(temperature=1.0, seed=5, max_tokens=24, logprobs=True, top_logprobs=20)
    content = d["choices"][0]["logprobs"]["content"]
    entries_ok("sampled chat", content, 20)
    ok = True
    for e in content:
        ok &= e["logprob"] <= e["top_logprobs"][0]["logprob"] + 1e-6
        listed = [t for t in e["top_logprobs"] if t["token"] == e["token"] and t["bytes"] == e["bytes"]]
        ok &= not listed or abs(listed[0]["logprob"] - e["logprob"]) < 1e-6
    check(ok, "a sampled token's logprob ≤ the best, its listed value when listed")
    # Streamed: the same entries.
    st, d = chat(temperature=0, max_tokens=24, logprobs=True, top_logprobs=2)
    status, ctype, ev = stream("/v1/chat/completions", {"messages": HELLO, "think": False, "temperature": 0, "max_tokens": 24,
                                                        "logprobs": True, "top_logprobs": 2, "stream": True})
    streamed = [e for k, x in ev if k == "data" and x != "[DONE]" and x.get("choices") and x["choices"][0].get("logprobs")
                for e in x["choices"][0]["logprobs"]["content"]]
    check(status == 200 and streamed == d["choices"][0]["logprobs"]["content"], f"streamed entries = the response's ({len(streamed)})")
    st, d = chat(temperature=0, max_tokens=4, logprobs=True)
    check(st == 200 and all(e["top_logprobs"] == [] for e in d["choices"][0]["logprobs"]["content"]), "top_logprobs 0: empty lists")
    st, d = chat(max_tokens=2, top_logprobs=2)
    check(st == 400 and d["error"]["param"] == "top_logprobs", f"top_logprobs without logprobs: {st}")


def test_completions():
    body = {"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0, "logprobs": 3}
    st, d = jcall("POST", "/v1/completions", body)
    ch = d["choices"][0]
    lp = ch["logprobs"]
    n = len(lp["tokens"])
    check(st == 200 and n == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == len(lp["text_offset"]) > 0,
          f"completion logprobs: four lists of one length: {lp}")
    check(all(lp["text_offset"][i] <= lp["text_offset"][i + 1] for i in range(n - 1)) and lp["text_offset"][0] == 0, "text_offset grows from 0")
    check(all(len(t) <= 3 and abs(max(t.values()) - lp["token_logprobs"][i]) < 1e-6 for i, t in enumerate(lp["top_logprobs"])),
          "greedy: each token's logprob is its best alternative's")
    status, ctype, ev = stream("/v1/completions", dict(body, stream=True))
    toks = [t for k, x in ev if k == "data" and x != "[DONE]" and x.get("choices") and x["choices"][0].get("logprobs")
            for t in x["choices"][0]["logprobs"]["tokens"]]
    offs = [t for k, x in ev if k == "data" and x != "[DONE]" and x.get("choices") and x["choices"][0].get("logprobs")
            for t in x["choices"][0]["logprobs"]["text_offset"]]
    check(toks == lp["tokens"] and offs == lp["text_offset"], "streamed completion logprobs = the response's")


def main(tmp):
    test_chat()
    test_completions()


if __name__ == "__main__":
    sys.exit(run_suite(main))
