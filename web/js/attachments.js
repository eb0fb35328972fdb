// attachments.js — documents attached to the message being written: the
// paper clip, dropping files on the page, the chips above the message box
// and the error line under it.
//
// A document is read whole, in the browser, into {name, size, text}, and
// refused there (with the reason on the error line) if it is too large,
// not UTF-8 or binary: what goes into the prompt is always text the user
// could have pasted.  state.attachments holds them until the message is sent.
import { el } from "./dom.js";
import { state } from "./state.js";
import { MAX_ATTACHMENT_BYTES, formatSize } from "./chatformat.js";
import { setIcon } from "./icons.js";

// The line under the composer: why a document was refused ("" hides it).
export function showComposerError(text) {
  el.composerError.textContent = text;
  el.composerError.hidden = !text;
}

// A document as a chip: icon, name, size, and a remove button if onRemove.
export function fileChip(f, onRemove) {
  const chip = document.createElement("span");
  chip.className = "file-chip";
  chip.title = `${f.name} · ${formatSize(f.size)}`;
  const ic = document.createElement("span");
  setIcon(ic, "file");
  const name = document.createElement("span");
  name.className = "file-name";
  name.textContent = f.name;
  const size = document.createElement("span");
  size.className = "muted small";
  size.textContent = formatSize(f.size);
  chip.append(ic, name, size);
  if (onRemove) {
    const x = document.createElement("button");
    x.type = "button";
    x.className = "icon-btn small";
    x.setAttribute("aria-label", `Remove ${f.name}`);
    setIcon(x, "x");
    x.addEventListener("click", onRemove);
    chip.append(x);
  }
  return chip;
}

async function addFiles(fileList) {
  const errors = [];
  for (const f of fileList) {
    if (f.size > MAX_ATTACHMENT_BYTES) {
      errors.push(`“${f.name}” is ${formatSize(f.size)}: documents can be at most ${formatSize(MAX_ATTACHMENT_BYTES)} each.`);
      continue;
    }
    let text;
    try {
      const buf = await f.arrayBuffer();
      text = new TextDecoder("utf-8", { fatal: true }).decode(buf);
    } catch (e) {
      errors.push(`“${f.name}” is not UTF-8 text: only text documents (.txt, .md, source code) can be attached.`);
      continue;
    }
    if (text.includes("\u0000")) {
      errors.push(`“${f.name}” looks binary (it contains NUL bytes): only text documents can be attached.`);
      continue;
    }
    if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
    state.attachments.push({ name: f.name, size: f.size, text });
  }
  showComposerError(errors.join(" "));
  renderAttachments();
}

export function renderAttachments() {
  el.attachments.replaceChildren(...state.attachments.map((f, i) => fileChip(f, () => {
    state.attachments.splice(i, 1);
    renderAttachments();
  })));
  el.attachments.hidden = state.attachments.length === 0;
}

export function wireAttachments() {
  el.attach.addEventListener("click", () => el.fileInput.click());
  el.fileInput.addEventListener("change", async () => {
    await addFiles([...el.fileInput.files]);
    el.fileInput.value = "";
  });

  // Documents dropped anywhere on the conversation.
  const main = el.main;
  main.addEventListener("dragover", (e) => {
    if (e.dataTransfer && [...e.dataTransfer.types].includes("Files")) {
      e.preventDefault();
      main.classList.add("dropping");
    }
  });
  main.addEventListener("dragleave", (e) => { if (e.target === main || !main.contains(e.relatedTarget)) main.classList.remove("dropping"); });
  main.addEventListener("drop", (e) => {
    main.classList.remove("dropping");
    if (e.dataTransfer && e.dataTransfer.files.length) {
      e.preventDefault();
      addFiles([...e.dataTransfer.files]);
    }
  });
}
