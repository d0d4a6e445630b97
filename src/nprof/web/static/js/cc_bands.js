// cc_bands.js — level of detail over ranks in the CC Aggregated view (cc_view.js).
// Contract: when the server answers with `lod` (more ranks than the canvas has rows; GET
// /api/groups/<id>/collectives?rows=R), each row of the canvas is a band of consecutive ranks:
//  * drawBands(view, g): per band its median compute activity (grey; the busiest rank's as a 2 px strip
//    on top), and per operation the spread
//    of its ranks' arrivals (a thin orange whisker, first -> last arrival), the median wait (orange,
//    from the median arrival; each op's waits on its own clock, docs/system.md) and the transfer
//    (blue, the op's start -> end); the band holding the job's straggler is labelled red;
//  * bandExtent(view, op): [first arrival, end] of an operation over the bands (for zooming);
//  * bandHit(view, x, y) -> {rank, label?, lines} (the tooltip: ranks, min/median/max of the waits,
//    the band's last rank to arrive) or null;
//  * bandMatrix(view): the rank-band x operation table, each cell "median" with "min–max" under it,
//    shaded by the band's largest wait; stragglerRows(ranks, n): the n ranks that made others wait
//    most (then the slowest), for the ranks table.

import { WAIT } from "./cc_tables.js";
import { h } from "./dom.js";
import { fmtTime } from "./fmt.js";

export const BAND_MIN_H = 8; // px per band row: the view asks for at most (canvas height / BAND_MIN_H) bands
const SPREAD = "#6d2a00";
const XFER = "rgba(30,110,220,0.85)";
const MAX_MATRIX_OPS = 64;

export function bandLabel(b) {
  return b.first === b.last ? `Rank ${b.first}` : `Ranks ${b.first}–${b.last}`;
}

/** Row height of the banded canvas: the bands fill `avail` px, at least BAND_MIN_H, at most 18 px each. */
export function bandRowH(nBands, avail) {
  return Math.max(BAND_MIN_H, Math.min(18, Math.floor(avail / Math.max(1, nBands))));
}

function opsById(d) {
  return new Map(d.ops.map((o) => [o.id, o]));
}

export function bandExtent(view, op) {
  let a = op.start;
  for (const b of view.data.lod.bands) for (const bo of b.ops) if (bo.id === op.id) a = Math.min(a, bo.arrival[0]);
  return [a, op.end];
}

export function drawBands(view, g, axisH) {
  const d = view.data;
  const rowH = view.rowH;
  const [t0, t1] = view.window;
  const binNs = d.bin_ns;
  const bands = d.lod.bands;
  const maxBusy = Math.max(0.001, ...bands.map((b) => Math.max(...b.busy)));
  const every = Math.max(1, Math.ceil(13 / rowH)); // label every k-th band so labels never overlap
  const byId = opsById(d);
  const stragBand = d.straggler === null ? -1 : bands.findIndex((b) => b.first <= d.straggler && d.straggler <= b.last);
  bands.forEach((b, i) => {
    const y = axisH + i * rowH;
    const strag = i === stragBand;
    g.fillStyle = i % 2 ? "#f4f6f8" : "#ffffff";
    g.fillRect(view.labelW, y, view.width - view.labelW, rowH);
    const nearStrag = stragBand >= 0 && Math.abs(i - stragBand) < every;
    if (strag || (i % every === 0 && !nearStrag)) {
      g.fillStyle = strag ? "#c62828" : "#1f2630";
      g.font = `${strag ? "bold " : ""}${Math.min(11, rowH + 2)}px system-ui, sans-serif`;
      g.fillText(`${bandLabel(b)}${strag ? " ⚑" : ""}`, 4, y + Math.min(rowH - 1, 12));
    }
    const b0 = Math.max(0, Math.floor(t0 / binNs));
    const b1 = Math.min(b.busy.length - 1, Math.ceil(t1 / binNs));
    for (let k = b0; k <= b1; k++) {
      const v = b.busy[k];
      const top = b.busy_max[k];
      if (!top) continue;
      const xa = view.x(k * binNs);
      const w = Math.max(1, view.x((k + 1) * binNs) - xa);
      g.fillStyle = `rgba(90,98,110,${0.15 + 0.7 * (top / maxBusy)})`; // the busiest rank: a strip on top
      g.fillRect(xa, y, w, 2);
      if (!v) continue;
      g.fillStyle = `rgba(90,98,110,${0.15 + 0.7 * (v / maxBusy)})`; // the median rank: the row
      g.fillRect(xa, y + 2, w, rowH - 3);
    }
    for (const bo of b.ops) {
      const op = byId.get(bo.id);
      if (!op || op.end < t0 || bo.arrival[0] > t1) continue;
      const xs = view.x(op.start);
      const xm = view.x(bo.arrival[1]);
      const xw = view.x(bo.arrival[1] + bo.wait[1]);
      if (xw - xm > 0.3) {
        g.fillStyle = WAIT;
        g.fillRect(xm, y + 2, Math.max(1, xw - xm), rowH - 4);
      }
      if (bo.arrival[2] > bo.arrival[0]) {
        g.fillStyle = SPREAD;
        g.fillRect(view.x(bo.arrival[0]), y + rowH / 2 - 0.5, Math.max(1, view.x(bo.arrival[2]) - view.x(bo.arrival[0])), 1);
      }
      g.fillStyle = XFER;
      g.fillRect(xs, y + 2, Math.max(1, view.x(op.end) - xs), rowH - 4);
    }
  });
  let right = -Infinity; // operation labels: skip one that would overlap the previous
  g.font = "11px system-ui, sans-serif";
  for (const op of [...d.ops].sort((p, q) => p.start - q.start)) {
    if (op.end < t0 || op.start > t1) continue;
    const text = `#${op.id} ${op.kind}`;
    const x = Math.max(view.labelW, view.x(op.start));
    if (x < right + 4) continue;
    g.fillStyle = "#1e3c78";
    g.fillText(text, x, axisH - 4);
    right = x + g.measureText(text).width;
  }
}

export function bandHit(view, x, y, axisH) {
  const d = view.data;
  const i = Math.floor((y - axisH) / view.rowH);
  const b = d.lod.bands[i];
  if (!b) return null;
  const head = `${bandLabel(b)} (${b.n} rank${b.n > 1 ? "s" : ""}; min / median / max)`;
  const triple = (v) => v.map((q) => (q === null ? "–" : fmtTime(q))).join(" / ");
  if (x < view.labelW) return { rank: b.first, label: true, band: b, lines: [head, `total time ${triple(b.total_time_ns)}`, `waited ${triple(b.cc_wait_ns)}`, "click to open its first rank"] };
  const t = view.t(x);
  const tol = ((view.window[1] - view.window[0]) / (view.width - view.labelW)) * 2;
  const byId = opsById(d);
  for (const bo of b.ops) {
    const op = byId.get(bo.id);
    if (op && t >= bo.arrival[0] - tol && t <= op.end + tol) {
      return {
        rank: b.first,
        band: b,
        op,
        lines: [
          `#${op.id} ${op.kind} · ${head}`,
          `wait ${triple(bo.wait)}`,
          `arrival ${triple(bo.arrival)}`,
          `last to arrive in this band: rank ${bo.last}; waited longest: rank ${bo.most_waited}`,
          op.max_wait_ns > 0 ? `job straggler of this op: rank ${op.straggler}` : "no rank waited",
        ],
      };
    }
  }
  return { rank: b.first, band: b, lines: [head, `total time ${triple(b.total_time_ns)}`, `waited ${triple(b.cc_wait_ns)}`] };
}

export function bandMatrix(view) {
  const d = view.data;
  const shown = d.ops.filter((o) => o.clock !== "host").slice(0, MAX_MATRIX_OPS);
  const maxWait = Math.max(1, ...shown.map((o) => o.max_wait_ns));
  const cell = (bo) => {
    if (!bo) return h("td", { class: "num muted" }, "·");
    const [lo, med, hi] = bo.wait;
    const a = hi > 0 ? 0.15 + 0.75 * (hi / maxWait) : 0;
    return h(
      "td",
      { class: "num", style: { background: `rgba(255,140,0,${a})` }, title: `min ${fmtTime(lo)} · median ${fmtTime(med)} · max ${fmtTime(hi)} · last to arrive: rank ${bo.last}` },
      med > 0 ? fmtTime(med) : "0",
      hi > lo ? h("div", { class: "muted small" }, `${fmtTime(lo)}–${fmtTime(hi)}`) : null,
    );
  };
  return h(
    "table",
    { class: "data cc-matrix cc-bands" },
    h("thead", {}, h("tr", {}, h("th", {}, `ranks (bands of ${d.lod.band_size})`), shown.map((o) => h("th", { class: "num" }, `#${o.id}`)))),
    h(
      "tbody",
      {},
      d.lod.bands.map((b) => {
        const ops = new Map(b.ops.map((bo) => [bo.id, bo]));
        return h("tr", {}, h("td", { class: "num" }, bandLabel(b).replace(/^Ranks? /, "")), shown.map((o) => cell(ops.get(o.id))));
      }),
    ),
  );
}

export function stragglerRows(ranks, n) {
  return [...ranks].sort((a, b) => b.caused_wait_ns - a.caused_wait_ns || b.total_time_ns - a.total_time_ns || a.rank - b.rank).slice(0, n);
}
