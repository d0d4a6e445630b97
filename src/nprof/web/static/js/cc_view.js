// cc_view.js — the multi-worker "CC Aggregated" view of /profile_cc/<group>?agg=1.
// Contract: renderAggregate(root, group) fetches /api/groups/<id>/collectives and draws
//  * a summary line (ranks, operations, total wait, the straggler and the slowest rank),
//  * a canvas with one row per rank on one shared time axis: the rank's compute activity
//    (grey, darker = more engines busy), and for every collective operation its wait on that
//    rank (orange, arrival -> last arrival) and its transfer (blue, last arrival -> end); every
//    operation is boxed across all ranks with its id; the straggler's label is red.
//    Drag to zoom, double-click (or "Reset zoom") to reset, hover for details, click a rank label
//    to open that rank's tab;
//  * tables: collective operations (with straggler and waits), ranks (totals, waits, caused wait),
//    and the wait matrix (ranks x operations);
//  * level of detail over ranks (cc_bands.js): the view asks for at most (canvas height / 8 px) rows
//    (`?rows=R` in the page URL overrides); with more ranks the server answers in bands of ranks,
//    drawn one band per row with min/median/max, the ranks table lists the stragglers only;
//  * the wait distribution per collective and its last ranks to arrive (cc_waits.js).
// Test hook: window.__nprof = {agg: {data, window, hit(x, y)}, idle(), state}.

import { counters } from "./api.js";
import { h, table } from "./dom.js";
import { fmtBytes, fmtTick, fmtTime, niceStep } from "./fmt.js";
import { hideTooltip, showTooltip } from "./tooltip.js";
import { BAND_MIN_H, bandHit, bandMatrix, bandRowH, drawBands, stragglerRows } from "./cc_bands.js";
import { waitsPanel } from "./cc_waits.js";

const LABEL_W = 92;
const AXIS_H = 32;
const ROW_H = 18;
const WAIT = "rgba(255,140,0,0.85)";
const XFER = "rgba(30,110,220,0.85)";
const MAX_MATRIX_OPS = 64;
const MAX_RANK_ROWS = 20; // the ranks table under level of detail: the stragglers only
const BAND_LABEL_W = 130;

/** Pixel height the canvas may fill before ranks are banded. */
function canvasAvail() {
  return Math.max(240, window.innerHeight - 260);
}

async function fetchJSON(path) {
  counters.inflight += 1;
  try {
    const res = await fetch(path);
    const data = await res.json();
    if (!res.ok) throw new Error(data && data.error ? data.error : `${res.status}`);
    return data;
  } finally {
    counters.inflight -= 1;
  }
}

export async function renderAggregate(root, group, st) {
  root.replaceChildren(h("p", { class: "loading" }, "Loading the aggregated view…"));
  const asked = Number(new URLSearchParams(window.location.search).get("rows"));
  const rows = asked > 0 ? asked : Math.floor(canvasAvail() / BAND_MIN_H);
  const data = await fetchJSON(`/api/groups/${encodeURIComponent(group.id)}/collectives?bins=600&rows=${rows}`);
  const view = new AggregateView(root, data, group);
  window.__nprof = { agg: view, idle: () => counters.inflight === 0, state: st };
  return view;
}

class AggregateView {
  constructor(root, data, group) {
    this.root = root;
    this.data = data;
    this.group = group;
    this.window = [0, data.t_max];
    this.drag = null;
    this.labelW = data.lod ? BAND_LABEL_W : LABEL_W;
    this.rowH = data.lod ? bandRowH(data.lod.bands.length, canvasAvail()) : ROW_H;
    this.build();
    this.draw();
  }

  build() {
    const d = this.data;
    const strag = d.straggler === null ? "none (no rank waited)" : `rank ${d.straggler}`;
    const caused = d.straggler === null ? null : d.ranks.find((r) => r.rank === d.straggler).caused_wait_ns;
    const summary = h(
      "div",
      { class: "cc-summary" },
      h("b", {}, `${d.ranks.length} ranks · ${d.ops.length} collective operations`),
      ` · total wait ${fmtTime(d.total_wait_ns)} · `,
      h("span", { class: d.straggler === null ? "" : "cc-straggler", id: "cc-straggler" }, `straggler: ${strag}`),
      caused ? ` (the others waited ${fmtTime(caused)} for it)` : "",
      ` · slowest rank: ${d.slowest_rank} · `,
      h("button", { class: "btn", onclick: () => this.setWindow(0, d.t_max) }, "Reset zoom"),
    );
    const legend = h(
      "div",
      { class: "muted small" },
      h("span", { class: "cc-key", style: { background: "#888" } }),
      " compute activity  ",
      h("span", { class: "cc-key", style: { background: WAIT } }),
      " waiting for other ranks  ",
      h("span", { class: "cc-key", style: { background: XFER } }),
      " collective transfer (ring)  · drag to zoom, double-click to reset, click a rank to open its timeline",
    );
    this.canvas = h("canvas", { class: "cc-canvas", id: "cc-canvas" });
    const holder = h("div", { class: "tl-scroll cc-holder" }, this.canvas);
    this.root.replaceChildren(summary, legend, holder, this.tables());
    this.canvas.addEventListener("mousedown", (e) => this.down(e));
    this.canvas.addEventListener("mousemove", (e) => this.move(e));
    this.canvas.addEventListener("mouseleave", () => hideTooltip());
    this.canvas.addEventListener("dblclick", () => this.setWindow(0, this.data.t_max));
    window.addEventListener("mouseup", (e) => this.up(e));
    this.onResize = () => this.draw();
    window.addEventListener("resize", this.onResize);
  }

  tables() {
    const d = this.data;
    const ops = table(
      [
        { label: "op", key: "id", cls: "num" },
        { label: "kind", key: "kind" },
        { label: "bytes/rank", key: "bytes", cls: "num", fmt: (v) => fmtBytes(v) },
        { label: "algorithm", key: "algorithm" },
        { label: "start", key: "start", cls: "num", fmt: (v) => fmtTime(v) },
        { label: "transfer", key: "end", cls: "num", fmt: (v, r) => fmtTime(v - r.start) },
        { label: "max wait", key: "max_wait_ns", cls: "num", fmt: (v) => fmtTime(v) },
        { label: "total wait", key: "total_wait_ns", cls: "num", fmt: (v) => fmtTime(v) },
        { label: "straggler", key: "straggler", fmt: (v, r) => (r.max_wait_ns > 0 ? `rank ${v}` : "–") },
      ],
      d.ops,
      { cls: "cc-ops", rowAttrs: (r) => ({ class: "clickable", onclick: () => this.zoomOp(r) }) },
    );
    const ranks = table(
      [
        { label: "rank", key: "rank", cls: "num" },
        { label: "nd/nc", key: "nd_idx", fmt: (v, r) => `${v}/${r.nc_idx}` },
        { label: "total time", key: "total_time_ns", cls: "num", fmt: (v) => fmtTime(v) },
        { label: "cc_op_time", key: "cc_op_time_ns", cls: "num", fmt: (v) => fmtTime(v) },
        { label: "cc_op_count", key: "cc_op_count", cls: "num" },
        { label: "waited", key: "cc_wait_ns", cls: "num", fmt: (v) => fmtTime(v) },
        { label: "made others wait", key: "caused_wait_ns", cls: "num", fmt: (v) => fmtTime(v) },
      ],
      d.lod ? stragglerRows(d.ranks, MAX_RANK_ROWS) : d.ranks,
      {
        cls: "cc-ranks clickable",
        rowAttrs: (r) => ({ class: r.rank === d.straggler ? "cc-straggler-row" : "", onclick: () => this.openRank(r.rank) }),
      },
    );
    const shown = d.lod ? [] : d.ops.slice(0, MAX_MATRIX_OPS);
    const maxWait = Math.max(1, ...shown.map((o) => o.max_wait_ns));
    const waitOf = new Map();
    for (const op of shown) for (const w of op.ranks) waitOf.set(`${w.rank}:${op.id}`, w.wait_ns);
    const matrix = h(
      "table",
      { class: "data cc-matrix" },
      h("thead", {}, h("tr", {}, h("th", {}, "rank"), shown.map((o) => h("th", { class: "num" }, `#${o.id}`)))),
      h(
        "tbody",
        {},
        (d.lod ? [] : d.ranks).map((r) =>
          h(
            "tr",
            {},
            h("td", { class: "num" }, String(r.rank)),
            shown.map((o) => {
              const w = waitOf.get(`${r.rank}:${o.id}`);
              if (w === undefined) return h("td", { class: "num muted" }, "·");
              const a = w > 0 ? 0.15 + 0.75 * (w / maxWait) : 0;
              return h("td", { class: "num", style: { background: `rgba(255,140,0,${a})` } }, w > 0 ? fmtTime(w) : "0");
            }),
          ),
        ),
      ),
    );
    const more = d.ops.length > MAX_MATRIX_OPS ? h("p", { class: "muted" }, `first ${MAX_MATRIX_OPS} operations shown`) : null;
    const rankTitle = d.lod ? `Stragglers (${Math.min(MAX_RANK_ROWS, d.ranks.length)} of ${d.ranks.length} ranks, by wait caused)` : "Ranks";
    this.waits = waitsPanel(this.group, d.ops);
    return h(
      "div",
      { class: "cols cc-tables" },
      h("section", { class: "wide" }, h("h3", {}, "Collective operations"), ops),
      this.waits,
      h("section", {}, h("h3", {}, rankTitle), ranks),
      h("section", {}, h("h3", {}, "Wait per rank and operation"), d.lod ? bandMatrix(this) : matrix, more),
    );
  }

  openRank(rank) {
    window.location.href = `/profile_cc/${encodeURIComponent(this.group.id)}?rank=${rank}`;
  }

  zoomOp(op) {
    if (this.waits) this.waits.show(op.id);
    const first = op.ranks ? Math.min(...op.ranks.map((w) => w.arrival)) : Math.min(...this.data.lod.bands.flatMap((b) => b.ops.filter((o) => o.id === op.id).map((o) => o.arrival[0])));
    const pad = Math.max(1, (op.end - first) * 0.15);
    this.setWindow(first - pad, op.end + pad);
  }

  setWindow(t0, t1) {
    const tmax = this.data.t_max;
    t0 = Math.max(0, t0);
    t1 = Math.min(tmax, t1);
    if (!(t1 > t0)) return;
    this.window = [t0, t1];
    this.draw();
  }

  x(t) {
    const [t0, t1] = this.window;
    return this.labelW + ((t - t0) / (t1 - t0)) * (this.width - this.labelW);
  }

  t(x) {
    const [t0, t1] = this.window;
    return t0 + ((x - this.labelW) / (this.width - this.labelW)) * (t1 - t0);
  }

  draw() {
    const d = this.data;
    const c = this.canvas;
    const dpr = window.devicePixelRatio || 1;
    this.width = Math.max(400, c.parentElement ? c.parentElement.clientWidth - 2 : 900);
    const height = AXIS_H + (d.lod ? d.lod.bands.length : d.ranks.length) * this.rowH + 4;
    c.width = this.width * dpr;
    c.height = height * dpr;
    c.style.width = `${this.width}px`;
    c.style.height = `${height}px`;
    const g = c.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, this.width, height);
    g.font = "11px system-ui, sans-serif";
    const [t0, t1] = this.window;
    // axis
    const step = niceStep(t1 - t0, this.width - this.labelW);
    g.fillStyle = "#6b7584";
    g.strokeStyle = "#e6e9ee";
    for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) {
      const x = this.x(t);
      g.fillText(fmtTick(t, step), x + 2, 11);
      g.beginPath();
      g.moveTo(x + 0.5, AXIS_H - 6);
      g.lineTo(x + 0.5, height);
      g.stroke();
    }
    if (d.lod) {
      drawBands(this, g, AXIS_H);
      this.drawDrag(g, height);
      return;
    }
    const binNs = d.bin_ns;
    const maxBusy = Math.max(0.001, ...d.ranks.map((r) => Math.max(...r.busy)));
    d.ranks.forEach((r, i) => {
      const y = AXIS_H + i * ROW_H;
      g.fillStyle = r.rank === d.straggler ? "#c62828" : "#1f2630";
      g.font = r.rank === d.straggler ? "bold 11px system-ui, sans-serif" : "11px system-ui, sans-serif";
      g.fillText(`Rank ${r.rank}${r.rank === d.straggler ? " ⚑" : ""}`, 6, y + 13);
      g.fillStyle = i % 2 ? "#fafbfc" : "#ffffff";
      g.fillRect(this.labelW, y, this.width - this.labelW, ROW_H);
      const b0 = Math.max(0, Math.floor(t0 / binNs));
      const b1 = Math.min(r.busy.length - 1, Math.ceil(t1 / binNs));
      for (let b = b0; b <= b1; b++) {
        const v = r.busy[b];
        if (!v) continue;
        const xa = this.x(b * binNs);
        const xb = this.x((b + 1) * binNs);
        g.fillStyle = `rgba(90,98,110,${0.15 + 0.7 * (v / maxBusy)})`;
        g.fillRect(xa, y + 4, Math.max(1, xb - xa), ROW_H - 8);
      }
    });
    // collective operations: waits and transfers per rank, boxed across ranks
    const rowOf = new Map(d.ranks.map((r, i) => [r.rank, i]));
    for (const op of d.ops) {
      if (op.end < t0 || Math.min(...op.ranks.map((w) => w.arrival)) > t1) continue;
      let top = Infinity;
      let bottom = -Infinity;
      let left = Infinity;
      for (const w of op.ranks) {
        const i = rowOf.get(w.rank);
        if (i === undefined) continue;
        const y = AXIS_H + i * ROW_H;
        top = Math.min(top, y);
        bottom = Math.max(bottom, y + ROW_H);
        const xa = this.x(w.arrival);
        const xs = this.x(op.start);
        const xe = this.x(op.end);
        left = Math.min(left, xa);
        if (xs - xa > 0.3) {
          g.fillStyle = WAIT;
          g.fillRect(xa, y + 3, Math.max(1, xs - xa), ROW_H - 6);
        }
        g.fillStyle = XFER;
        g.fillRect(xs, y + 3, Math.max(1, xe - xs), ROW_H - 6);
      }
      if (top === Infinity) continue;
      g.strokeStyle = "rgba(30,60,120,0.9)";
      g.lineWidth = 1;
      g.strokeRect(left - 1.5, top + 0.5, this.x(op.end) - left + 3, bottom - top - 1);
      g.fillStyle = "#1e3c78";
      g.fillText(`#${op.id} ${op.kind}`, Math.max(this.labelW, left), AXIS_H - 4);
    }
    this.drawDrag(g, height);
  }

  drawDrag(g, height) {
    if (this.drag && this.drag.x1 !== undefined) {
      g.fillStyle = "rgba(30,110,220,0.15)";
      const a = Math.min(this.drag.x0, this.drag.x1);
      g.fillRect(a, AXIS_H, Math.abs(this.drag.x1 - this.drag.x0), height - AXIS_H);
    }
  }

  /** What is under canvas point (x, y): {rank, op, wait} or {rank} or null. */
  hit(x, y) {
    if (this.data.lod) return bandHit(this, x, y, AXIS_H);
    const i = Math.floor((y - AXIS_H) / ROW_H);
    const r = this.data.ranks[i];
    if (!r) return null;
    if (x < this.labelW) return { rank: r.rank, label: true };
    const t = this.t(x);
    const tol = ((this.window[1] - this.window[0]) / (this.width - this.labelW)) * 2;
    for (const op of this.data.ops) {
      const w = op.ranks.find((q) => q.rank === r.rank);
      if (w && t >= w.arrival - tol && t <= op.end + tol) return { rank: r.rank, op, wait: w };
    }
    return { rank: r.rank, t };
  }

  down(e) {
    const x = e.offsetX;
    if (x < this.labelW) {
      const hit = this.hit(x, e.offsetY);
      if (hit) this.openRank(hit.rank);
      return;
    }
    this.drag = { x0: x };
  }

  move(e) {
    if (this.drag) {
      this.drag.x1 = e.offsetX;
      this.draw();
      return;
    }
    const hit = this.hit(e.offsetX, e.offsetY);
    if (!hit) return hideTooltip();
    if (hit.lines) return showTooltip(hit.lines, e.clientX, e.clientY);
    if (hit.op) {
      const op = hit.op;
      showTooltip(
        [
          `#${op.id} ${op.kind} · rank ${hit.rank}`,
          `${fmtBytes(op.bytes)} per rank · ${op.algorithm || "ring"}`,
          `arrived ${fmtTime(hit.wait.arrival)}, waited ${fmtTime(hit.wait.wait_ns)}`,
          `transfer ${fmtTime(op.end - op.start)} (all ranks from ${fmtTime(op.start)})`,
          op.max_wait_ns > 0 ? `straggler: rank ${op.straggler}` : "no rank waited",
        ],
        e.clientX,
        e.clientY,
      );
    } else if (hit.label) {
      showTooltip([`Rank ${hit.rank}`, "click to open this rank's timeline"], e.clientX, e.clientY);
    } else {
      hideTooltip();
    }
  }

  up(e) {
    if (!this.drag) return;
    const { x0, x1 } = this.drag;
    this.drag = null;
    if (x1 !== undefined && Math.abs(x1 - x0) > 4) this.setWindow(this.t(Math.min(x0, x1)), this.t(Math.max(x0, x1)));
    else this.draw();
  }
}
