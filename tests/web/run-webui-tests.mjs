// run-webui-tests.mjs — browser tests of the chat page: playwright-core drives
// Debian's chromium (headless) against the real stack — deploy/start.sh with
// the demo model on free ports and a temporary state directory, so nginx
// serves web/ and proxies to nebula-coordinator — and every scenario goes
// through the page as a user would.  tests/tools/test_webui.sh runs it (make test).
//
//   node tests/web/run-webui-tests.mjs [--screenshot FILE] [--url URL] [--only NAME]
//
//   --screenshot FILE  also save a screenshot of a conversation (docs/screenshot-chat.png)
//   --url URL          test a page that is already running (e.g. tests/web/mock-server.mjs
//                      while working on the page); scenarios that stop the server are skipped
//   --only NAME        run the scenarios whose name contains NAME
//
// Prints one line per scenario and closes with "N passed, N failed"; exits 1
// when any failed.  Where the demo model cannot make the server do something
// on demand (the loading phase lasts milliseconds for it), the page's request
// is answered by a route in the browser instead, and the scenario says so.
import { existsSync, mkdirSync, readFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { assert, sleep, setOptions, send, pace, waitIdle, chatTitles, storedChats, runScenarios } from "./harness.mjs";
import { addFeatureScenarios } from "./features.mjs";
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
const args = process.argv.slice(2);
const arg = (name) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : null;
};
const screenshotPath = arg("--screenshot");
const externalUrl = arg("--url");
const only = arg("--only");

function fail(msg) {
  console.error(`run-webui-tests: FAIL: ${msg}`);
  process.exit(1);
}

if (!existsSync(CHROMIUM)) fail(`${CHROMIUM} is missing: install Debian's chromium (deploy/install-deps.sh does)`);

// ---------------------------------------------------------------- scenarios

const scenarios = [];
const scenario = (name, fn, { needsStack = false, mock = false, allowConsole = null } = {}) =>
  scenarios.push({ name, fn, needsStack, mock, allowConsole });

scenario("status: ready, the demo model's notice is shown", async ({ page }) => {
  await page.waitForSelector('#server-status[data-state="ready"]');
  const notice = page.locator("#demo-notice");
  await notice.waitFor();
  const text = await notice.textContent();
  assert(/noise/i.test(text), `the demo notice does not say its answers are noise: '${text}'`);
  assert(await page.locator("#loading").isHidden(), "the loading panel is shown while the model is ready");
});

scenario("loading phase: progress bar while /api/status says loading (answered by a route); a message waits for it", async ({ page, bodies }) => {
  const real = await (await page.request.get(new URL("api/status", page.url()).href)).json();
  await page.route("**/api/status", (route) => route.fulfill({
    contentType: "application/json",
    body: JSON.stringify({ ...real, phase: "loading", progress: 0.42, message: "reading experts of layer 17" }),
  }));
  await page.reload();
  await page.locator("#loading").waitFor({ timeout: 15000 });
  assert((await page.textContent("#loading-pct")).trim() === "42%", `progress text is '${await page.textContent("#loading-pct")}'`);
  const width = await page.evaluate(() => document.querySelector("#loading-bar").style.width);
  assert(Math.abs(parseFloat(width) - 42) < 0.01 && width.endsWith("%"), `progress bar width is '${width}'`);
  assert((await page.textContent("#loading-message")).includes("layer 17"), "the server's message is not shown");
  assert((await page.getAttribute("#server-status", "data-state")) === "loading", "the status pill does not say loading");
  // A message sent while the model loads waits for it, then goes out.
  await setOptions(page, { think: false, maxTokens: 16 });
  const a = await send(page, "Sent while loading.", { wait: false });
  await page.waitForFunction(() => /waiting for the model to load \(42%\)/.test(document.querySelector(".msg.assistant .msg-state").textContent));
  await sleep(1500);
  assert(bodies.length === 0, "the request went out while the model was loading");
  await page.unroute("**/api/status");
  await page.locator("#loading").waitFor({ state: "hidden", timeout: 15000 });
  await waitIdle(page);
  assert(bodies.length === 1, `${bodies.length} requests after loading`);
  assert(!(await a.locator(".msg-error").isVisible()), `error: ${await a.locator(".msg-error").textContent()}`);
  assert((await a.locator(".msg-body").textContent()).trim().length > 0, "no answer after loading");
});

// The states the prefill bar of the streaming answer was seen in: window.__prefill, one
// "hidden" or "NOW/MAX text" string per change.
async function watchPrefill(page) {
  await page.evaluate(() => {
    window.__prefill = [];
    if (window.__prefillObserver) return;
    window.__prefillObserver = new MutationObserver(() => {
      const box = document.querySelector(".msg.assistant.streaming .prefill");
      if (!box) return;
      const bar = box.querySelector('[role="progressbar"]');
      const st = box.hidden ? "hidden" : `${bar.getAttribute("aria-valuenow")}/${bar.getAttribute("aria-valuemax")} ${box.textContent.trim()}`;
      if (window.__prefill.at(-1) !== st) window.__prefill.push(st);
    });
    window.__prefillObserver.observe(document.querySelector("#messages"), { subtree: true, childList: true, attributes: true, characterData: true });
  });
}

scenario("prefill progress: a bar with the tokens read while a long prompt is prefilled, then the answer in its place (a route sends the progress)", async ({ page }) => {
  // The demo model reads any prompt in a blink: a route answers with the stream of a
  // 4,096-token prompt read 1,024 a step (docs/API.md), paced at 400 ms an event.
  const ev = (delta, finish = null) => `data: ${JSON.stringify({ id: "chatcmpl-route", object: "chat.completion.chunk", created: 1,
    model: "nebula-demo", choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
  const answer = (comments) => ": keep-alive\n\n" + ev({ role: "assistant", content: "" }) + comments.map((c) => `: ${c}\n\n`).join("") +
    ev({ content: "The " }) + ev({ content: "answer." }) + ev({}, "stop") + "data: [DONE]\n\n";
  let body = answer([0, 1024, 2048, 3072, 4096].map((d) => `prefill ${d}/4096`));
  await page.route("**/v1/chat/completions", (route) => route.fulfill({ status: 200, contentType: "text/event-stream", body }));
  await setOptions(page, { think: false });
  await pace(page, 400);
  await watchPrefill(page);
  const a = await send(page, "A long prompt.", { wait: false });
  const box = a.locator(".prefill");
  const bar = box.locator('[role="progressbar"]');
  await page.waitForFunction(() => document.querySelector('.msg.assistant.streaming .prefill [role="progressbar"]')?.getAttribute("aria-valuenow") === "1024");
  assert(await box.isVisible(), "the prefill bar is not shown at 1,024 of 4,096");
  const text = (await box.locator(".prefill-text").textContent()).trim();
  assert(text === "prefill 1,024 / 4,096 tokens", `prefill text '${text}'`);
  const aria = await bar.evaluate((b) => [b.getAttribute("aria-valuemin"), b.getAttribute("aria-valuemax"), b.getAttribute("aria-valuetext"), b.getAttribute("aria-label")]);
  assert(aria[0] === "0" && aria[1] === "4096" && aria[2] === text && aria[3], `progressbar attributes ${JSON.stringify(aria)}`);
  const width = await bar.locator(".bar").evaluate((b) => b.style.width);
  assert(Math.abs(parseFloat(width) - 25) < 0.01 && width.endsWith("%"), `bar width ${width}`);
  assert((await a.locator(".typing").count()) === 0, "the typing dots are shown beside the prefill bar");
  assert(/reading the prompt/.test(await a.locator(".msg-state").textContent()), `state '${await a.locator(".msg-state").textContent()}'`);
  await waitIdle(page);
  assert(await box.isHidden(), "the prefill bar stays after the answer");
  assert((await a.locator(".msg-body").textContent()).trim() === "The answer.", `answer '${await a.locator(".msg-body").textContent()}'`);
  const seen = await page.evaluate(() => window.__prefill);
  const want = ["0/4096 prefill 0 / 4,096 tokens", "1024/4096 prefill 1,024 / 4,096 tokens", "2048/4096 prefill 2,048 / 4,096 tokens",
    "3072/4096 prefill 3,072 / 4,096 tokens", "4096/4096 prefill 4,096 / 4,096 tokens", "hidden"];
  assert(JSON.stringify(seen[0] === "hidden" ? seen.slice(1) : seen) === JSON.stringify(want), `the bar went through ${JSON.stringify(seen)}`);
  const stored = (await storedChats(page))[0].messages.at(-1);
  assert(!("prefill" in stored) && stored.content === "The answer.", `stored: ${JSON.stringify(stored)}`);

  // A prompt read in one step (its only report is done = total): no bar.
  body = answer(["prefill 30/30"]);
  await pace(page, 100);
  await watchPrefill(page);
  const b = await send(page, "A short prompt.");
  assert((await page.evaluate(() => window.__prefill)).every((x) => x === "hidden"), `a bar for a one-step prompt: ${await page.evaluate(() => window.__prefill)}`);
  assert((await b.locator(".msg-body").textContent()).trim() === "The answer.", "no answer after a one-step prefill");
});

scenario("prefill progress from the real server: a long prompt read 64 tokens a step shows the bar, then the answer", async ({ page }) => {
  await setOptions(page, { think: false, maxTokens: 16 });
  await page.selectOption("#opt-prefill", "64");
  // The demo model reads the prompt in milliseconds: the server's stream, paced at 80 ms an event.
  await pace(page, 80);
  await watchPrefill(page);
  const a = await send(page, "hello world ".repeat(400));
  const raw = await page.evaluate(() => window.__sse.at(-1).text);
  const reports = raw.split("\n").map((l) => /^: prefill (\d+)\/(\d+)$/.exec(l)).filter(Boolean).map((m) => [Number(m[1]), Number(m[2])]);
  const usage = raw.split("\n").filter((l) => l.startsWith("data: {")).map((l) => JSON.parse(l.slice(6))).find((c) => c.usage);
  const n = usage && usage.usage.prompt_tokens;
  assert(n > 1000 && reports.length >= n / 64 / 2 && reports.every(([, t]) => t === n), `${reports.length} reports of ${n} tokens: ${JSON.stringify(reports.slice(0, 3))}`);
  const seen = await page.evaluate(() => window.__prefill);
  const shown = seen.filter((x) => x !== "hidden");
  const fmt = (x) => x.toLocaleString("en");
  assert(shown.length >= 2 && shown.every((x) => new RegExp(`^\\d+/${n} prefill [\\d,]+ / ${fmt(n)} tokens$`).test(x)) && seen.at(-1) === "hidden",
    `the bar went through ${JSON.stringify(seen.slice(0, 4))}…${JSON.stringify(seen.slice(-2))}`);
  assert(!(await a.locator(".msg-error").isVisible()), `error: ${await a.locator(".msg-error").textContent()}`);
  assert((await a.locator(".msg-body").textContent()).trim().length > 0 && (await a.locator(".prefill").isHidden()), "no answer in place of the bar");
});

scenario("new chat → send → streamed answer → rename → reload keeps it → delete", async ({ page, bodies }) => {
  await setOptions(page, { think: false, maxTokens: 16 });
  await page.click("#new-chat");
  // The demo model writes 16 tokens in a few milliseconds: paced to 60 ms per event.
  await pace(page, 60);
  // Record each length the answer's text had while it streamed.
  await page.evaluate(() => {
    window.__lengths = new Set();
    new MutationObserver(() => {
      const b = document.querySelector(".msg.assistant.streaming .msg-body");
      if (b && b.textContent.trim()) window.__lengths.add(b.textContent.length);
    }).observe(document.querySelector("#messages"), { subtree: true, childList: true, characterData: true });
  });
  const sse = page.waitForResponse((r) => r.url().endsWith("/v1/chat/completions"));
  const answer = await send(page, "Hello Nebula, tell me about the stars.");
  await pace(page, 0);
  const res = await sse;
  assert(res.status() === 200 && res.headers()["content-type"].startsWith("text/event-stream"), `response ${res.status()} ${res.headers()["content-type"]}`);
  const raw = await page.evaluate(() => window.__sse.at(-1).text);
  assert(raw.trimEnd().endsWith("data: [DONE]"), `the stream as received:\n${raw.slice(-300)}`);
  const deltas = raw.split("\n").filter((l) => l.startsWith("data: {"))
    .map((l) => JSON.parse(l.slice(6))).flatMap((c) => c.choices || []).map((c) => (c.delta || {}).content || "");
  const streamed = deltas.join("");
  const stored = (await storedChats(page))[0].messages.at(-1);
  assert(stored.content === streamed, `the stored answer is not the streamed text:\n${JSON.stringify(stored.content)}\n${JSON.stringify(streamed)}`);
  const text = (await answer.locator(".msg-body").textContent()).trim();
  assert(text.length > 0, "the answer is empty");
  const pieces = deltas.filter((d) => d !== "").length;
  const updates = await page.evaluate(() => window.__lengths.size);
  assert(updates >= Math.min(2, pieces), `the answer did not stream: ${pieces} pieces, the text changed ${updates} times`);
  const body = bodies[bodies.length - 1];
  assert(body.stream === true && body.think === false && body.max_tokens === 16, `request body: ${JSON.stringify(body)}`);
  const stats = await answer.locator(".stats").textContent();
  assert(/tok\/s/.test(stats) && /TTFT/.test(stats), `no tokens/s and TTFT under the answer: '${stats}'`);
  assert(!(await answer.locator(".msg-error").isVisible()), `error: ${await answer.locator(".msg-error").textContent()}`);
  assert((await chatTitles(page))[0] === "Hello Nebula, tell me about the stars.", `chat list: ${await chatTitles(page)}`);

  // rename
  await page.locator("#chat-list .chat-item").first().hover();
  await page.click('#chat-list .chat-item >> nth=0 >> [data-action="rename"]');
  await page.fill(".chat-rename-input", "Stars and noise");
  await page.press(".chat-rename-input", "Enter");
  await page.locator(".chat-rename-input").waitFor({ state: "detached" });
  assert((await chatTitles(page))[0] === "Stars and noise", `after rename: ${await chatTitles(page)}`);
  await page.waitForFunction(async () => {
    const r = indexedDB.open("nebula-webui");
    const chats = await new Promise((res) => { r.onsuccess = () => { const g = r.result.transaction("chats").objectStore("chats").getAll(); g.onsuccess = () => { r.result.close(); res(g.result); }; }; });
    return chats.length === 1 && chats[0].title === "Stars and noise";
  });
  assert((await page.textContent("#chat-title")) === "Stars and noise", "the header keeps the old title");

  // reload: the chat and its messages are still there
  await page.reload();
  await page.waitForSelector("html[data-ready]");
  assert((await chatTitles(page)).includes("Stars and noise"), `after reload: ${await chatTitles(page)}`);
  await page.click("#chat-list .chat-item >> text=Stars and noise");
  await page.locator(".msg.user").first().waitFor();
  assert((await page.textContent(".msg.user .msg-body")) === "Hello Nebula, tell me about the stars.", "user message lost");
  const again = (await page.locator(".msg.assistant .msg-body").first().textContent()).trim();
  assert(again === text, `the answer changed across the reload:\n${again}\n---\n${text}`);

  // delete (through the dialog), and it stays deleted after a reload
  await page.locator("#chat-list .chat-item").first().hover();
  await page.click('#chat-list .chat-item >> nth=0 >> [data-action="delete"]');
  await page.click("#confirm-ok");
  await page.waitForFunction(() => !document.querySelector("#chat-list .chat-item"));
  assert((await storedChats(page)).length === 0, "the chat is still in IndexedDB");
  await page.reload();
  await page.waitForSelector("html[data-ready]");
  assert((await chatTitles(page)).length === 0, `after delete + reload: ${await chatTitles(page)}`);
  assert(await page.isVisible("#empty-state"), "the empty state is not shown");
});

scenario("thinking on: a thinking section with text; off: none (and the request's think field)", async ({ page, bodies }) => {
  await setOptions(page, { think: true, maxTokens: 64 });
  const a = await send(page, "Think about the number seven.");
  assert(bodies[bodies.length - 1].think === true, `think on: body ${JSON.stringify(bodies[bodies.length - 1])}`);
  assert(!(await a.locator(".msg-error").isVisible()), `error: ${await a.locator(".msg-error").textContent()}`);
  const details = a.locator("details.thinking");
  assert(await details.isVisible(), "no thinking section with think on");
  if (!(await details.evaluate((d) => d.open))) await details.locator("summary").click();
  const reasoning = (await details.locator(".thinking-body").textContent()).trim();
  assert(reasoning.length > 0, "the thinking section is empty");
  const stored = (await storedChats(page))[0].messages.at(-1);
  assert(stored.reasoning.length > 0, "reasoning_content was not kept");

  await setOptions(page, { think: false });
  const b = await send(page, "Now answer without thinking.");
  assert(bodies[bodies.length - 1].think === false, `think off: body ${JSON.stringify(bodies[bodies.length - 1])}`);
  assert(!(await b.locator(".msg-error").isVisible()), `error: ${await b.locator(".msg-error").textContent()}`);
  assert(await b.locator("details.thinking").isHidden(), "a thinking section is shown with think off");
  assert((await b.locator(".msg-body").textContent()).trim().length > 0, "empty answer with think off");
});

scenario("documents: an attached .txt goes into the message; an oversize file is refused", async ({ page, bodies }) => {
  await setOptions(page, { think: false, maxTokens: 16 });
  const doc = "Line one of the notes.\nThe secret word is PERIWINKLE.\n";
  await page.setInputFiles("#file-input", { name: "notes.txt", mimeType: "text/plain", buffer: Buffer.from(doc) });
  await page.locator("#attachments .file-chip", { hasText: "notes.txt" }).waitFor();
  await send(page, "Summarise the attached notes.");
  const content = bodies[bodies.length - 1].messages.at(-1).content;
  assert(content.startsWith("Summarise the attached notes."), `sent: ${content}`);
  assert(content.includes("File: notes.txt\n```text\n" + doc + "```"), `the document is not in a fenced block:\n${content}`);
  assert(await page.locator(".msg.user .file-chip", { hasText: "notes.txt" }).isVisible(), "no file chip on the sent message");
  assert((await page.locator("#attachments .file-chip").count()) === 0, "the attachment stayed in the composer");

  const big = Buffer.alloc(300 * 1024, "a");
  await page.setInputFiles("#file-input", { name: "huge.log", mimeType: "text/plain", buffer: big });
  await page.locator("#composer-error").waitFor();
  const err = await page.textContent("#composer-error");
  assert(err.includes("huge.log") && err.includes("256") && /KiB/.test(err), `oversize error: '${err}'`);
  assert((await page.locator("#attachments .file-chip").count()) === 0, "the oversize file was attached");

  await page.setInputFiles("#file-input", { name: "image.bin", mimeType: "application/octet-stream", buffer: Buffer.from([0xff, 0xfe, 0x00, 0x81]) });
  await page.waitForFunction(() => document.querySelector("#composer-error").textContent.includes("image.bin"));
  assert((await page.locator("#attachments .file-chip").count()) === 0, "a binary file was attached");
});

scenario("export: the downloaded Markdown has the title, the roles and the messages", async ({ page }) => {
  await setOptions(page, { think: true, maxTokens: 32 });
  await send(page, "First question about **markdown**?");
  await setOptions(page, { think: false });
  await send(page, "Second question.");
  const [download] = await Promise.all([page.waitForEvent("download"), page.click("#export-chat")]);
  assert(/\.md$/.test(download.suggestedFilename()), `file name ${download.suggestedFilename()}`);
  const md = readFileSync(await download.path(), "utf8");
  const chat = (await storedChats(page))[0];
  assert(md.startsWith(`# ${chat.title}\n`), `no title heading:\n${md.slice(0, 200)}`);
  const users = md.match(/^## User$/gm) || [];
  const assistants = md.match(/^## Assistant$/gm) || [];
  assert(users.length === 2 && assistants.length === 2, `roles: ${users.length} user, ${assistants.length} assistant headings`);
  assert(md.includes("First question about **markdown**?") && md.includes("Second question."), "user messages missing");
  for (const m of chat.messages.filter((x) => x.role === "assistant")) {
    if (m.content) assert(md.includes(m.content), `answer missing from the export: ${m.content.slice(0, 80)}`);
    if (m.reasoning) assert(md.includes("> **Thinking**"), "thinking missing from the export");
  }
  assert(md.indexOf("First question") < md.indexOf("Second question"), "messages out of order");
});

scenario("prompt cache: an answer shows the prompt tokens the server resumed from a checkpoint", async ({ page }) => {
  await setOptions(page, { think: false, maxTokens: 16 });
  await send(page, "Tell me about rivers.");
  const b = await send(page, "And about lakes?");
  // the server's count, from the stream the page read (timings in the last chunk)
  const raw = await page.evaluate(() => window.__sse.at(-1).text);
  const timings = raw.split("\n").filter((l) => l.startsWith("data: {")).map((l) => JSON.parse(l.slice(6)))
    .map((c) => c.timings).filter(Boolean).at(-1);
  assert(timings && timings.prompt_cached > 0, `the second turn resumed nothing: ${JSON.stringify(timings)}`);
  const stats = await b.locator(".stats").textContent();
  assert(stats.includes(`${timings.prompt_cached} cached`), `no '${timings.prompt_cached} cached' under the answer: '${stats}'`);
});

scenario("stop: Stop ends a streaming answer, it is kept as stopped, the next request works", async ({ page, bodies }) => {
  await setOptions(page, { think: false, maxTokens: 2048 });
  // Paced (see openPage): even a short answer takes a while to arrive.
  await pace(page, 150);
  const a = await send(page, "Write a very long story.", { wait: false });
  await page.waitForFunction(() => {
    const b = document.querySelector(".msg.assistant.streaming .msg-body");
    return b && b.textContent.trim().length > 0;
  });
  await page.click("#stop");
  await waitIdle(page, 10000);
  await pace(page, 0);
  assert((await a.locator(".msg-state").textContent()) === "stopped", `state: '${await a.locator(".msg-state").textContent()}'`);
  const len1 = (await a.locator(".msg-body").textContent()).length;
  assert(len1 > 0, "the partial answer was dropped");
  await sleep(500);
  assert((await a.locator(".msg-body").textContent()).length === len1, "the answer kept growing after Stop");
  const stored = (await storedChats(page))[0].messages.at(-1);
  assert(stored.stopped === true && stored.content.length > 0, `stored: ${JSON.stringify(stored).slice(0, 200)}`);
  assert(await page.isVisible("#send") && await page.isHidden("#stop"), "the Send button did not come back");
  await setOptions(page, { maxTokens: 16 });
  const b = await send(page, "And now a short one.");
  assert(!(await b.locator(".msg-error").isVisible()), `after stop: ${await b.locator(".msg-error").textContent()}`);
  assert((await b.locator(".msg-body").textContent()).trim().length > 0, "empty answer after a stop");
  assert(bodies.length === 2, `${bodies.length} requests`);
});

scenario("delete while an answer streams: the answer stops, the chat stays deleted", async ({ page }) => {
  await setOptions(page, { think: false, maxTokens: 2048 });
  await pace(page, 150);
  await send(page, "Delete me while you answer.", { wait: false });
  await page.waitForFunction(() => {
    const b = document.querySelector(".msg.assistant.streaming .msg-body");
    return b && b.textContent.trim().length > 0;
  });
  await page.locator("#chat-list .chat-item").first().hover();
  await page.click('#chat-list .chat-item >> nth=0 >> [data-action="delete"]');
  await page.click("#confirm-ok");
  await waitIdle(page, 10000);
  await pace(page, 0);
  await sleep(300);
  assert((await storedChats(page)).length === 0, "the chat came back into IndexedDB");
  assert((await chatTitles(page)).length === 0, `chat list: ${await chatTitles(page)}`);
});

scenario("options: context, prefill chunk and accuracy bounded by /api/status and sent in the request", async ({ page, bodies }) => {
  // The lists are bounded once the page's first /api/status answer is in,
  // which may come after html[data-ready].
  await page.waitForSelector('#server-status[data-state="ready"]');
  const st = await (await page.request.get(new URL("api/status", page.url()).href)).json();
  const ctx = st.model.context_length;
  const ctxOptions = (await page.locator("#opt-context option").evaluateAll((os) => os.map((o) => o.value))).filter(Boolean).map(Number);
  assert(ctxOptions.length > 0 && Math.max(...ctxOptions) === ctx, `context options ${ctxOptions} (model ${ctx})`);
  const maxChunk = st.limits.max_prefill_chunk;
  const preOptions = (await page.locator("#opt-prefill option").evaluateAll((os) => os.map((o) => o.value))).filter(Boolean).map(Number);
  assert(preOptions.length > 0 && (!maxChunk || Math.max(...preOptions) <= maxChunk), `prefill options ${preOptions} (server's ${maxChunk})`);
  await setOptions(page, { think: false, maxTokens: 16, context: 2048 });
  await page.selectOption("#opt-prefill", String(preOptions[0]));
  await page.selectOption("#opt-accuracy", "1");
  const a = await send(page, "Options test.");
  const body = bodies.at(-1);
  assert(body.context_length === 2048 && body.prefill_chunk === preOptions[0] && body.accuracy_level === 1 && body.max_tokens === 16,
    `request body: ${JSON.stringify(body)}`);
  assert(!(await a.locator(".msg-error").isVisible()), `error: ${await a.locator(".msg-error").textContent()}`);
  // The options are kept across a reload.
  await page.reload();
  await page.waitForSelector("html[data-ready]");
  assert((await page.inputValue("#opt-context")) === "2048" && (await page.inputValue("#opt-accuracy")) === "1", "options not kept");
  await page.selectOption("#opt-context", "");
  await page.selectOption("#opt-prefill", "");
  await page.click("#chat-list .chat-item .chat-open");
  await page.locator(".msg.assistant").first().waitFor();
  await send(page, "Defaults now.");
  const b2 = bodies.at(-1);
  assert(!("context_length" in b2) && !("prefill_chunk" in b2), `defaults sent explicitly: ${JSON.stringify(b2)}`);
});

scenario("options: a saved value the server no longer offers is shown and sent as the default", async ({ page, bodies }) => {
  await page.waitForSelector('#server-status[data-state="ready"]');
  const st = await (await page.request.get(new URL("api/status", page.url()).href)).json();
  // Saved under a model with four times the context (and a larger answer limit than this one offers).
  const stale = st.model.context_length * 4;
  await page.evaluate((v) => localStorage.setItem("nebula.settings.v1", JSON.stringify({
    think: false, context_length: String(v), prefill_chunk: "", accuracy_level: "3", max_tokens: "16",
  })), stale);
  await page.reload();
  await page.waitForSelector('#server-status[data-state="ready"]');
  assert((await page.inputValue("#opt-context")) === "", `the context list shows '${await page.inputValue("#opt-context")}'`);
  const a = await send(page, "Stale options.");
  const body = bodies.at(-1);
  assert(!("context_length" in body), `a context the server does not offer was sent: ${JSON.stringify(body)}`);
  assert(!(await a.locator(".msg-error").isVisible()), `error: ${await a.locator(".msg-error").textContent()}`);
});

scenario("Esc in the rename box cancels the rename, not the streaming answer", async ({ page }) => {
  await setOptions(page, { think: false, maxTokens: 2048 });
  // Paced slowly: the demo model may end its answer after a few dozen tokens,
  // and it must still be streaming when Esc is pressed.
  await pace(page, 400);
  const a = await send(page, "Write a very long story.", { wait: false });
  await page.waitForFunction(() => {
    const b = document.querySelector(".msg.assistant.streaming .msg-body");
    return b && b.textContent.trim().length > 0;
  });
  const title = (await chatTitles(page))[0];
  await page.locator("#chat-list .chat-item").first().hover();
  await page.click('#chat-list .chat-item >> nth=0 >> [data-action="rename"]');
  await page.fill(".chat-rename-input", "Not this name");
  assert(await page.locator(".msg.assistant.streaming").count() === 1, "the answer ended before Esc: the check would prove nothing");
  await page.press(".chat-rename-input", "Escape");
  await page.locator(".chat-rename-input").waitFor({ state: "detached" });
  assert((await chatTitles(page))[0] === title, `the rename was kept: ${await chatTitles(page)}`);
  await sleep(600);
  assert((await a.locator(".msg-state").textContent()) !== "stopped", "Esc in the rename box stopped the answer");
  if (await page.locator(".msg.assistant.streaming").count()) await page.click("#stop");
  await waitIdle(page, 10000);
  await pace(page, 0);
});

scenario("copy and regenerate", async ({ page, context, bodies }) => {
  await context.grantPermissions(["clipboard-read", "clipboard-write"]);
  await setOptions(page, { think: false, maxTokens: 16 });
  const a = await send(page, "Copy me.");
  const first = (await storedChats(page))[0].messages.at(-1).content;
  await a.hover();
  await a.locator('[data-action="copy"]').click();
  await page.waitForFunction(() => document.querySelector(".msg.assistant [data-action=copy]").classList.contains("done"));
  const clip = await page.evaluate(() => navigator.clipboard.readText());
  assert(clip === first, `clipboard: ${JSON.stringify(clip)} vs ${JSON.stringify(first)}`);
  await a.locator('[data-action="regenerate"]').click();
  await page.waitForFunction(() => document.querySelectorAll(".msg.assistant").length === 1 && !document.querySelector(".msg.streaming"));
  await waitIdle(page);
  assert(bodies.length === 2, `${bodies.length} requests`);
  assert(JSON.stringify(bodies[0].messages) === JSON.stringify(bodies[1].messages), "regenerate sent other messages");
  const msgs = (await storedChats(page))[0].messages;
  assert(msgs.length === 2 && msgs[1].role === "assistant" && msgs[1].content.length > 0, `after regenerate: ${JSON.stringify(msgs).slice(0, 300)}`);
});

scenario("errors: a 4xx from the API is shown with the server's message", async ({ page }) => {
  await setOptions(page, { think: false, maxTokens: 256, context: 512 });
  // ~1,700 words: far over 512 tokens with the demo tokenizer.
  const words = Array.from({ length: 1700 }, (_, i) => `word${i}`).join(" ");
  const a = await send(page, `Please read: ${words}`);
  const err = a.locator(".msg-error");
  await err.waitFor();
  const text = await err.textContent();
  assert(/HTTP 4\d\d/.test(text), `no HTTP status in the error: '${text}'`);
  assert(/context/i.test(text), `the server's message is not shown: '${text}'`);
  await setOptions(page, { context: "" });
  const b = await send(page, "Short again.", {});
  assert(!(await b.locator(".msg-error").isVisible()), `the next request failed: ${await b.locator(".msg-error").textContent()}`);
});

scenario("markdown: sanitised HTML, highlighted code (the page's renderer)", async ({ page }) => {
  const out = await page.evaluate(async () => {
    const md = await import("./js/markdown.js");
    const html = md.renderMarkdown("# T\n\n<img src=x onerror=\"window.__x=1\"><script>window.__x=2</script>" +
      "[l](javascript:alert(1))\n\n```c\nint main(void) { return 0; }\n```\n");
    const div = document.createElement("div");
    div.innerHTML = html;
    return {
      html,
      h1: !!div.querySelector("h1"),
      script: !!div.querySelector("script"),
      onerror: !!div.querySelector("[onerror]"),
      js: [...div.querySelectorAll("a")].some((a) => /^javascript:/i.test(a.getAttribute("href") || "")),
      kw: !!div.querySelector("pre code .hljs-type, pre code .hljs-keyword"),
    };
  });
  assert(out.h1 && !out.script && !out.onerror && !out.js && out.kw, `rendered: ${JSON.stringify(out)}`);
  assert(await page.evaluate(() => window.__x === undefined), "the injected handler ran");
}, {
  // DOMPurify parses the dirty HTML with DOMParser; chromium reports the page's
  // CSP blocking the onerror attribute there (defence in depth, expected).
  allowConsole: /Content Security Policy/,
});

scenario("screenshot of a conversation", async ({ page }) => {
  await setOptions(page, { think: true, maxTokens: 32 });
  const first = await send(page, "Hello! Can you explain what a mixture-of-experts model is?");
  await first.locator("details.thinking summary").click();
  await setOptions(page, { think: false, maxTokens: 64 });
  const a = await send(page, "Thanks. And in one paragraph, how does Nebula split work between GPU and CPU?");
  assert((await a.locator(".msg-body").textContent()).trim().length > 0, "empty answer");
  assert(await page.isVisible("#demo-notice"), "the demo notice is not visible");
  if (screenshotPath) {
    mkdirSync(dirname(resolve(screenshotPath)), { recursive: true });
    await page.screenshot({ path: screenshotPath });
    console.log(`   screenshot: ${screenshotPath}`);
  }
});

// The page's later features (features.mjs); its last one kills the coordinator
// with -9 and sees the page recover, before the one below stops it for good.
addFeatureScenarios(scenario);

scenario("errors: the coordinator stops → the page says so", async ({ page, stack }) => {
  await setOptions(page, { think: false, maxTokens: 16 });
  await stack.stopCoordinator();
  const a = await send(page, "Is anyone there?");
  const err = a.locator(".msg-error");
  await err.waitFor();
  const text = await err.textContent();
  assert(/HTTP 50\d|Cannot reach/.test(text), `error shown: '${text}'`);
  await page.waitForSelector('#server-status[data-state="error"]', { timeout: 15000 });
  assert(await page.isVisible("#error-banner"), "no banner about the unreachable server");
}, { needsStack: true });

await runScenarios(scenarios, { chromiumPath: CHROMIUM, externalUrl, only });
