// tooltip.js — the single floating tooltip of the page.
// Contract: showTooltip(lines, clientX, clientY) shows a box of text lines near the
// pointer (first line bold), kept inside the window; hideTooltip() hides it.

let el = null;

function node() {
  if (!el) {
    el = document.createElement("div");
    el.id = "tooltip";
    el.setAttribute("role", "tooltip");
    el.hidden = true;
    document.body.append(el);
  }
  return el;
}

export function showTooltip(lines, x, y) {
  const t = node();
  t.replaceChildren(
    ...lines.map((line, i) => {
      const d = document.createElement("div");
      d.textContent = line;
      if (i === 0) d.className = "tt-title";
      else if (line.startsWith("⚠")) d.className = "tt-warn";
      return d;
    }),
  );
  t.hidden = false;
  const r = t.getBoundingClientRect();
  let left = x + 14;
  let top = y + 14;
  if (left + r.width > window.innerWidth - 6) left = Math.max(6, x - r.width - 14);
  if (top + r.height > window.innerHeight - 6) top = Math.max(6, y - r.height - 14);
  t.style.left = `${left}px`;
  t.style.top = `${top}px`;
}

export function hideTooltip() {
  if (el) el.hidden = true;
}
