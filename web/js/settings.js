// settings.js — the composer's options under the message box: thinking,
// context, prefill chunk, accuracy, the longest answer, temperature, top-p
// and seed; and the default system prompt of new chats (set from the system
// prompt panel, sysprompt.js).
//
// state.settings holds the values as the controls give them (strings, ""
// meaning "send none"), kept in localStorage under nebula.settings.v1.  The
// choices offered depend on the server (the model's context, its prefill
// chunk from /api/status), so the lists are rebuilt whenever those limits
// change, keeping the chosen value where it is still offered.
import { el } from "./dom.js";
import { state } from "./state.js";
import { showError } from "./banners.js";
import { renderMeter } from "./meter.js";

const SETTINGS_KEY = "nebula.settings.v1";
// "" sends nothing: the server's own default (docs/API.md).
const DEFAULT_SETTINGS = {
  think: true, context_length: "", prefill_chunk: "", accuracy_level: "3", max_tokens: "",
  temperature: "", top_p: "", seed: "", system: "",
};

const CONTEXT_STEPS = [512, 1024, 2048, 4096, 8192, 16384, 24576, 32768, 65536, 131072, 262144];
const PREFILL_STEPS = [64, 128, 256, 512, 1024, 2048, 4096, 8192];
const MAX_TOKEN_STEPS = [16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768];
const TEMPERATURE_STEPS = ["0", "0.2", "0.4", "0.6", "0.7", "0.8", "1.0", "1.2", "1.5", "2.0"];
const TOP_P_STEPS = ["0.5", "0.7", "0.8", "0.9", "0.95", "1.0"];
// The API takes seeds up to 2^64 - 1; the page offers whole numbers below 2^53 (exact in JSON).
const SEED_RE = /^\d{1,15}$/;

// The server limits the option lists were last built for, "context/chunk".
const built = { limits: "" };

// The saved settings over the defaults (the defaults alone when none are saved).
export function loadSettings() {
  try {
    const s = { ...DEFAULT_SETTINGS, ...JSON.parse(localStorage.getItem(SETTINGS_KEY) || "{}") };
    for (const k of ["temperature", "top_p", "seed", "system"]) if (typeof s[k] !== "string") s[k] = "";
    return s;
  } catch (_) {
    return { ...DEFAULT_SETTINGS };
  }
}

export function saveSettings() {
  try {
    localStorage.setItem(SETTINGS_KEY, JSON.stringify(state.settings));
  } catch (e) {
    showError(`Cannot save the settings in this browser: ${e.message}`);
  }
}

function modelContext() {
  const s = state.status;
  if (!s) return null;
  const n = (s.model && s.model.context_length) || (s.limits && s.limits.context_length);
  return Number.isInteger(n) && n > 0 ? n : null;
}

function maxPrefillChunk() {
  const n = state.status && state.status.limits && state.status.limits.max_prefill_chunk;
  return Number.isInteger(n) && n > 0 ? n : null;
}

function fillSelect(select, options, value) {
  select.replaceChildren(...options.map(([v, label]) => {
    const o = document.createElement("option");
    o.value = v;
    o.textContent = label;
    return o;
  }));
  select.value = options.some(([v]) => v === value) ? value : "";
}

export function renderOptions() {
  const max = modelContext();
  const s = state.settings;
  el.think.checked = !!s.think;
  const ctx = [["", max ? `model's (${max.toLocaleString("en")})` : "model's"]];
  for (const n of CONTEXT_STEPS) if (!max || n <= max) ctx.push([String(n), n.toLocaleString("en")]);
  if (max && !CONTEXT_STEPS.includes(max)) ctx.push([String(max), max.toLocaleString("en")]);
  fillSelect(el.context, ctx, s.context_length);
  // A saved value the server no longer offers (a smaller model's context, a
  // lower --chunk) is shown as the default, so the default is what is sent.
  s.context_length = el.context.value;
  const limit = Number(s.context_length) || max;
  // The server caps a request's prefill_chunk at its own (--chunk): larger
  // values would change nothing, so they are not offered.
  const maxChunk = maxPrefillChunk();
  const pre = [["", maxChunk ? `default (${maxChunk})` : "default"]];
  for (const n of PREFILL_STEPS) if (!maxChunk || n <= maxChunk) pre.push([String(n), String(n)]);
  fillSelect(el.prefill, pre, s.prefill_chunk);
  el.accuracy.value = ["1", "2", "3"].includes(s.accuracy_level) ? s.accuracy_level : "3";
  const mt = [["", "auto"]];
  for (const n of MAX_TOKEN_STEPS) if (!limit || n < limit) mt.push([String(n), n.toLocaleString("en")]);
  fillSelect(el.maxTokens, mt, s.max_tokens);
  fillSelect(el.temperature, [["", "server's"], ...TEMPERATURE_STEPS.map((v) => [v, v])], s.temperature);
  fillSelect(el.topP, [["", "server's"], ...TOP_P_STEPS.map((v) => [v, v])], s.top_p);
  el.seed.value = s.seed;
  s.prefill_chunk = el.prefill.value;
  s.max_tokens = el.maxTokens.value;
  s.accuracy_level = el.accuracy.value;
  s.temperature = el.temperature.value;
  s.top_p = el.topP.value;
  renderMeter();
}

// Why the options cannot be sent as they are ("" when they can): a seed
// that is not a whole number.
export function settingsError() {
  const seed = state.settings.seed.trim();
  return seed === "" || SEED_RE.test(seed) ? "" : `The seed must be a whole number of at most 15 digits (or empty for none), not “${seed}”.`;
}

// The request fields the options give; those left at their default are absent.
export function samplingFields() {
  const s = state.settings;
  const out = {};
  if (s.temperature !== "") out.temperature = Number(s.temperature);
  if (s.top_p !== "") out.top_p = Number(s.top_p);
  if (s.seed.trim() !== "" && SEED_RE.test(s.seed.trim())) out.seed = Number(s.seed.trim());
  return out;
}

// After each /api/status answer: rebuilds the lists if the limits changed.
export function renderOptionsIfLimitsChanged() {
  const key = `${modelContext()}/${maxPrefillChunk()}`;
  if (key !== built.limits) {
    built.limits = key;
    renderOptions();
  }
}

function readOptions() {
  state.settings = {
    ...state.settings,
    think: el.think.checked,
    context_length: el.context.value,
    prefill_chunk: el.prefill.value,
    accuracy_level: el.accuracy.value,
    max_tokens: el.maxTokens.value,
    temperature: el.temperature.value,
    top_p: el.topP.value,
    seed: el.seed.value.trim(),
  };
  saveSettings();
  renderOptions();
}

export function wireSettings() {
  for (const s of [el.think, el.context, el.prefill, el.accuracy, el.maxTokens, el.temperature, el.topP, el.seed]) {
    s.addEventListener("change", readOptions);
  }
  el.seed.addEventListener("input", () => {
    el.seed.setCustomValidity(el.seed.value.trim() === "" || SEED_RE.test(el.seed.value.trim()) ? "" : "a whole number, or empty");
  });
}
