// theme.js — light or dark: the button next to the name and the page's colours.
//
// The choice (auto, light, dark) is kept in localStorage under nebula.theme;
// "auto" follows the system's prefers-color-scheme and changes with it.  The
// theme is one attribute on <html> (style.css keys its colours on it) plus
// which of the two highlight.js style sheets applies.
import { el } from "./dom.js";
import { showError } from "./banners.js";
import { setIcon } from "./icons.js";

const THEME_KEY = "nebula.theme";

export function applyTheme() {
  let pref = "auto";
  try {
    pref = localStorage.getItem(THEME_KEY) || "auto";
  } catch (_) { /* private mode: follow the system */ }
  const dark = pref === "dark" || (pref === "auto" && matchMedia("(prefers-color-scheme: dark)").matches);
  document.documentElement.dataset.theme = dark ? "dark" : "light";
  el.hlLight.media = dark ? "not all" : "all";
  el.hlDark.media = dark ? "all" : "not all";
  setIcon(el.theme, pref === "auto" ? "auto" : pref === "dark" ? "moon" : "sun");
  el.theme.title = `Theme: ${pref === "auto" ? "follows the system" : pref} (click to change)`;
}

function cycleTheme() {
  let pref = "auto";
  try {
    pref = localStorage.getItem(THEME_KEY) || "auto";
    const next = { auto: "light", light: "dark", dark: "auto" }[pref] || "auto";
    localStorage.setItem(THEME_KEY, next);
  } catch (e) {
    showError(`Cannot save the theme in this browser: ${e.message}`);
  }
  applyTheme();
}

export function wireTheme() {
  el.theme.addEventListener("click", cycleTheme);
  matchMedia("(prefers-color-scheme: dark)").addEventListener("change", applyTheme);
}
