// messages.js — the conversation on screen: its title, its messages (the
// prompt's prefill progress, the answer streaming in, thinking, tool calls
// and tool results, speed, errors) and their copy, edit, fork and
// regenerate buttons; markdown.js is loaded from here.
//
// Each message object is drawn into one <article> (cloned from
// #msg-template) and redrawn from the object whenever it changes: the
// object is the truth, the element only shows it.  While an answer streams,
// its redraws are batched to one per animation frame (scheduleRender), and
// the view follows the end only if the user was already there.  The
// regenerate, edit and fork buttons belong to generation.js and chatops.js,
// which this module does not import: a click on one is sent up as a
// "nebula:regenerate", "nebula:edit" or "nebula:fork" event on the message
// (detail: {id}), which bubbles to #messages.
import { $, el } from "./dom.js";
import { state } from "./state.js";
import { showError } from "./banners.js";
import { composeUserContent, formatSpecDetail, formatStats } from "./chatformat.js";
import { applyIcons, setIcon } from "./icons.js";
import { copyText } from "./copy.js";
import { fileChip } from "./attachments.js";
import { renderMeter } from "./meter.js";
import { renderToolCalls, toolResultBlock } from "./toolview.js";

// What this module keeps for itself.
const view = {
  els: new Map(),     // message id → its <article>, for the chat on screen
  queued: new Set(),  // messages to redraw at the next animation frame
  md: null,           // markdown.js once loaded (null: answers as plain text)
  toolOpen: new Map(), // message id → the ids of its tool-call blocks the user opened
};

// The <article> of message id on screen (undefined when not shown).
export function messageElement(id) {
  return view.els.get(id);
}

export async function loadMarkdown() {
  try {
    const md = await import("./markdown.js");
    await md.loadLanguages();
    view.md = md;
  } catch (e) {
    showError(`Markdown rendering is unavailable (web/vendor/ is missing or broken: run make web): ${e.message}. Answers are shown as plain text.`);
  }
}

export function renderTitle() {
  const t = state.current ? state.current.title : "New chat";
  el.title.textContent = t;
  document.title = state.current ? `${t} · Nebula` : "Nebula";
  el.exportChat.disabled = !state.current || state.current.messages.length === 0;
  renderMeter();
}

export function renderChat() {
  renderTitle();
  view.els.clear();
  view.toolOpen.clear();
  for (const a of el.messages.querySelectorAll(".msg")) a.remove();
  const msgs = state.current ? state.current.messages : [];
  el.empty.hidden = msgs.length > 0;
  for (const m of msgs) {
    const a = createMessageEl(m);
    el.messages.append(a);
    updateMessageEl(m);
  }
  updateRegenerate();
  scrollToEnd();
  // The system prompt panel (sysprompt.js) shows the chat on screen.
  el.messages.dispatchEvent(new CustomEvent("nebula:chat-shown"));
}

// A new message at the end of the conversation on screen.
export function appendMessage(m) {
  el.empty.hidden = true;
  el.messages.append(createMessageEl(m));
  updateMessageEl(m);
}

export function removeMessage(id) {
  const a = view.els.get(id);
  if (a) a.remove();
  view.els.delete(id);
}

function createMessageEl(m) {
  const a = el.msgTemplate.content.firstElementChild.cloneNode(true);
  a.classList.add(m.role === "user" ? "user" : m.role === "tool" ? "tool" : "assistant");
  a.dataset.id = m.id;
  a.dataset.role = m.role;
  $(".role", a).textContent = m.role === "user" ? "You" : m.role === "tool" ? "Tool" : "Nebula";
  $(".avatar", a).textContent = m.role === "user" ? "You" : "";
  applyIcons(a);
  $('[data-action="copy"]', a).addEventListener("click", (e) => copyMessage(m, e.currentTarget));
  for (const action of ["regenerate", "edit", "fork"]) {
    $(`[data-action="${action}"]`, a).addEventListener("click", () => {
      a.dispatchEvent(new CustomEvent(`nebula:${action}`, { bubbles: true, detail: { id: m.id } }));
    });
  }
  // Only the user's clicks decide whether a finished thinking section stays open.
  const details = $(".thinking", a);
  $("summary", details).addEventListener("click", () => { m.thinkingOpen = !details.open; });
  view.els.set(m.id, a);
  return a;
}

function copyMessage(m, button) {
  const text = m.role === "user" ? composeUserContent(m.content, m.attachments) : m.content || m.reasoning || "";
  copyText(text, button);
}

function renderMarkdownInto(target, text) {
  if (view.md) {
    target.innerHTML = view.md.renderMarkdown(text);
    decorateCodeBlocks(target);
  } else {
    target.textContent = text;
  }
}

function decorateCodeBlocks(root) {
  for (const pre of root.querySelectorAll("pre.code-block")) {
    const bar = document.createElement("div");
    bar.className = "code-bar";
    const lang = document.createElement("span");
    lang.textContent = pre.dataset.lang || "text";
    const btn = document.createElement("button");
    btn.type = "button";
    btn.className = "icon-btn small";
    btn.title = "Copy the code";
    btn.setAttribute("aria-label", "Copy the code");
    setIcon(btn, "copy");
    btn.addEventListener("click", () => copyText(pre.querySelector("code").textContent, btn));
    bar.append(lang, btn);
    pre.prepend(bar);
  }
}

// Redraws message m's element from m (nothing if m is not on screen).
export function updateMessageEl(m) {
  const a = view.els.get(m.id);
  if (!a) return;
  if (m.role === "tool") {
    $(".msg-body", a).hidden = true;
    const box = $(".msg-tools", a);
    box.replaceChildren(toolResultBlock(m));
    box.hidden = false;
  } else if (m.role === "user") {
    const body = $(".msg-body", a);
    body.className = "msg-body plain";
    body.textContent = m.content;
    body.hidden = m.content === "";
    $(".msg-files", a).replaceChildren(...(m.attachments || []).map((f) => fileChip(f, null)));
  } else {
    updateAnswerEl(m, a);
  }
}

function updateAnswerEl(m, a) {
  const live = state.generation && state.generation.msg === m;
  a.classList.toggle("streaming", live);
  const details = $(".thinking", a);
  details.hidden = !m.reasoning;
  if (m.reasoning) {
    const thinkingNow = live && !m.content;
    $(".thinking-label", details).textContent = thinkingNow ? "Thinking…" : "Thinking";
    details.classList.toggle("active", thinkingNow);
    // Open while the model thinks; afterwards as the user left it (closed by default).
    details.open = m.thinkingOpen ?? thinkingNow;
    renderMarkdownInto($(".thinking-body", details), m.reasoning);
  }
  const prefill = live && !m.content && !m.reasoning ? m.prefill : null;
  renderPrefill($(".prefill", a), prefill);
  const body = $(".msg-body", a);
  body.className = "msg-body md";
  if (m.content) {
    renderMarkdownInto(body, m.content);
  } else if (live && !m.reasoning && !prefill) {
    body.innerHTML = '<span class="typing"><i></i><i></i><i></i></span>';
  } else {
    body.textContent = "";
  }
  body.hidden = body.childNodes.length === 0;
  if (!view.toolOpen.has(m.id)) view.toolOpen.set(m.id, new Set());
  renderToolCalls($(".msg-tools", a), m.tool_calls, view.toolOpen.get(m.id));
  const calls = m.tool_calls && m.tool_calls.length;
  let st = "";
  if (live) st = m.waiting || "";
  else if (m.stopped) st = m.interrupted ? "interrupted" : "stopped";
  else if (m.finish_reason === "length") st = "cut at the token limit";
  else if (m.finish_reason === "tool_calls") st = "asks to call a tool";
  else if (!m.error && !m.content && !calls && m.reasoning) st = "no answer after the thinking";
  $(".msg-state", a).textContent = st;
  const err = $(".msg-error", a);
  err.hidden = !m.error;
  err.textContent = m.error || "";
  renderStats(m, $(".stats", a));
  $(".msg-foot", a).hidden = live;
}

// The prompt's prefill progress, p = {done, total} (generation.js sets it
// from the stream), or null: the bar is hidden.
function renderPrefill(box, p) {
  box.hidden = !p;
  if (!p) return;
  const text = `prefill ${p.done.toLocaleString("en")} / ${p.total.toLocaleString("en")} tokens`;
  $(".prefill-text", box).textContent = text;
  const bar = $(".progress", box);
  bar.setAttribute("aria-valuenow", String(p.done));
  bar.setAttribute("aria-valuemax", String(p.total));
  bar.setAttribute("aria-valuetext", text);
  $(".bar", box).style.width = `${((100 * p.done) / p.total).toFixed(1)}%`;
}

// The line under an answer: speed, and the accuracy level if it differs from
// the one asked; hovering says where the figures come from.
function renderStats(m, stats) {
  let acc = "";
  const nb = m.nebula;
  if (nb && nb.accuracy_level_effective != null && nb.accuracy_level != null && nb.accuracy_level_effective !== nb.accuracy_level) {
    acc = ` · accuracy ${nb.accuracy_level_effective} (asked ${nb.accuracy_level})`;
  }
  stats.textContent = formatStats(m.stats) + acc;
  stats.title = m.stats
    ? (m.stats.measured ? "Measured in the browser (the server sent no timings)" : "Reported by the server") +
      (m.stats.prompt_tokens != null ? ` · prompt ${m.stats.prompt_tokens} tokens` : "") +
      (m.stats.queue_ms != null ? ` · queued ${Math.round(m.stats.queue_ms)} ms` : "") +
      formatSpecDetail(m.stats.spec) +
      (m.model ? ` · model ${m.model}` : "")
    : "";
}

// The regenerate button shows on the last answer only, edit on user
// messages, fork on every message; none while an answer streams.
export function updateRegenerate() {
  const msgs = state.current ? state.current.messages : [];
  const last = msgs[msgs.length - 1];
  const busy = !!state.generation;
  for (const [id, a] of view.els) {
    const b = $('[data-action="regenerate"]', a);
    b.hidden = !(last && last.role === "assistant" && last.id === id && !busy);
    $('[data-action="edit"]', a).hidden = busy || a.dataset.role !== "user";
    $('[data-action="fork"]', a).hidden = busy;
  }
}

export function scheduleRender(m) {
  if (view.queued.size === 0) {
    requestAnimationFrame(() => {
      const stick = nearBottom();
      for (const x of view.queued) updateMessageEl(x);
      view.queued.clear();
      if (stick) scrollToEnd();
    });
  }
  view.queued.add(m);
}

export function nearBottom() {
  const m = el.messages;
  return m.scrollHeight - m.scrollTop - m.clientHeight < 120;
}

export function scrollToEnd() {
  el.messages.scrollTop = el.messages.scrollHeight;
}
