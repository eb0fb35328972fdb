// dialects.mjs BASE_URL — the official `@anthropic-ai/sdk` and `openai` npm packages (tests/openai/
// package.json, locked), unmodified, against Nebula's POST /v1/messages and POST /v1/responses on a
// coordinator started with --test-hooks (the model's text scripted with `nebula_test_script`, a
// body field the packages pass through).  Anthropic: a message, streamed and not (the stream's
// final message = its events, greedy = the non-streamed text), a tool_use (input parsed, streamed
// as input_json_delta), thinking, stop_sequences, a tool_result round trip, a typed 400.
// Responses: output_text, streamed (deltas = the completed response), a function_call (streamed
// arguments), a function_call_output round trip, a typed 400.  Exits 1 at the first thing wrong.
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";

const base = process.argv[2];
if (!base) {
  console.error("usage: node dialects.mjs BASE_URL (e.g. http://127.0.0.1:8091)");
  process.exit(2);
}
const fail = (msg) => {
  console.log(`FAIL: ${msg}`);
  process.exit(1);
};
const check = (ok, msg) => {
  if (!ok) fail(msg);
  console.log(`ok: ${msg}`);
};
const anthropic = new Anthropic({ baseURL: base, apiKey: "none", maxRetries: 0, timeout: 60_000 });
const openai = new OpenAI({ baseURL: `${base}/v1`, apiKey: "none", maxRetries: 0, timeout: 60_000 });
const weather = { name: "get_weather", description: "The weather", input_schema: { type: "object", properties: { city: { type: "string" }, days: { type: "integer" } }, required: ["city"] } };
const CALL = "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>";
const user = [{ role: "user", content: "Hello! Who are you?" }];

// ---------- Anthropic ----------
const msg = await anthropic.messages.create({ model: "claude-x", max_tokens: 16, temperature: 0, messages: user });
check(msg.type === "message" && msg.role === "assistant" && msg.model === "claude-x" && msg.id.startsWith("msg_"), `message envelope: ${msg.id} ${msg.model}`);
check(msg.content.length === 1 && msg.content[0].type === "text" && ["end_turn", "max_tokens"].includes(msg.stop_reason), `one text block, ${msg.stop_reason}`);
check(msg.usage.input_tokens > 0 && msg.usage.output_tokens > 0 && msg.usage.output_tokens <= 16, `usage ${JSON.stringify(msg.usage)}`);

const stream = anthropic.messages.stream({ model: "claude-x", max_tokens: 16, temperature: 0, messages: user });
let deltas = "", events = [];
stream.on("text", (t) => { deltas += t; });
stream.on("streamEvent", (e) => events.push(e.type));
const fin = await stream.finalMessage();
check(fin.content[0].text === deltas && deltas === msg.content[0].text, `stream: text deltas = final = non-streamed (${JSON.stringify(deltas).slice(0, 40)})`);
check(events[0] === "message_start" && events.includes("content_block_start") && events.at(-2) === "message_delta" && events.at(-1) === "message_stop",
  `event order ${events.filter((e, i) => e !== events[i - 1]).join(",")}`);

const tm = await anthropic.messages.create({ model: "m", max_tokens: 200, messages: [{ role: "user", content: "Weather in Oslo?" }], tools: [weather], nebula_test_script: "Checking.\n\n" + CALL });
const tu = tm.content.find((b) => b.type === "tool_use");
check(tm.stop_reason === "tool_use" && tm.content[0].type === "text" && tm.content[0].text === "Checking." && tu && tu.name === "get_weather" &&
  JSON.stringify(tu.input) === '{"city":"Oslo","days":2}' && tu.id.startsWith("toolu_"), `tool_use: ${JSON.stringify(tm.content)}`);
const ts = anthropic.messages.stream({ model: "m", max_tokens: 200, messages: [{ role: "user", content: "Weather?" }], tools: [weather], nebula_test_script: CALL });
let partial = "";
ts.on("inputJson", (d) => { partial += d; });
const tf = await ts.finalMessage();
check(tf.stop_reason === "tool_use" && tf.content[0].type === "tool_use" && tf.content[0].input.city === "Oslo" && JSON.parse(partial).days === 2,
  `streamed tool_use: input_json_delta ${partial}`);

const th = await anthropic.messages.create({ model: "m", max_tokens: 2000, thinking: { type: "enabled", budget_tokens: 1024 }, messages: user, nebula_test_script: "let me think\n</think>\n\nHi there" });
check(th.content[0].type === "thinking" && th.content[0].thinking === "let me think" && th.content[1].type === "text" && th.content[1].text === "Hi there",
  `thinking block then text: ${JSON.stringify(th.content)}`);
// budget_tokens is enforced: after 1024 thinking tokens the block is closed and the answer follows.
const long = "a".repeat(1500);
const tb = await anthropic.messages.create({ model: "m", max_tokens: 3000, thinking: { type: "enabled", budget_tokens: 1024 }, messages: user, nebula_test_script: long });
const tbThink = tb.content.find((b) => b.type === "thinking"), tbText = tb.content.find((b) => b.type === "text");
check(tbThink && tbText && tbThink.thinking.length > 0 && tbThink.thinking.length < 1500 && tbThink.thinking + tbText.text === long,
  `budget_tokens 1024: thinking ${tbThink?.thinking.length} characters, then the answer ${tbText?.text.length}`);
const sq = await anthropic.messages.create({ model: "m", max_tokens: 50, stop_sequences: ["STOP"], messages: user, nebula_test_script: "hello STOP world" });
check(sq.stop_reason === "stop_sequence" && sq.stop_sequence === "STOP" && sq.content[0].text === "hello ", `stop_sequence: ${JSON.stringify(sq)}`);
const rt = await anthropic.messages.create({ model: "m", max_tokens: 4, tools: [weather], messages: [
  { role: "user", content: "Weather?" },
  { role: "assistant", content: [{ type: "text", text: "Checking." }, { type: "tool_use", id: "toolu_1", name: "get_weather", input: { city: "Oslo" } }] },
  { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "sunny" }, { type: "text", text: "Thanks" }] }] });
check(rt.type === "message", "a tool_result round trip is served");
try {
  await anthropic.messages.create({ model: "m", max_tokens: 4, messages: [...user, { role: "assistant", content: "Sure" }] });
  fail("a prefilled answer: no error");
} catch (e) {
  check(e instanceof Anthropic.BadRequestError && /prefilled/.test(e.message), `a prefilled answer: typed 400`);
}
try {
  await anthropic.messages.create({ model: "m", messages: user });
  fail("no max_tokens: no error");
} catch (e) {
  check(e instanceof Anthropic.BadRequestError && e.status === 400 && e.error?.error?.type === "invalid_request_error" && /max_tokens/.test(e.message),
    `no max_tokens: typed 400 (${e.message.slice(0, 60)})`);
}

// ---------- OpenAI Responses ----------
const r = await openai.responses.create({ model: "gpt-x", input: "Hello! Who are you?", max_output_tokens: 16, temperature: 0, think: false });
check(r.object === "response" && r.id.startsWith("resp_") && r.model === "gpt-x" && typeof r.output_text === "string" && r.output_text.length > 0,
  `response: ${r.status} ${JSON.stringify(r.output_text).slice(0, 40)}`);
check(["completed", "incomplete"].includes(r.status) && r.usage.output_tokens > 0 && r.usage.total_tokens === r.usage.input_tokens + r.usage.output_tokens, `usage ${JSON.stringify(r.usage)}`);
const rs = await openai.responses.create({ model: "gpt-x", input: "Hello! Who are you?", max_output_tokens: 16, temperature: 0, think: false, stream: true });
let rtext = "", seq = -1, types = [], done = null;
for await (const e of rs) {
  if (e.sequence_number <= seq) fail(`sequence_number ${e.sequence_number} after ${seq}`);
  seq = e.sequence_number;
  types.push(e.type);
  if (e.type === "response.output_text.delta") rtext += e.delta;
  if (e.type === "response.completed" || e.type === "response.incomplete") done = e.response;
}
const doneText = done ? done.output.filter((o) => o.type === "message").flatMap((o) => o.content).map((c) => c.text).join("") : null;
check(types[0] === "response.created" && doneText === rtext && rtext === r.output_text,
  `streamed: deltas = completed = non-streamed (${types.filter((t, i) => t !== types[i - 1]).join(",")})`);
const fn = { type: "function", name: "get_weather", parameters: weather.input_schema };
const fc = await openai.responses.create({ model: "m", input: "Weather?", tools: [fn], think: false, nebula_test_script: CALL });
const call = fc.output.find((o) => o.type === "function_call");
check(call && call.name === "get_weather" && JSON.parse(call.arguments).city === "Oslo" && call.call_id.startsWith("call_"), `function_call: ${JSON.stringify(call)}`);
const fs = await openai.responses.create({ model: "m", input: "Weather?", tools: [fn], think: false, nebula_test_script: CALL, stream: true });
let args = "", item = null;
for await (const e of fs) {
  if (e.type === "response.function_call_arguments.delta") args += e.delta;
  if (e.type === "response.output_item.done" && e.item.type === "function_call") item = e.item;
}
check(item && item.arguments === args && JSON.parse(args).days === 2, `streamed function_call arguments ${args}`);
const back = await openai.responses.create({ model: "m", max_output_tokens: 4, tools: [fn], input: [
  { role: "user", content: "Weather?" }, { type: "function_call", call_id: "call_1", name: "get_weather", arguments: '{"city":"Oslo"}' },
  { type: "function_call_output", call_id: "call_1", output: "sunny" }] });
check(back.object === "response", "a function_call_output round trip is served");
try {
  await openai.responses.create({ model: "m", input: "x", previous_response_id: "resp_1" });
  fail("previous_response_id: no error");
} catch (e) {
  check(e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === "previous_response_id", `previous_response_id: typed 400 (${e.message.slice(0, 60)})`);
}
console.log("dialects: ok");
