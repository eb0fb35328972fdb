// dom.js — the page's elements, looked up once by id.
//
// index.html is the one description of the page's structure; every module
// reaches its part of it through `el` (the table below) rather than through
// its own selectors, so a renamed id breaks in one place.  Modules are
// deferred scripts: by the time this runs, the document is parsed.

export const $ = (sel, root = document) => root.querySelector(sel);

export const el = {
  app: $("#app"),
  toggleSidebar: $("#toggle-sidebar"),
  theme: $("#theme"),
  hlLight: $("#hl-light"),
  hlDark: $("#hl-dark"),
  newChat: $("#new-chat"),
  chatList: $("#chat-list"),
  serverStatus: $("#server-status"),
  main: $(".main"),
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
  confirmOk: $("#confirm-ok"),
  confirmCancel: $("#confirm-cancel"),
  msgTemplate: $("#msg-template"),
};
