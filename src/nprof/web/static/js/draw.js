// draw.js — paints the timeline canvas from a Layout, a viewport response and overlays.
// Contract: drawTimeline(ctx, layout, vp, style, overlays) draws everything in CSS px
// (the caller has already scaled ctx by devicePixelRatio). Items keep absolute ns, so
// the previous response can be redrawn at a new zoom while the next one loads.
// overlays: {hits, selected, deps, dependents, markers, warnings, collectives, sel}.

import { engineColor, layerAtDepth, paletteColor, textOn, THEME } from "./colors.js";
import { axisOrigin, fmtCounter, fmtTick, fmtTimeAt, niceStep } from "./fmt.js";
import { AXIS_H } from "./layout.js";

const FONT = "12px system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif";
const SMALL = "11px system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif";

/** The colour of item i of a viewport row under the current colour mode. */
export function itemColor(vp, row, vr, i, style) {
  switch (style.color) {
    case "engine":
      return engineColor(row.kind === "dma" ? "dma" : row.engine || "other");
    case "queue":
      return row.kind === "dma" ? paletteColor("queue", row.key) : engineColor(row.engine || "other");
    case "layer":
      if (vr.layer && vp.layers) {
        const li = vr.layer[i];
        return li >= 0 ? paletteColor(`layer:${style.depth}`, layerAtDepth(vp.layers[li], style.depth)) : "#b8bec7";
      }
      return "#b8bec7";
    default:
      return vr.op && vp.opcodes ? paletteColor("opcode", vp.opcodes[vr.op[i]]) : engineColor(row.engine);
  }
}

function drawAxis(ctx, L) {
  const step = niceStep(L.span, L.plotW);
  const first = Math.ceil(L.t0 / step) * step;
  ctx.font = SMALL;
  ctx.textBaseline = "top";
  ctx.fillStyle = THEME.axis;
  ctx.strokeStyle = THEME.grid;
  ctx.lineWidth = 1;
  ctx.beginPath();
  for (let t = first; t <= L.t1; t += step) {
    const x = Math.round(L.x(t)) + 0.5;
    ctx.moveTo(x, AXIS_H - 6);
    ctx.lineTo(x, L.height);
  }
  ctx.stroke();
  // deep in a long profile absolute labels ("315451500 ns") say nothing: label ticks relative to a
  // visible origin, itself written out in full in the label column
  const origin = axisOrigin(L.t0, step);
  if (origin !== null) {
    const text = `t₀ = ${fmtTimeAt(origin, step)}`;
    ctx.fillText(fit(ctx, text, L.plotX - 12), 8, 6);
  }
  for (let t = first; t <= L.t1; t += step) {
    const x = L.x(t);
    const label = origin === null ? fmtTick(t, step) : `+${fmtTick(t - origin, step)}`;
    const w = ctx.measureText(label).width;
    if (x + w / 2 > L.plotX + L.plotW + 10) continue;
    ctx.fillText(label, Math.max(L.plotX, x - w / 2), 6);
  }
  ctx.strokeStyle = "#c9ced6";
  ctx.beginPath();
  ctx.moveTo(L.plotX, AXIS_H - 0.5);
  ctx.lineTo(L.plotX + L.plotW, AXIS_H - 0.5);
  ctx.stroke();
}

function drawLabels(ctx, L, counterScale) {
  ctx.textBaseline = "middle";
  for (const r of L.rows) {
    const cy = r.y + r.h / 2;
    const sw = r.kind === "counter" ? "#55606e" : engineColor(r.kind === "dma" ? "dma" : r.engine || "other");
    ctx.fillStyle = sw;
    ctx.fillRect(8, r.y + 2, 3, r.h - 3);
    ctx.fillStyle = "#1f2630";
    ctx.font = r.kind === "dma" && L.view === "minimal" ? SMALL : FONT;
    const label = r.label || r.key;
    ctx.fillText(fit(ctx, label, L.plotX - 24), 16, r.kind === "counter" ? r.y + 11 : cy);
    if (r.kind === "counter" && counterScale.has(r.key)) {
      ctx.font = SMALL;
      ctx.fillStyle = "#6b7584";
      const m = counterScale.get(r.key).max;
      ctx.fillText(m === null ? "max —" : `max ${fmtCounter(m, r)}`, 16, r.y + 26);
    }
  }
  ctx.strokeStyle = "#d5d9e0";
  ctx.beginPath();
  ctx.moveTo(L.plotX - 0.5, AXIS_H);
  ctx.lineTo(L.plotX - 0.5, L.height);
  for (const y of L.sections) {
    ctx.moveTo(0, Math.round(y) + 0.5);
    ctx.lineTo(L.width, Math.round(y) + 0.5);
  }
  ctx.stroke();
}

function fit(ctx, text, w) {
  if (ctx.measureText(text).width <= w) return text;
  let s = text;
  while (s.length > 2 && ctx.measureText(`${s}…`).width > w) s = s.slice(0, -1);
  return `${s}…`;
}

/** The text inside a wide bar: a DMA transfer's tensor (else its direction), an instruction's opcode. */
function barLabel(vp, vr, i) {
  const ti = vr.tensor ? vr.tensor[i] : -1;
  return ti >= 0 && vp.tensors ? vp.tensors[ti] : vp.opcodes[vr.op[i]];
}

function drawEventsRow(ctx, L, vp, row, vr, style) {
  // Rects are snapped to whole CSS pixels and drawn with fillRect: software rasterisation of
  // anti-aliased fractional rects is several times slower. Batched per colour (one fillStyle each).
  const batches = new Map();
  const n = vr.ts.length;
  const y = row.y + 1;
  const h = row.h - 2;
  const buckets = vr.mode === "buckets";
  const labels = [];
  const right = L.plotX + L.plotW;
  for (let i = 0; i < n; i += 1) {
    const x0 = L.x(vr.ts[i]);
    const x1 = L.x(vr.ts[i] + vr.dur[i]);
    if (x1 < L.plotX || x0 > right) continue;
    const xa = Math.round(Math.max(L.plotX, x0));
    const w = Math.max(1, Math.round(Math.min(right, x1)) - xa);
    let key = itemColor(vp, row, vr, i, style);
    if (buckets) {
      const f = vr.busy_frac ? vr.busy_frac[i] : 1;
      key += `|${Math.min(4, Math.floor(f * 4.999))}`;
    }
    let b = batches.get(key);
    if (!b) batches.set(key, (b = []));
    b.push(xa, w);
    if (!buckets && style.view === "full" && w > 46 && vr.op) labels.push([xa, w, barLabel(vp, vr, i), key]);
  }
  for (const [key, rects] of batches) {
    const [color, level] = key.split("|");
    ctx.globalAlpha = level === undefined ? 1 : 0.3 + 0.175 * Number(level);
    ctx.fillStyle = color;
    for (let j = 0; j < rects.length; j += 2) ctx.fillRect(rects[j], y, rects[j + 1], h);
  }
  ctx.globalAlpha = 1;
  if (labels.length) {
    ctx.font = SMALL;
    ctx.textBaseline = "middle";
    for (const [x, w, text, color] of labels) {
      ctx.fillStyle = textOn(color);
      ctx.fillText(fit(ctx, text, w - 6), x + 3, row.y + row.h / 2);
    }
  }
}

/** The largest value of a counter row in the window (null when it has no samples there). */
function dataMax(vr) {
  let m = null;
  for (const v of vr.max || vr.mean || []) if (v !== null && (m === null || v > m)) m = v;
  return m;
}

/** The vertical scale of a counter row: its data max (a % row: 0..1 or 0..100), 1 when empty or zero. */
function counterMax(row, vr) {
  let m = dataMax(vr) || 0;
  if (row.unit === "%") m = Math.max(m, m <= 1.0001 ? 1 : 100);
  return m > 0 ? m : 1;
}

function drawCounterRow(ctx, L, row, vr, max) {
  const base = row.y + row.h - 1;
  const top = row.y + 4;
  const Y = (v) => base - (Math.max(0, v) / max) * (base - top);
  const color = row.key.includes("util") ? engineColor("tensor") : engineColor("dma");
  const n = vr.ts.length;
  ctx.fillStyle = "rgba(120, 130, 150, 0.18)";
  for (let i = 0; i < n && vr.max; i += 1) {
    const x0 = Math.round(Math.max(L.plotX, L.x(vr.ts[i])));
    const x1 = Math.round(Math.min(L.plotX + L.plotW, L.x(vr.ts[i] + vr.dur[i])));
    if (x1 < x0) continue;
    const top = Math.round(Y(vr.max[i]));
    ctx.fillRect(x0, top, Math.max(1, x1 - x0), Math.max(1, Math.round(Y(vr.min[i])) - top));
  }
  ctx.beginPath();
  let started = false;
  let lastX = L.plotX;
  for (let i = 0; i < n; i += 1) {
    const x0 = Math.max(L.plotX, L.x(vr.ts[i]));
    const x1 = Math.min(L.plotX + L.plotW, L.x(vr.ts[i] + vr.dur[i]));
    if (x1 < L.plotX || x0 > L.plotX + L.plotW) continue;
    const yv = Y(vr.mean[i]);
    if (!started) {
      ctx.moveTo(x0, base);
      started = true;
    } else if (x0 > lastX + 0.5) {
      ctx.lineTo(lastX, base);
      ctx.lineTo(x0, base);
    }
    ctx.lineTo(x0, yv);
    ctx.lineTo(Math.max(x1, x0 + 1), yv);
    lastX = Math.max(x1, x0 + 1);
  }
  if (!started) return;
  ctx.lineTo(lastX, base);
  ctx.closePath();
  ctx.globalAlpha = 0.35;
  ctx.fillStyle = color;
  ctx.fill();
  ctx.globalAlpha = 1;
  ctx.strokeStyle = color;
  ctx.lineWidth = 1.2;
  ctx.stroke();
  ctx.lineWidth = 1;
}

function boxRect(ctx, L, t0, t1, top, bottom, color, width, dash) {
  const x0 = Math.max(L.plotX - 2, L.x(t0));
  const x1 = Math.min(L.plotX + L.plotW + 2, L.x(t1));
  if (x1 < L.plotX || x0 > L.plotX + L.plotW) return;
  ctx.strokeStyle = color;
  ctx.lineWidth = width;
  ctx.setLineDash(dash || []);
  ctx.strokeRect(x0 - 1.5, top - 1.5, Math.max(3, x1 - x0 + 3), bottom - top + 3);
  ctx.setLineDash([]);
  ctx.lineWidth = 1;
}

function outlineEvent(ctx, L, ev, color, width) {
  const r = L.byKey.get(ev.row);
  if (!r) return null;
  const x0 = L.x(ev.ts);
  const x1 = Math.max(x0 + 2, L.x(ev.ts + ev.dur));
  ctx.strokeStyle = color;
  ctx.lineWidth = width;
  ctx.strokeRect(x0 - 1, r.y - 0.5, x1 - x0 + 2, r.h + 1);
  ctx.lineWidth = 1;
  return { x0, x1, y: r.y + r.h / 2 };
}

const MAX_BOXES = 60;

/** Warning/collective boxes visible in the window, at most MAX_BOXES (the narrowest first). */
function visibleBoxes(L, boxes) {
  const vis = (boxes || []).filter((b) => b.t1 >= L.t0 && b.t0 <= L.t1);
  if (vis.length <= MAX_BOXES) return vis;
  return vis.sort((a, b) => a.t1 - a.t0 - (b.t1 - b.t0)).slice(0, MAX_BOXES);
}

/**
 * Warning (orange: an outline around each event it names) and collective (teal, dashed, labelled: one
 * rectangle per run of adjacent CC rows it ran on) boxes; one with no rows is a band under the time axis. A label
 * is skipped where it would overprint one already drawn.
 */
function drawBoxes(ctx, L, ov) {
  const band = (b, color, dy) => {
    const x0 = Math.max(L.plotX, L.x(b.t0));
    const x1 = Math.min(L.plotX + L.plotW, L.x(b.t1));
    ctx.fillStyle = color;
    ctx.fillRect(x0, AXIS_H - 5 - dy, Math.max(2, x1 - x0), 3);
  };
  ctx.globalAlpha = 0.85;
  for (const w of visibleBoxes(L, ov.warnings)) {
    // a warning naming events outlines each of them on its own row; one without events is a band
    if (!w.events || !w.events.length) band(w, THEME.warning, 0);
    for (const [key, a, b] of w.events || []) {
      const r = L.byKey.get(key);
      if (!r || b < L.t0 || a > L.t1) continue;
      // wide enough to frame: an outline; else a tick under the bar (outlines would bury the data)
      if (L.x(b) - L.x(a) >= 6) boxRect(ctx, L, a, Math.max(b, a + 1), r.y, r.y + r.h, THEME.warning, 1.5);
      else {
        ctx.fillStyle = THEME.warning;
        ctx.fillRect(Math.round(L.x(a)), r.y + r.h - 2, Math.max(2, Math.round(L.x(b) - L.x(a))), 2);
      }
    }
  }
  ctx.globalAlpha = 1;
  ctx.font = SMALL;
  ctx.textBaseline = "top";
  const taken = [];
  for (const c of visibleBoxes(L, ov.collectives)) {
    const runs = L.runsOf(c.rows);
    if (!runs.length) band(c, THEME.collective, 4);
    for (const [top, bottom] of runs) boxRect(ctx, L, c.t0, c.t1, top, bottom, THEME.collective, 1.5, [5, 3]);
    if (!runs.length || !c.label) continue;
    const top = runs[0][0];
    const x0 = Math.max(L.plotX, L.x(c.t0));
    const w = Math.min(L.plotX + L.plotW, L.x(c.t1)) - x0;
    if (w <= 50) continue;
    const text = fit(ctx, c.label, w - 10);
    const tw = ctx.measureText(text).width + 6;
    const rect = [x0, top - 1, x0 + tw, top + 12];
    if (taken.some((t) => rect[0] < t[2] && t[0] < rect[2] && rect[1] < t[3] && t[1] < rect[3])) continue;
    taken.push(rect);
    ctx.fillStyle = THEME.collective;
    ctx.fillRect(Math.round(x0), Math.round(top) - 1, Math.round(tw), 13);
    ctx.fillStyle = "#fff";
    ctx.fillText(text, x0 + 3, top);
  }
}

function drawOverlays(ctx, L, ov, style) {
  ctx.save();
  ctx.beginPath();
  ctx.rect(L.plotX - 3, AXIS_H - 10, L.plotW + 6, L.height - AXIS_H + 10);
  ctx.clip();
  if (style.warn !== false) drawBoxes(ctx, L, ov);
  if (ov.hits && ov.hits.length) {
    // a dark frame with a bright core, pixel-snapped: visible on any event colour
    const boxes = [];
    for (const hit of ov.hits) {
      const r = L.byKey.get(hit.row);
      if (!r) continue;
      const x0 = L.x(hit.ts);
      const x1 = L.x(hit.ts + hit.dur);
      if (x1 < L.plotX || x0 > L.plotX + L.plotW) continue;
      const xa = Math.round(x0) - 1;
      boxes.push(xa, Math.max(3, Math.round(x1) + 1 - xa), Math.round(r.y + r.h * 0.2), Math.round(r.h * 0.6));
    }
    ctx.fillStyle = "#6b5400";
    for (let j = 0; j < boxes.length; j += 4) ctx.fillRect(boxes[j], boxes[j + 2], boxes[j + 1], boxes[j + 3]);
    ctx.fillStyle = THEME.hit;
    for (let j = 0; j < boxes.length; j += 4) {
      if (boxes[j + 1] > 2) ctx.fillRect(boxes[j] + 1, boxes[j + 2] + 1, boxes[j + 1] - 2, boxes[j + 3] - 2);
    }
  }
  if (ov.sel) {
    const [top, bottom] = L.extentOf(ov.sel.rows);
    const x0 = L.x(ov.sel.t0);
    const x1 = L.x(ov.sel.t1);
    ctx.fillStyle = THEME.select;
    ctx.fillRect(x0, top, x1 - x0, bottom - top);
    boxRect(ctx, L, ov.sel.t0, ov.sel.t1, top, bottom, THEME.selectEdge, 1.5, [4, 2]);
  }
  if (ov.selected) {
    const me = outlineEvent(ctx, L, ov.selected, THEME.selected, 2.5);
    const link = (ev, color, incoming) => {
      const o = outlineEvent(ctx, L, ev, color, 2);
      if (!o || !me) return;
      ctx.strokeStyle = color;
      ctx.setLineDash([4, 3]);
      ctx.beginPath();
      if (incoming) {
        ctx.moveTo(o.x1, o.y);
        ctx.lineTo(me.x0, me.y);
      } else {
        ctx.moveTo(me.x1, me.y);
        ctx.lineTo(o.x0, o.y);
      }
      ctx.stroke();
      ctx.setLineDash([]);
    };
    for (const d of ov.deps || []) link(d, THEME.dep, true);
    for (const d of ov.dependents || []) link(d, THEME.dependent, false);
  }
  ctx.restore();
  for (const m of ov.markers || []) {
    const x = Math.round(L.x(m.ts)) + 0.5;
    if (x < L.plotX || x > L.plotX + L.plotW) continue;
    ctx.strokeStyle = THEME.marker;
    ctx.beginPath();
    ctx.moveTo(x, AXIS_H - 12);
    ctx.lineTo(x, L.height);
    ctx.stroke();
    ctx.font = SMALL;
    const text = m.label || m.id;
    const w = Math.min(140, ctx.measureText(text).width + 8);
    const lx = Math.min(x, L.plotX + L.plotW - w);
    ctx.fillStyle = THEME.marker;
    ctx.fillRect(lx, AXIS_H - 14, w, 13);
    ctx.fillStyle = "#fff";
    ctx.textBaseline = "middle";
    ctx.fillText(fit(ctx, text, w - 8), lx + 4, AXIS_H - 7.5);
  }
}

/** Paint the whole timeline; returns {items, events, buckets, counterScale} for the readout and tests. */
export function drawTimeline(ctx, L, vp, style, overlays) {
  ctx.clearRect(0, 0, L.width, L.height);
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, L.width, L.height);
  for (let i = 0; i < L.rows.length; i += 1) {
    const r = L.rows[i];
    if (i % 2) {
      ctx.fillStyle = "#f7f8fa";
      ctx.fillRect(0, r.y, L.width, r.h + 1);
    }
  }
  drawAxis(ctx, L);
  const counterScale = new Map();
  let items = 0;
  let events = 0;
  let buckets = 0;
  if (vp) {
    const byKey = new Map(vp.rows.map((r) => [r.key, r]));
    ctx.save();
    ctx.beginPath();
    ctx.rect(L.plotX, AXIS_H, L.plotW, L.height - AXIS_H);
    ctx.clip();
    for (const row of L.rows) {
      const vr = byKey.get(row.key);
      if (!vr || !vr.ts) continue;
      items += vr.ts.length;
      if (vr.mode === "events") events += vr.ts.length;
      else if (vr.mode === "buckets") buckets += vr.ts.length;
      if (vr.mode === "counter") {
        const max = counterMax(row, vr);
        counterScale.set(row.key, { scale: max, max: dataMax(vr) }); // label: the data's max, not the scale
        drawCounterRow(ctx, L, row, vr, max);
      } else drawEventsRow(ctx, L, vp, row, vr, style);
    }
    ctx.restore();
  }
  drawLabels(ctx, L, counterScale);
  drawOverlays(ctx, L, overlays || {}, style);
  return { items, events, buckets, counterScale };
}
