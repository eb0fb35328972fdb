// app.js — Nebula's chat page: chat list, conversation, composer, server status.
//
// State lives in three places: chats in IndexedDB (store.js), the composer's
// settings and the theme in localStorage, and the server's state polled from
// /api/status.  One answer streams at a time (the engine serves one request
// at a time anyway); its message object is updated in place as pieces arrive
// and re-rendered at most once per animation frame.  Every failure ends up on
// screen: in the message it belongs to, under the composer (attachments), or
// in the banner at the top (status, storage, missing vendor files).
import { ApiError, fetchStatus, streamChat } from "./api.js";
import * as store from "./store.js";
import {
  MAX_ATTACHMENT_BYTES, composeUserContent, titleFromText, formatStats, chatToMarkdown, exportFileName,
} from "./chatformat.js";
import { applyIcons, setIcon } from "./icons.js";

const $ = (sel, root = document) => root.querySelector(sel);

const el = {
  app: $("#app"),
  sidebar: $("#sidebar"),
  toggleSidebar: $("#toggle-sidebar"),
  theme: $("#theme"),
  newChat: $("#new-chat"),
  chatList: $("#chat-list"),
  serverStatus: $("#server-status"),
  title: $("#chat-title"),
  exportChat: $("#export-chat"),
  demoNotice: $("#demo-notice"),
  loading: $("#loading"),
  loadingPhase: $("#loading-phase"),
  loadingPct: $("#loading-pct"),
  loadingBar: $("#loading-bar"),
  loadingMessage: $("#loading-message"),
  errorBanner: $("#error-banner"),
  messages: $("#messages"),
  empty: $("#empty-state"),
  composer: $("#composer"),
  composerError: $("#composer-error"),
  attachments: $("#attachments"),
  attach: $("#attach"),
  fileInput: $("#file-input"),
  prompt: $("#prompt"),
  send: $("#send"),
  stop: $("#stop"),
  think: $("#opt-think"),
  context: $("#opt-context"),
  prefill: $("#opt-prefill"),
  accuracy: $("#opt-accuracy"),
  maxTokens: $("#opt-max-tokens"),
  confirm: $("#confirm-dialog"),
  confirmTitle: $("#confirm-title"),
  confirmText: $("#confirm-text"),
  msgTemplate: $("#msg-template"),
};

// ---------------------------------------------------------------- state

const SETTINGS_KEY = "nebula.settings.v1";
const THEME_KEY = "nebula.theme";
const DEFAULT_SETTINGS = { think: true, context_length: "", prefill_chunk: "", accuracy_level: "3", max_tokens: "" };

const state = {
  chats: [],            // every chat, most recently updated first
  current: null,        // the chat on screen (null: a new, unsaved one)
  status: null,         // last /api/status answer
  statusError: null,    // last /api/status failure
  generation: null,     // {chat, msg, controller} while an answer streams
  attachments: [],      // documents attached to the message being written
  settings: loadSettings(),
  md: null,             // markdown module once loaded
};
const msgEls = new Map(); // message id → its <article>

function loadSettings() {
  try {
    const s = JSON.parse(localStorage.getItem(SETTINGS_KEY) || "{}");
    return { ...DEFAULT_SETTINGS, ...s };
  } catch (_) {
    return { ...DEFAULT_SETTINGS };
  }
}

function saveSettings() {
  try {
    localStorage.setItem(SETTINGS_KEY, JSON.stringify(state.settings));
  } catch (e) {
    showError(`Cannot save the settings in this browser: ${e.message}`);
  }
}

// ---------------------------------------------------------------- banners

function showError(text) {
  $(".text", el.errorBanner).textContent = text;
  el.errorBanner.hidden = false;
}

function clearError() {
  el.errorBanner.hidden = true;
  $(".text", el.errorBanner).textContent = "";
}

function showComposerError(text) {
  el.composerError.textContent = text;
  el.composerError.hidden = !text;
}

// ---------------------------------------------------------------- theme

function applyTheme() {
  let pref = "auto";
  try {
    pref = localStorage.getItem(THEME_KEY) || "auto";
  } catch (_) { /* private mode: follow the system */ }
  const dark = pref === "dark" || (pref === "auto" && matchMedia("(prefers-color-scheme: dark)").matches);
  document.documentElement.dataset.theme = dark ? "dark" : "light";
  $("#hl-light").media = dark ? "not all" : "all";
  $("#hl-dark").media = dark ? "all" : "not all";
  setIcon(el.theme, pref === "auto" ? "auto" : pref === "dark" ? "moon" : "sun");
  el.theme.title = `Theme: ${pref === "auto" ? "follows the system" : pref} (click to change)`;
}

function cycleTheme() {
  let pref = "auto";
  try {
    pref = localStorage.getItem(THEME_KEY) || "auto";
    const next = { auto: "light", light: "dark", dark: "auto" }[pref] || "auto";
    localStorage.setItem(THEME_KEY, next);
  } catch (e) {
    showError(`Cannot save the theme in this browser: ${e.message}`);
  }
  applyTheme();
}

// ---------------------------------------------------------------- chat list

function renderChatList() {
  el.chatList.replaceChildren();
  if (state.chats.length === 0) {
    const p = document.createElement("p");
    p.className = "muted small chat-list-empty";
    p.textContent = "No chats yet.";
    el.chatList.append(p);
    return;
  }
  for (const chat of state.chats) {
    const item = document.createElement("div");
    item.className = "chat-item" + (state.current && state.current.id === chat.id ? " active" : "");
    item.dataset.id = chat.id;
    const open = document.createElement("button");
    open.type = "button";
    open.className = "chat-open";
    open.title = chat.title;
    const t = document.createElement("span");
    t.className = "chat-name";
    t.textContent = chat.title;
    open.append(t);
    if (state.generation && state.generation.chat.id === chat.id) {
      const dot = document.createElement("span");
      dot.className = "live-dot";
      dot.title = "Answering…";
      open.append(dot);
    }
    open.addEventListener("click", () => selectChat(chat.id));
    open.addEventListener("dblclick", () => startRename(item, chat));
    const actions = document.createElement("span");
    actions.className = "chat-actions";
    const ren = document.createElement("button");
    ren.type = "button";
    ren.className = "icon-btn";
    ren.dataset.action = "rename";
    ren.title = "Rename";
    ren.setAttribute("aria-label", `Rename ${chat.title}`);
    setIcon(ren, "pencil");
    ren.addEventListener("click", () => startRename(item, chat));
    const del = document.createElement("button");
    del.type = "button";
    del.className = "icon-btn";
    del.dataset.action = "delete";
    del.title = "Delete";
    del.setAttribute("aria-label", `Delete ${chat.title}`);
    setIcon(del, "trash");
    del.addEventListener("click", () => removeChat(chat));
    actions.append(ren, del);
    item.append(open, actions);
    el.chatList.append(item);
  }
}

function startRename(item, chat) {
  if (item.querySelector("input")) return;
  const input = document.createElement("input");
  input.className = "chat-rename-input";
  input.value = chat.title;
  input.maxLength = 200;
  input.setAttribute("aria-label", "New name");
  const open = item.querySelector(".chat-open");
  open.hidden = true;
  item.classList.add("renaming");
  item.prepend(input);
  input.focus();
  input.select();
  let finished = false;
  const finish = async (save) => {
    if (finished) return;
    finished = true;
    const name = input.value.trim();
    const changed = save && name !== "" && name !== chat.title;
    if (changed) {
      chat.title = name;
      chat.renamed = true;
      chat.updated = Date.now();
    }
    renderChatList();
    renderTitle();
    if (changed && await saveChat(chat)) renderChatList();
  };
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter") { e.preventDefault(); finish(true); }
    if (e.key === "Escape") { e.preventDefault(); finish(false); }
  });
  input.addEventListener("blur", () => finish(true));
}

function confirmDialog(title, text, okLabel) {
  el.confirmTitle.textContent = title;
  el.confirmText.textContent = text;
  $("#confirm-ok").textContent = okLabel;
  return new Promise((resolve) => {
    const onClose = () => {
      el.confirm.removeEventListener("close", onClose);
      resolve(el.confirm.returnValue === "ok");
    };
    el.confirm.returnValue = "";
    el.confirm.addEventListener("close", onClose);
    el.confirm.showModal();
    $("#confirm-cancel").focus();
  });
}

async function removeChat(chat) {
  const ok = await confirmDialog("Delete chat?", `“${chat.title}” and its ${chat.messages.length} messages will be removed from this browser.`, "Delete");
  if (!ok) return;
  // An answer still streaming into it is stopped, and its last save skipped.
  chat.deleted = true;
  if (state.generation && state.generation.chat.id === chat.id) state.generation.controller.abort();
  try {
    await store.deleteChat(chat.id);
  } catch (e) {
    delete chat.deleted;
    showError(`Cannot delete the chat: ${e.message}`);
    return;
  }
  state.chats = state.chats.filter((c) => c.id !== chat.id);
  if (state.current && state.current.id === chat.id) state.current = null;
  renderChatList();
  renderChat();
}

async function saveChat(chat) {
  if (chat.deleted) return false;
  try {
    await store.putChat(chat);
  } catch (e) {
    showError(`Cannot save the chat in this browser (IndexedDB): ${e.message}`);
    return false;
  }
  if (!state.chats.includes(chat)) state.chats.unshift(chat);
  state.chats.sort((a, b) => b.updated - a.updated);
  return true;
}

function selectChat(id) {
  const chat = state.chats.find((c) => c.id === id) || null;
  state.current = chat;
  try {
    if (chat) sessionStorage.setItem("nebula.current", chat.id);
    else sessionStorage.removeItem("nebula.current");
  } catch (_) { /* not needed to work */ }
  renderChatList();
  renderChat();
  if (matchMedia("(max-width: 800px)").matches) el.app.classList.remove("sidebar-open");
  el.prompt.focus();
}

function newChat() {
  state.current = null;
  try { sessionStorage.removeItem("nebula.current"); } catch (_) { /* ignore */ }
  renderChatList();
  renderChat();
  el.prompt.focus();
}

// ---------------------------------------------------------------- messages

function renderTitle() {
  const t = state.current ? state.current.title : "New chat";
  el.title.textContent = t;
  document.title = state.current ? `${t} · Nebula` : "Nebula";
  el.exportChat.disabled = !state.current || state.current.messages.length === 0;
}

function renderChat() {
  renderTitle();
  msgEls.clear();
  for (const a of el.messages.querySelectorAll(".msg")) a.remove();
  const msgs = state.current ? state.current.messages : [];
  el.empty.hidden = msgs.length > 0;
  for (const m of msgs) {
    const a = createMessageEl(m);
    el.messages.append(a);
    updateMessageEl(m);
  }
  updateRegenerate();
  el.messages.scrollTop = el.messages.scrollHeight;
}

function createMessageEl(m) {
  const a = el.msgTemplate.content.firstElementChild.cloneNode(true);
  a.classList.add(m.role === "user" ? "user" : "assistant");
  a.dataset.id = m.id;
  a.dataset.role = m.role;
  $(".role", a).textContent = m.role === "user" ? "You" : "Nebula";
  $(".avatar", a).textContent = m.role === "user" ? "You" : "";
  applyIcons(a);
  $('[data-action="copy"]', a).addEventListener("click", (e) => copyMessage(m, e.currentTarget));
  $('[data-action="regenerate"]', a).addEventListener("click", () => regenerate());
  // Only the user's clicks decide whether a finished thinking section stays open.
  const details = $(".thinking", a);
  $("summary", details).addEventListener("click", () => { m.thinkingOpen = !details.open; });
  msgEls.set(m.id, a);
  return a;
}

function renderMarkdownInto(target, text) {
  if (state.md) {
    target.innerHTML = state.md.renderMarkdown(text);
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

function updateMessageEl(m) {
  const a = msgEls.get(m.id);
  if (!a) return;
  const body = $(".msg-body", a);
  const files = $(".msg-files", a);
  if (m.role === "user") {
    body.className = "msg-body plain";
    body.textContent = m.content;
    body.hidden = m.content === "";
    files.replaceChildren(...(m.attachments || []).map((f) => fileChip(f, null)));
  } else {
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
    body.className = "msg-body md";
    if (m.content) {
      renderMarkdownInto(body, m.content);
    } else if (live && !m.reasoning) {
      body.innerHTML = '<span class="typing"><i></i><i></i><i></i></span>';
    } else {
      body.textContent = "";
    }
    body.hidden = body.childNodes.length === 0;
    let st = "";
    if (live) st = m.waiting || "";
    else if (m.stopped) st = m.interrupted ? "interrupted" : "stopped";
    else if (m.finish_reason === "length") st = "cut at the token limit";
    else if (!m.error && !m.content && m.reasoning) st = "no answer after the thinking";
    $(".msg-state", a).textContent = st;
    const err = $(".msg-error", a);
    err.hidden = !m.error;
    err.textContent = m.error || "";
    const stats = $(".stats", a);
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
        (m.model ? ` · model ${m.model}` : "")
      : "";
    $(".msg-foot", a).hidden = live;
  }
}

function fileChip(f, onRemove) {
  const chip = document.createElement("span");
  chip.className = "file-chip";
  chip.title = `${f.name} · ${fmtSize(f.size)}`;
  const ic = document.createElement("span");
  setIcon(ic, "file");
  const name = document.createElement("span");
  name.className = "file-name";
  name.textContent = f.name;
  const size = document.createElement("span");
  size.className = "muted small";
  size.textContent = fmtSize(f.size);
  chip.append(ic, name, size);
  if (onRemove) {
    const x = document.createElement("button");
    x.type = "button";
    x.className = "icon-btn small";
    x.setAttribute("aria-label", `Remove ${f.name}`);
    setIcon(x, "x");
    x.addEventListener("click", onRemove);
    chip.append(x);
  }
  return chip;
}

function fmtSize(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(n < 10240 ? 1 : 0)} KiB`;
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}

function updateRegenerate() {
  const msgs = state.current ? state.current.messages : [];
  const last = msgs[msgs.length - 1];
  for (const [id, a] of msgEls) {
    const b = $('[data-action="regenerate"]', a);
    b.hidden = !(last && last.role === "assistant" && last.id === id && !state.generation);
  }
}

let renderQueued = new Set();
function scheduleRender(m) {
  if (renderQueued.size === 0) {
    requestAnimationFrame(() => {
      const stick = nearBottom();
      for (const x of renderQueued) updateMessageEl(x);
      renderQueued = new Set();
      if (stick) el.messages.scrollTop = el.messages.scrollHeight;
    });
  }
  renderQueued.add(m);
}

function nearBottom() {
  const m = el.messages;
  return m.scrollHeight - m.scrollTop - m.clientHeight < 120;
}

// ---------------------------------------------------------------- copy

async function copyText(text, button) {
  try {
    if (navigator.clipboard && window.isSecureContext) {
      await navigator.clipboard.writeText(text);
    } else {
      const ta = document.createElement("textarea");
      ta.value = text;
      ta.setAttribute("readonly", "");
      ta.className = "offscreen";
      document.body.append(ta);
      ta.select();
      const ok = document.execCommand("copy");
      ta.remove();
      if (!ok) throw new Error("the browser refused to copy");
    }
  } catch (e) {
    showError(`Cannot copy to the clipboard: ${e.message}`);
    return;
  }
  if (button) {
    const prev = button.dataset.icon;
    setIcon(button, "check");
    button.classList.add("done");
    setTimeout(() => { setIcon(button, prev); button.classList.remove("done"); }, 1500);
  }
}

function copyMessage(m, button) {
  const text = m.role === "user" ? composeUserContent(m.content, m.attachments) : m.content || m.reasoning || "";
  copyText(text, button);
}

// ---------------------------------------------------------------- attachments

async function addFiles(fileList) {
  const errors = [];
  for (const f of fileList) {
    if (f.size > MAX_ATTACHMENT_BYTES) {
      errors.push(`“${f.name}” is ${fmtSize(f.size)}: documents can be at most ${fmtSize(MAX_ATTACHMENT_BYTES)} each.`);
      continue;
    }
    let text;
    try {
      const buf = await f.arrayBuffer();
      text = new TextDecoder("utf-8", { fatal: true }).decode(buf);
    } catch (e) {
      errors.push(`“${f.name}” is not UTF-8 text: only text documents (.txt, .md, source code) can be attached.`);
      continue;
    }
    if (text.includes("\u0000")) {
      errors.push(`“${f.name}” looks binary (it contains NUL bytes): only text documents can be attached.`);
      continue;
    }
    if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
    state.attachments.push({ name: f.name, size: f.size, text });
  }
  showComposerError(errors.join(" "));
  renderAttachments();
}

function renderAttachments() {
  el.attachments.replaceChildren(...state.attachments.map((f, i) => fileChip(f, () => {
    state.attachments.splice(i, 1);
    renderAttachments();
  })));
  el.attachments.hidden = state.attachments.length === 0;
}

// ---------------------------------------------------------------- options

const CONTEXT_STEPS = [512, 1024, 2048, 4096, 8192, 16384, 24576, 32768, 65536, 131072, 262144];
const PREFILL_STEPS = [64, 128, 256, 512, 1024, 2048, 4096, 8192];
const MAX_TOKEN_STEPS = [16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768];

function modelContext() {
  const s = state.status;
  if (!s) return null;
  const n = (s.model && s.model.context_length) || (s.limits && s.limits.context_length);
  return Number.isInteger(n) && n > 0 ? n : null;
}

function maxPrefillChunk() {
  const n = state.status && state.status.limits && state.status.limits.max_prefill_chunk;
  return Number.isInteger(n) && n > 0 ? n : null;
}

function fillSelect(select, options, value) {
  select.replaceChildren(...options.map(([v, label]) => {
    const o = document.createElement("option");
    o.value = v;
    o.textContent = label;
    return o;
  }));
  select.value = options.some(([v]) => v === value) ? value : "";
}

function renderOptions() {
  const max = modelContext();
  const s = state.settings;
  el.think.checked = !!s.think;
  const ctx = [["", max ? `model's (${max.toLocaleString("en")})` : "model's"]];
  for (const n of CONTEXT_STEPS) if (!max || n <= max) ctx.push([String(n), n.toLocaleString("en")]);
  if (max && !CONTEXT_STEPS.includes(max)) ctx.push([String(max), max.toLocaleString("en")]);
  fillSelect(el.context, ctx, s.context_length);
  const limit = Number(s.context_length) || max;
  // The server caps a request's prefill_chunk at its own (--chunk): larger
  // values would change nothing, so they are not offered.
  const maxChunk = maxPrefillChunk();
  const pre = [["", maxChunk ? `default (${maxChunk})` : "default"]];
  for (const n of PREFILL_STEPS) if (!maxChunk || n <= maxChunk) pre.push([String(n), String(n)]);
  fillSelect(el.prefill, pre, s.prefill_chunk);
  el.accuracy.value = ["1", "2", "3"].includes(s.accuracy_level) ? s.accuracy_level : "3";
  const mt = [["", "auto"]];
  for (const n of MAX_TOKEN_STEPS) if (!limit || n < limit) mt.push([String(n), n.toLocaleString("en")]);
  fillSelect(el.maxTokens, mt, s.max_tokens);
}

function readOptions() {
  state.settings = {
    think: el.think.checked,
    context_length: el.context.value,
    prefill_chunk: el.prefill.value,
    accuracy_level: el.accuracy.value,
    max_tokens: el.maxTokens.value,
  };
  saveSettings();
  renderOptions();
}

// ---------------------------------------------------------------- server status

let statusTimer = null;
let statusInFlight = null;

async function pollStatus() {
  clearTimeout(statusTimer);
  if (statusInFlight) return statusInFlight;
  statusInFlight = (async () => {
    try {
      const ctl = new AbortController();
      const t = setTimeout(() => ctl.abort(), 5000);
      try {
        state.status = await fetchStatus(ctl.signal);
      } finally {
        clearTimeout(t);
      }
      state.statusError = null;
    } catch (e) {
      state.statusError = e.name === "AbortError" ? new ApiError("GET /api/status timed out after 5 s") : e;
    } finally {
      statusInFlight = null;
    }
    renderStatus();
    const phase = state.status && !state.statusError ? state.status.phase : null;
    const fast = phase !== "ready" || (state.generation && !state.generation.firstToken);
    statusTimer = setTimeout(pollStatus, fast ? 1000 : 10000);
  })();
  return statusInFlight;
}

function renderStatus() {
  const s = state.status;
  const e = state.statusError;
  const pill = el.serverStatus;
  const text = $(".text", pill);
  if (e) {
    pill.dataset.state = "error";
    text.textContent = "Server unreachable";
    pill.title = e.message;
    el.loading.hidden = true;
    showStatusError(e.message);
    return;
  }
  showStatusError("");
  if (!s) return;
  const model = s.model || {};
  const phase = s.phase || "unknown";
  pill.dataset.state = phase;
  const name = model.id || "model";
  text.textContent = phase === "ready" ? `${name} · ready` : `${name} · ${phase}`;
  const q = s.queue || {};
  const workers = (s.workers || []).map((w) => `${w.role}: ${w.state}${w.restarts ? ` (${w.restarts} restarts)` : ""}`).join(", ");
  pill.title = [
    model.path ? `model file: ${model.path}` : "",
    model.context_length ? `context: ${model.context_length} tokens` : "",
    workers ? `workers: ${workers}` : "",
    q.capacity != null ? `queue: ${q.running || 0} running, ${q.waiting || 0} waiting of ${q.capacity}` : "",
    s.message || "",
  ].filter(Boolean).join("\n");

  // The demo model: say plainly what it is.
  if (model.demo) {
    el.demoNotice.textContent = model.notice ||
      "This is Nebula's demo model: tiny random weights. Its answers are noise; it only shows that everything works.";
    el.demoNotice.hidden = false;
  } else {
    el.demoNotice.hidden = true;
  }

  const loading = phase === "loading" || phase === "starting";
  el.loading.hidden = !loading;
  if (loading) {
    const p = typeof s.progress === "number" ? Math.max(0, Math.min(1, s.progress)) : 0;
    el.loadingPhase.textContent = phase === "starting" ? "Starting the engine…" : `Loading ${name} into memory…`;
    el.loadingPct.textContent = `${Math.round(p * 100)}%`;
    el.loadingBar.style.width = `${(p * 100).toFixed(1)}%`;
    el.loading.querySelector(".progress").setAttribute("aria-valuenow", String(Math.round(p * 100)));
    el.loadingMessage.textContent = s.message || "The first start reads the weights into RAM and VRAM; answers start once this is done.";
  }
  if (phase === "error") {
    showStatusError(`The engine reports an error: ${s.message || "no details"} (see coordinator.log in the state directory)`);
  }
  renderOptionsIfContextChanged();
}

let lastLimits = "";
function renderOptionsIfContextChanged() {
  const key = `${modelContext()}/${maxPrefillChunk()}`;
  if (key !== lastLimits) {
    lastLimits = key;
    renderOptions();
  }
}

// Status problems have their own line in the banner so that they clear
// themselves once the server answers again.
let statusErrorShown = "";
function showStatusError(text) {
  if (text) {
    statusErrorShown = text;
    showError(text);
  } else if (statusErrorShown && $(".text", el.errorBanner).textContent === statusErrorShown) {
    statusErrorShown = "";
    clearError();
  }
}

// Resolves once /api/status says ready; rejects on phase error or abort.
async function waitUntilReady(signal, onWait) {
  for (;;) {
    if (signal.aborted) throw new DOMException("aborted", "AbortError");
    const s = state.status;
    if (state.statusError || !s || s.phase === "ready" || !s.phase) return;
    if (s.phase === "error") throw new ApiError(`The engine failed to start: ${s.message || "no details"}`);
    onWait(s);
    await new Promise((r) => setTimeout(r, 500));
    await pollStatus();
  }
}

// ---------------------------------------------------------------- generation

function setGenerating(on) {
  el.send.hidden = on;
  el.stop.hidden = !on;
  renderChatList();
  updateRegenerate();
}

// The messages as the API gets them: user turns with their documents,
// assistant turns without their thinking (the template drops it anyway),
// failed or empty answers left out.
// A user turn whose answer failed with nothing written (e.g. a 400 for a
// prompt over the context) is left out too, or every later request would
// fail the same way; the turn being answered is always sent.
function requestMessages(chat, upTo) {
  const msgs = chat.messages.slice(0, upTo);
  const out = [];
  msgs.forEach((m, i) => {
    const next = msgs[i + 1];
    if (m.role === "user") {
      if (next && next.role === "assistant" && next.error && !next.content) return;
      out.push({ role: "user", content: composeUserContent(m.content, m.attachments) });
    } else if (m.content) {
      out.push({ role: "assistant", content: m.content });
    }
  });
  return out;
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
  return body;
}

async function generate(chat) {
  const msg = {
    id: store.newId(), role: "assistant", content: "", reasoning: "", created: Date.now(), pending: true,
  };
  chat.messages.push(msg);
  chat.updated = Date.now();
  const controller = new AbortController();
  const gen = { chat, msg, controller, firstToken: false };
  state.generation = gen;
  if (state.current === chat) {
    el.empty.hidden = true;
    el.messages.append(createMessageEl(msg));
    updateMessageEl(msg);
    el.messages.scrollTop = el.messages.scrollHeight;
  }
  setGenerating(true);
  await saveChat(chat);

  const body = requestBody(chat, chat.messages.length - 1);
  const limit = state.status && state.status.limits && state.status.limits.max_body_bytes;
  const size = new TextEncoder().encode(JSON.stringify(body)).length;

  const t0 = performance.now();
  let tFirst = null;
  let pieces = 0;
  let lastSave = Date.now();
  try {
    if (limit && size > limit) {
      throw new ApiError(`This conversation with its documents is ${fmtSize(size)}; the server accepts at most ${fmtSize(limit)} per request. Remove a document or start a new chat.`);
    }
    // A 503 model_not_ready (the engine restarted, or it loads on the first
    // request) waits for the model once more and retries.
    let res;
    for (let attempt = 0; ; attempt++) {
      await waitUntilReady(controller.signal, (s) => {
        msg.waiting = `waiting for the model to load (${Math.round((s.progress || 0) * 100)}%)…`;
        scheduleRender(msg);
      });
      msg.waiting = "sending…";
      scheduleRender(msg);
      pollStatus(); // a first request may make the engine load: show it
      try {
        res = await streamChat(body, {
          signal: controller.signal,
          onFirstByte: () => { msg.waiting = "waiting for the first token…"; scheduleRender(msg); },
          onKeepAlive: () => {
            const secs = Math.round((performance.now() - t0) / 1000);
            msg.waiting = `queued or reading the prompt… ${secs} s`;
            scheduleRender(msg);
          },
          onDelta: ({ content, reasoning }) => {
            if (tFirst === null) {
              tFirst = performance.now();
              gen.firstToken = true;
              msg.waiting = "";
            }
            pieces++;
            msg.content += content;
            msg.reasoning += reasoning;
            scheduleRender(msg);
            if (Date.now() - lastSave > 2000) {
              lastSave = Date.now();
              saveChat(chat);
            }
          },
        });
        break;
      } catch (e) {
        if (attempt > 0 || !(e instanceof ApiError) || e.status !== 503 || e.code !== "model_not_ready") throw e;
        await pollStatus();
      }
    }
    const tEnd = performance.now();
    msg.finish_reason = res.finish_reason;
    msg.model = res.model;
    if (res.nebula) msg.nebula = res.nebula;
    msg.stats = statsFrom(res.timings, res.usage, t0, tFirst, tEnd, pieces);
  } catch (e) {
    const tEnd = performance.now();
    if (e && e.name === "AbortError") {
      msg.stopped = true;
      if (tFirst !== null) msg.stats = statsFrom(null, null, t0, tFirst, tEnd, pieces);
    } else {
      msg.error = e && e.message ? e.message : String(e);
      if (!(e instanceof ApiError)) console.error(e);
    }
  } finally {
    delete msg.pending;
    delete msg.waiting;
    state.generation = null;
    chat.updated = Date.now();
    await saveChat(chat);
    setGenerating(false);
    if (state.current === chat) {
      updateMessageEl(msg);
      if (nearBottom()) el.messages.scrollTop = el.messages.scrollHeight;
    }
    pollStatus();
  }
}

function statsFrom(timings, usage, t0, tFirst, tEnd, pieces) {
  if (timings && (typeof timings.tokens_per_s === "number" || typeof timings.ttft_ms === "number")) {
    return {
      tokens_per_s: timings.tokens_per_s,
      ttft_ms: timings.ttft_ms,
      completion_tokens: timings.completion_tokens ?? (usage ? usage.completion_tokens : undefined),
      prompt_tokens: timings.prompt_tokens ?? (usage ? usage.prompt_tokens : undefined),
      queue_ms: timings.queue_ms,
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
    measured: true,
  };
}

async function send() {
  if (state.generation) return;
  const text = el.prompt.value;
  if (text.trim() === "" && state.attachments.length === 0) {
    el.prompt.focus();
    return;
  }
  showComposerError("");
  let chat = state.current;
  if (!chat) {
    chat = { id: store.newId(), title: titleFromText(text || state.attachments[0].name), created: Date.now(), updated: Date.now(), messages: [] };
    state.current = chat;
    state.chats.unshift(chat);
    try { sessionStorage.setItem("nebula.current", chat.id); } catch (_) { /* ignore */ }
  }
  const user = { id: store.newId(), role: "user", content: text, attachments: state.attachments, created: Date.now() };
  chat.messages.push(user);
  if (!chat.renamed && chat.messages.length === 1) chat.title = titleFromText(text || user.attachments[0].name);
  state.attachments = [];
  renderAttachments();
  el.prompt.value = "";
  autosize();
  if (state.current === chat) {
    el.empty.hidden = true;
    el.messages.append(createMessageEl(user));
    updateMessageEl(user);
  }
  renderTitle();
  await generate(chat);
}

async function regenerate() {
  const chat = state.current;
  if (!chat || state.generation) return;
  const last = chat.messages[chat.messages.length - 1];
  if (!last || last.role !== "assistant") return;
  chat.messages.pop();
  const a = msgEls.get(last.id);
  if (a) a.remove();
  msgEls.delete(last.id);
  await generate(chat);
}

function stop() {
  if (state.generation) state.generation.controller.abort();
}

// ---------------------------------------------------------------- export

function exportChat() {
  const chat = state.current;
  if (!chat) return;
  const model = state.status && state.status.model ? state.status.model.id : "";
  const md = chatToMarkdown(chat, { model });
  const blob = new Blob([md], { type: "text/markdown;charset=utf-8" });
  const url = URL.createObjectURL(blob);
  const a = document.createElement("a");
  a.href = url;
  a.download = exportFileName(chat);
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

// ---------------------------------------------------------------- composer

function autosize() {
  el.prompt.style.height = "auto";
  el.prompt.style.height = Math.min(el.prompt.scrollHeight, window.innerHeight * 0.4) + "px";
}

function wire() {
  applyIcons(document);
  el.newChat.addEventListener("click", newChat);
  el.theme.addEventListener("click", cycleTheme);
  matchMedia("(prefers-color-scheme: dark)").addEventListener("change", applyTheme);
  el.toggleSidebar.addEventListener("click", () => {
    el.app.classList.toggle(matchMedia("(max-width: 800px)").matches ? "sidebar-open" : "sidebar-hidden");
  });
  el.exportChat.addEventListener("click", exportChat);
  // Narrow screens: a tap beside the sliding chat list closes it.
  $(".main").addEventListener("click", (e) => {
    if (el.app.classList.contains("sidebar-open") && e.target !== el.toggleSidebar && !el.toggleSidebar.contains(e.target)) {
      el.app.classList.remove("sidebar-open");
    }
  }, true);
  $(".close", el.errorBanner).addEventListener("click", clearError);
  el.composer.addEventListener("submit", (e) => { e.preventDefault(); send(); });
  el.stop.addEventListener("click", stop);
  el.prompt.addEventListener("input", autosize);
  el.prompt.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      send();
    }
  });
  el.attach.addEventListener("click", () => el.fileInput.click());
  el.fileInput.addEventListener("change", async () => {
    await addFiles([...el.fileInput.files]);
    el.fileInput.value = "";
  });
  for (const s of [el.think, el.context, el.prefill, el.accuracy, el.maxTokens]) s.addEventListener("change", readOptions);

  // Documents dropped anywhere on the conversation.
  const main = $(".main");
  main.addEventListener("dragover", (e) => {
    if (e.dataTransfer && [...e.dataTransfer.types].includes("Files")) {
      e.preventDefault();
      main.classList.add("dropping");
    }
  });
  main.addEventListener("dragleave", (e) => { if (e.target === main || !main.contains(e.relatedTarget)) main.classList.remove("dropping"); });
  main.addEventListener("drop", (e) => {
    main.classList.remove("dropping");
    if (e.dataTransfer && e.dataTransfer.files.length) {
      e.preventDefault();
      addFiles([...e.dataTransfer.files]);
    }
  });

  document.addEventListener("keydown", (e) => {
    if (e.key === "Escape" && state.generation && !el.confirm.open) {
      e.preventDefault();
      stop();
    } else if (e.altKey && !e.ctrlKey && !e.metaKey && (e.key === "n" || e.key === "N")) {
      e.preventDefault();
      newChat();
    } else if (e.key === "/" && !["INPUT", "TEXTAREA", "SELECT"].includes(document.activeElement.tagName)) {
      e.preventDefault();
      el.prompt.focus();
    }
  });
  window.addEventListener("beforeunload", (e) => {
    if (state.generation) e.preventDefault();
  });
}

// ---------------------------------------------------------------- start

async function loadMarkdown() {
  try {
    const md = await import("./markdown.js");
    await md.loadLanguages();
    state.md = md;
  } catch (e) {
    showError(`Markdown rendering is unavailable (web/vendor/ is missing or broken: run make web): ${e.message}. Answers are shown as plain text.`);
  }
}

async function loadChats() {
  try {
    state.chats = await store.listChats();
  } catch (e) {
    showError(`Cannot read the saved chats (IndexedDB): ${e.message}`);
    state.chats = [];
    return;
  }
  // An answer that was streaming when the page went away is incomplete.
  for (const c of state.chats) {
    let changed = false;
    for (const m of c.messages) {
      if (m.pending) {
        delete m.pending;
        delete m.waiting;
        m.stopped = true;
        m.interrupted = true;
        changed = true;
      }
    }
    if (changed) await saveChat(c);
  }
  let id = null;
  try { id = sessionStorage.getItem("nebula.current"); } catch (_) { /* ignore */ }
  state.current = state.chats.find((c) => c.id === id) || null;
}

async function main() {
  applyTheme();
  wire();
  renderOptions();
  renderAttachments();
  await Promise.all([loadMarkdown(), loadChats()]);
  renderChatList();
  renderChat();
  pollStatus();
  el.prompt.focus();
  document.documentElement.dataset.ready = "1";
}

main();
