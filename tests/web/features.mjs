// features.mjs — browser scenarios of the chat page's later features (issue
// 17 item 8): the system prompt, temperature / top-p / seed, editing and
// re-sending a message, forking a chat, searching chats, the context meter,
// an answer that is only thinking kept in the history, titles without
// Markdown, the server's token count for a stopped answer, tool calls as
// collapsible blocks (against tests/web/mock-server.mjs, which streams
// them), and the status dot noticing a killed coordinator within about 2 s
// and the page recovering once deploy/supervise.sh has restarted it.
// run-webui-tests.mjs registers them (addFeatureScenarios) and runs them with
// its own, on the real stack unless a scenario says mock.
import { assert, sleep, setOptions, send, pace, waitIdle, chatTitles, storedChats } from "./harness.mjs";

const status = async (page) => (await page.request.get(new URL("api/status", page.url()).href)).json();

export function addFeatureScenarios(scenario) {
  scenario("system prompt: per chat, a default for new chats, sent first in the request", async ({ page, bodies }) => {
    await setOptions(page, { think: false, maxTokens: 16 });
    await page.click("#system-toggle");
    await page.fill("#system-prompt", "You are terse.");
    await page.locator("#system-prompt").blur();
    await send(page, "First chat.");
    assert(JSON.stringify(bodies.at(-1).messages[0]) === JSON.stringify({ role: "system", content: "You are terse." }),
      `first message sent: ${JSON.stringify(bodies.at(-1).messages[0])}`);
    assert((await storedChats(page))[0].system === "You are terse.", "the chat's system prompt is not stored");
    // A default for new chats.
    await page.fill("#system-prompt", "You are a pirate.");
    await page.click("#system-save-default");
    await page.click("#new-chat");
    assert((await page.inputValue("#system-prompt")) === "You are a pirate.", `a new chat shows '${await page.inputValue("#system-prompt")}'`);
    await send(page, "Second chat.");
    assert(bodies.at(-1).messages[0].content === "You are a pirate." && bodies.at(-1).messages.length === 2,
      `second chat sent ${JSON.stringify(bodies.at(-1).messages)}`);
    // The first chat keeps its own (it was changed before "Use for new chats"), across a reload.
    await page.reload();
    await page.waitForSelector("html[data-ready]");
    await page.locator("#chat-list .chat-item .chat-open", { hasText: "First chat." }).click();
    assert((await page.inputValue("#system-prompt")) === "You are a pirate.", "the first chat lost its system prompt");
    // Emptied: none is sent.
    await page.click("#system-toggle");
    await page.fill("#system-prompt", "");
    await page.locator("#system-prompt").blur();
    await send(page, "No system now.");
    assert(bodies.at(-1).messages[0].role === "user", `an empty system prompt was sent: ${JSON.stringify(bodies.at(-1).messages[0])}`);
  });

  scenario("sampling: temperature, top-p and seed in the request, none at the defaults; the same seed, the same answer; a bad seed refused", async ({ page, bodies }) => {
    await setOptions(page, { think: false, maxTokens: 16 });
    await send(page, "Defaults.");
    const d = bodies.at(-1);
    assert(!("temperature" in d) && !("top_p" in d) && !("seed" in d), `defaults sent: ${JSON.stringify(d)}`);
    await page.selectOption("#opt-temperature", "1.2");
    await page.selectOption("#opt-top-p", "0.9");
    await page.fill("#opt-seed", "4242");
    await page.press("#opt-seed", "Tab");
    await page.click("#new-chat");
    const a = await send(page, "Seeded.");
    const b = bodies.at(-1);
    assert(b.temperature === 1.2 && b.top_p === 0.9 && b.seed === 4242, `request body: ${JSON.stringify(b)}`);
    const t1 = (await a.locator(".msg-body").textContent()).trim();
    await page.click("#new-chat");
    const a2 = await send(page, "Seeded.");
    const t2 = (await a2.locator(".msg-body").textContent()).trim();
    assert(t1.length > 0 && t1 === t2, `the same seed gave different answers:\n${t1}\n${t2}`);
    await page.reload();
    await page.waitForSelector("html[data-ready]");
    assert((await page.inputValue("#opt-seed")) === "4242" && (await page.inputValue("#opt-temperature")) === "1.2", "sampling options not kept");
    await page.fill("#opt-seed", "12abc");
    await page.press("#opt-seed", "Tab");
    const n = bodies.length;
    await page.fill("#prompt", "Bad seed.");
    await page.press("#prompt", "Enter");
    await page.locator("#composer-error").waitFor();
    assert(/seed must be a whole number/.test(await page.textContent("#composer-error")), `error: ${await page.textContent("#composer-error")}`);
    await sleep(300);
    assert(bodies.length === n, "a request went out with a bad seed");
  });

  scenario("edit and re-send: the answers after the edited message are replaced", async ({ page, bodies }) => {
    await setOptions(page, { think: false, maxTokens: 16 });
    await send(page, "First question.");
    await send(page, "Second question.");
    const user = page.locator(".msg.user").first();
    await user.hover();
    await user.locator('[data-action="edit"]').click();
    await page.fill(".msg-edit-text", "First question, edited.");
    await page.press(".msg-edit-text", "Enter");
    await page.waitForFunction(() => document.querySelectorAll(".msg").length === 2);
    await waitIdle(page);
    const sent = bodies.at(-1).messages;
    assert(sent.length === 1 && sent[0].content === "First question, edited.", `sent after the edit: ${JSON.stringify(sent)}`);
    const msgs = (await storedChats(page))[0].messages;
    assert(msgs.length === 2 && msgs[0].content === "First question, edited." && msgs[1].role === "assistant" && msgs[1].content,
      `stored after the edit: ${JSON.stringify(msgs).slice(0, 300)}`);
    assert((await chatTitles(page))[0] === "First question, edited.", `title: ${await chatTitles(page)}`);
    // Cancel leaves it as it was.
    await user.hover();
    await user.locator('[data-action="edit"]').click();
    await page.fill(".msg-edit-text", "Not this.");
    await page.press(".msg-edit-text", "Escape");
    assert((await user.locator(".msg-body").textContent()) === "First question, edited." && bodies.length === 3, "Cancel changed the message or sent it");
  });

  scenario("fork: a new chat with the messages up to the one forked, the original unchanged", async ({ page, bodies }) => {
    await setOptions(page, { think: false, maxTokens: 16 });
    await send(page, "Trunk one.");
    await send(page, "Trunk two.");
    const answer = page.locator(".msg.assistant").first();
    await answer.hover();
    await answer.locator('[data-action="fork"]').click();
    await page.waitForFunction(() => document.querySelectorAll("#chat-list .chat-item").length === 2);
    assert((await page.textContent("#chat-title")) === "Trunk one. (fork)", `title: ${await page.textContent("#chat-title")}`);
    assert((await page.locator(".msg").count()) === 2, `the fork shows ${await page.locator(".msg").count()} messages`);
    const chats = await storedChats(page);
    const fork = chats.find((c) => c.title.endsWith("(fork)"));
    const trunk = chats.find((c) => c !== fork);
    assert(fork && trunk && fork.messages.length === 2 && trunk.messages.length === 4, `stored: ${chats.map((c) => `${c.title}: ${c.messages.length}`)}`);
    assert(fork.messages[1].content === trunk.messages[1].content && fork.messages[0].id !== trunk.messages[0].id, "the fork's messages are not copies");
    await send(page, "Branch.");
    const sent = bodies.at(-1).messages;
    assert(sent.length === 3 && sent[0].content === "Trunk one." && sent[2].content === "Branch.", `sent in the fork: ${JSON.stringify(sent)}`);
    assert((await storedChats(page)).find((c) => c.id === trunk.id).messages.length === 4, "the original chat changed");
  });

  scenario("search: chats filtered by title and by message text; Esc clears", async ({ page }) => {
    await setOptions(page, { think: false, maxTokens: 16 });
    await send(page, "About volcanoes");
    await page.click("#new-chat");
    await send(page, "About rivers");
    await send(page, "Tell me of the Danube, the Rhône and the Nile.");
    await page.click("#new-chat");
    await send(page, "About deserts");
    await page.fill("#chat-search", "volcano");
    assert(JSON.stringify(await chatTitles(page)) === JSON.stringify(["About volcanoes"]), `title search: ${await chatTitles(page)}`);
    await page.fill("#chat-search", "rhone NILE");
    assert(JSON.stringify(await chatTitles(page)) === JSON.stringify(["About rivers"]), `content search: ${await chatTitles(page)}`);
    await page.fill("#chat-search", "glaciers");
    assert((await chatTitles(page)).length === 0 && /No chat matches/.test(await page.textContent("#chat-list")), "no-match message");
    await page.press("#chat-search", "Escape");
    assert((await chatTitles(page)).length === 3 && (await page.inputValue("#chat-search")) === "", `after Esc: ${await chatTitles(page)}`);
  });

  scenario("context meter: the server's count of the chat's tokens over the context length", async ({ page }) => {
    await page.waitForSelector('#server-status[data-state="ready"]');
    const ctx = (await status(page)).model.context_length;
    await setOptions(page, { think: false, maxTokens: 16 });
    assert(await page.locator("#context-meter").isHidden(), "a meter for a new chat");
    await send(page, "Count my tokens.");
    const usage = () => page.evaluate(() => {
      const raw = window.__sse.at(-1).text;
      return raw.split("\n").filter((l) => l.startsWith("data: {")).map((l) => JSON.parse(l.slice(6))).find((c) => c.usage).usage;
    });
    let u = await usage();
    const fmt = (n) => n.toLocaleString("en");
    let want = `${fmt(u.prompt_tokens + u.completion_tokens)} / ${fmt(ctx)} tokens`;
    assert((await page.textContent("#context-meter-text")) === want, `meter '${await page.textContent("#context-meter-text")}', want '${want}'`);
    await setOptions(page, { context: 2048 });
    await send(page, "And more.");
    u = await usage();
    want = `${fmt(u.prompt_tokens + u.completion_tokens)} / 2,048 tokens`;
    assert((await page.textContent("#context-meter-text")) === want, `meter '${await page.textContent("#context-meter-text")}', want '${want}'`);
    const w = parseFloat(await page.evaluate(() => document.querySelector("#context-meter-fill").style.width));
    assert(Math.abs(w - (100 * (u.prompt_tokens + u.completion_tokens)) / 2048) < 0.1, `bar width ${w}%`);
  });

  scenario("an answer that was only thinking stays in the history: the next request alternates (a route answers the first)", async ({ page, bodies }) => {
    await setOptions(page, { think: true, maxTokens: 16 });
    const ev = (delta, finish = null) => `data: ${JSON.stringify({ id: "chatcmpl-route", object: "chat.completion.chunk", created: 1,
      model: "nebula-demo", choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
    await page.route("**/v1/chat/completions", (route) => route.fulfill({ status: 200, contentType: "text/event-stream",
      body: ev({ role: "assistant", content: "" }) + ev({ reasoning_content: "Hmm, let me think." }) + ev({}, "length") + "data: [DONE]\n\n" }));
    const a = await send(page, "Think only.");
    assert((await a.locator(".thinking").isVisible()) && !(await a.locator(".msg-body").isVisible()), "the thinking-only answer is not shown as such");
    await page.unroute("**/v1/chat/completions");
    const b = await send(page, "Now answer.");
    const sent = bodies.at(-1).messages;
    assert(sent.length === 3 && sent[1].role === "assistant" && sent[1].content === "" && sent[1].reasoning_content === "Hmm, let me think.",
      `sent: ${JSON.stringify(sent)}`);
    assert(!(await b.locator(".msg-error").isVisible()), `the server refused it: ${await b.locator(".msg-error").textContent()}`);
    assert((await storedChats(page))[0].messages.length === 4, "a message was dropped from the chat");
  });

  scenario("titles: the first message's Markdown is not in the chat's title", async ({ page }) => {
    await setOptions(page, { think: false, maxTokens: 16 });
    await send(page, "## **Fix** the `make run` [target](https://example.com) _now_");
    assert((await chatTitles(page))[0] === "Fix the make run target now", `title: ${await chatTitles(page)}`);
    assert((await page.textContent("#chat-title")) === "Fix the make run target now", `top bar: ${await page.textContent("#chat-title")}`);
  });

  scenario("stop: a stopped answer shows the token count the server counted", async ({ page }) => {
    await setOptions(page, { think: false, maxTokens: 2048 });
    await page.waitForSelector('#server-status[data-state="ready"]');
    const before = (await status(page)).stats;
    await pace(page, 150);
    const a = await send(page, "Write a very long story.", { wait: false });
    await page.waitForFunction(() => (document.querySelector(".msg.assistant.streaming .msg-body")?.textContent || "").trim().length > 0);
    await page.click("#stop");
    await waitIdle(page, 10000);
    await pace(page, 0);
    // The pieces' count (≈) first, the server's once it has it.
    await page.waitForFunction(() => /(^|· )\d+ tokens?$/.test(document.querySelector(".msg.assistant .stats").textContent), null, { timeout: 10000 });
    const after = (await status(page)).stats;
    const n = after.tokens_generated - before.tokens_generated;
    // (The demo model may have ended its answer before the paced page saw it
    // all: the request then ended as ok, not cancelled; it is counted all the same.)
    assert(after.requests === before.requests + 1, `requests ${before.requests} → ${after.requests}`);
    const stats = await a.locator(".stats").textContent();
    assert(new RegExp(`(^|· )${n} tokens?$`).test(stats) && !/≈\d+ tokens/.test(stats), `stats '${stats}', the server counted ${n}`);
    assert((await storedChats(page))[0].messages.at(-1).stats.completion_tokens === n, "the stored count is not the server's");
  });

  scenario("tool calls: collapsible blocks with the name and the arguments pretty-printed; tool results likewise (mock server)", async ({ page, bodies }) => {
    await setOptions(page, { think: false });
    const a = await send(page, "What is the weather? #tool-call");
    const blocks = a.locator("details.tool-block.tool-call");
    assert((await blocks.count()) === 2, `${await blocks.count()} tool-call blocks`);
    assert(JSON.stringify(await blocks.locator(".tool-name").allTextContents()) === '["get_weather","search_docs"]', "tool names");
    assert(!(await blocks.first().evaluate((d) => d.open)), "a tool call is open by default");
    await blocks.first().locator("summary").click();
    const args = await blocks.first().locator(".tool-args").textContent();
    assert(args === JSON.stringify({ city: "Paris", unit: "celsius", days: [1, 2] }, null, 2), `arguments shown:\n${args}`);
    assert((await blocks.nth(1).locator(".tool-args").textContent()).includes('"nebula <b>shm</b>"') &&
      (await blocks.nth(1).locator("b").count()) === 0, "the arguments were not shown as text");
    assert(/tool/.test(await a.locator(".msg-state").textContent()), `state '${await a.locator(".msg-state").textContent()}'`);
    const stored = (await storedChats(page))[0];
    const calls = stored.messages.at(-1).tool_calls;
    assert(calls.length === 2 && calls[0].id === "call_mock1" && calls[0].function.arguments === '{"city": "Paris", "unit": "celsius", "days": [1, 2]}',
      `stored tool calls: ${JSON.stringify(calls)}`);
    // A tool result (as an API client could store one) shows as a block too, and both go back to the server.
    await page.evaluate((chat) => new Promise((res, rej) => {
      chat.messages.push({ id: "tool-1", role: "tool", tool_call_id: "call_mock1", name: "get_weather", content: '{"temp_c":21,"sky":"clear"}', created: Date.now() });
      const r = indexedDB.open("nebula-webui");
      r.onsuccess = () => {
        const t = r.result.transaction("chats", "readwrite");
        t.objectStore("chats").put(chat);
        t.oncomplete = () => { r.result.close(); res(); };
        t.onerror = () => rej(t.error);
      };
    }), stored);
    await page.reload();
    await page.waitForSelector("html[data-ready]");
    await page.click("#chat-list .chat-item .chat-open");
    const result = page.locator(".msg.tool details.tool-result");
    await result.waitFor();
    assert((await result.locator(".tool-name").textContent()) === "get_weather", "tool result's name");
    assert((await result.locator(".tool-args").textContent()) === JSON.stringify({ temp_c: 21, sky: "clear" }, null, 2), "tool result not pretty-printed");
    await send(page, "Thanks.");
    const sent = bodies.at(-1).messages;
    assert(sent[1].role === "assistant" && sent[1].tool_calls.length === 2 && sent[1].tool_calls[1].function.name === "search_docs" &&
      sent[2].role === "tool" && sent[2].tool_call_id === "call_mock1", `sent: ${JSON.stringify(sent).slice(0, 400)}`);
  }, { mock: true });

  scenario("speculative decoding: tokens a pass and drafts accepted under the answer, by position on hover, the level sent (mock server)", async ({ page, bodies }) => {
    await setOptions(page, { think: false });
    await page.selectOption("#opt-accuracy", "2");
    const a = await send(page, "Hello #spec");
    assert(bodies.at(-1).accuracy_level === 2, `accuracy_level sent: ${bodies.at(-1).accuracy_level}`);
    const stats = a.locator(".stats");
    const text = await stats.textContent();
    assert(/· 2\.50 tok\/pass · 60% of 10 drafts accepted$/.test(text) && !/accuracy/.test(text), `stats '${text}'`);
    const title = await stats.getAttribute("title");
    assert(title.includes("4 verify windows (MTP 3, lookup 1)") && title.includes("accepted by position 1: 100%, 2: 50%, 3: 0%") &&
      title.includes("1 kept by the accuracy level") && title.includes("windows 4 4 5 4"), `title '${title}'`);
    const kept = (await storedChats(page))[0].messages.at(-1).stats.spec;
    assert(kept && kept.passes === 4 && kept.accepted === 6, `stored: ${JSON.stringify(kept)}`);
    await page.selectOption("#opt-accuracy", "3");
    const b = await send(page, "Hello again");
    assert(!/tok\/pass/.test(await b.locator(".stats").textContent()), "a plain answer shows no speculative counters");
  }, { mock: true });

  scenario("the coordinator killed with -9: the dot turns red within about 2 s, then the page recovers once it is restarted", async ({ page, stack }) => {
    await setOptions(page, { think: false, maxTokens: 16 });
    await page.waitForSelector('#server-status[data-state="ready"]');
    // The supervisor would restart it within a second, before the page could
    // tell: it is held (SIGSTOP) until the page has seen the outage.
    stack.signalSupervisor("SIGSTOP");
    let t0;
    try {
      t0 = Date.now();
      stack.killCoordinator();
      await page.waitForFunction(() => document.querySelector("#server-status").dataset.state === "error", null, { timeout: 6000, polling: 50 });
    } finally {
      stack.signalSupervisor("SIGCONT");
    }
    const seen = Date.now() - t0;
    assert(seen <= 2600, `the dot turned red ${seen} ms after the kill`);
    assert(await page.isVisible("#error-banner"), "no banner while the engine is down");
    await page.waitForSelector('#server-status[data-state="ready"]', { timeout: 30000 });
    await page.locator("#error-banner").waitFor({ state: "hidden", timeout: 5000 });
    const a = await send(page, "Back again?");
    assert(!(await a.locator(".msg-error").isVisible()), `after the restart: ${await a.locator(".msg-error").textContent()}`);
    assert((await a.locator(".msg-body").textContent()).trim().length > 0, "no answer after the restart");
    console.log(`   the dot turned red ${seen} ms after kill -9`);
  }, { needsStack: true });
}
