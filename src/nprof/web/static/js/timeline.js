// timeline.js — the timeline component: two stacked canvases (data + overlay),
// devicePixelRatio-aware sizing, hit testing and mouse/keyboard interaction.
// Contract: new Timeline(host, callbacks). The owner calls setRows(), setWindow(),
// setData(), setOverlays(), setStyle(); each schedules one redraw per animation frame.
// Callbacks (all optional): onWindow(t0, t1, {push}) for zoom/pan requests,
// onClick(hit), onSelect({t0, t1, rows}), onMarker(ts), onHover(hit|null, ev),
// onDrawn(info). Interaction: drag = zoom (or box select in "select" mode, or with
// Shift), wheel = zoom at cursor (Shift/horizontal wheel = pan), right-click = marker.

import { THEME } from "./colors.js";
import { drawTimeline } from "./draw.js";
import { AXIS_H, Layout } from "./layout.js";

const MIN_SPAN = 10; // ns

export class Timeline {
  constructor(host, cb) {
    this.host = host;
    this.cb = cb;
    this.base = document.createElement("canvas");
    this.over = document.createElement("canvas");
    this.base.className = "tl-base";
    this.over.className = "tl-over";
    this.over.tabIndex = 0;
    this.over.setAttribute("aria-label", "timeline: drag to zoom, right-click to add a marker");
    host.append(this.base, this.over);
    this.rows = [];
    this.view = "minimal";
    this.style = { color: "opcode", depth: 0, view: "minimal" };
    this.vp = null;
    this.overlays = {};
    this.bounds = [0, 1];
    this.mode = "zoom";
    this.layout = new Layout([], "minimal", host.clientWidth || 800);
    this.frame = 0;
    this.drag = null;
    this.mouse = null;
    this.drawCount = 0;
    this.drawMs = []; // recent draw durations (ms), for bench/first_paint.py
    this.lastInfo = { items: 0, counterScale: new Map() };
    this._bind();
    this._ro = new ResizeObserver(() => this._resize());
    this._ro.observe(host);
  }

  setRows(rows, view) {
    this.rows = rows;
    this.view = view;
    this._relayout();
  }

  setBounds(tmin, tmax) {
    this.bounds = [tmin, Math.max(tmax, tmin + 1)];
  }

  setWindow(t0, t1) {
    this.layout.setWindow(t0, t1);
    this.schedule();
  }

  setData(vp) {
    this.vp = vp;
    this.schedule();
  }

  setOverlays(ov) {
    this.overlays = { ...this.overlays, ...ov };
    this.schedule();
  }

  setStyle(style) {
    this.style = { ...this.style, ...style };
    if (style.view && style.view !== this.view) {
      this.view = style.view;
      this._relayout();
    }
    this.schedule();
  }

  setMode(mode) {
    this.mode = mode;
    this.over.style.cursor = mode === "select" ? "crosshair" : "col-resize";
  }

  /** Plot width in CSS px (what the viewport query's `width` should be). */
  plotWidth() {
    return Math.max(1, Math.round(this.layout.plotW));
  }

  _relayout() {
    const { t0, t1 } = this.layout;
    this.layout = new Layout(this.rows, this.view, this.host.clientWidth || 800);
    this.layout.setWindow(t0, t1);
    this._size();
    this.schedule();
  }

  _resize() {
    const w = this.host.clientWidth;
    if (w && Math.abs(w - this.layout.width) >= 1) {
      this._relayout();
      if (this.cb.onResize) this.cb.onResize();
    }
  }

  _size() {
    const L = this.layout;
    const dpr = window.devicePixelRatio || 1;
    for (const c of [this.base, this.over]) {
      c.width = Math.round(L.width * dpr);
      c.height = Math.round(L.height * dpr);
      c.style.width = `${L.width}px`;
      c.style.height = `${L.height}px`;
    }
    this.host.style.height = `${L.height}px`;
    this.dpr = dpr;
  }

  schedule() {
    if (this.frame || this.destroyed) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      this.draw();
    });
  }

  draw() {
    const start = performance.now();
    const ctx = this.base.getContext("2d", { alpha: false });
    ctx.setTransform(this.dpr, 0, 0, this.dpr, 0, 0);
    this.lastInfo = drawTimeline(ctx, this.layout, this.vp, { ...this.style, view: this.view }, this.overlays);
    this.drawCount += 1;
    this.drawMs.push(performance.now() - start);
    if (this.drawMs.length > 500) this.drawMs.shift();
    this._drawOverlay();
    if (this.cb.onDrawn) this.cb.onDrawn(this.lastInfo);
  }

  _drawOverlay() {
    const ctx = this.over.getContext("2d");
    const L = this.layout;
    ctx.setTransform(this.dpr, 0, 0, this.dpr, 0, 0);
    ctx.clearRect(0, 0, L.width, L.height);
    if (this.drag && this.drag.moved) {
      const d = this.drag;
      const xa = Math.max(L.plotX, Math.min(d.x0, d.x1));
      const xb = Math.min(L.plotX + L.plotW, Math.max(d.x0, d.x1));
      if (d.select) {
        const ya = Math.max(AXIS_H, Math.min(d.y0, d.y1));
        const yb = Math.min(L.height, Math.max(d.y0, d.y1));
        ctx.fillStyle = THEME.select;
        ctx.fillRect(xa, ya, xb - xa, yb - ya);
        ctx.strokeStyle = THEME.selectEdge;
        ctx.strokeRect(xa + 0.5, ya + 0.5, xb - xa, yb - ya);
      } else {
        ctx.fillStyle = THEME.zoom;
        ctx.fillRect(xa, AXIS_H, xb - xa, L.height - AXIS_H);
        ctx.strokeStyle = "#666";
        ctx.strokeRect(xa + 0.5, AXIS_H + 0.5, xb - xa, L.height - AXIS_H - 1);
      }
    } else if (this.mouse && L.inPlot(this.mouse.x, this.mouse.y)) {
      const x = Math.round(this.mouse.x) + 0.5;
      ctx.strokeStyle = "rgba(40, 40, 40, 0.35)";
      ctx.beginPath();
      ctx.moveTo(x, AXIS_H);
      ctx.lineTo(x, L.height);
      ctx.stroke();
    }
  }

  /** What is under CSS point (x, y): {row, t, kind, i, vr} or {row, t} or null. */
  hitTest(x, y) {
    const L = this.layout;
    if (!L.inPlot(x, y)) return null;
    const row = L.rowAt(y);
    const t = L.t(x);
    if (!row) return { row: null, t };
    const vr = this.vp && this.vp.rows.find((r) => r.key === row.key);
    if (!vr || !vr.ts) return { row, t };
    const tol = (3 * L.span) / L.plotW;
    let best = -1;
    let bestDist = Infinity;
    for (let i = 0; i < vr.ts.length; i += 1) {
      const a = vr.ts[i];
      const b = a + vr.dur[i];
      const d = t < a ? a - t : t > b ? t - b : 0;
      if (d < bestDist || (d === 0 && bestDist === 0 && vr.dur[i] < vr.dur[best])) {
        bestDist = d;
        best = i;
      }
    }
    if (best < 0 || bestDist > tol) return { row, t };
    const kind = vr.mode === "events" ? "event" : vr.mode === "buckets" ? "bucket" : "counter";
    return { row, t, kind, i: best, vr, vp: this.vp };
  }

  _zoomAt(factor, tCenter) {
    const L = this.layout;
    const [lo, hi] = this.bounds;
    const full = hi - lo;
    let span = Math.min(full, Math.max(MIN_SPAN, L.span * factor));
    const frac = (tCenter - L.t0) / L.span;
    let t0 = tCenter - frac * span;
    t0 = Math.max(lo, Math.min(hi - span, t0));
    span = Math.min(span, hi - t0);
    this.cb.onWindow(t0, t0 + span, { push: false });
  }

  _pan(fraction) {
    const L = this.layout;
    const [lo, hi] = this.bounds;
    const span = L.span;
    const t0 = Math.max(lo, Math.min(hi - span, L.t0 + fraction * span));
    this.cb.onWindow(t0, t0 + span, { push: false });
  }

  zoomIn() {
    this._zoomAt(0.5, this._focusT());
  }

  zoomOut() {
    this._zoomAt(2, this._focusT());
  }

  _focusT() {
    const L = this.layout;
    return this.mouse && L.inPlot(this.mouse.x, this.mouse.y) ? L.t(this.mouse.x) : (L.t0 + L.t1) / 2;
  }

  _pos(e) {
    const r = this.over.getBoundingClientRect();
    return { x: e.clientX - r.left, y: e.clientY - r.top };
  }

  _bind() {
    const o = this.over;
    o.addEventListener("mousedown", (e) => {
      if (e.button !== 0) return;
      const p = this._pos(e);
      if (!this.layout.inPlot(p.x, p.y)) return;
      o.focus({ preventScroll: true });
      this.drag = { x0: p.x, y0: p.y, x1: p.x, y1: p.y, moved: false, select: this.mode === "select" || e.shiftKey };
      e.preventDefault();
    });
    this._onMove = (e) => {
      const p = this._pos(e);
      if (this.drag) {
        this.drag.x1 = p.x;
        this.drag.y1 = p.y;
        if (Math.abs(p.x - this.drag.x0) > 3 || Math.abs(p.y - this.drag.y0) > 3) this.drag.moved = true;
        this._drawOverlay();
        return;
      }
      if (e.target !== o) {
        if (this.mouse) {
          this.mouse = null;
          this._drawOverlay();
          if (this.cb.onHover) this.cb.onHover(null, e);
        }
        return;
      }
      this.mouse = p;
      this._drawOverlay();
      if (this.cb.onHover) this.cb.onHover(this.hitTest(p.x, p.y), e);
    };
    this._onUp = (e) => {
      const d = this.drag;
      if (!d) return;
      this.drag = null;
      const L = this.layout;
      const clampX = (x) => Math.max(L.plotX, Math.min(L.plotX + L.plotW, x));
      if (d.moved && Math.abs(d.x1 - d.x0) > 3) {
        const ta = L.t(clampX(Math.min(d.x0, d.x1)));
        const tb = L.t(clampX(Math.max(d.x0, d.x1)));
        if (d.select) {
          const rows = L.rowsBetween(d.y0, d.y1).filter((r) => r.kind !== "counter").map((r) => r.key);
          if (this.cb.onSelect) this.cb.onSelect({ t0: Math.floor(ta), t1: Math.ceil(tb), rows });
        } else if (tb - ta >= 1) {
          const mid = (ta + tb) / 2;
          const span = Math.max(MIN_SPAN, tb - ta);
          this.cb.onWindow(mid - span / 2, mid + span / 2, { push: true });
        }
      } else if (!d.moved && this.cb.onClick) {
        const p = this._pos(e);
        this.cb.onClick(this.hitTest(p.x, p.y), e);
      }
      this._drawOverlay();
    };
    window.addEventListener("mousemove", this._onMove);
    window.addEventListener("mouseup", this._onUp);
    o.addEventListener("contextmenu", (e) => {
      const p = this._pos(e);
      if (!this.layout.inPlot(p.x, p.y)) return;
      e.preventDefault();
      if (this.cb.onMarker) this.cb.onMarker(Math.round(this.layout.t(p.x)));
    });
    o.addEventListener(
      "wheel",
      (e) => {
        const p = this._pos(e);
        if (!this.layout.inPlot(p.x, p.y)) return;
        e.preventDefault();
        if (e.shiftKey || Math.abs(e.deltaX) > Math.abs(e.deltaY)) {
          const dx = e.shiftKey ? e.deltaY : e.deltaX;
          this._pan(dx / this.layout.plotW);
        } else {
          const unit = e.deltaMode === 1 ? 30 : e.deltaMode === 2 ? 300 : 1;
          this._zoomAt(Math.exp(e.deltaY * unit * 0.0025), this.layout.t(p.x));
        }
      },
      { passive: false },
    );
    o.addEventListener("mouseleave", () => {
      if (this.drag) return;
      this.mouse = null;
      this._drawOverlay();
      if (this.cb.onHover) this.cb.onHover(null, null);
    });
  }

  /** Detach everything this timeline registered outside its canvases (window listeners, observer, frame). */
  destroy() {
    window.removeEventListener("mousemove", this._onMove);
    window.removeEventListener("mouseup", this._onUp);
    this._ro.disconnect();
    if (this.frame) cancelAnimationFrame(this.frame);
    this.frame = 0;
    this.destroyed = true;
  }

  /** Keyboard navigation; returns true when the key was handled. */
  handleKey(e) {
    const k = e.key.toLowerCase();
    if (k === "w" || k === "arrowup" || k === "+" || k === "=") this._zoomAt(0.7, this._focusT());
    else if (k === "s" || k === "arrowdown" || k === "-") this._zoomAt(1 / 0.7, this._focusT());
    else if (k === "a" || k === "arrowleft") this._pan(-0.2);
    else if (k === "d" || k === "arrowright") this._pan(0.2);
    else return false;
    return true;
  }
}
