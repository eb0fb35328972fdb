// chatlist.js — the sidebar: the list of chats (open, rename, delete), New
// chat, showing and hiding the list; and the chats' loading and saving.
//
// state.chats is the list, most recently updated first, and every change to a
// chat goes through saveChat, which writes it to IndexedDB (store.js) and
// keeps that order.  A chat being deleted is marked `deleted` first, so that
// an answer still streaming into it cannot save it back.  Which chat is on
// screen survives a reload through sessionStorage (nebula.current).
import { el } from "./dom.js";
import { state } from "./state.js";
import * as store from "./store.js";
import { showError } from "./banners.js";
import { setIcon } from "./icons.js";
import { renderChat, renderTitle } from "./messages.js";
import { countOf, chatMatches } from "./chatformat.js";

const CURRENT_KEY = "nebula.current";
const narrow = () => matchMedia("(max-width: 800px)").matches;

// The chats that match the search (state.search, search.js), or all.
export function renderChatList() {
  el.chatList.replaceChildren();
  const shown = state.chats.filter((c) => chatMatches(c, state.search));
  if (shown.length === 0) {
    const p = document.createElement("p");
    p.className = "muted small chat-list-empty";
    p.textContent = state.chats.length === 0 ? "No chats yet." : `No chat matches “${state.search.trim()}”.`;
    el.chatList.append(p);
    return;
  }
  for (const chat of shown) el.chatList.append(chatItem(chat));
}

function chatItem(chat) {
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
  const ren = actionButton("rename", "Rename", "pencil", chat);
  ren.addEventListener("click", () => startRename(item, chat));
  const del = actionButton("delete", "Delete", "trash", chat);
  del.addEventListener("click", () => removeChat(chat));
  actions.append(ren, del);
  item.append(open, actions);
  return item;
}

function actionButton(action, label, icon, chat) {
  const b = document.createElement("button");
  b.type = "button";
  b.className = "icon-btn";
  b.dataset.action = action;
  b.title = label;
  b.setAttribute("aria-label", `${label} ${chat.title}`);
  setIcon(b, icon);
  return b;
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

// The page's one dialog (#confirm-dialog): resolves true if the user confirmed.
function confirmDialog(title, text, okLabel) {
  el.confirmTitle.textContent = title;
  el.confirmText.textContent = text;
  el.confirmOk.textContent = okLabel;
  return new Promise((resolve) => {
    const onClose = () => {
      el.confirm.removeEventListener("close", onClose);
      resolve(el.confirm.returnValue === "ok");
    };
    el.confirm.returnValue = "";
    el.confirm.addEventListener("close", onClose);
    el.confirm.showModal();
    el.confirmCancel.focus();
  });
}

async function removeChat(chat) {
  const ok = await confirmDialog("Delete chat?", `“${chat.title}” and its ${countOf(chat.messages.length, "message")} will be removed from this browser.`, "Delete");
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

// Writes chat to IndexedDB and puts it in the list; false (and the banner) if
// it could not be saved.
export async function saveChat(chat) {
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

// Remembers which chat is on screen (null: a new one) for a reload of this tab.
export function rememberCurrent(chat) {
  try {
    if (chat) sessionStorage.setItem(CURRENT_KEY, chat.id);
    else sessionStorage.removeItem(CURRENT_KEY);
  } catch (_) { /* not needed to work */ }
}

export function selectChat(id) {
  const chat = state.chats.find((c) => c.id === id) || null;
  state.current = chat;
  rememberCurrent(chat);
  renderChatList();
  renderChat();
  if (narrow()) el.app.classList.remove("sidebar-open");
  el.prompt.focus();
}

export function newChat() {
  state.current = null;
  state.draftSystem = null;
  rememberCurrent(null);
  renderChatList();
  renderChat();
  el.prompt.focus();
}

// At start: the saved chats, and the one this tab showed before a reload.
export async function loadChats() {
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
  try { id = sessionStorage.getItem(CURRENT_KEY); } catch (_) { /* ignore */ }
  state.current = state.chats.find((c) => c.id === id) || null;
}

export function wireChatList() {
  el.newChat.addEventListener("click", newChat);
  el.toggleSidebar.addEventListener("click", () => {
    el.app.classList.toggle(narrow() ? "sidebar-open" : "sidebar-hidden");
  });
  // Narrow screens: a tap beside the sliding chat list closes it.
  el.main.addEventListener("click", (e) => {
    if (el.app.classList.contains("sidebar-open") && e.target !== el.toggleSidebar && !el.toggleSidebar.contains(e.target)) {
      el.app.classList.remove("sidebar-open");
    }
  }, true);
}
