// sysprompt.js — the system prompt panel under the top bar: the chat's own
// system prompt, and the default that new chats start with.
//
// A chat keeps its system prompt in chat.system (generation.js sends it as
// the first message of every request of the chat); a new chat takes the
// default (state.settings.system, kept with the options in localStorage)
// when it is created.  While the chat on screen is a new, unsaved one, what
// is typed waits in state.draftSystem and becomes the chat's when its first
// message is sent (composer.js).  "Use for new chats" makes the text the
// default.
import { el } from "./dom.js";
import { state } from "./state.js";
import { saveSettings } from "./settings.js";
import { saveChat } from "./chatlist.js";

// What the panel shows: the chat's system prompt, or for a new chat the
// draft, else the default.
function shownText() {
  if (state.current) return state.current.system || "";
  return state.draftSystem ?? state.settings.system;
}

// Redraws the panel and the button's state from the chat on screen.
export function renderSystemPanel() {
  if (document.activeElement !== el.systemPrompt) el.systemPrompt.value = shownText();
  el.systemScope.textContent = state.current ? "this chat" : "the new chat";
  const d = state.settings.system;
  el.systemDefaultNote.textContent = d ? `New chats start with: “${d.length > 60 ? d.slice(0, 59) + "…" : d}”` : "New chats start with none.";
  const has = shownText().trim() !== "";
  el.systemToggle.classList.toggle("active", has);
  el.systemToggle.title = has ? "The system prompt of this chat (set)" : "The system prompt of this chat (none)";
}

async function edited() {
  const text = el.systemPrompt.value;
  if (!state.current) {
    state.draftSystem = text;
  } else if ((state.current.system || "") !== text) {
    state.current.system = text;
    state.current.updated = Date.now();
    await saveChat(state.current);
  }
  renderSystemPanel();
}

export function wireSystemPanel() {
  el.systemToggle.addEventListener("click", () => {
    el.systemPanel.hidden = !el.systemPanel.hidden;
    el.systemToggle.setAttribute("aria-expanded", String(!el.systemPanel.hidden));
    if (!el.systemPanel.hidden) el.systemPrompt.focus();
  });
  el.systemPrompt.addEventListener("change", edited);
  el.systemPrompt.addEventListener("blur", edited);
  el.systemSaveDefault.addEventListener("click", async () => {
    await edited();
    state.settings.system = el.systemPrompt.value;
    saveSettings();
    renderSystemPanel();
  });
  // Another chat on screen (chatlist.js redraws the messages and says so).
  el.messages.addEventListener("nebula:chat-shown", renderSystemPanel);
}
