// generation.js — one answer being generated: the request built from the
// chat and the settings, streamed into a new assistant message, Stop and
// Regenerate.
//
// One answer streams at a time (the engine serves one request at a time
// anyway); state.generation names it while it runs.  Its message object is
// filled in place as pieces arrive and redrawn through scheduleRender; the
// chat is saved when the message is created, every 2 s while it streams and
// once at the end, whatever the end was (done, stopped, failed), so a page
// closed mid-answer keeps all but its last seconds.  Every failure ends up
// in the message.
import { el } from "./dom.js";
import { state } from "./state.js";
import * as store from "./store.js";
import { ApiError, streamChat, fetchStatus, mergeToolCalls } from "./api.js";
import { requestMessages, formatSize } from "./chatformat.js";
import { appendMessage, removeMessage, updateMessageEl, updateRegenerate, scheduleRender, nearBottom, scrollToEnd } from "./messages.js";
import { renderChatList, saveChat } from "./chatlist.js";
import { pollStatus, waitUntilReady } from "./status.js";
import { samplingFields } from "./settings.js";
import { renderMeter } from "./meter.js";

function setGenerating(on) {
  el.send.hidden = on;
  el.stop.hidden = !on;
  renderChatList();
  updateRegenerate();
}

function requestBody(chat, upTo) {
  const s = state.settings;
  const body = {
    messages: requestMessages(chat, upTo),
    stream: true,
    stream_options: { include_usage: true },
    think: !!s.think,
    accuracy_level: Number(s.accuracy_level) || 3,
  };
  if (s.context_length) body.context_length = Number(s.context_length);
  if (s.prefill_chunk) body.prefill_chunk = Number(s.prefill_chunk);
  if (s.max_tokens) body.max_tokens = Number(s.max_tokens);
  return { ...body, ...samplingFields() };
}

// Answers the last turn of chat: a new assistant message, streamed.
export async function generate(chat) {
  const msg = {
    id: store.newId(), role: "assistant", content: "", reasoning: "", created: Date.now(), pending: true,
  };
  chat.messages.push(msg);
  chat.updated = Date.now();
  const controller = new AbortController();
  const gen = { chat, msg, controller, firstToken: false };
  state.generation = gen;
  if (state.current === chat) {
    appendMessage(msg);
    scrollToEnd();
  }
  setGenerating(true);
  await saveChat(chat);

  const body = requestBody(chat, chat.messages.length - 1);
  const limit = state.status && state.status.limits && state.status.limits.max_body_bytes;
  const size = new TextEncoder().encode(JSON.stringify(body)).length;

  // When the request went out and the first piece came, and how many came:
  // the speed figures where the server sends none.
  const clock = { t0: performance.now(), tFirst: null, pieces: 0, lastSave: Date.now() };
  try {
    if (limit && size > limit) {
      throw new ApiError(`This conversation with its documents is ${formatSize(size)}; the server accepts at most ${formatSize(limit)} per request. Remove a document or start a new chat.`);
    }
    const res = await streamWhenReady(gen, body, clock);
    const tEnd = performance.now();
    msg.finish_reason = res.finish_reason;
    msg.model = res.model;
    if (res.nebula) msg.nebula = res.nebula;
    msg.stats = statsFrom(res.timings, res.usage, clock.t0, clock.tFirst, tEnd, clock.pieces);
  } catch (e) {
    const tEnd = performance.now();
    if (e && e.name === "AbortError") {
      msg.stopped = true;
      if (clock.tFirst !== null) {
        // The pieces counted until the server's own count is in (countStopped).
        clock.tEnd = tEnd;
        msg.stats = { ...statsFrom(null, null, clock.t0, clock.tFirst, tEnd, clock.pieces), tokens_approx: true };
      }
    } else {
      msg.error = e && e.message ? e.message : String(e);
      if (!(e instanceof ApiError)) console.error(e);
    }
  } finally {
    delete msg.pending;
    delete msg.waiting;
    delete msg.prefill;
    state.generation = null;
    chat.updated = Date.now();
    await saveChat(chat);
    setGenerating(false);
    if (state.current === chat) {
      updateMessageEl(msg);
      renderMeter();
      if (nearBottom()) scrollToEnd();
    }
    pollStatus();
  }
  if (msg.stopped && msg.stats && !chat.deleted) await countStopped(chat, msg, gen.before, clock);
}

// A stopped answer's token count replaced by the server's, once it has it.
async function countStopped(chat, msg, before, clock) {
  const n = await serverTokensAfterStop(before);
  if (n === null || chat.deleted) return;
  const secs = (clock.tEnd - clock.tFirst) / 1000;
  msg.stats.completion_tokens = n;
  msg.stats.tokens_per_s = n > 1 && secs > 0 ? (n - 1) / secs : undefined;
  delete msg.stats.tokens_approx;
  await saveChat(chat);
  if (state.current === chat) updateMessageEl(msg);
}

// The tokens the server generated for a request this page stopped.  The
// stream's pieces are not tokens: the server sends what accumulated since
// its last write as one delta (several tokens, or none for </think> and for
// bytes held back for a stop string or an unfinished UTF-8 character), and
// it notices the closed connection a moment later, having sampled a few
// more (or, fast, had finished before the page read it all).  Its own count
// is in /api/status: stats.tokens_generated grows by each ended request's
// tokens, cancelled ones included.  Compared with the figures read just
// before the request (before), once the server counts one more ended
// request: the difference is this request's, provided it is the only one
// that ended meanwhile.  null when that cannot be told (another client's
// request ended too, or the server did not answer within 3 s).
async function serverTokensAfterStop(before) {
  if (!before) return null;
  for (let i = 0; i < 30; i++) {
    let st;
    try {
      st = (await fetchStatus()).stats;
    } catch (_) {
      return null;
    }
    if (st && typeof st.requests === "number" && st.requests > before.requests) {
      return st.requests === before.requests + 1 ? st.tokens_generated - before.tokens_generated : null;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return null;
}

// Sends the request once the model is ready and streams the answer into
// gen.msg.  A 503 model_not_ready (the engine restarted, or it loads on the
// first request) waits for the model once more and retries.
async function streamWhenReady(gen, body, clock) {
  const { chat, msg, controller } = gen;
  for (let attempt = 0; ; attempt++) {
    let reading = false; // a prefill report came: the request left the queue
    await waitUntilReady(controller.signal, (s) => {
      msg.waiting = `waiting for the model to load (${Math.round((s.progress || 0) * 100)}%)…`;
      scheduleRender(msg);
    });
    msg.waiting = "sending…";
    scheduleRender(msg);
    // A fresh status: a first request may make the engine load (show it), and
    // its counters are what a Stop compares the server's count with.
    await pollStatus();
    const st = state.status && !state.statusError ? state.status.stats : null;
    gen.before = st && typeof st.tokens_generated === "number" && typeof st.requests === "number" ? { ...st } : null;
    try {
      return await streamChat(body, {
        signal: controller.signal,
        onFirstByte: () => { msg.waiting = "waiting for the first token…"; scheduleRender(msg); },
        onKeepAlive: () => {
          if (reading || gen.firstToken) return;
          const secs = Math.round((performance.now() - clock.t0) / 1000);
          msg.waiting = `queued… ${secs} s`;
          scheduleRender(msg);
        },
        // The progress comes from this request's own stream, which api.js
        // reads raw anyway, rather than from /api/status: the status shows
        // whichever request runs (maybe another client's) and is polled once
        // a second.  A bar (messages.js) only for a prompt of several steps:
        // the first report short of the total starts it, the last step's
        // (done = total) fills it, the first piece of the answer replaces it.
        onPrefill: ({ done, total }) => {
          reading = true;
          if (gen.firstToken) return; // a retried generation reads the prompt again: the answer stays
          if (done < total || msg.prefill) msg.prefill = { done, total };
          msg.waiting = "reading the prompt…";
          scheduleRender(msg);
        },
        onDelta: ({ content, reasoning, toolCalls }) => {
          if (clock.tFirst === null) {
            clock.tFirst = performance.now();
            gen.firstToken = true;
            msg.waiting = "";
            delete msg.prefill;
          }
          clock.pieces++;
          msg.content += content;
          msg.reasoning += reasoning;
          if (toolCalls.length) msg.tool_calls = mergeToolCalls(msg.tool_calls || [], toolCalls);
          scheduleRender(msg);
          if (Date.now() - clock.lastSave > 2000) {
            clock.lastSave = Date.now();
            saveChat(chat);
          }
        },
      });
    } catch (e) {
      if (attempt > 0 || !(e instanceof ApiError) || e.status !== 503 || e.code !== "model_not_ready") throw e;
      await pollStatus();
    }
  }
}

// Speculative decoding's counters of an answer (timings.speculative), kept
// small: the history stores them with the message.
function specFrom(sp) {
  if (!sp || typeof sp.passes !== "number" || sp.passes <= 0) return undefined;
  return {
    passes: sp.passes,
    tokens_per_pass: sp.tokens_per_pass,
    drafted: sp.drafted,
    accepted: sp.accepted,
    nongreedy: sp.nongreedy_accepted,
    by_position: Array.isArray(sp.acceptance_by_position) ? sp.acceptance_by_position.slice(0, 16) : [],
    windows: Array.isArray(sp.windows) ? sp.windows.slice(0, 24) : [],
    drafters: sp.drafters || {},
  };
}

function statsFrom(timings, usage, t0, tFirst, tEnd, pieces) {
  if (timings && (typeof timings.tokens_per_s === "number" || typeof timings.ttft_ms === "number")) {
    return {
      tokens_per_s: timings.tokens_per_s,
      ttft_ms: timings.ttft_ms,
      completion_tokens: timings.completion_tokens ?? (usage ? usage.completion_tokens : undefined),
      prompt_tokens: timings.prompt_tokens ?? (usage ? usage.prompt_tokens : undefined),
      prompt_cached: timings.prompt_cached ?? usage?.prompt_tokens_details?.cached_tokens,
      queue_ms: timings.queue_ms,
      spec: specFrom(timings.speculative),
      measured: false,
    };
  }
  if (tFirst === null) return null;
  const n = usage && typeof usage.completion_tokens === "number" ? usage.completion_tokens : pieces;
  const secs = (tEnd - tFirst) / 1000;
  return {
    ttft_ms: tFirst - t0,
    tokens_per_s: secs > 0 && n > 1 ? (n - 1) / secs : undefined,
    completion_tokens: n,
    prompt_tokens: usage ? usage.prompt_tokens : undefined,
    prompt_cached: usage?.prompt_tokens_details?.cached_tokens,
    measured: true,
  };
}

// The last answer of the chat on screen, replaced by a new one.
async function regenerate() {
  const chat = state.current;
  if (!chat || state.generation) return;
  const last = chat.messages[chat.messages.length - 1];
  if (!last || last.role !== "assistant") return;
  chat.messages.pop();
  removeMessage(last.id);
  await generate(chat);
}

export function stop() {
  if (state.generation) state.generation.controller.abort();
}

export function wireGeneration() {
  // A message's regenerate button (messages.js sends its click up as this event).
  el.messages.addEventListener("nebula:regenerate", () => regenerate());
  el.stop.addEventListener("click", stop);
  // Leaving the page while an answer streams asks first.
  window.addEventListener("beforeunload", (e) => {
    if (state.generation) e.preventDefault();
  });
}
