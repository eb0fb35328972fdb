// api.js — the page's side of the HTTP API (docs/API.md): /api/status and
// streaming /v1/chat/completions.
//
// Streaming uses fetch + ReadableStream rather than EventSource because the
// request is a POST with a JSON body.  The SSE parser is written out here (it
// is small) so that every case the server produces is handled explicitly:
// `: keep-alive` comment lines while the request waits in the queue,
// `: prefill DONE/TOTAL` ones after each prefill step and while a long one
// runs, `data: {"error":…}` once the stream has begun, and `data: [DONE]`.
// A stream that ends without [DONE] is an error, not a short answer: the
// user must see that the connection broke.

// An error to show the user: the server's own message where there is one.
export class ApiError extends Error {
  constructor(message, { status = 0, type = null, code = null, param = null } = {}) {
    super(message);
    this.name = "ApiError";
    this.status = status;
    this.type = type;
    this.code = code;
    this.param = param;
  }
}

// Reads an error response: OpenAI-style JSON {"error":{message,…}} from the
// coordinator, or whatever a proxy in front of it answered (nginx's HTML 502).
async function errorFromResponse(res) {
  let text = "";
  try {
    text = await res.text();
  } catch (e) {
    text = "";
  }
  const what = `HTTP ${res.status}${res.statusText ? " " + res.statusText : ""}`;
  try {
    const j = JSON.parse(text);
    const e = j && j.error;
    if (e && typeof e === "object" && typeof e.message === "string") {
      return new ApiError(`${what}: ${e.message}`, {
        status: res.status, type: e.type ?? null, code: e.code ?? null, param: e.param ?? null,
      });
    }
    if (typeof e === "string") return new ApiError(`${what}: ${e}`, { status: res.status });
  } catch (_) {
    // not JSON: fall through
  }
  let hint = "";
  if (res.status === 502 || res.status === 504) {
    hint = " — the web server cannot reach the Nebula engine (is nebula-coordinator running? see coordinator.log and webui-error.log in the state directory)";
  }
  const plain = text.replace(/<[^>]*>/g, " ").replace(/\s+/g, " ").trim().slice(0, 200);
  return new ApiError(`${what}${plain && !hint ? ": " + plain : ""}${hint}`, { status: res.status });
}

function networkError(e, what) {
  return new ApiError(`Cannot reach the Nebula server (${what}): ${e && e.message ? e.message : e}`, { status: 0 });
}

// GET /api/status.  Throws ApiError.
export async function fetchStatus(signal) {
  let res;
  try {
    res = await fetch("api/status", { signal, cache: "no-store", headers: { Accept: "application/json" } });
  } catch (e) {
    if (e && e.name === "AbortError") throw e;
    throw networkError(e, "GET /api/status");
  }
  if (!res.ok) throw await errorFromResponse(res);
  try {
    return await res.json();
  } catch (e) {
    throw new ApiError(`GET /api/status: the answer is not JSON (${e.message})`, { status: res.status });
  }
}

// An incremental SSE parser (the text/event-stream format): push() decoded
// text as it arrives; onEvent receives {data} for each complete event and
// onComment receives the text of each comment line (": keep-alive").
export class SseParser {
  constructor({ onEvent, onComment }) {
    this.onEvent = onEvent;
    this.onComment = onComment || (() => {});
    this.buf = "";
    this.data = [];
  }

  push(text) {
    this.buf += text;
    for (;;) {
      const m = /\r\n|\r|\n/.exec(this.buf);
      if (!m) break;
      // A lone \r at the very end may be the first half of \r\n: wait.
      if (m[0] === "\r" && m.index === this.buf.length - 1) break;
      const line = this.buf.slice(0, m.index);
      this.buf = this.buf.slice(m.index + m[0].length);
      this.line(line);
    }
  }

  line(line) {
    if (line === "") {
      if (this.data.length) {
        const data = this.data.join("\n");
        this.data = [];
        this.onEvent({ data });
      }
      return;
    }
    if (line.startsWith(":")) {
      this.onComment(line.slice(1).trim());
      return;
    }
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "data") this.data.push(value);
    // event:, id:, retry: carry nothing the chat API uses.
  }

  // End of stream: a final event without its blank line still counts.
  end() {
    if (this.buf !== "") {
      const rest = this.buf;
      this.buf = "";
      this.line(rest);
    }
    this.line("");
  }
}

// The prompt's progress in a `: prefill DONE/TOTAL` comment (its text after
// the colon, as SseParser gives it): {done, total}, or null for any other.
export function parsePrefill(comment) {
  const m = /^prefill (\d+)\/(\d+)$/.exec(comment);
  return m && Number(m[2]) > 0 ? { done: Number(m[1]), total: Number(m[2]) } : null;
}

// Folds the tool_calls of one stream delta into calls (the message's list,
// changed in place), OpenAI's way: the first piece of a call brings its
// index, id, type and function name, later pieces of the same index append
// to function.arguments (a JSON text cut anywhere).  Returns calls.
export function mergeToolCalls(calls, deltas) {
  for (const d of deltas) {
    if (!d || typeof d !== "object") continue;
    const index = Number.isInteger(d.index) ? d.index : calls.length;
    let c = calls.find((x) => x.index === index);
    if (!c) {
      c = { index, id: "", type: "function", function: { name: "", arguments: "" } };
      calls.push(c);
      calls.sort((a, b) => a.index - b.index);
    }
    if (typeof d.id === "string" && d.id) c.id = d.id;
    if (typeof d.type === "string" && d.type) c.type = d.type;
    const f = d.function || {};
    if (typeof f.name === "string") c.function.name += f.name;
    if (typeof f.arguments === "string") c.function.arguments += f.arguments;
  }
  return calls;
}

// POST /v1/chat/completions with stream:true.  Callbacks:
//   onDelta({content, reasoning, toolCalls})  text pieces as they arrive, and
//                                  the raw tool_calls pieces (mergeToolCalls)
//   onPrefill({done, total})       prompt tokens evaluated so far, of all
//   onKeepAlive()                  any other comment (queued)
//   onFirstByte()                  the response headers arrived
// Resolves to {finish_reason, timings, usage, model, nebula, id} after [DONE];
// rejects with ApiError (HTTP error, error event, broken stream, network) or
// the AbortError of `signal`.
export async function streamChat(body, { signal, onDelta, onPrefill, onKeepAlive, onFirstByte } = {}) {
  let res;
  try {
    res = await fetch("v1/chat/completions", {
      method: "POST",
      signal,
      headers: { "Content-Type": "application/json", Accept: "text/event-stream" },
      body: JSON.stringify({ ...body, stream: true }),
    });
  } catch (e) {
    if (e && e.name === "AbortError") throw e;
    throw networkError(e, "POST /v1/chat/completions");
  }
  if (!res.ok) throw await errorFromResponse(res);
  if (onFirstByte) onFirstByte();
  const ctype = res.headers.get("Content-Type") || "";
  if (!ctype.includes("text/event-stream")) {
    throw new ApiError(`POST /v1/chat/completions: expected an event stream, got '${ctype || "no content type"}'`, { status: res.status });
  }

  const result = { finish_reason: null, timings: null, usage: null, model: null, nebula: null, id: null };
  let done = false;
  let failure = null;

  const parser = new SseParser({
    onComment: (text) => {
      const p = parsePrefill(text);
      if (p) { if (onPrefill) onPrefill(p); } else if (onKeepAlive) onKeepAlive();
    },
    onEvent: ({ data }) => {
      if (done || failure) return;
      if (data.trim() === "[DONE]") {
        done = true;
        return;
      }
      let chunk;
      try {
        chunk = JSON.parse(data);
      } catch (e) {
        failure = new ApiError(`The server sent a stream event that is not JSON: ${data.slice(0, 120)}`);
        return;
      }
      if (chunk.error) {
        const e = chunk.error;
        const msg = typeof e === "string" ? e : e.message || JSON.stringify(e);
        failure = new ApiError(`The server stopped the answer: ${msg}`, {
          type: e.type ?? null, code: e.code ?? null, status: res.status,
        });
        return;
      }
      if (chunk.id) result.id = chunk.id;
      if (chunk.model) result.model = chunk.model;
      if (chunk.timings) result.timings = chunk.timings;
      if (chunk.usage) result.usage = chunk.usage;
      if (chunk.nebula) result.nebula = chunk.nebula;
      for (const choice of chunk.choices || []) {
        const d = choice.delta || {};
        const content = typeof d.content === "string" ? d.content : "";
        const reasoning = typeof d.reasoning_content === "string" ? d.reasoning_content : "";
        const toolCalls = Array.isArray(d.tool_calls) ? d.tool_calls : [];
        if ((content || reasoning || toolCalls.length) && onDelta) onDelta({ content, reasoning, toolCalls });
        if (choice.finish_reason) result.finish_reason = choice.finish_reason;
      }
    },
  });

  const reader = res.body.getReader();
  const decoder = new TextDecoder("utf-8");
  try {
    for (;;) {
      let r;
      try {
        r = await reader.read();
      } catch (e) {
        if (e && e.name === "AbortError") throw e;
        if (signal && signal.aborted) throw new DOMException("aborted", "AbortError");
        throw new ApiError(`The connection broke during the answer: ${e && e.message ? e.message : e}`);
      }
      if (r.done) {
        parser.push(decoder.decode());
        parser.end();
        break;
      }
      parser.push(decoder.decode(r.value, { stream: true }));
      if (failure || done) break;
    }
  } finally {
    if (failure || done) reader.cancel().catch(() => {});
  }
  if (failure) throw failure;
  if (!done) throw new ApiError("The connection closed before the answer was complete (no [DONE] from the server)");
  return result;
}
