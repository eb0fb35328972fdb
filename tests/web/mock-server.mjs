// mock-server.mjs — a stand-in for nginx + nebula-coordinator, for working on
// the web page without building the engine: serves web/ and answers
// /api/status and /v1/chat/completions as docs/API.md describes (streaming
// SSE with keep-alive and prefill progress comments, reasoning_content,
// timings, error events, OpenAI-style JSON errors).  Node standard library
// only.  The browser tests in CI run against the real stack
// (run-webui-tests.mjs); this server is for development only:
//
//   node tests/web/mock-server.mjs [--port N] [--loading SECONDS] [--demo]
//
// A user message containing "#stream-error" gets an error event after a few
// pieces; "#http-500" gets an HTTP 500; "#tool-call" gets an answer that
// calls two tools, streamed as OpenAI's tool_calls deltas (the arguments cut
// into pieces), finish_reason "tool_calls".
import http from "node:http";
import { readFile, stat } from "node:fs/promises";
import { extname, join, normalize, dirname } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "web");
const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : dflt;
};
const port = Number(opt("--port", "0"));
const loadingSeconds = Number(opt("--loading", "0"));
const demo = args.includes("--demo");
const started = Date.now();
const CONTEXT = 4096;
const MAX_BODY = 4 * 1024 * 1024;
let requests = 0;
let cancelled = 0;
let tokensGenerated = 0;

const TYPES = { ".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".mjs": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml", ".json": "application/json" };

function sendJson(res, status, obj) {
  const body = JSON.stringify(obj);
  res.writeHead(status, { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(body) });
  res.end(body);
}

function apiError(res, status, message, type = "invalid_request_error", param = null, code = null) {
  sendJson(res, status, { error: { message, type, param, code } });
}

function phase() {
  const t = (Date.now() - started) / 1000;
  if (t < loadingSeconds) return { phase: t < 0.5 ? "starting" : "loading", progress: Math.min(1, t / loadingSeconds) };
  return { phase: "ready", progress: 1 };
}

function status() {
  const p = phase();
  return {
    ...p,
    message: p.phase === "ready" ? "ready" : `reading layer ${Math.floor(p.progress * 40)} of 40`,
    model: { id: demo ? "nebula-demo" : "mock-model", path: "/mock/model.gguf", demo,
      notice: demo ? "Demo model with random weights: its answers are noise." : "", context_length: CONTEXT,
      vocab: 512, layers: 4, has_mtp: false },
    workers: [{ role: "gpu-worker", state: "ready", pid: 1, restarts: 0 }],
    queue: { running: 0, waiting: 0, capacity: 9 },
    prefill: null,
    limits: { max_body_bytes: MAX_BODY, context_length: CONTEXT },
    stats: { requests, requests_cancelled: cancelled, tokens_generated: tokensGenerated, last_tokens_per_s: 0, last_ttft_ms: 0, vram_hit_rate: 0 },
  };
}

function answerFor(text) {
  return [
    `You wrote ${text.length} characters. Here is a **mock** answer with a list:\n\n`,
    "- one\n- two\n\n",
    "```c\nint main(void) {\n    return 0; /* nothing */\n}\n```\n\n",
    "| a | b |\n|---|---|\n| 1 | 2 |\n\n",
    "And a <script>alert(1)</script> that must not run.",
  ].join("").match(/.{1,6}/gs);
}

async function chat(req, res, body) {
  let j;
  try {
    j = JSON.parse(body);
  } catch (e) {
    return apiError(res, 400, `malformed JSON: ${e.message}`);
  }
  if (!Array.isArray(j.messages) || j.messages.length === 0) return apiError(res, 400, "'messages' must be a non-empty array", "invalid_request_error", "messages");
  if (j.context_length != null && (!Number.isInteger(j.context_length) || j.context_length > CONTEXT)) {
    return apiError(res, 400, `context_length ${j.context_length} is over the model's ${CONTEXT}`, "invalid_request_error", "context_length");
  }
  if (phase().phase !== "ready") return apiError(res, 503, "the model is not loaded yet", "server_error");
  const last = j.messages[j.messages.length - 1];
  const text = typeof last.content === "string" ? last.content : "";
  if (text.includes("#http-500")) return apiError(res, 500, "mock internal error", "server_error");
  const promptTokens = JSON.stringify(j.messages).length >> 2;
  if (j.context_length && promptTokens + (j.max_tokens || 0) > j.context_length) {
    return apiError(res, 400, `the prompt (${promptTokens} tokens) and max_tokens do not fit in context_length ${j.context_length}`,
      "invalid_request_error", "messages", "context_length_exceeded");
  }
  requests++;
  const id = `chatcmpl-mock${requests}`;
  const created = Math.floor(Date.now() / 1000);
  const model = status().model.id;
  const chunk = (delta, finish = null, extra = {}) =>
    `data: ${JSON.stringify({ id, object: "chat.completion.chunk", created, model, choices: [{ index: 0, delta, finish_reason: finish }], ...extra })}\n\n`;
  if (!j.stream) {
    const content = answerFor(text).join("");
    return sendJson(res, 200, { id, object: "chat.completion", created, model,
      choices: [{ index: 0, message: { role: "assistant", content, reasoning_content: j.think === false ? "" : "mock thinking" }, finish_reason: "stop" }],
      usage: { prompt_tokens: promptTokens, completion_tokens: 10, total_tokens: promptTokens + 10 } });
  }
  res.writeHead(200, { "Content-Type": "text/event-stream", "Cache-Control": "no-cache" });
  let closed = false;
  res.on("close", () => { closed = true; });
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  const t0 = Date.now();
  res.write(": keep-alive\n\n");
  await sleep(300);
  // The prompt read in steps of prefill_chunk (the server's 512 by default), 150 ms each.
  const step = j.prefill_chunk || 512;
  for (let done = Math.min(step, promptTokens); promptTokens > step; done = Math.min(done + step, promptTokens)) {
    if (closed) return;
    res.write(`: prefill ${done}/${promptTokens}\n\n`);
    if (done === promptTokens) break;
    await sleep(150);
  }
  res.write(chunk({ role: "assistant", content: "" }));
  if (text.includes("#tool-call")) return toolCalls(res, chunk);
  const pieces = [];
  const think = j.think !== false && j.think !== "off";
  if (think) for (const p of "Let me think about this… the user wants a *demo*.".match(/.{1,5}/gs)) pieces.push({ reasoning_content: p });
  for (const p of answerFor(text)) pieces.push({ content: p });
  const max = j.max_tokens || Infinity;
  let n = 0;
  let ttft = null;
  for (const d of pieces) {
    if (closed) {
      cancelled++;
      tokensGenerated += n;
      return;
    }
    if (n >= max) break;
    if (text.includes("#stream-error") && n === 5) {
      res.write(`data: ${JSON.stringify({ error: { message: "mock worker failure", type: "server_error", param: null, code: null } })}\n\n`);
      res.end("data: [DONE]\n\n");
      return;
    }
    res.write(chunk(d));
    if (ttft === null) ttft = Date.now() - t0;
    n++;
    await sleep(25);
  }
  tokensGenerated += n;
  const decodeMs = Date.now() - t0 - ttft;
  res.write(chunk({}, n >= max ? "length" : "stop", {
    timings: { prompt_tokens: promptTokens, prompt_ms: 12, ttft_ms: ttft, completion_tokens: n, decode_ms: decodeMs,
      tokens_per_s: n / (decodeMs / 1000), queue_ms: 0,
      // "#spec": speculative decoding's counters, as a coordinator with --spec sends them
      ...(text.includes("#spec") ? { speculative: { passes: 4, tokens: 10, tokens_per_pass: 2.5, drafted: 10, accepted: 6,
        acceptance: 0.6, nongreedy_accepted: 1, drafted_by_position: [4, 4, 2], accepted_by_position: [4, 2, 0],
        acceptance_by_position: [1, 0.5, 0], drafters: { mtp: 3, lookup: 1 }, windows: [4, 4, 5, 4] } } : {}) },
    nebula: { accuracy_level: j.accuracy_level ?? 3, accuracy_level_effective: text.includes("#spec") ? j.accuracy_level ?? 3 : 3 } }));
  if (j.stream_options && j.stream_options.include_usage) {
    res.write(`data: ${JSON.stringify({ id, object: "chat.completion.chunk", created, model, choices: [],
      usage: { prompt_tokens: promptTokens, completion_tokens: n, total_tokens: promptTokens + n } })}\n\n`);
  }
  res.end("data: [DONE]\n\n");
}

// Two tool calls, as the API streams them: each call's first piece has its
// index, id, type and name, the arguments follow in pieces.
function toolCalls(res, chunk) {
  const calls = [
    { id: "call_mock1", name: "get_weather", args: ['{"city": "Par', 'is", "unit"', ': "celsius", "days": [1, 2]}'] },
    { id: "call_mock2", name: "search_docs", args: ['{"query":', ' "nebula <b>shm</b>"}'] },
  ];
  res.write(chunk({ content: "Let me check." }));
  calls.forEach((c, index) => {
    res.write(chunk({ tool_calls: [{ index, id: c.id, type: "function", function: { name: c.name, arguments: "" } }] }));
    for (const a of c.args) res.write(chunk({ tool_calls: [{ index, function: { arguments: a } }] }));
  });
  res.write(chunk({}, "tool_calls"));
  tokensGenerated += 12;
  res.end("data: [DONE]\n\n");
}

async function serveStatic(req, res, path) {
  const rel = normalize(decodeURIComponent(path)).replace(/^(\.\.[/\\])+/, "");
  let file = join(root, rel);
  if (!file.startsWith(root)) return apiError(res, 404, "not found");
  try {
    if ((await stat(file)).isDirectory()) file = join(file, "index.html");
    const data = await readFile(file);
    res.writeHead(200, { "Content-Type": TYPES[extname(file)] || "application/octet-stream" });
    res.end(data);
  } catch (_) {
    res.writeHead(404, { "Content-Type": "text/plain" });
    res.end("not found");
  }
}

const server = http.createServer((req, res) => {
  const url = new URL(req.url, "http://x");
  const chunks = [];
  let size = 0;
  req.on("data", (c) => {
    size += c.length;
    if (size <= MAX_BODY) chunks.push(c);
  });
  req.on("end", () => {
    if (size > MAX_BODY) return apiError(res, 413, `request body over ${MAX_BODY} bytes`);
    const body = Buffer.concat(chunks).toString("utf8");
    if (url.pathname === "/api/status") return req.method === "GET" ? sendJson(res, 200, status()) : apiError(res, 405, "use GET");
    if (url.pathname === "/v1/chat/completions") {
      if (req.method !== "POST") return apiError(res, 405, "use POST");
      return chat(req, res, body).catch((e) => apiError(res, 500, e.message, "server_error"));
    }
    if (url.pathname.startsWith("/v1/") || url.pathname.startsWith("/api/")) return apiError(res, 404, `unknown path ${url.pathname}`);
    return serveStatic(req, res, url.pathname);
  });
});
server.listen(port, "127.0.0.1", () => {
  console.log(`mock-server: http://127.0.0.1:${server.address().port}/`);
});
