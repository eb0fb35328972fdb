// toolview.js — tool calls and tool results as the page shows them: one
// collapsible <details> block each, the function's name in its summary and
// its arguments (or the result) pretty-printed inside.
//
// The arguments arrive as a JSON text in pieces (api.js mergeToolCalls); while
// it is incomplete, or when it is not JSON at all, it is shown as it is,
// never dropped.  Everything goes in as text (textContent): model output
// never becomes markup here.

// The text pretty-printed when it is JSON, else as it came.
export function prettyJson(text) {
  if (typeof text !== "string") return JSON.stringify(text, null, 2);
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch (_) {
    return text;
  }
}

function block(kind, label, body, open) {
  const d = document.createElement("details");
  d.className = `tool-block ${kind}`;
  d.open = open;
  const s = document.createElement("summary");
  const k = document.createElement("span");
  k.className = "tool-kind";
  k.textContent = kind === "tool-call" ? "Tool call" : "Tool result";
  const n = document.createElement("code");
  n.className = "tool-name";
  n.textContent = label;
  s.append(k, n);
  const pre = document.createElement("pre");
  pre.className = "tool-args";
  pre.textContent = body;
  d.append(s, pre);
  return d;
}

// Blocks for an assistant message's tool calls ({id, function: {name,
// arguments}}), replacing box's children.  A block the user opened stays
// open across redraws (openIds: the ids of open blocks, kept by the caller).
export function renderToolCalls(box, calls, openIds) {
  box.replaceChildren(...(calls || []).map((c) => {
    const key = c.id || `#${c.index}`;
    const d = block("tool-call", c.function && c.function.name ? c.function.name : "(unnamed)",
      prettyJson(c.function ? c.function.arguments : ""), openIds.has(key));
    d.dataset.callId = key;
    d.addEventListener("toggle", () => { if (d.open) openIds.add(key); else openIds.delete(key); });
    return d;
  }));
  box.hidden = box.childElementCount === 0;
}

// The block of a role:"tool" message: its result, named by the call it answers.
export function toolResultBlock(m) {
  const label = m.name || m.tool_call_id || "tool";
  const d = block("tool-result", label, prettyJson(m.content || ""), false);
  if (m.tool_call_id) d.dataset.callId = m.tool_call_id;
  return d;
}
