// composer.js — the message box at the bottom: typing, and sending with
// Enter or the Send button.
//
// Sending turns what the box holds (text and state.attachments) into a user
// message of the chat on screen, creating and naming the chat first if it
// is a new one, empties the box, and hands the chat to generate()
// (generation.js), which answers it.  Nothing is sent while an answer
// streams: generation.js shows Stop in place of Send until it is over.
import { el } from "./dom.js";
import { state } from "./state.js";
import * as store from "./store.js";
import { titleFromText } from "./chatformat.js";
import { renderAttachments, showComposerError } from "./attachments.js";
import { appendMessage, renderTitle } from "./messages.js";
import { rememberCurrent } from "./chatlist.js";
import { generate } from "./generation.js";
import { settingsError } from "./settings.js";

async function send() {
  if (state.generation) return;
  const text = el.prompt.value;
  if (text.trim() === "" && state.attachments.length === 0) {
    el.prompt.focus();
    return;
  }
  const bad = settingsError();
  if (bad) {
    showComposerError(bad);
    return;
  }
  showComposerError("");
  let chat = state.current;
  if (!chat) {
    chat = {
      id: store.newId(), title: titleFromText(text || state.attachments[0].name), created: Date.now(), updated: Date.now(),
      messages: [], system: state.draftSystem ?? state.settings.system,
    };
    state.draftSystem = null;
    state.current = chat;
    state.chats.unshift(chat);
    rememberCurrent(chat);
  }
  const user = { id: store.newId(), role: "user", content: text, attachments: state.attachments, created: Date.now() };
  chat.messages.push(user);
  if (!chat.renamed && chat.messages.length === 1) chat.title = titleFromText(text || user.attachments[0].name);
  state.attachments = [];
  renderAttachments();
  el.prompt.value = "";
  autosize();
  if (state.current === chat) appendMessage(user);
  renderTitle();
  await generate(chat);
}

// The box grows with its text, up to 40% of the window.
function autosize() {
  el.prompt.style.height = "auto";
  el.prompt.style.height = Math.min(el.prompt.scrollHeight, window.innerHeight * 0.4) + "px";
}

export function wireComposer() {
  el.composer.addEventListener("submit", (e) => { e.preventDefault(); send(); });
  el.prompt.addEventListener("input", autosize);
  el.prompt.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      send();
    }
  });
}
