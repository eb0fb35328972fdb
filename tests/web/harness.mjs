// harness.mjs — what the browser tests of the chat page share: the stack
// they run against (deploy/start.sh --demo-random on free ports, or
// tests/web/mock-server.mjs), a page with its instruments, the helpers that
// act as a user, and the loop that runs the scenarios.
//
// run-webui-tests.mjs holds the scenarios; the ones of the page's later
// features are in features.mjs.  A scenario marked needsStack needs the
// stack this harness starts (it stops or kills the coordinator); one marked
// mock runs against tests/web/mock-server.mjs, started beside the stack, for
// what the demo model cannot be made to do (tool calls).
import { chromium } from "playwright-core";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, readFileSync, existsSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");

// ---------------------------------------------------------------- the stack

export function freePort() {
  return new Promise((res, rej) => {
    const s = createServer();
    s.unref();
    s.on("error", rej);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => res(port));
    });
  });
}

export function run(cmd, argv, opts = {}) {
  return new Promise((res, rej) => {
    const p = spawn(cmd, argv, { cwd: REPO, stdio: ["ignore", "pipe", "pipe"], ...opts });
    let out = "";
    p.stdout.on("data", (d) => { out += d; });
    p.stderr.on("data", (d) => { out += d; });
    p.on("error", rej);
    p.on("close", (code) => (code === 0 ? res(out) : rej(new Error(`${cmd} ${argv.join(" ")} exited ${code}:\n${out}`))));
  });
}

export class Stack {
  async start() {
    this.state = mkdtempSync(join(tmpdir(), "nebula-webui-"));
    this.port = await freePort();
    this.apiPort = await freePort();
    while (this.apiPort === this.port) this.apiPort = await freePort();
    this.url = `http://127.0.0.1:${this.port}/`;
    const t0 = Date.now();
    const out = await run("bash", ["deploy/start.sh", "--demo-random", "--port", String(this.port), "--api-port", String(this.apiPort),
      "--state", this.state, "--threads", "2", "--wait", "120"],
      { env: { ...process.env, NEBULA_BIN: resolve(REPO, process.env.BUILD || "build", "bin") } });
    console.log(`stack: deploy/start.sh up in ${Date.now() - t0} ms on ${this.url} (state ${this.state})`);
    this.startOutput = out;
  }

  // The coordinator alone (nginx stays): the page must report the failure.
  async stopCoordinator() {
    const pidFile = join(this.state, "coordinator.pid");
    const pid = Number(readFileSync(pidFile, "utf8").trim());
    if (!(pid > 0)) throw new Error(`no pid in ${pidFile}`);
    process.kill(pid, "SIGTERM");
    for (let i = 0; i < 100; i++) {
      try {
        process.kill(pid, 0);
      } catch (_) {
        return;
      }
      await sleep(100);
    }
    throw new Error(`the coordinator (pid ${pid}) did not stop within 10 s`);
  }

  // The coordinator killed with -9: deploy/supervise.sh restarts it.  Returns its pid.
  killCoordinator() {
    const pid = Number(readFileSync(join(this.state, "coordinator.pid"), "utf8").trim());
    if (!(pid > 0)) throw new Error(`no pid in ${join(this.state, "coordinator.pid")}`);
    process.kill(pid, "SIGKILL");
    return pid;
  }

  // deploy/supervise.sh held (SIGSTOP) or let go (SIGCONT): held, it restarts nothing.
  signalSupervisor(sig) {
    const pid = Number(readFileSync(join(this.state, "supervisor.pid"), "utf8").trim());
    if (!(pid > 0)) throw new Error(`no pid in ${join(this.state, "supervisor.pid")}`);
    process.kill(pid, sig);
  }

  async stop() {
    if (!this.state) return;
    try {
      await run("bash", ["deploy/stop.sh", "--state", this.state]);
    } catch (e) {
      console.error(`stack: deploy/stop.sh failed: ${e.message}`);
      this.keep = true;
    }
    if (!this.keep && !process.env.KEEP_STATE) rmSync(this.state, { recursive: true, force: true });
    else console.error(`stack: state kept in ${this.state}`);
  }

  logs() {
    const out = [];
    for (const f of ["coordinator.log", "webui-error.log"]) {
      const p = join(this.state, f);
      if (existsSync(p)) out.push(`--- ${f} (tail)\n` + readFileSync(p, "utf8").split("\n").slice(-25).join("\n"));
    }
    return out.join("\n");
  }
}

// ---------------------------------------------------------------- helpers

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export function assert(cond, msg) {
  if (!cond) throw new Error(msg);
}

export async function openPage(browser, baseUrl) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 860 }, acceptDownloads: true, colorScheme: "light" });
  // Two instruments on the page's fetch of /v1/chat/completions:
  // - window.__sse keeps a copy of each stream's text as it was received
  //   (a tee: the page still reads its own branch as it arrives);
  // - window.__paceMs > 0 hands the page the stream one SSE event at a time,
  //   that many ms apart.  The demo model writes a whole answer in a few
  //   milliseconds, faster than a frame; paced, the page's progressive
  //   rendering and Stop in the middle of an answer can be seen.  The bytes
  //   are the server's, unchanged; aborting the fetch still aborts the request.
  await context.addInitScript(() => {
    const orig = window.fetch;
    window.__sse = [];
    window.__paceMs = 0;
    window.fetch = async (...a) => {
      const res = await orig(...a);
      if (!String(a[0]).includes("chat/completions") || !res.body) return res;
      const [mine, copy] = res.body.tee();
      const rec = { text: "" };
      window.__sse.push(rec);
      (async () => {
        const r = copy.getReader();
        const d = new TextDecoder();
        for (;;) {
          const { done, value } = await r.read();
          if (done) break;
          rec.text += d.decode(value, { stream: true });
        }
      })().catch(() => {});
      let body = mine;
      const pace = window.__paceMs;
      if (pace > 0) {
        const src = mine.getReader();
        const enc = new TextEncoder();
        const dec = new TextDecoder();
        let buf = "";
        let ended = false;
        let failed = false;
        const signal = a[1] && a[1].signal;
        body = new ReadableStream({
          start(ctl) {
            // An aborted fetch errors its body at once, buffered events or not.
            if (signal) {
              signal.addEventListener("abort", () => {
                failed = true;
                ctl.error(new DOMException("The user aborted a request.", "AbortError"));
              });
            }
          },
          async pull(ctl) {
            for (;;) {
              const cut = buf.indexOf("\n\n");
              if (cut >= 0) {
                await new Promise((r) => setTimeout(r, pace));
                if (failed) return;
                ctl.enqueue(enc.encode(buf.slice(0, cut + 2)));
                buf = buf.slice(cut + 2);
                return;
              }
              if (ended) {
                if (buf) ctl.enqueue(enc.encode(buf));
                buf = "";
                ctl.close();
                return;
              }
              try {
                const { done, value } = await src.read();
                if (done) ended = true;
                else buf += dec.decode(value, { stream: true });
              } catch (e) {
                ctl.error(e);
                return;
              }
            }
          },
          cancel(reason) { return src.cancel(reason); },
        });
      }
      return new Response(body, { status: res.status, statusText: res.statusText, headers: res.headers });
    };
  });
  const page = await context.newPage();
  page.setDefaultTimeout(20000);
  const problems = [];
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  // (The browser logs every 4xx/5xx response; the scenarios that cause them check what the page shows.)
  page.on("console", (m) => {
    if (m.type() === "error" && !m.text().startsWith("Failed to load resource")) problems.push(`console error: ${m.text()}`);
  });
  const bodies = [];
  page.on("request", (r) => {
    if (r.method() === "POST" && r.url().endsWith("/v1/chat/completions")) bodies.push(r.postDataJSON());
  });
  await page.goto(baseUrl);
  await page.waitForSelector("html[data-ready]");
  return { context, page, bodies, problems };
}

// Sets the composer's options through its controls.
export async function setOptions(page, { think, maxTokens, context } = {}) {
  if (think !== undefined) {
    const on = await page.isChecked("#opt-think");
    if (on !== think) await page.click("label.switch");
    assert((await page.isChecked("#opt-think")) === think, "the thinking switch did not change");
  }
  if (maxTokens !== undefined) await page.selectOption("#opt-max-tokens", String(maxTokens));
  if (context !== undefined) await page.selectOption("#opt-context", String(context));
}

// Types a message, sends it with Enter and waits until the answer is over.
export async function send(page, text, { wait = true } = {}) {
  const before = await page.locator(".msg.assistant").count();
  await page.fill("#prompt", text);
  await page.press("#prompt", "Enter");
  await page.locator(".msg.assistant").nth(before).waitFor();
  if (wait) await waitIdle(page);
  return page.locator(".msg.assistant").nth(before);
}

// Paces the chat streams the page reads (see openPage): MS between SSE events, 0: off.
export async function pace(page, ms) {
  await page.evaluate((x) => { window.__paceMs = x; }, ms);
}

export async function waitIdle(page, timeout = 60000) {
  await page.waitForFunction(() => !document.querySelector(".msg.streaming") && !document.querySelector("#send").hidden, null, { timeout });
}

export async function chatTitles(page) {
  return page.locator("#chat-list .chat-item .chat-name").allTextContents();
}

// The chats as stored in the page's IndexedDB.
export async function storedChats(page) {
  return page.evaluate(() => new Promise((res, rej) => {
    const r = indexedDB.open("nebula-webui");
    r.onerror = () => rej(r.error);
    r.onsuccess = () => {
      const g = r.result.transaction("chats").objectStore("chats").getAll();
      g.onsuccess = () => { r.result.close(); res(g.result); };
      g.onerror = () => rej(g.error);
    };
  }));
}

// tests/web/mock-server.mjs on a free port (it prints its URL).
export class MockServer {
  async start() {
    this.proc = spawn(process.execPath, [join(REPO, "tests", "web", "mock-server.mjs"), "--demo"], { stdio: ["ignore", "pipe", "pipe"] });
    this.url = await new Promise((res, rej) => {
      let out = "";
      const t = setTimeout(() => rej(new Error(`mock-server.mjs printed no URL in 10 s: ${out}`)), 10000);
      this.proc.stdout.on("data", (d) => {
        out += d;
        const m = /mock-server: (http:\/\/\S+)/.exec(out);
        if (m) { clearTimeout(t); res(m[1]); }
      });
      this.proc.on("exit", (code) => rej(new Error(`mock-server.mjs exited ${code}: ${out}`)));
    });
    console.log(`mock: tests/web/mock-server.mjs on ${this.url}`);
  }

  stop() {
    if (this.proc) this.proc.kill();
  }
}

// Runs the scenarios (those whose name contains `only`, when given) and
// exits: 1 when any failed.  Each runs in a fresh browser context against
// the stack this starts, or externalUrl.
export async function runScenarios(scenarios, { chromiumPath, externalUrl, only }) {
  let stack = null;
  let mock = null;
  let browser = null;
  let passed = 0;
  let failed = 0;
  let skipped = 0;
  const t0 = Date.now();
  try {
    if (!externalUrl) {
      stack = new Stack();
      await stack.start();
    }
    const baseUrl = externalUrl || stack.url;
    if (scenarios.some((s) => s.mock && (!only || s.name.includes(only)))) {
      mock = new MockServer();
      await mock.start();
    }
    browser = await chromium.launch({ executablePath: chromiumPath, headless: true, args: ["--no-sandbox", "--headless", "--disable-dev-shm-usage"] });
    for (const s of scenarios) {
      if (only && !s.name.includes(only)) continue;
      if (s.needsStack && !stack) {
        console.log(`skip - ${s.name} (needs the stack this script starts)`);
        skipped++;
        continue;
      }
      const t = Date.now();
      let ctx = null;
      try {
        ctx = await openPage(browser, s.mock ? mock.url : baseUrl);
        await s.fn({ ...ctx, stack });
        const problems = ctx.problems.filter((p) => !(s.allowConsole && s.allowConsole.test(p)));
        if (problems.length) throw new Error(problems.join("\n"));
        console.log(`ok - ${s.name} (${Date.now() - t} ms)`);
        passed++;
      } catch (e) {
        console.log(`not ok - ${s.name} (${Date.now() - t} ms)\n   ${String(e.stack || e).split("\n").slice(0, 6).join("\n   ")}`);
        if (ctx && ctx.problems.length) console.log(`   page: ${ctx.problems.join("\n   page: ")}`);
        failed++;
        if (ctx) {
          const p = join(tmpdir(), `webui-fail-${s.name.replace(/\W+/g, "_").slice(0, 40)}.png`);
          await ctx.page.screenshot({ path: p }).catch(() => {});
          console.log(`   screenshot of the failure: ${p}`);
        }
      } finally {
        if (ctx) await ctx.context.close().catch(() => {});
      }
    }
  } catch (e) {
    console.log(`not ok - setup: ${e.message}`);
    failed++;
  } finally {
    if (browser) await browser.close().catch(() => {});
    if (mock) mock.stop();
    if (stack) {
      if (failed) console.log(stack.logs());
      await stack.stop();
    }
  }
  console.log(`webui: ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  console.log(`${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ""}`);
  process.exit(failed ? 1 : 0);
}
