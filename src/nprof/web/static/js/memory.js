// memory.js — the Memory tab: SBUF and PSUM tile allocations as address (bytes per partition, y) ×
// time (x) rectangles from each tile's first to last compute use (GET /profiles/{id}/memory), coloured
// by source line, with the peak use and the fragmentation at the peak stated. Hover a tile for its
// name, range, size, source and use span; click it to highlight the instructions that use it.
// Contract: activate() loads once; `busy` while loading; each canvas keeps its drawn rects on
// `canvas.rects` ([{name, x, y, w, h}], CSS px; a test hook).

import { api } from "./api.js";
import { paletteColor } from "./colors.js";
import { h, help, loadOnce } from "./dom.js";
import { fmtBytes, fmtInt, fmtTime, trim } from "./fmt.js";
import { hideTooltip, showTooltip } from "./tooltip.js";

const W = 1100;
const H = 220;
const PAD = { l: 70, r: 10, t: 8, b: 22 };
const esc = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

function drawSpace(canvas, sp, t1, view) {
  const g = canvas.getContext("2d");
  const used = sp.allocations.filter((a) => a.first !== null);
  const top = Math.max(1, ...sp.allocations.map((a) => a.offset + a.bytes));
  const X = (t) => PAD.l + (t / t1) * (W - PAD.l - PAD.r);
  const Y = (b) => H - PAD.b - (b / top) * (H - PAD.t - PAD.b);
  g.clearRect(0, 0, W, H);
  g.font = "11px system-ui, sans-serif";
  g.fillStyle = "#5b6472";
  g.fillText(fmtBytes(top), 4, PAD.t + 8);
  g.fillText("0 B", 4, H - PAD.b);
  g.fillText("0", PAD.l, H - 6);
  g.fillText(fmtTime(t1), W - PAD.r - 50, H - 6);
  g.strokeStyle = "#c9ced6";
  g.strokeRect(PAD.l, PAD.t, W - PAD.l - PAD.r, H - PAD.t - PAD.b);
  const rects = [];
  for (const a of used) {
    const x = X(a.first);
    const w = Math.max(2, X(a.last) - x);
    const y = Y(a.offset + a.bytes);
    const hh = Math.max(1, Y(a.offset) - y);
    g.fillStyle = paletteColor("source", a.source || "(none)");
    g.fillRect(x, y, w, hh);
    g.strokeStyle = "rgba(0,0,0,0.35)";
    g.strokeRect(x + 0.5, y + 0.5, w - 1, hh - 1);
    rects.push({ name: a.name, x, y, w, h: hh, a });
  }
  if (sp.peak_ts !== null) {
    g.strokeStyle = "#d81b60";
    g.setLineDash([4, 3]);
    g.beginPath();
    g.moveTo(X(sp.peak_ts), PAD.t);
    g.lineTo(X(sp.peak_ts), H - PAD.b);
    g.stroke();
    g.setLineDash([]);
  }
  canvas.rects = rects;
  const at = (e) => {
    const r = canvas.getBoundingClientRect();
    const px = ((e.clientX - r.left) * W) / r.width;
    const py = ((e.clientY - r.top) * H) / r.height;
    return rects.find((q) => px >= q.x && px <= q.x + q.w && py >= q.y && py <= q.y + q.h);
  };
  canvas.onmousemove = (e) => {
    const q = at(e);
    if (!q) return hideTooltip();
    const a = q.a;
    showTooltip(
      [
        `${a.name}  ·  ${a.partitions} partitions × ${fmtBytes(a.bytes)}`,
        `bytes ${fmtInt(a.offset)} – ${fmtInt(a.offset + a.bytes)} of each partition`,
        `used ${fmtTime(a.first)} – ${fmtTime(a.last)} by ${fmtInt(a.uses)} instructions`,
        a.source ? `allocated at ${a.source}` : "no source line",
        "click to highlight its instructions",
      ],
      e.clientX,
      e.clientY,
    );
  };
  canvas.onmouseleave = () => hideTooltip();
  canvas.onclick = (e) => {
    const q = at(e);
    if (q) view.panels.search.setQuery([["operands", `/ ${esc(q.name)}\\[/`]], false, true);
  };
}

export class MemoryPanel {
  constructor(el, view) {
    this.el = el;
    this.view = view;
    this.busy = false;
    this.loaded = false;
  }

  async activate() {
    await loadOnce(this, "the memory view", () => api.memory(this.view.id), (d) => this._render(d));
  }

  _render(d) {
    if (!d.recorded) {
      this.el.replaceChildren(
        h("p", { class: "muted", id: "memory-none" }, "No SBUF/PSUM allocation records in this profile (they come from nprof.nki kernels and compiled graphs traced by this nprof version)."),
      );
      return;
    }
    const t1 = this.view.tmax;
    const parts = Object.entries(d.spaces).map(([space, sp]) => {
      const canvas = h("canvas", { id: `memory-${space}`, width: W, height: H, style: { width: "100%", maxWidth: `${W}px` } });
      requestAnimationFrame(() => drawSpace(canvas, sp, t1, this.view));
      const cap = d.capacity[space];
      const facts = [
        `${fmtInt(sp.allocations.length)} tiles`,
        `peak ${fmtBytes(sp.peak_bytes)} per partition${cap ? ` (${trim((100 * sp.peak_bytes) / cap)} % of ${fmtBytes(cap)})` : ""}${sp.peak_ts !== null ? ` at ${fmtTime(sp.peak_ts)}` : ""}`,
        sp.fragmentation === null ? "fragmentation –" : `fragmentation at peak ${trim(100 * sp.fragmentation)} %`,
      ];
      return h("section", { class: "memory-space" }, h("h3", {}, space.toUpperCase()), h("p", { class: "muted", id: `memory-${space}-facts` }, facts.join("  ·  ")), canvas);
    });
    this.el.replaceChildren(
      h("div", { class: "search-head" }, h("strong", {}, "On-chip memory"), help("Each tile is a rectangle: bytes per partition it occupies (y) from its first to its last compute use (x), coloured by the source line that allocated it. Dashed line: the peak. Fragmentation = 1 − largest free gap / free bytes at the peak.")),
      ...parts,
    );
  }
}
