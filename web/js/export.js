// export.js — the Export .md button: the chat on screen downloaded as Markdown.
//
// The text is built by chatformat.js (pure, tested under node); this module
// only hands it to the browser as a download, through a Blob URL and a
// temporary <a download>: nothing is sent anywhere.
import { el } from "./dom.js";
import { state } from "./state.js";
import { chatToMarkdown, exportFileName } from "./chatformat.js";

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

export function wireExport() {
  el.exportChat.addEventListener("click", exportChat);
}
