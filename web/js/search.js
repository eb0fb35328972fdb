// search.js — the search box above the chat list: the list shows only the
// chats whose title or messages contain every word typed.
//
// The words are kept in state.search and the list filtered by chatlist.js
// (chatformat.js chatMatches: case- and accent-insensitive, titles, system
// prompts, messages and documents' names); every chat is in memory already,
// so each keystroke filters at once.  Esc in the box clears it.
import { el } from "./dom.js";
import { state } from "./state.js";
import { renderChatList } from "./chatlist.js";

function setSearch(text) {
  state.search = text;
  renderChatList();
}

export function wireSearch() {
  el.chatSearch.addEventListener("input", () => setSearch(el.chatSearch.value));
  el.chatSearch.addEventListener("keydown", (e) => {
    if (e.key === "Escape" && el.chatSearch.value !== "") {
      e.preventDefault();
      el.chatSearch.value = "";
      setSearch("");
    }
  });
}
