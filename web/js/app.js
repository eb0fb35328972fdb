// app.js — Nebula's chat page: starts it, and wires the keyboard shortcuts.
//
// The page is split by what the user sees, one module each (docs/WEBUI.md
// has the map): the chat list, the messages, the composer, the settings,
// the server status, the banners, ...  Each exports a wireX() that attaches
// its own event listeners; this module calls them, loads what the page
// needs (saved chats, the markdown renderer) and draws it once.  It is the
// only module that imports every other one, and none imports it.
import { el } from "./dom.js";
import { state } from "./state.js";
import { applyIcons } from "./icons.js";
import { wireBanners } from "./banners.js";
import { applyTheme, wireTheme } from "./theme.js";
import { loadSettings, renderOptions, wireSettings } from "./settings.js";
import { renderAttachments, wireAttachments } from "./attachments.js";
import { loadMarkdown, renderChat } from "./messages.js";
import { loadChats, newChat, renderChatList, wireChatList } from "./chatlist.js";
import { pollStatus, wireStatus } from "./status.js";
import { stop, wireGeneration } from "./generation.js";
import { wireComposer } from "./composer.js";
import { wireExport } from "./export.js";
import { wireSearch } from "./search.js";
import { renderSystemPanel, wireSystemPanel } from "./sysprompt.js";
import { wireChatOps } from "./chatops.js";

// Esc stops the answer, Alt+N starts a new chat, / goes to the message box.
function wireKeys() {
  document.addEventListener("keydown", (e) => {
    // A control that handles Esc itself (the rename box) has called preventDefault.
    if (e.key === "Escape" && state.generation && !el.confirm.open && !e.defaultPrevented) {
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
}

async function main() {
  state.settings = loadSettings();
  applyTheme();
  applyIcons(document);
  wireChatList();
  wireTheme();
  wireExport();
  wireBanners();
  wireComposer();
  wireGeneration();
  wireAttachments();
  wireSettings();
  wireKeys();
  wireStatus();
  wireSearch();
  wireSystemPanel();
  wireChatOps();
  renderOptions();
  renderAttachments();
  await Promise.all([loadMarkdown(), loadChats()]);
  renderChatList();
  renderChat();
  renderSystemPanel();
  pollStatus();
  el.prompt.focus();
  document.documentElement.dataset.ready = "1";
}

main();
