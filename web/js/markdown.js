// markdown.js — model output → safe HTML: marked (GFM) renders, highlight.js
// colours fenced code, DOMPurify removes anything active (scripts, event
// handlers, javascript: links, forms) before the HTML reaches the page.
//
// Model output is untrusted input: a prompt can make a model write any HTML.
// Sanitising happens last, on the final HTML, so nothing the renderer or the
// highlighter produced can bypass it.  The packages come from web/vendor/
// (make web); messages.js imports this module dynamically and falls back to
// plain text, with a visible error, if they are missing.
import { Marked } from "../vendor/marked.esm.js";
import DOMPurify from "../vendor/purify.es.mjs";
import hljs from "../vendor/highlight/core.js";
import { LANGUAGES } from "../vendor/highlight/languages.js";

const ALIASES = {
  sh: "bash", zsh: "bash", console: "bash", js: "javascript", mjs: "javascript", jsx: "javascript",
  ts: "typescript", tsx: "typescript", py: "python", rb: "ruby", rs: "rust", "c++": "cpp", cc: "cpp",
  h: "c", hpp: "cpp", cs: "csharp", html: "xml", svg: "xml", yml: "yaml", md: "markdown", kt: "kotlin",
  cu: "cpp", cuh: "cpp", txt: "plaintext", text: "plaintext", asm: "x86asm", tex: "latex", hs: "haskell",
};

export async function loadLanguages() {
  const mods = await Promise.all(LANGUAGES.map((l) => import(`../vendor/highlight/languages/${l}.js`)));
  mods.forEach((m, i) => hljs.registerLanguage(LANGUAGES[i], m.default));
}

function escapeHtml(s) {
  return s.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

export function languageFor(name) {
  const l = (name || "").toLowerCase();
  const lang = ALIASES[l] || l;
  return hljs.getLanguage(lang) ? lang : null;
}

const marked = new Marked({
  gfm: true,
  breaks: false,
  renderer: {
    code({ text, lang }) {
      const name = (lang || "").trim().split(/\s+/)[0];
      const language = languageFor(name);
      let body;
      if (language) {
        body = hljs.highlight(text, { language, ignoreIllegals: true }).value;
      } else {
        body = escapeHtml(text);
      }
      const label = escapeHtml(name || "text");
      return `<pre class="code-block" data-lang="${label}"><code class="hljs${language ? " language-" + language : ""}">${body}</code></pre>\n`;
    },
  },
});

// Links from a model open in a new tab and carry no referrer.
DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A" && node.hasAttribute("href")) {
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer nofollow");
  }
});

const PURIFY = {
  USE_PROFILES: { html: true },
  FORBID_TAGS: ["style", "form", "input", "button", "textarea", "select", "iframe", "object", "embed"],
  FORBID_ATTR: ["style"],
  ADD_ATTR: ["target"],
};

// Markdown text → sanitised HTML string.
export function renderMarkdown(text) {
  const html = marked.parse(text || "", { async: false });
  return DOMPurify.sanitize(html, PURIFY);
}

// Highlighted, escaped HTML of a whole source file (attachment preview).
export function highlightFile(text, lang) {
  const language = languageFor(lang);
  const html = language ? hljs.highlight(text, { language, ignoreIllegals: true }).value : escapeHtml(text);
  return DOMPurify.sanitize(html, PURIFY);
}
