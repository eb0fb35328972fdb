// chatops.js — what can be done to a chat at one of its messages: edit a
// user message and send it again (the answers after it are replaced), and
// fork the chat there (a new chat with the messages up to it).
//
// Both start from a button of the message (messages.js sends its click up as
// a "nebula:edit" or "nebula:fork" event with the message's id, which this
// module hears on #messages).  Editing happens in place: the message's text
// becomes a box with Send and Cancel; sending cuts the chat after the
// message, saves it and has generation.js answer it again.  A fork is a
// copy, new ids and all, so that the two chats never share a message
// object; it opens at once.  Nothing happens while an answer streams.
import { $, el } from "./dom.js";
import { state } from "./state.js";
import * as store from "./store.js";
import { titleFromText } from "./chatformat.js";
import { messageElement, renderChat } from "./messages.js";
import { renderChatList, saveChat, selectChat } from "./chatlist.js";
import { generate } from "./generation.js";

function located(id) {
  const chat = state.current;
  const i = chat ? chat.messages.findIndex((m) => m.id === id) : -1;
  return i < 0 || state.generation ? null : { chat, i, m: chat.messages[i] };
}

function button(kind, action, text, title) {
  const b = document.createElement("button");
  b.type = "button";
  b.className = `btn ${kind} small`;
  b.dataset.edit = action;
  b.textContent = text;
  b.title = title;
  return b;
}

function startEdit(id) {
  const at = located(id);
  const a = messageElement(id);
  if (!at || at.m.role !== "user" || !a || $(".msg-edit", a)) return;
  const body = $(".msg-body", a);
  const box = document.createElement("div");
  box.className = "msg-edit";
  const text = document.createElement("textarea");
  text.className = "msg-edit-text";
  text.value = at.m.content;
  text.rows = Math.min(12, Math.max(2, at.m.content.split("\n").length));
  text.setAttribute("aria-label", "Edit the message");
  const actions = document.createElement("div");
  actions.className = "msg-edit-actions";
  const send = button("primary", "send", "Send", "Send the edited message (Enter); the answers after it are replaced");
  const cancel = button("ghost", "cancel", "Cancel", "Leave the message as it was (Esc)");
  actions.append(send, cancel);
  box.append(text, actions);
  body.hidden = true;
  body.after(box);
  text.focus();
  const close = () => {
    box.remove();
    body.hidden = at.m.content === "";
  };
  const submit = () => {
    if (text.value.trim() === "" && !(at.m.attachments && at.m.attachments.length)) return text.focus();
    close();
    resend(at.chat, at.m, text.value);
  };
  send.addEventListener("click", submit);
  cancel.addEventListener("click", close);
  text.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); submit(); }
    if (e.key === "Escape") { e.preventDefault(); close(); }
  });
}

// The chat cut after message m, m's text replaced, and answered again.
async function resend(chat, m, text) {
  if (state.generation || state.current !== chat) return;
  const i = chat.messages.indexOf(m);
  if (i < 0) return;
  m.content = text;
  m.edited = Date.now();
  chat.messages = chat.messages.slice(0, i + 1);
  if (i === 0 && !chat.renamed) chat.title = titleFromText(text || (m.attachments[0] && m.attachments[0].name));
  chat.updated = Date.now();
  renderChat();
  renderChatList();
  await generate(chat);
}

// A new chat holding copies of chat's messages up to and including message id.
async function fork(id) {
  const at = located(id);
  if (!at) return;
  const { chat, i } = at;
  const now = Date.now();
  const messages = structuredClone(chat.messages.slice(0, i + 1)).map((m) => {
    delete m.pending;
    delete m.waiting;
    delete m.prefill;
    return { ...m, id: store.newId() };
  });
  const copy = {
    id: store.newId(), title: `${chat.title} (fork)`, created: now, updated: now, messages,
    system: chat.system || "", forkedFrom: chat.id,
  };
  if (!(await saveChat(copy))) return;
  selectChat(copy.id);
}

export function wireChatOps() {
  el.messages.addEventListener("nebula:edit", (e) => startEdit(e.detail.id));
  el.messages.addEventListener("nebula:fork", (e) => fork(e.detail.id));
}
