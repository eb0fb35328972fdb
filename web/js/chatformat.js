// chatformat.js — the text the page builds from a chat: the user message with
// its attached documents and the request's messages (what the model sees),
// the Markdown export (what the user downloads), chat titles, the search,
// the context used, and the speed and size figures it shows.
// Pure functions, no DOM, so that they read the same in the browser and in a
// test under node.

// Attached documents: one file at most this size (the whole request must also
// fit the server's body limit, checked when sending).
export const MAX_ATTACHMENT_BYTES = 256 * 1024;

const EXT_LANG = {
  c: "c", h: "c", cc: "cpp", cpp: "cpp", cxx: "cpp", hpp: "cpp", hh: "cpp", cu: "cpp", cuh: "cpp",
  py: "python", js: "javascript", mjs: "javascript", cjs: "javascript", ts: "typescript", tsx: "typescript",
  jsx: "javascript", rs: "rust", go: "go", java: "java", kt: "kotlin", rb: "ruby", php: "php", pl: "perl",
  lua: "lua", sh: "bash", bash: "bash", zsh: "bash", sql: "sql", swift: "swift", cs: "csharp", r: "r",
  scala: "scala", hs: "haskell", json: "json", yaml: "yaml", yml: "yaml", toml: "ini", ini: "ini",
  cfg: "ini", conf: "ini", xml: "xml", html: "xml", htm: "xml", svg: "xml", css: "css", md: "markdown",
  markdown: "markdown", tex: "latex", cmake: "cmake", diff: "diff", patch: "diff", s: "x86asm",
  asm: "x86asm", txt: "text", log: "text", csv: "text", tsv: "text",
};

// The fence language for a file name ("" when unknown).
export function langForFile(name) {
  const base = (name || "").toLowerCase().split("/").pop();
  if (base === "makefile" || base === "gnumakefile") return "makefile";
  if (base === "dockerfile") return "dockerfile";
  if (base === "cmakelists.txt") return "cmake";
  const dot = base.lastIndexOf(".");
  if (dot <= 0) return "";
  return EXT_LANG[base.slice(dot + 1)] || "";
}

// A backtick fence longer than any backtick run inside text, so a document
// that itself contains ``` cannot close the block early.
export function fenceFor(text) {
  let longest = 0;
  for (const m of (text || "").matchAll(/`+/g)) longest = Math.max(longest, m[0].length);
  return "`".repeat(Math.max(3, longest + 1));
}

export function fencedFile(name, text) {
  const fence = fenceFor(text);
  const body = text.endsWith("\n") ? text : text + "\n";
  return `File: ${name}\n${fence}${langForFile(name)}\n${body}${fence}`;
}

// What the model receives for a user turn: the typed text, then each
// attached document in a fenced block headed by its file name.
export function composeUserContent(text, attachments = []) {
  const parts = [];
  if (text && text.trim() !== "") parts.push(text);
  for (const a of attachments) parts.push(fencedFile(a.name, a.text));
  return parts.join("\n\n");
}

// A line of Markdown as plain text, for a title: links and images keep their
// text, code spans their code; headings' #, quotes' >, list bullets,
// emphasis (** __ * _ ~~) and stray backticks go.
export function plainInline(line) {
  return line
    .replace(/!\[([^\]]*)\]\([^)]*\)/g, "$1")      // ![alt](src)
    .replace(/\[([^\]]*)\]\([^)]*\)/g, "$1")       // [text](href)
    .replace(/<(https?:[^>]+)>/g, "$1")               // <https://…>
    .replace(/<\/?[a-z][^>]*>/gi, "")                // inline HTML tags
    .replace(/^\s{0,3}(?:#{1,6}\s+|>\s*|[-*+]\s+(?:\[[ xX]\]\s+)?|\d+[.)]\s+)/, "") // heading, quote, bullet
    .replace(/\s+#+\s*$/, "")                       // a closing ### of a heading
    .replace(/`+([^`]*)`+/g, "$1")                   // `code`
    .replace(/(\*\*|__|~~)(?=\S)([^]*?\S)\1/g, "$2")  // **bold**, __bold__, ~~struck~~
    .replace(/(^|[^\w*])[*_](?=\S)([^*_]*?\S)[*_](?=[^\w*]|$)/g, "$1$2") // *em*, _em_
    .replace(/\*\*|`+|~~/g, "")                       // what is left unpaired
    .replace(/\s+/g, " ")
    .trim();
}

// The messages as the API gets them: the chat's system prompt first (when
// it has one), user turns with their documents, assistant turns without
// their thinking (the template drops it anyway) but with their tool calls,
// tool results as role:"tool".  An answer that is only thinking (or was
// stopped before its first word) is still an assistant turn — content "",
// its reasoning_content beside it — so that two user turns never follow each
// other.  A failed answer with nothing written is left out, and so is its
// user turn (e.g. a 400 for a prompt over the context), or every later
// request would fail the same way; the turn being answered is always sent.
export function requestMessages(chat, upTo) {
  const msgs = chat.messages.slice(0, upTo);
  const out = [];
  if (chat.system && chat.system.trim() !== "") out.push({ role: "system", content: chat.system });
  msgs.forEach((m, i) => {
    const next = msgs[i + 1];
    const failedEmpty = (a) => a.error && !a.content && !a.reasoning && !(a.tool_calls && a.tool_calls.length);
    if (m.role === "user") {
      if (next && next.role === "assistant" && failedEmpty(next)) return;
      out.push({ role: "user", content: composeUserContent(m.content, m.attachments) });
    } else if (m.role === "tool") {
      out.push({ role: "tool", content: m.content || "", ...(m.tool_call_id ? { tool_call_id: m.tool_call_id } : {}) });
    } else if (!failedEmpty(m)) {
      const turn = { role: "assistant", content: m.content || "" };
      if (!m.content && m.reasoning) turn.reasoning_content = m.reasoning;
      if (m.tool_calls && m.tool_calls.length) {
        turn.tool_calls = m.tool_calls.map((c) => ({ id: c.id, type: c.type || "function", function: { ...c.function } }));
      }
      out.push(turn);
    }
  });
  return out;
}

// A chat's title from its first message: the first line with text, as plain
// text (no Markdown), at most 48 characters.
export function titleFromText(text) {
  const lines = (text || "").split("\n").filter((l) => !/^\s*(```|~~~|[-*_=]{3,}\s*$)/.test(l));
  const line = lines.map(plainInline).find((l) => l !== "") || "";
  if (line === "") return "New chat";
  return line.length > 48 ? line.slice(0, 47).trimEnd() + "…" : line;
}

// Does the chat match the search?  Every word of the query (case- and
// accent-insensitive) must appear in its title or in one of its messages
// (typed text, documents' names, answers).  An empty query matches all.
export function chatMatches(chat, query) {
  const fold = (t) => (t || "").normalize("NFKD").replace(/[\u0300-\u036f]/g, "").toLowerCase();
  const words = fold(query).split(/\s+/).filter(Boolean);
  if (words.length === 0) return true;
  const hay = [chat.title, chat.system, ...chat.messages.flatMap((m) => [m.content, ...(m.attachments || []).map((a) => a.name)])]
    .map(fold).join("\n");
  return words.every((w) => hay.includes(w));
}

// The context a chat uses, from the server's count for its last answer:
// the prompt it read plus the tokens it wrote (what the next request starts
// from, before the new message).  null when no answer has a count yet.
export function contextUsed(chat) {
  for (let i = chat.messages.length - 1; i >= 0; i--) {
    const st = chat.messages[i].stats;
    if (chat.messages[i].role === "assistant" && st && typeof st.prompt_tokens === "number") {
      return st.prompt_tokens + (typeof st.completion_tokens === "number" ? st.completion_tokens : 0);
    }
  }
  return null;
}

export function formatStats(stats) {
  if (!stats) return "";
  const parts = [];
  const approx = stats.measured ? "≈" : "";
  if (typeof stats.tokens_per_s === "number" && isFinite(stats.tokens_per_s) && stats.tokens_per_s > 0) {
    parts.push(`${approx}${stats.tokens_per_s.toFixed(1)} tok/s`);
  }
  if (typeof stats.ttft_ms === "number" && isFinite(stats.ttft_ms)) {
    parts.push(`TTFT ${approx}${stats.ttft_ms < 10000 ? Math.round(stats.ttft_ms) + " ms" : (stats.ttft_ms / 1000).toFixed(1) + " s"}`);
  }
  // The prompt cache (the server's timings.prompt_cached): prompt tokens resumed from a checkpoint, not evaluated again.
  if (typeof stats.prompt_cached === "number" && stats.prompt_cached > 0) parts.push(`${stats.prompt_cached} cached`);
  // tokens_approx: counted from the stream's pieces, not by the server (generation.js).
  if (typeof stats.completion_tokens === "number") parts.push(`${stats.tokens_approx ? "≈" : ""}${countOf(stats.completion_tokens, "token")}`);
  // Speculative decoding (the server's timings.speculative): tokens a verify pass, drafts accepted.
  const sp = stats.spec;
  if (sp && sp.passes > 0) {
    parts.push(`${Number(sp.tokens_per_pass).toFixed(2)} tok/pass`);
    if (sp.drafted > 0) parts.push(`${Math.round((100 * sp.accepted) / sp.drafted)}% of ${countOf(sp.drafted, "draft")} accepted`);
  }
  return parts.join(" · ");
}

// The hover text of an answer's speculative counters: acceptance by draft
// position, the drafters, the first windows of the trajectory.
export function formatSpecDetail(sp) {
  if (!sp || !(sp.passes > 0)) return "";
  const pos = (sp.by_position || []).map((r, i) => `${i + 1}: ${Math.round(100 * r)}%`).join(", ");
  const d = sp.drafters || {};
  return ` · ${countOf(sp.passes, "verify window")} (MTP ${d.mtp ?? 0}, lookup ${d.lookup ?? 0})` +
    (pos ? ` · accepted by position ${pos}` : "") +
    (sp.nongreedy ? ` · ${sp.nongreedy} kept by the accuracy level` : "") +
    (sp.windows && sp.windows.length ? ` · windows ${sp.windows.join(" ")}${sp.passes > sp.windows.length ? " …" : ""}` : "");
}

// A byte count as the page shows it: B, KiB (one decimal under 10 KiB), MiB.
export function formatSize(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(n < 10240 ? 1 : 0)} KiB`;
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}

function quote(text) {
  return text.split("\n").map((l) => (l === "" ? ">" : "> " + l)).join("\n");
}

// "1 message", "3 messages": a count and its noun.
export function countOf(n, noun) {
  return `${n} ${noun}${n === 1 ? "" : "s"}`;
}

// The whole chat as a Markdown document.
export function chatToMarkdown(chat, { exportedAt = new Date(), model = "" } = {}) {
  const out = [];
  out.push(`# ${chat.title || "Chat"}`);
  out.push("");
  const when = exportedAt.toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
  out.push(`*Exported from Nebula on ${when}${model ? ` · model ${model}` : ""} · ${countOf(chat.messages.length, "message")}*`);
  for (const m of chat.messages) {
    out.push("");
    if (m.role === "user") {
      out.push("## User");
      out.push("");
      if (m.content) out.push(m.content);
      for (const a of m.attachments || []) {
        out.push("");
        out.push(`**Attached: ${a.name}** (${a.size} bytes)`);
        out.push("");
        const fence = fenceFor(a.text);
        out.push(`${fence}${langForFile(a.name)}`);
        out.push(a.text.endsWith("\n") ? a.text.slice(0, -1) : a.text);
        out.push(fence);
      }
    } else {
      out.push("## Assistant");
      if (m.reasoning) {
        out.push("");
        out.push(quote(`**Thinking**\n\n${m.reasoning.trim()}`));
      }
      if (m.content) {
        out.push("");
        out.push(m.content);
      }
      const notes = [];
      const s = formatStats(m.stats);
      if (s) notes.push(s);
      if (m.stopped) notes.push("stopped by the user");
      if (m.finish_reason === "length") notes.push("cut at the token limit");
      if (m.error) notes.push(`error: ${m.error}`);
      if (notes.length) {
        out.push("");
        out.push(`*${notes.join(" · ")}*`);
      }
    }
  }
  out.push("");
  return out.join("\n");
}

// A file name for the export: the title in safe characters, then the date.
export function exportFileName(chat, date = new Date()) {
  const base = (chat.title || "chat").normalize("NFKD").replace(/[^\w\- ]+/g, "").trim()
    .replace(/\s+/g, "-").slice(0, 60) || "chat";
  return `${base}-${date.toISOString().slice(0, 10)}.md`;
}
