// layout.js — row layout and coordinate transforms of the timeline canvas.
// Contract: `new Layout(rows, view, cssWidth)` places the API's rows (display
// order kept: DMA queues, engines, other tracks, counters) below the time axis;
// `x(t)`/`t(x)` map ns <-> CSS px for the current window; `rowAt(y)` finds the
// row under a CSS-pixel y. Pure geometry: no drawing, no DOM.

export const AXIS_H = 34;
export const LABEL_W = 216;
export const RIGHT_PAD = 12;
const SECTION_GAP = 8;

const HEIGHTS = {
  minimal: { dma: 13, engine: 24, track: 24, counter: 42 },
  full: { dma: 20, engine: 32, track: 32, counter: 60 },
};

export class Layout {
  constructor(rows, view, cssWidth) {
    this.view = view;
    this.width = Math.max(320, cssWidth);
    this.plotX = LABEL_W;
    this.plotW = this.width - LABEL_W - RIGHT_PAD;
    this.rows = [];
    this.sections = [];
    let y = AXIS_H + 4;
    let prevKind = null;
    const hs = HEIGHTS[view] || HEIGHTS.minimal;
    for (const r of rows) {
      const kind = r.kind === "dma" || r.kind === "engine" || r.kind === "counter" ? r.kind : "track";
      if (prevKind !== null && kind !== prevKind) {
        y += SECTION_GAP;
        this.sections.push(y - SECTION_GAP / 2);
      }
      const h = hs[kind];
      this.rows.push({ ...r, kind, y, h });
      y += h + 1;
      prevKind = kind;
    }
    this.height = y + 8;
    this.byKey = new Map(this.rows.map((r) => [r.key, r]));
    this.t0 = 0;
    this.t1 = 1;
  }

  setWindow(t0, t1) {
    this.t0 = t0;
    this.t1 = Math.max(t1, t0 + 1e-6);
  }

  get span() {
    return this.t1 - this.t0;
  }

  x(t) {
    return this.plotX + ((t - this.t0) / this.span) * this.plotW;
  }

  t(x) {
    return this.t0 + ((x - this.plotX) / this.plotW) * this.span;
  }

  inPlot(x, y) {
    return x >= this.plotX && x <= this.plotX + this.plotW && y >= AXIS_H && y <= this.height;
  }

  rowAt(y) {
    for (const r of this.rows) if (y >= r.y && y < r.y + r.h + 1) return r;
    return null;
  }

  /** Rows whose band intersects [ya, yb] (CSS px), in display order. */
  rowsBetween(ya, yb) {
    const lo = Math.min(ya, yb);
    const hi = Math.max(ya, yb);
    return this.rows.filter((r) => r.y + r.h >= lo && r.y <= hi);
  }

  /** [top, bottom] of each run of adjacent rows among `keys` (display order); [] when none match. */
  runsOf(keys) {
    const want = new Set(keys || []);
    const runs = [];
    let prev = -2;
    this.rows.forEach((r, i) => {
      if (!want.has(r.key)) return;
      if (i === prev + 1 && runs.length) runs[runs.length - 1][1] = r.y + r.h;
      else runs.push([r.y, r.y + r.h]);
      prev = i;
    });
    return runs;
  }

  /** Vertical extent [top, bottom] covering the given row keys (or every row when none match). */
  extentOf(keys) {
    const rs = (keys || []).map((k) => this.byKey.get(k)).filter(Boolean);
    const list = rs.length ? rs : this.rows;
    if (!list.length) return [AXIS_H, this.height];
    return [Math.min(...list.map((r) => r.y)), Math.max(...list.map((r) => r.y + r.h))];
  }
}
