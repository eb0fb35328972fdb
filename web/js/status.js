// status.js — the server's state: /api/status polled, the status dot at the
// bottom of the sidebar, and what follows from it (the loading bar, the demo
// notice, the option lists, status failures in the banner).
//
// One poll at a time: pollStatus called while one is in flight returns that
// one, so the callers that need a fresh answer (a request about to go out)
// can simply await it.  It polls every second while the model is not ready
// or an answer waits for its first token, every 2 s otherwise, so that an
// engine that died shows within 2 s (a failed request polls at once:
// generation.js); every 10 s while the page is hidden, and at once when it
// shows again.  A status failure it put in the banner is taken down again
// once the server answers.
import { $, el } from "./dom.js";
import { state } from "./state.js";
import { ApiError, fetchStatus } from "./api.js";
import { showError, clearError, shownError, renderDemoNotice, renderLoading, hideLoading } from "./banners.js";
import { renderOptionsIfLimitsChanged } from "./settings.js";
import { renderMeter } from "./meter.js";

// What this module keeps for itself.
const poll = {
  timer: null,      // the next poll (setTimeout)
  inFlight: null,   // the poll under way, a promise
  errorShown: "",   // the status failure this module put in the banner
};

export async function pollStatus() {
  clearTimeout(poll.timer);
  if (poll.inFlight) return poll.inFlight;
  poll.inFlight = (async () => {
    try {
      const ctl = new AbortController();
      const t = setTimeout(() => ctl.abort(), 5000);
      try {
        state.status = await fetchStatus(ctl.signal);
      } finally {
        clearTimeout(t);
      }
      state.statusError = null;
    } catch (e) {
      state.statusError = e.name === "AbortError" ? new ApiError("GET /api/status timed out after 5 s") : e;
    } finally {
      poll.inFlight = null;
    }
    renderStatus();
    const phase = state.status && !state.statusError ? state.status.phase : null;
    const fast = phase !== "ready" || (state.generation && !state.generation.firstToken);
    poll.timer = setTimeout(pollStatus, fast ? 1000 : document.hidden ? 10000 : 2000);
  })();
  return poll.inFlight;
}

function renderStatus() {
  const s = state.status;
  const e = state.statusError;
  const pill = el.serverStatus;
  const text = $(".text", pill);
  if (e) {
    pill.dataset.state = "error";
    text.textContent = "Server unreachable";
    pill.title = e.message;
    hideLoading();
    showStatusError(e.message);
    return;
  }
  showStatusError("");
  if (!s) return;
  const model = s.model || {};
  const phase = s.phase || "unknown";
  pill.dataset.state = phase;
  const name = model.id || "model";
  text.textContent = phase === "ready" ? `${name} · ready` : `${name} · ${phase}`;
  const q = s.queue || {};
  const workers = (s.workers || []).map((w) => `${w.role}: ${w.state}${w.restarts ? ` (${w.restarts} restarts)` : ""}`).join(", ");
  pill.title = [
    model.path ? `model file: ${model.path}` : "",
    model.context_length ? `context: ${model.context_length} tokens` : "",
    workers ? `workers: ${workers}` : "",
    q.capacity != null ? `queue: ${q.running || 0} running, ${q.waiting || 0} waiting of ${q.capacity}` : "",
    s.message || "",
  ].filter(Boolean).join("\n");

  renderDemoNotice(model);
  renderLoading(s, name);
  if (phase === "error") {
    showStatusError(`The engine reports an error: ${s.message || "no details"} (see coordinator.log in the state directory)`);
  }
  renderOptionsIfLimitsChanged();
  renderMeter();
}

export function wireStatus() {
  document.addEventListener("visibilitychange", () => { if (!document.hidden) pollStatus(); });
}

// Status problems have their own line in the banner so that they clear
// themselves once the server answers again.
function showStatusError(text) {
  if (text) {
    poll.errorShown = text;
    showError(text);
  } else if (poll.errorShown && shownError() === poll.errorShown) {
    poll.errorShown = "";
    clearError();
  }
}

// Resolves once /api/status says ready; rejects on phase error or abort.
export async function waitUntilReady(signal, onWait) {
  for (;;) {
    if (signal.aborted) throw new DOMException("aborted", "AbortError");
    const s = state.status;
    if (state.statusError || !s || s.phase === "ready" || !s.phase) return;
    if (s.phase === "error") throw new ApiError(`The engine failed to start: ${s.message || "no details"}`);
    onWait(s);
    await new Promise((r) => setTimeout(r, 500));
    await pollStatus();
  }
}
