// meter.js — the context meter in the top bar: how much of the context the
// chat on screen uses, "1,234 / 4,096 tokens", with a bar.
//
// Both numbers are the server's: the used part is what it counted for the
// chat's last answer (usage.prompt_tokens + completion_tokens, kept in the
// message's stats: chatformat.js contextUsed), the length is the request's
// context (the Context option) or else the model's (/api/status
// model.context_length).  A chat without a counted answer shows no meter.
// It is redrawn with the title, after each answer and each status answer.
import { el } from "./dom.js";
import { state } from "./state.js";
import { contextUsed } from "./chatformat.js";

function contextLength() {
  const chosen = Number(state.settings && state.settings.context_length);
  if (chosen > 0) return chosen;
  const s = state.status;
  const n = s && ((s.model && s.model.context_length) || (s.limits && s.limits.context_length));
  return Number.isInteger(n) && n > 0 ? n : null;
}

export function renderMeter() {
  const box = el.contextMeter;
  const used = state.current ? contextUsed(state.current) : null;
  const total = contextLength();
  box.hidden = used === null || !total;
  if (box.hidden) return;
  const fmt = (n) => n.toLocaleString("en");
  const frac = Math.min(1, used / total);
  el.contextMeterText.textContent = `${fmt(used)} / ${fmt(total)} tokens`;
  el.contextMeterFill.style.width = `${(100 * frac).toFixed(1)}%`;
  box.dataset.level = frac >= 0.9 ? "full" : frac >= 0.7 ? "high" : "ok";
  box.setAttribute("aria-valuenow", String(used));
  box.setAttribute("aria-valuemax", String(total));
  box.title = `Context: ${fmt(used)} of ${fmt(total)} tokens used by this chat (the server's count for the last answer: ` +
    `prompt + answer; the next message adds to it)`;
}
