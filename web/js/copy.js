// copy.js — the copy buttons: text to the clipboard, and a tick on the button.
//
// The Clipboard API needs a secure context; the page is usually served from
// 127.0.0.1 (secure), but over plain http from another host it is not, so
// the old execCommand("copy") on an off-screen textarea is the fallback.  A
// refusal either way is shown in the banner, never dropped.
import { showError } from "./banners.js";
import { setIcon } from "./icons.js";

export async function copyText(text, button) {
  try {
    if (navigator.clipboard && window.isSecureContext) {
      await navigator.clipboard.writeText(text);
    } else {
      const ta = document.createElement("textarea");
      ta.value = text;
      ta.setAttribute("readonly", "");
      ta.className = "offscreen";
      document.body.append(ta);
      ta.select();
      const ok = document.execCommand("copy");
      ta.remove();
      if (!ok) throw new Error("the browser refused to copy");
    }
  } catch (e) {
    showError(`Cannot copy to the clipboard: ${e.message}`);
    return;
  }
  if (button) {
    const prev = button.dataset.icon;
    setIcon(button, "check");
    button.classList.add("done");
    setTimeout(() => { setIcon(button, prev); button.classList.remove("done"); }, 1500);
  }
}
