// client.mjs BASE_URL — the official `openai` npm package (tests/openai/
// package.json, locked), unmodified, against Nebula's API.  Lists the models,
// streams a chat completion, asks for a non-streamed one, streams a long
// prompt whose prefill progress comments the client must skip, and checks
// that API errors reach the client as the package's typed errors (an unknown field, a
// field of the wrong type, an unknown model id looked up), that another model id is served,
// and asks for structured output (response_format json_schema).  Prints
// what it saw; exits 1 with the reason at the first thing that is wrong.
import OpenAI from "openai";

const baseURL = process.argv[2];
if (!baseURL) {
  console.error("usage: node client.mjs BASE_URL (e.g. http://127.0.0.1:8090/v1)");
  process.exit(2);
}
// Each response body as the server sent it (a tee: the client reads its own
// branch unchanged), for the checks on what the client was given to parse.
const raw = [];
async function recordingFetch(url, init) {
  const res = await fetch(url, init);
  if (!res.body) return res;
  const [mine, copy] = res.body.tee();
  const rec = { text: "" };
  rec.done = (async () => {
    const d = new TextDecoder();
    for await (const v of copy) rec.text += d.decode(v, { stream: true });
  })();
  raw.push(rec);
  return new Response(mine, { status: res.status, statusText: res.statusText, headers: res.headers });
}
const client = new OpenAI({ baseURL, apiKey: "none", maxRetries: 0, timeout: 60_000, fetch: recordingFetch });
const fail = (msg) => {
  console.log(`FAIL: ${msg}`);
  process.exit(1);
};
const messages = [{ role: "user", content: "Hello! Who are you?" }];

// models.list(): a page the client can iterate.
const models = [];
for await (const m of client.models.list()) models.push(m);
if (models.length < 1 || typeof models[0].id !== "string" || models[0].object !== "model")
  fail(`models.list(): ${JSON.stringify(models)}`);
const model = models[0].id;
console.log(`models.list(): ${models.map((m) => m.id).join(", ")}`);

// A streamed chat completion, read with the client's own SSE parser.
const stream = await client.chat.completions.create({
  model, messages, max_tokens: 16, temperature: 0.7, seed: 1, stream: true,
  stream_options: { include_usage: true },
});
let chunks = 0, textEvents = 0, text = "", finish = null, usage = null, role = null;
for await (const chunk of stream) {
  chunks++;
  if (chunk.object !== "chat.completion.chunk") fail(`stream: chunk object ${chunk.object}`);
  if (chunk.usage) usage = chunk.usage;
  const choice = chunk.choices[0];
  if (!choice) continue;
  if (choice.delta.role) role = choice.delta.role;
  const piece = (choice.delta.content ?? "") + (choice.delta.reasoning_content ?? "");
  if (piece) { textEvents++; text += piece; }
  if (choice.finish_reason) finish = choice.finish_reason;
}
if (role !== "assistant") fail(`stream: role ${role}`);
if (textEvents < 2) fail(`stream: ${textEvents} chunks with text (want >= 2)`);
if (finish !== "stop" && finish !== "length") fail(`stream: finish_reason ${finish}`);
if (!usage || !(usage.completion_tokens >= 1 && usage.completion_tokens <= 16) ||
    usage.total_tokens !== usage.prompt_tokens + usage.completion_tokens)
  fail(`stream: usage ${JSON.stringify(usage)}`);
console.log(`stream: ${chunks} chunks, ${textEvents} with text (${text.length} characters), ` +
            `finish_reason ${finish}, usage ${JSON.stringify(usage)}`);

// A non-streamed one.
const done = await client.chat.completions.create({ model, messages, max_tokens: 8, temperature: 0 });
const c0 = done.choices?.[0];
if (done.object !== "chat.completion" || !c0 || c0.message.role !== "assistant" ||
    typeof c0.message.content !== "string")
  fail(`non-stream: ${JSON.stringify(done).slice(0, 300)}`);
if (c0.finish_reason !== "stop" && c0.finish_reason !== "length") fail(`non-stream: finish_reason ${c0.finish_reason}`);
if (!(done.usage?.completion_tokens >= 1 && done.usage.completion_tokens <= 8))
  fail(`non-stream: usage ${JSON.stringify(done.usage)}`);
console.log(`non-stream: finish_reason ${c0.finish_reason}, usage ${JSON.stringify(done.usage)}`);

// A long prompt prefilled 16 tokens a step: the stream carries the server's
// `: prefill DONE/TOTAL` comments, and the client skips them (same text as
// the non-streamed answer).  cache_prompt false: the repeat is prefilled again (the reference's
// checkpoint after its generation prompt's role header would serve it).
const long = [{ role: "user", content: "hello world ".repeat(200) }];
const ref = (await client.chat.completions.create({ model, messages: long, max_tokens: 8, temperature: 0 })).choices[0].message;
const seen = raw.length;
const pstream = await client.chat.completions.create({ model, messages: long, max_tokens: 8, temperature: 0, stream: true, prefill_chunk: 16,
  cache_prompt: false });
let ptext = "";
for await (const chunk of pstream) {
  if (chunk.object !== "chat.completion.chunk") fail(`prefill stream: chunk object ${chunk.object}`);
  const choice = chunk.choices[0];
  if (choice) ptext += (choice.delta.reasoning_content ?? "") + (choice.delta.content ?? "");
}
await raw[seen].done;
const progress = raw[seen].text.split("\n").filter((l) => /^: prefill \d+\/\d+$/.test(l));
if (progress.length < 10) fail(`prefill stream: ${progress.length} progress comments (want >= 10): ${raw[seen].text.slice(0, 200)}`);
if (ptext !== (ref.reasoning_content ?? "") + (ref.content ?? "")) fail(`prefill stream: text ${JSON.stringify(ptext)} vs ${JSON.stringify(ref)}`);
console.log(`prefill stream: ${progress.length} progress comments (${progress[0]} … ${progress[progress.length - 1]}), the same text`);

// Errors arrive as the client's typed errors, with the server's message.
async function expectError(what, status, cls, body) {
  try {
    await client.chat.completions.create(body);
  } catch (e) {
    if (!(e instanceof cls) || e.status !== status || !e.error?.message)
      fail(`${what}: got ${e?.constructor?.name} ${e?.status} ${JSON.stringify(e?.error)}`);
    console.log(`${what}: ${e.constructor.name} ${e.status}: ${e.error.message}`);
    return;
  }
  fail(`${what}: no error`);
}
// Any model id is served by this server's model and echoed back (as llama.cpp's server does);
// looking up another id is a typed 404.
const other = await client.chat.completions.create({ model: "gpt-4o-mini", messages, max_tokens: 2 });
if (other.model !== "gpt-4o-mini") fail(`another model id: the response names ${other.model}`);
console.log(`another model id: served, echoed as ${other.model}`);
try {
  await client.models.retrieve(model + "-nope");
  fail("models.retrieve of an unknown id: no error");
} catch (e) {
  if (!(e instanceof OpenAI.NotFoundError) || e.status !== 404) fail(`models.retrieve of an unknown id: ${e?.constructor?.name} ${e?.status}`);
  console.log(`models.retrieve of an unknown id: ${e.constructor.name} ${e.status}`);
}
await expectError("an unknown field", 400, OpenAI.BadRequestError, { model, messages, max_tokens: 2, frobnicate: 1 });
await expectError("max_tokens of the wrong type", 400, OpenAI.BadRequestError, { model, messages, max_tokens: "many" });

// Structured output (docs/API.md): response_format json_schema as the client
// sends it; the random-weight model's answer is whatever the grammar allows,
// so it parses and has the schema's shape.  An unsupported keyword is a typed 400.
const schema = { type: "object", properties: { name: { type: "string", maxLength: 12 }, n: { type: "integer" } },
                 required: ["name", "n"], additionalProperties: false };
const so = await client.chat.completions.create({
  model, messages, max_tokens: 2000, seed: 2, think: false,
  response_format: { type: "json_schema", json_schema: { name: "answer", schema, strict: true } },
});
let parsed;
try { parsed = JSON.parse(so.choices[0].message.content); } catch (e) { fail(`json_schema: not JSON: ${so.choices[0].message.content}`); }
if (typeof parsed.name !== "string" || parsed.name.length > 12 || !Number.isInteger(parsed.n) || Object.keys(parsed).length !== 2)
  fail(`json_schema: ${JSON.stringify(parsed)} does not fit the schema`);
console.log(`json_schema: ${JSON.stringify(parsed)} (${so.choices[0].finish_reason})`);
await expectError("an unsupported schema keyword", 400, OpenAI.BadRequestError, { model, messages, max_tokens: 4,
  response_format: { type: "json_schema", json_schema: { name: "a", schema: { type: "string", pattern: "^a" } } } });
console.log("openai client: ok");
