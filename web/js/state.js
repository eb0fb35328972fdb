// state.js — what the page's modules share: the chats, the server's state,
// the answer being generated, the composer's documents and settings.
//
// One plain object, read and written directly by the modules that need it
// (no getters, no change notifications): whoever changes a field redraws
// what shows it.  What a single module keeps for itself (the status poll's
// timer, the message elements on screen) stays private to that module.
// Where each field is kept beyond the page's lifetime: chats in IndexedDB
// (store.js), settings in localStorage (settings.js); the rest lives only
// here.

export const state = {
  chats: [],          // every chat, most recently updated first (chatlist.js loads and saves them)
  current: null,      // the chat on screen (null: a new, unsaved one)
  status: null,       // last /api/status answer (status.js)
  statusError: null,  // last /api/status failure, an ApiError (status.js)
  generation: null,   // {chat, msg, controller, firstToken} while an answer streams (generation.js)
  attachments: [],    // documents attached to the message being written: {name, size, text}
  settings: null,     // the composer's options (settings.js loads them at start)
  search: "",         // the chat list's search words (search.js; chatlist.js shows the chats that match)
  draftSystem: null,  // the system prompt typed for a new, unsaved chat (null: the default; sysprompt.js)
};
