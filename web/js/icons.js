// icons.js — the page's line icons as inline SVG (no icon font, nothing
// fetched): elements with data-icon="name" get the drawing.
const PATHS = {
  plus: "M12 5v14M5 12h14",
  menu: "M4 6h16M4 12h16M4 18h16",
  download: "M12 4v11m0 0-4-4m4 4 4-4M5 20h14",
  x: "M6 6l12 12M18 6 6 18",
  clip: "M16.5 6.5 8.6 14.4a2 2 0 0 0 2.8 2.8l8-8a4 4 0 0 0-5.6-5.6l-8 8a6 6 0 0 0 8.5 8.5l6.2-6.2",
  send: "M5 12h13M13 6l6 6-6 6",
  stop: "M7 7h10v10H7z",
  copy: "M9 9h10v11H9zM5 15V4h10",
  refresh: "M20 11a8 8 0 1 0-2.3 5.7M20 4v7h-7",
  pencil: "M4 20h4L19 9l-4-4L4 16v4zM14 6l4 4",
  trash: "M4 7h16M10 11v6M14 11v6M6 7l1 13h10l1-13M9 7V4h6v3",
  spark: "M12 3v4M12 17v4M3 12h4M17 12h4M6 6l2.5 2.5M15.5 15.5 18 18M6 18l2.5-2.5M15.5 8.5 18 6",
  check: "M5 12l5 5 9-10",
  file: "M6 3h8l4 4v14H6zM14 3v4h4",
  sun: "M12 8a4 4 0 1 0 0 8 4 4 0 0 0 0-8zM12 2v2M12 20v2M2 12h2M20 12h2M4.9 4.9l1.4 1.4M17.7 17.7l1.4 1.4M4.9 19.1l1.4-1.4M17.7 6.3l1.4-1.4",
  moon: "M20 14.5A8 8 0 0 1 9.5 4 8 8 0 1 0 20 14.5z",
  auto: "M12 3a9 9 0 1 0 0 18zM12 3a9 9 0 0 1 0 18",
  fork: "M6 3v6a4 4 0 0 0 4 4h4a4 4 0 0 1 4 4v4M6 9v12M18 3v6",
};

export function iconSvg(name) {
  const d = PATHS[name];
  if (!d) return "";
  return `<svg viewBox="0 0 24 24" width="18" height="18" aria-hidden="true" fill="none" stroke="currentColor" ` +
    `stroke-width="1.8" stroke-linecap="round" stroke-linejoin="round"><path d="${d}"/></svg>`;
}

export function setIcon(el, name) {
  el.dataset.icon = name;
  el.innerHTML = iconSvg(name);
}

export function applyIcons(root) {
  for (const el of root.querySelectorAll("[data-icon]")) {
    if (!el.firstElementChild) el.innerHTML = iconSvg(el.dataset.icon);
  }
}
