// banners.js — the strip at the top of the conversation: the demo model's
// notice, the loading progress bar and the red error banner.
//
// Each is a fixed element of index.html that is only shown, hidden or given
// new text, never created.  The error banner holds one message, the latest:
// whatever fails outside a message (storage, status, clipboard, missing
// vendor files) calls showError, and the user dismisses it or a later
// success clears it (status.js clears the failures it raised itself).
import { $, el } from "./dom.js";

export function showError(text) {
  $(".text", el.errorBanner).textContent = text;
  el.errorBanner.hidden = false;
}

export function clearError() {
  el.errorBanner.hidden = true;
  $(".text", el.errorBanner).textContent = "";
}

// The text the error banner shows now ("" when none).
export function shownError() {
  return $(".text", el.errorBanner).textContent;
}

// The demo model: say plainly what it is.
export function renderDemoNotice(model) {
  if (model.demo) {
    el.demoNotice.textContent = model.notice ||
      "This is Nebula's demo model: tiny random weights. Its answers are noise; it only shows that everything works.";
    el.demoNotice.hidden = false;
  } else {
    el.demoNotice.hidden = true;
  }
}

// The progress bar, shown while /api/status says starting or loading:
// s is that answer, name the model's.
export function renderLoading(s, name) {
  const phase = s.phase || "unknown";
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
}

export function hideLoading() {
  el.loading.hidden = true;
}

export function wireBanners() {
  $(".close", el.errorBanner).addEventListener("click", clearError);
}
