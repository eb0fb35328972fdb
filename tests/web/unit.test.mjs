// unit.test.mjs — the page's pure modules under node (node --test): the SSE
// parser fed the server's stream cut at every byte, and the text the page
// builds (documents in the prompt, the Markdown export, titles, stats).
import { test } from "node:test";
import assert from "node:assert/strict";
import { SseParser, parsePrefill, mergeToolCalls } from "../../web/js/api.js";
import {
  composeUserContent, fenceFor, langForFile, chatToMarkdown, titleFromText, formatStats, formatSize, exportFileName, countOf,
  requestMessages, chatMatches, contextUsed,
} from "../../web/js/chatformat.js";
import { prettyJson } from "../../web/js/toolview.js";

test("counts: the noun agrees with the number (\"its 1 messages\" was a bug)", () => {
  assert.equal(countOf(0, "message"), "0 messages");
  assert.equal(countOf(1, "message"), "1 message");
  assert.equal(countOf(2, "message"), "2 messages");
  const md = chatToMarkdown({ title: "One", messages: [{ role: "user", content: "hi" }] }, { exportedAt: new Date("2026-12-01T00:00:00Z") });
  assert.match(md, /· 1 message\*/);
});

function parseAll(pieces) {
  const events = [];
  const comments = [];
  const p = new SseParser({ onEvent: (e) => events.push(e.data), onComment: (c) => comments.push(c) });
  for (const x of pieces) p.push(x);
  p.end();
  return { events, comments };
}

const STREAM = ': keep-alive\n\ndata: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n' +
  ': keep-alive\r\n\r\n' +
  'data: {"choices":[{"delta":{"content":"h\u00e9llo \u4e16\u754c \ud83d\ude80"}}]}\r\n\r\n' +
  'event: message\nid: 7\ndata: line one\ndata: line two\n\n' +
  'data:no-space\r\r' +
  'data: {"error":{"message":"worker died"}}\n\n' +
  "data: [DONE]\n\n";
const WANT = [
  '{"choices":[{"delta":{"role":"assistant","content":""}}]}',
  '{"choices":[{"delta":{"content":"h\u00e9llo \u4e16\u754c \ud83d\ude80"}}]}',
  "line one\nline two",
  "no-space",
  '{"error":{"message":"worker died"}}',
  "[DONE]",
];

test("SSE: events, multi-line data, comments, CRLF and CR line ends", () => {
  const { events, comments } = parseAll([STREAM]);
  assert.deepEqual(events, WANT);
  assert.deepEqual(comments, ["keep-alive", "keep-alive"]);
});

test("SSE: the same stream cut at every position (and into single bytes) parses the same", () => {
  const bytes = new TextEncoder().encode(STREAM);
  for (let cut = 0; cut <= bytes.length; cut++) {
    const d = new TextDecoder();
    const parts = [d.decode(bytes.slice(0, cut), { stream: true }), d.decode(bytes.slice(cut), { stream: true }), d.decode()];
    assert.deepEqual(parseAll(parts).events, WANT, `cut at byte ${cut}`);
  }
  const d = new TextDecoder();
  const ones = [...bytes].map((b) => d.decode(new Uint8Array([b]), { stream: true }));
  assert.deepEqual(parseAll(ones).events, WANT);
});

test("SSE: a last event without its blank line still counts; an empty stream has none", () => {
  assert.deepEqual(parseAll(["data: [DONE]"]).events, ["[DONE]"]);
  assert.deepEqual(parseAll([""]).events, []);
  assert.deepEqual(parseAll([": only a comment\n\n"]).events, []);
});

test("SSE: `: prefill DONE/TOTAL` comments are the prompt's progress, any other comment is not", () => {
  const { events, comments } = parseAll([": prefill 0/4096\n\n: prefill 1024/4096\r\n\r\n: keep-alive\n\ndata: [DONE]\n\n"]);
  assert.deepEqual(events, ["[DONE]"]);
  assert.deepEqual(comments.map(parsePrefill), [{ done: 0, total: 4096 }, { done: 1024, total: 4096 }, null]);
  for (const c of ["keep-alive", "prefill", "prefill 1/", "prefill 1/0", "prefill -1/4", "prefill 1/4 tokens", "prefilled 1/4"])
    assert.equal(parsePrefill(c), null, c);
});

test("documents: fenced with the file name and a language, fences longer than any inside", () => {
  assert.equal(langForFile("main.c"), "c");
  assert.equal(langForFile("src/Makefile"), "makefile");
  assert.equal(langForFile("notes.txt"), "text");
  assert.equal(langForFile("README"), "");
  assert.equal(fenceFor("no backticks"), "```");
  assert.equal(fenceFor("has ``` inside and ````` too"), "``````");
  const c = composeUserContent("Look:", [{ name: "a.py", text: "print(1)\n" }, { name: "b.md", text: "```x```" }]);
  assert.equal(c, "Look:\n\nFile: a.py\n```python\nprint(1)\n```\n\nFile: b.md\n````markdown\n```x```\n````");
  assert.equal(composeUserContent("", [{ name: "n.txt", text: "x" }]), "File: n.txt\n```text\nx\n```");
  assert.equal(composeUserContent("just text"), "just text");
});

test("titles, stats, sizes and export file names", () => {
  assert.equal(titleFromText("\n  Hello there  \nsecond line"), "Hello there");
  assert.equal(titleFromText(""), "New chat");
  assert.equal(titleFromText("x".repeat(100)).length, 48);
  assert.equal(formatStats({ tokens_per_s: 12.345, ttft_ms: 87.6, completion_tokens: 40 }), "12.3 tok/s · TTFT 88 ms · 40 tokens");
  assert.equal(formatStats({ tokens_per_s: 5, ttft_ms: 12500, measured: true }), "≈5.0 tok/s · TTFT ≈12.5 s");
  assert.equal(formatStats(null), "");
  assert.equal(formatStats({ ttft_ms: 7, completion_tokens: 9, prompt_cached: 320 }), "TTFT 7 ms · 320 cached · 9 tokens");
  assert.equal(formatStats({ ttft_ms: 7, completion_tokens: 9, prompt_cached: 0 }), "TTFT 7 ms · 9 tokens");
  assert.equal(formatStats({ tokens_per_s: 5, completion_tokens: 9, spec: { passes: 4, tokens_per_pass: 2.25, drafted: 12, accepted: 5 } }),
    "5.0 tok/s · 9 tokens · 2.25 tok/pass · 42% of 12 drafts accepted");
  assert.equal(formatStats({ tokens_per_s: 0, ttft_ms: 7, completion_tokens: 1 }), "TTFT 7 ms · 1 token");
  assert.equal(formatStats({ ttft_ms: 7, completion_tokens: 9, measured: true, tokens_approx: true }), "TTFT ≈7 ms · ≈9 tokens");
  assert.equal(formatStats({ ttft_ms: 7, completion_tokens: 9, measured: true }), "TTFT ≈7 ms · 9 tokens");
  assert.equal(exportFileName({ title: "Ünïcode: a/b?" }, new Date("2026-11-30T07:00:00Z")), "Unicode-ab-2026-11-30.md");
  assert.equal(formatSize(1023), "1023 B");
  assert.equal(formatSize(1536), "1.5 KiB");
  assert.equal(formatSize(300 * 1024), "300 KiB");
  assert.equal(formatSize(4 * 1024 * 1024), "4.0 MiB");
});

test("Markdown export: title, roles, documents, thinking, notes", () => {
  const chat = {
    title: "Stars",
    messages: [
      { role: "user", content: "What is **this**?", attachments: [{ name: "n.txt", size: 4, text: "abc\n" }] },
      { role: "assistant", content: "An answer.\n\n```c\nint x;\n```", reasoning: "hmm\nok", stats: { tokens_per_s: 10, ttft_ms: 5, completion_tokens: 3 } },
      { role: "user", content: "More", attachments: [] },
      { role: "assistant", content: "Part", stopped: true },
      { role: "user", content: "Again" },
      { role: "assistant", content: "", error: "HTTP 400: too long" },
    ],
  };
  const md = chatToMarkdown(chat, { exportedAt: new Date("2026-11-30T07:00:00Z"), model: "nebula-demo" });
  assert.equal(md, [
    "# Stars",
    "",
    "*Exported from Nebula on 2026-11-30 07:00:00 UTC · model nebula-demo · 6 messages*",
    "",
    "## User",
    "",
    "What is **this**?",
    "",
    "**Attached: n.txt** (4 bytes)",
    "",
    "```text",
    "abc",
    "```",
    "",
    "## Assistant",
    "",
    "> **Thinking**",
    ">",
    "> hmm",
    "> ok",
    "",
    "An answer.",
    "",
    "```c",
    "int x;",
    "```",
    "",
    "*10.0 tok/s · TTFT 5 ms · 3 tokens*",
    "",
    "## User",
    "",
    "More",
    "",
    "## Assistant",
    "",
    "Part",
    "",
    "*stopped by the user*",
    "",
    "## User",
    "",
    "Again",
    "",
    "## Assistant",
    "",
    "*error: HTTP 400: too long*",
    "",
  ].join("\n"));
});

test("titles: the first line with text, without its Markdown", () => {
  const cases = [
    ["# **Hello** world", "Hello world"],
    ["## Use `make run` ##", "Use make run"],
    ["[Docs](http://x) and **bold** _em_ ~~gone~~", "Docs and bold em gone"],
    ["![a chart](c.png) of *speed*", "a chart of speed"],
    ["> quoted *text*", "quoted text"],
    ["- [ ] task __b__", "task b"],
    ["1. first `a`", "first a"],
    ["```c\nint x;\n```", "int x;"],
    ["---\n\n  **Real** line", "Real line"],
    ["snake_case_name and 2*3*4", "snake_case_name and 2*3*4"],
    ["**unclosed bold", "unclosed bold"],
    ["<b>tag</b> <https://example.com>", "tag https://example.com"],
    ["**", "New chat"],
    ["", "New chat"],
  ];
  for (const [text, want] of cases) assert.equal(titleFromText(text), want, JSON.stringify(text));
  assert.equal(titleFromText("**" + "x".repeat(60) + "**"), "x".repeat(47) + "…");
});

test("search: every word, in the title, the messages or the documents' names, case and accents folded", () => {
  const chat = { title: "About rivers", system: "Be brief.", messages: [
    { role: "user", content: "Tell me of the Rhône", attachments: [{ name: "notes.md", text: "secret words" }] },
    { role: "assistant", content: "The **Danube** flows east." },
  ] };
  for (const q of ["", "  ", "rivers", "RHONE", "rhône danube", "notes.md", "brief", "flows east"]) assert.ok(chatMatches(chat, q), q);
  for (const q of ["nile", "rivers nile", "secret"]) assert.ok(!chatMatches(chat, q), q);
});

test("context used: the server's prompt + completion of the last counted answer", () => {
  assert.equal(contextUsed({ messages: [] }), null);
  assert.equal(contextUsed({ messages: [{ role: "user", content: "a" }, { role: "assistant", content: "b", stats: null }] }), null);
  const chat = { messages: [
    { role: "user" }, { role: "assistant", stats: { prompt_tokens: 10, completion_tokens: 5 } },
    { role: "user" }, { role: "assistant", stats: { prompt_tokens: 30, completion_tokens: 7 } },
    { role: "user" }, { role: "assistant", error: "HTTP 502", stats: null },
  ] };
  assert.equal(contextUsed(chat), 37);
});

test("request messages: system first, thinking-only and empty answers kept as assistant turns, failed ones dropped, tools", () => {
  const chat = { system: "Be brief.", messages: [
    { role: "user", content: "one" },
    { role: "assistant", content: "", reasoning: "thinking only" },
    { role: "user", content: "two" },
    { role: "assistant", content: "", stopped: true },
    { role: "user", content: "three", attachments: [{ name: "a.txt", text: "x\n" }] },
    { role: "assistant", content: "", error: "HTTP 400: too long" },
    { role: "user", content: "four" },
    { role: "assistant", content: "Let me check.", reasoning: "dropped",
      tool_calls: [{ index: 0, id: "c1", type: "function", function: { name: "f", arguments: "{}" } }] },
    { role: "tool", tool_call_id: "c1", content: "42" },
    { role: "user", content: "five" },
    { role: "assistant", pending: true, content: "" },
  ] };
  assert.deepEqual(requestMessages(chat, chat.messages.length - 1), [
    { role: "system", content: "Be brief." },
    { role: "user", content: "one" },
    { role: "assistant", content: "", reasoning_content: "thinking only" },
    { role: "user", content: "two" },
    { role: "assistant", content: "" },
    { role: "user", content: "four" },
    { role: "assistant", content: "Let me check.", tool_calls: [{ id: "c1", type: "function", function: { name: "f", arguments: "{}" } }] },
    { role: "tool", content: "42", tool_call_id: "c1" },
    { role: "user", content: "five" },
  ]);
  assert.deepEqual(requestMessages({ system: "  ", messages: [{ role: "user", content: "hi" }] }, 1), [{ role: "user", content: "hi" }]);
});

test("tool calls: pieces merged by index, arguments appended, pretty-printed once they are JSON", () => {
  const calls = [];
  mergeToolCalls(calls, [{ index: 0, id: "call_1", type: "function", function: { name: "get_weather", arguments: "" } }]);
  mergeToolCalls(calls, [{ index: 0, function: { arguments: '{"city": "Pa' } }]);
  mergeToolCalls(calls, [{ index: 1, id: "call_2", type: "function", function: { name: "search", arguments: '{"q"' } },
    { index: 0, function: { arguments: 'ris"}' } }]);
  mergeToolCalls(calls, [{ index: 1, function: { arguments: ': 1}' } }, null]);
  assert.deepEqual(calls, [
    { index: 0, id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city": "Paris"}' } },
    { index: 1, id: "call_2", type: "function", function: { name: "search", arguments: '{"q": 1}' } },
  ]);
  assert.equal(prettyJson(calls[0].function.arguments), '{\n  "city": "Paris"\n}');
  assert.equal(prettyJson('{"city": "Pa'), '{"city": "Pa');
  assert.equal(prettyJson(""), "");
});
