#!/usr/bin/env python3
"""test_http_tools.py — tool calls over the HTTP API (docs/API.md, "Tools"), on test_http_api.py's
server started with --test-hooks: a random-weight model never writes a tool call, so the model's
text is scripted (`nebula_test_script`: its tokens replace the sampled ones, through the same
decoder, reasoning filter, tool-call scanner and SSE path).  Checks: several calls with content
and reasoning before them come back as OpenAI tool_calls (arguments a JSON string, values typed by
the schema), finish_reason tool_calls, content null without text; the stream's deltas rebuild the
same calls and text; the response fed back as history renders the scripted call text byte for
byte (parser and renderer round trip); tool_choice none (no tools rendered, calls left as text),
required and a named function (the forced opening: the script continues it), parallel_tool_calls
false (the generation ends after the first call); malformed calls (an unknown function, a block
the generation ends inside) stay content with nebula.tool_call_error, streamed and not, and the
server keeps serving.  Standard library only.  Prints "N checks, N failed"; exits 1 on any
failure.  Run from the repository root (BUILD=build).
"""
import json
import sys

sys.dont_write_bytecode = True
from test_http_api import alive, check, jcall, run_suite, stream  # noqa: E402

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"}, "hourly": {"type": "boolean"}, "ratio": {"type": "number"},
    "opts": {"type": "object"}}, "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
ASK = [{"role": "user", "content": "Weather in Oslo, and the time?"}]
CALL1 = ("<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n<parameter=days>\n3\n</parameter>\n"
         "<parameter=hourly>\ntrue\n</parameter>\n<parameter=ratio>\n0.5\n</parameter>\n<parameter=opts>\n{\"units\": \"metric\"}\n"
         "</parameter>\n</function>\n</tool_call>")
CALL2 = "<tool_call>\n<function=get_time>\n</function>\n</tool_call>"
SCRIPT = "I should look both up.\n</think>\n\nLet me check.\n\n" + CALL1 + "\n" + CALL2


def gen(script, stream_=False, **kw):
    body = {"messages": ASK, "tools": [WEATHER, TIME], "temperature": 0, "max_tokens": 400, "nebula_test_script": script}
    body.update(kw)
    if stream_:
        body["stream"] = True
        return stream("/v1/chat/completions", body)
    return jcall("POST", "/v1/chat/completions", body)


def rebuild(events):
    """OpenAI-style accumulation of a chat stream: (content, reasoning, calls, finish, last chunk)."""
    content, reasoning, calls, finish, last = "", "", {}, None, None
    for kind, d in events:
        if kind != "data" or d == "[DONE]" or not d.get("choices"):
            continue
        ch = d["choices"][0]
        delta = ch.get("delta", {})
        content += delta.get("content") or ""
        reasoning += delta.get("reasoning_content") or ""
        for tc in delta.get("tool_calls") or []:
            c = calls.setdefault(tc["index"], {"id": None, "type": None, "function": {"name": "", "arguments": ""}})
            c["id"] = tc.get("id") or c["id"]
            c["type"] = tc.get("type") or c["type"]
            c["function"]["name"] += tc.get("function", {}).get("name") or ""
            c["function"]["arguments"] += tc.get("function", {}).get("arguments") or ""
        if ch.get("finish_reason"):
            finish, last = ch["finish_reason"], d
    return content, reasoning, [calls[k] for k in sorted(calls)], finish, last


def test_calls():
    st, d = gen(SCRIPT)
    check(st == 200, f"scripted tool calls: {st} {d}")
    ch = d["choices"][0]
    m = ch["message"]
    check(ch["finish_reason"] == "tool_calls", f"finish_reason tool_calls: {ch['finish_reason']}")
    check(m["content"] == "Let me check." and m["reasoning_content"] == "I should look both up.", f"content and reasoning: {m}")
    calls = m.get("tool_calls") or []
    check(len(calls) == 2 and [c["function"]["name"] for c in calls] == ["get_weather", "get_time"], f"two calls: {calls}")
    check(all(c["type"] == "function" and c["id"].startswith("call_") for c in calls) and calls[0]["id"] != calls[1]["id"],
          f"ids and types: {calls}")
    args = json.loads(calls[0]["function"]["arguments"])
    check(args == {"city": "Oslo", "days": 3, "hourly": True, "ratio": 0.5, "opts": {"units": "metric"}},
          f"arguments typed by the schema: {args}")
    check(isinstance(calls[0]["function"]["arguments"], str) and json.loads(calls[1]["function"]["arguments"]) == {},
          "arguments are JSON strings")
    check("tool_call_error" not in d["nebula"], f"no tool error: {d['nebula']}")

    # Streamed: the deltas rebuild the same text and calls.
    status, ctype, ev = gen(SCRIPT, stream_=True)
    content, reasoning, scalls, finish, last = rebuild(ev)
    check(status == 200 and ev[-1] == ("data", "[DONE]"), f"stream ends with [DONE]: {ev[-2:]}")
    check(content == m["content"] and reasoning == m["reasoning_content"], f"streamed text: {content!r} {reasoning!r}")
    check([(c["type"], c["function"]["name"], json.loads(c["function"]["arguments"])) for c in scalls] ==
          [(c["type"], c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] and all(c["id"] for c in scalls),
          f"streamed calls: {scalls}")
    check(finish == "tool_calls", f"streamed finish_reason: {finish}")
    opening = [d for k, d in ev if k == "data" and d != "[DONE]" and d.get("choices") and d["choices"][0]["delta"].get("tool_calls")]
    check(len(opening) == 4 and opening[0]["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"] == "",
          "each call streams as an opening delta (id, name) and an arguments delta")

    # Round trip: the answer as history renders the scripted calls byte for byte.
    hist = ASK + [{"role": "assistant", "content": m["content"], "reasoning_content": m["reasoning_content"], "tool_calls": calls},
                  {"role": "tool", "tool_call_id": calls[0]["id"], "content": "sunny"},
                  {"role": "tool", "tool_call_id": calls[1]["id"], "content": "noon"}]
    st, t = jcall("POST", "/apply-template", {"messages": hist, "tools": [WEATHER, TIME]})
    check(st == 200 and ("<|im_start|>assistant\n<think>\nI should look both up.\n</think>\n\nLet me check.\n\n" + CALL1 + "\n" + CALL2 +
                         "<|im_end|>\n<|im_start|>user\n<tool_response>\nsunny\n</tool_response>\n<tool_response>\nnoon\n"
                         "</tool_response><|im_end|>\n") in t.get("prompt", ""), f"history renders the calls as written: {t}")


def test_choices():
    # none: no tools in the prompt, a call in the text stays text.
    st, d = gen("plain " + CALL2, tool_choice="none", think=False)
    m = d["choices"][0]["message"]
    check(st == 200 and "tool_calls" not in m and m["content"] == "plain " + CALL2 and d["choices"][0]["finish_reason"] == "stop",
          f"tool_choice none: the call is text: {d}")
    # required: the prompt opens a call; the script writes the rest.
    st, d = gen("get_time>\n</function>\n</tool_call>", tool_choice="required")
    ch = d["choices"][0]
    check(st == 200 and ch["finish_reason"] == "tool_calls" and [c["function"]["name"] for c in ch["message"]["tool_calls"]] == ["get_time"]
          and ch["message"]["content"] is None and "reasoning_content" not in ch["message"], f"tool_choice required: {d}")
    # A named function: the opening names it.
    st, d = gen("<parameter=city>\nRome\n</parameter>\n</function>\n</tool_call>",
                tool_choice={"type": "function", "function": {"name": "get_weather"}})
    calls = d["choices"][0]["message"].get("tool_calls") or [{}]
    check(st == 200 and calls[0].get("function", {}).get("name") == "get_weather" and
          json.loads(calls[0]["function"]["arguments"]) == {"city": "Rome"}, f"named tool_choice: {d}")
    # parallel_tool_calls false: the first call ends the generation.
    st, d = gen(SCRIPT, parallel_tool_calls=False)
    ch = d["choices"][0]
    check(st == 200 and len(ch["message"]["tool_calls"]) == 1 and ch["finish_reason"] == "tool_calls" and
          d["usage"]["completion_tokens"] < gen(SCRIPT)[1]["usage"]["completion_tokens"], f"parallel_tool_calls false: one call: {d}")


def test_malformed():
    bad = "Sure.\n<tool_call>\n<function=launch>\n</function>\n</tool_call> after"
    for think in (True, False):
        st, d = gen(("x</think>\n" if think else "") + bad, think=think)
        ch = d["choices"][0]
        check(st == 200 and ch["message"]["content"] == "Sure.<tool_call>\n<function=launch>\n</function>\n</tool_call> after"
              and "tool_calls" not in ch["message"] and ch["finish_reason"] == "stop"
              and "launch" in d["nebula"].get("tool_call_error", ""), f"an unknown function stays content, with an error: {d}")
    status, ctype, ev = gen(bad, stream_=True, think=False)
    content, reasoning, calls, finish, last = rebuild(ev)
    check(status == 200 and content == "Sure.<tool_call>\n<function=launch>\n</function>\n</tool_call> after" and not calls
          and finish == "stop" and "launch" in last["nebula"].get("tool_call_error", "") and ev[-1] == ("data", "[DONE]"),
          f"streamed: the same content and error: {content!r} {last}")
    st, d = gen("ok " + CALL2 + "\n<tool_call>\n<function=get_weather>\n<parameter=city>\nOs", think=False)
    ch = d["choices"][0]
    check(st == 200 and len(ch["message"]["tool_calls"]) == 1 and ch["finish_reason"] == "stop" and
          ch["message"]["content"].startswith("ok<tool_call>\n<function=get_weather>") and
          "ended inside" in d["nebula"].get("tool_call_error", ""), f"an unclosed call: content and an error: {d}")
    alive("malformed tool calls")


def test_think_budget():
    """think_budget: after N reasoning tokens the server closes the think block and the answer goes on
    from there (a second leg); the closing tokens count in usage."""
    script = "alpha beta gamma delta epsilon zeta eta theta"
    body = {"messages": ASK, "max_tokens": 80, "temperature": 0, "nebula_test_script": script}
    st, free = jcall("POST", "/v1/chat/completions", body)
    st, d = jcall("POST", "/v1/chat/completions", dict(body, think_budget=3))
    m, fm = d["choices"][0]["message"], free["choices"][0]["message"]
    check(st == 200 and fm["reasoning_content"] == script and fm["content"] == "", f"without a budget the script is all thinking: {fm}")
    check(m["reasoning_content"] and m["reasoning_content"] + m["content"] == script and len(m["reasoning_content"]) < 6,
          f"think_budget 3: the thinking is cut after 3 tokens, the rest is the answer: {m}")
    check(d["usage"]["completion_tokens"] > free["usage"]["completion_tokens"], f"the server's close counts: {d['usage']} vs {free['usage']}")
    status, ctype, ev = stream("/v1/chat/completions", dict(body, think_budget=3, stream=True))
    content, reasoning, calls, finish, last = rebuild(ev)
    check(reasoning == m["reasoning_content"] and content == m["content"] and finish == "stop", f"streamed the same: {reasoning!r} {content!r}")
    check(sum(1 for k, e in ev if k == "comment" and e.startswith(": prefill")) >= 1 and
          all(e != ": prefill 0/0" for k, e in ev if k == "comment"), "the second leg's prefill is not reported as the prompt's")
    st, d = jcall("POST", "/v1/chat/completions", dict(body, think_budget=3, think=False))
    check(st == 400 and d["error"]["param"] == "think_budget", f"think_budget without thinking: 400 {st}")


def main(tmp):
    test_calls()
    test_choices()
    test_malformed()
    test_think_budget()


if __name__ == "__main__":
    sys.exit(run_suite(main, args=["--test-hooks"]))
