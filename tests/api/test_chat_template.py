#!/usr/bin/env python3
"""test_chat_template.py — the prompt the coordinator renders (core/chat, coordinator/api_tools.c)
is bit-identical to the model's released chat template (tests/fixtures/chat-template/qwen3.6.jinja)
rendered the way transformers' apply_chat_template renders it (jinja2: trim_blocks, lstrip_blocks,
`tojson` = json.dumps(ensure_ascii=False), raise_exception), for message sets with a system
prompt, thinking on and off, history with thinking (in the content and as reasoning_content),
tools, assistant tool calls of every argument type, several calls in one turn, content before
calls, runs of tool results, a developer message, whitespace to trim (ASCII and Unicode), and
non-ASCII text; tool_choice none renders no tools; what the template refuses is a 400.  Uses
test_http_api.py's server (the real pipeline on the demo model) and POST /apply-template.
Needs jinja2 (Debian's python3-jinja2, which deploy/install-deps.sh installs; without it the test
fails).  Prints "N checks, N failed"; exits 1 on any failure.  Run from the repository root
(BUILD=build).
"""
import copy
import json
import sys

sys.dont_write_bytecode = True
from test_http_api import check, jcall, run_suite  # noqa: E402

try:
    import jinja2  # noqa: F401
except ImportError:
    # A python of its own (pyenv, a venv) does not see Debian's python3-jinja2 (deploy/install-deps.sh):
    # its pure-python package serves any python3 of the same kind.
    sys.path.append("/usr/lib/python3/dist-packages")
try:
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    print("FAIL: jinja2 is not importable (python3-jinja2: deploy/install-deps.sh installs it): "
          "the template comparison cannot run")
    print("1 checks, 1 failed")
    sys.exit(1)

TEMPLATE = "tests/fixtures/chat-template/qwen3.6.jinja"


def reference(messages, tools=None, think=True):
    """The released template, as transformers renders it (OpenAI `arguments` strings parsed, as
    vLLM and llama.cpp do before rendering)."""
    def raise_exception(msg):
        raise ValueError(msg)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    msgs = copy.deepcopy(messages)
    for m in msgs:
        if m["role"] == "developer":
            m["role"] = "system"
        for c in m.get("tool_calls") or []:
            if isinstance(c["function"].get("arguments"), str):
                c["function"]["arguments"] = json.loads(c["function"]["arguments"])
    return env.from_string(open(TEMPLATE).read()).render(messages=msgs, tools=tools, add_generation_prompt=True,
                                                         enable_thinking=think)


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather <now> & été \u0001 \"quoted\" 東京",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "a city"}, "days": {"type": "integer", "minimum": 1, "maximum": 16},
        "ratio": {"type": "number", "default": 0.25, "exclusiveMinimum": 1e-07}, "hourly": {"type": "boolean"},
        "opts": {"type": "object", "additionalProperties": True}, "tags": {"type": "array", "items": {"type": "string"}},
        "note": {"type": ["string", "null"]}}, "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
NOPARAMS = {"type": "function", "function": {"name": "ping", "description": "no parameters at all"}}


def call(name, args, cid="call_1"):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


CASES = [
    ("one user turn", [{"role": "user", "content": "Hello"}], None),
    ("system, trimmed", [{"role": "system", "content": "  Be brief.\n\n"}, {"role": "user", "content": "\n Hi \u3000"}], None),
    ("history loses thinking", [
        {"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "<think>\nadd\n</think>\n\n4"},
        {"role": "user", "content": "and 3+3?"}], None),
    ("reasoning_content after the query", [
        {"role": "user", "content": "q"}, {"role": "assistant", "content": "partial", "reasoning_content": "\n  thought \n"},
        {"role": "user", "content": "<tool_response>\nr\n</tool_response>"}], None),
    ("developer and content parts", [
        {"role": "developer", "content": [{"type": "text", "text": "Dev "}, {"type": "text", "text": "rules"}]},
        {"role": "user", "content": [{"type": "text", "text": "part one"}, {"type": "text", "text": " part two"}]}], None),
    ("tools listed", [{"role": "system", "content": "You are a bot."}, {"role": "user", "content": "Weather in Oslo?"}],
     [WEATHER, TIME, NOPARAMS]),
    ("tools, empty system", [{"role": "system", "content": "  "}, {"role": "user", "content": "x"}], [TIME]),
    ("a call of every argument type and its result", [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": None, "tool_calls": [call("get_weather", {
            "city": "São Paulo\nline 2", "days": 3, "ratio": 2.5, "hourly": True, "opts": {"units": "metric", "n": [1, None, False]},
            "tags": ["a", "b"], "note": None})]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21}"}], [WEATHER]),
    ("content before two calls, two results", [
        {"role": "system", "content": "sys"}, {"role": "user", "content": "Both please."},
        {"role": "assistant", "content": "<think>\nI need two tools.\n</think>\n\nLet me check.",
         "tool_calls": [call("get_weather", {"city": "Oslo"}, "c1"), call("get_time", {}, "c2")]},
        {"role": "tool", "tool_call_id": "c1", "content": " sunny "}, {"role": "tool", "tool_call_id": "c2", "content": "noon"},
        {"role": "assistant", "content": "Sunny at noon."}, {"role": "user", "content": "Thanks"}], [WEATHER, TIME]),
    ("multi-step tool use", [
        {"role": "user", "content": "Plan a day"},
        {"role": "assistant", "content": "", "reasoning_content": "first the weather", "tool_calls": [call("get_weather", {"city": "Rome"})]},
        {"role": "tool", "tool_call_id": "call_1", "content": "rain"},
        {"role": "assistant", "content": "", "reasoning_content": "then the time", "tool_calls": [call("get_time", {})]},
        {"role": "tool", "tool_call_id": "call_1", "content": "9am"}], [WEATHER, TIME]),
]


def test_bytes():
    for name, msgs, tools in CASES:
        for think in (True, False):
            body = {"messages": msgs, "think": think}
            if tools:
                body["tools"] = tools
            st, d = jcall("POST", "/apply-template", body)
            ref = reference(msgs, tools, think)
            ok = st == 200 and d.get("prompt") == ref
            if not ok and st == 200:
                got = d["prompt"]
                at = next((i for i in range(min(len(got), len(ref))) if got[i] != ref[i]), min(len(got), len(ref)))
                print(f"  {name} (think {think}): differs at {at}: ours {got[at - 40:at + 40]!r} vs template {ref[at - 40:at + 40]!r}")
            check(ok, f"{name}, think {think}: the prompt is the template's bytes ({st} {str(d)[:200] if st != 200 else ''})")
    # tool_choice none: the tools are not rendered (the template without them).
    msgs = CASES[5][1]
    st, d = jcall("POST", "/apply-template", {"messages": msgs, "tools": [WEATHER], "tool_choice": "none"})
    check(st == 200 and d["prompt"] == reference(msgs, None, True), "tool_choice none renders no tools")
    # A forced call: the template's prompt with thinking closed, then the call's opening.
    st, d = jcall("POST", "/apply-template", {"messages": msgs, "tools": [WEATHER, TIME],
                                              "tool_choice": {"type": "function", "function": {"name": "get_time"}}})
    check(st == 200 and d["prompt"] == reference(msgs, [WEATHER, TIME], False) + "<tool_call>\n<function=get_time>\n",
          f"a named tool_choice: the template's prompt (think closed) + the call's opening: {str(d)[-120:]}")
    st, d = jcall("POST", "/apply-template", {"messages": msgs, "tools": [WEATHER], "tool_choice": "required"})
    check(st == 200 and d["prompt"] == reference(msgs, [WEATHER], False) + "<tool_call>\n<function=",
          "tool_choice required: the template's prompt (think closed) + <tool_call>\\n<function=")
    # What the template refuses is a 400.
    for msgs, what in (([{"role": "system", "content": "s"}], "no user query"),
                       ([{"role": "user", "content": "<tool_response>x</tool_response>"}], "only a tool response"),
                       ([{"role": "user", "content": "a"}, {"role": "system", "content": "b"}], "a late system message")):
        try:
            reference(msgs)
            refused = False
        except ValueError:
            refused = True
        st, d = jcall("POST", "/apply-template", {"messages": msgs})
        check(refused and st == 400 and d["error"]["param"] == "messages", f"{what}: the template refuses it, the API answers 400: {st}")


if __name__ == "__main__":
    sys.exit(run_suite(lambda tmp: test_bytes()))
