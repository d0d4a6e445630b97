// cc_view.js — the multi-worker "CC Aggregated" view of /profile_cc/<group>?agg=1.
// Contract: renderAggregate(root, group) fetches /api/groups/<id>/collectives and draws
//  * a summary line (ranks, operations, the slowest rank, and per clock its total wait and straggler),
//  * a canvas with one row per rank on one shared time axis: the rank's compute activity
//    (grey, darker = more engines busy), and for every collective operation, at the rank's own row
//    times: its wait (arrival -> arrival + wait_ns) and its transfer (-> arrival + duration). Two
//    clocks, never mixed (docs/system.md): a device op's wait and transfer are simulated (orange,
//    blue, lane "device (sim.)"); a host op's (gloo) and the host's exchange of a device op were
//    measured (purple wait, teal transfer, lane "host"). The host lane exists only when the group has
//    host data. Device ops are boxed across the ranks with their id; the straggler's label is red.
//    Drag to zoom, double-click (or "Reset zoom") to reset, hover for details, click a rank label
//    to open that rank's tab;
//  * tables: collective operations (clock, transfer, waits and straggler per clock), ranks (totals,
//    waits and caused waits per clock), and the wait matrices (ranks x operations) per clock;
//  * level of detail over ranks (cc_bands.js): the view asks for at most (canvas height / 8 px) rows
//    (`?rows=R` in the page URL overrides); with more ranks the server answers in bands of ranks,
//    drawn one band per row with min/median/max, the ranks table lists the stragglers only;
//  * the wait distribution per collective and its last ranks to arrive (cc_waits.js).
// Test hook: window.__nprof = {agg: {data, window, hit(x, y)}, idle(), state}.

import { counters } from "./api.js";
import { WAIT, HWAIT, MEAS, SIM, ccTables } from "./cc_tables.js";
import { h } from "./dom.js";
import { fmtBytes, fmtTick, fmtTime, niceStep } from "./fmt.js";
import { hideTooltip, showTooltip } from "./tooltip.js";
import { BAND_MIN_H, bandExtent, bandHit, bandRowH, drawBands } from "./cc_bands.js";

const LABEL_W = 92;
const AXIS_H = 32;
const XFER = "rgba(30,110,220,0.85)"; // device transfer (simulated)
const HXFER = "rgba(0,137,123,0.85)"; // host collective (measured)
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

/** "straggler: rank r (the others waited X for it)" or "straggler: none (no rank waited)". */
function stragglerText(rank, caused) {
  if (rank === null || rank === undefined) return "straggler: none (no rank waited)";
  return `straggler: rank ${rank}${caused ? ` (the others waited ${fmtTime(caused)} for it)` : ""}`;
}

class AggregateView {
  constructor(root, data, group) {
    this.root = root;
    this.data = data;
    this.group = group;
    this.window = [0, data.t_max];
    this.drag = null;
    this.host = data.ops.some((o) => o.clock === "host" || o.host_max_wait_ns !== null);
    this.device = data.ops.some((o) => o.clock !== "host");
    this.rowH = data.lod ? bandRowH(data.lod.bands.length, canvasAvail()) : this.host && this.device ? 28 : 18;
    this.labelW = data.lod ? BAND_LABEL_W : LABEL_W;
    this.build();
    this.draw();
  }

  /** [y offset, height] of a lane ("host" or "device") inside a rank's row. */
  lane(which) {
    if (!(this.host && this.device)) return [3, 12];
    return which === "host" ? [2, 11] : [15, 11];
  }

  summary() {
    const d = this.data;
    const caused = (r, key) => (r === null ? 0 : d.ranks.find((x) => x.rank === r)[key]);
    const parts = [h("b", {}, `${d.ranks.length} ranks · ${d.ops.length} collective operations`)];
    if (this.device) {
      parts.push(` · device (${SIM}): total wait ${fmtTime(d.total_wait_ns)}, `);
      parts.push(h("span", { class: d.straggler === null ? "" : "cc-straggler", id: "cc-straggler" },
        stragglerText(d.straggler, caused(d.straggler, "caused_wait_ns"))));
    }
    if (this.host) {
      parts.push(` · host (${MEAS}): total wait ${fmtTime(d.host_total_wait_ns)}, `);
      parts.push(h("span", { class: d.host_straggler === null ? "" : "cc-straggler", id: "cc-host-straggler" },
        stragglerText(d.host_straggler, caused(d.host_straggler, "caused_host_wait_ns"))));
    }
    parts.push(` · slowest rank: ${d.slowest_rank} · `);
    parts.push(h("button", { class: "btn", onclick: () => this.setWindow(0, d.t_max) }, "Reset zoom"));
    return h("div", { class: "cc-summary" }, ...parts);
  }

  legend() {
    const key = (color, text) => [h("span", { class: "cc-key", style: { background: color } }), ` ${text}  `];
    const items = [...key("#888", "compute activity")];
    if (this.device) {
      items.push(...key(WAIT, `device waiting for other ranks (${SIM})`), ...key(XFER, `collective transfer (${SIM})`));
    }
    if (this.host) {
      items.push(...key(HWAIT, `host waiting for other ranks (${MEAS})`), ...key(HXFER, `host collective (gloo, ${MEAS})`));
    }
    const note = this.host && this.device
      ? " · upper lane: host clock (measured); lower lane: device (simulated; each execution placed at its host launch, so ranks launched apart sit apart: dashed box)"
      : "";
    return h("div", { class: "muted small", id: "cc-legend" }, ...items, note,
      " · drag to zoom, double-click to reset, click a rank to open its timeline");
  }

  build() {
    this.canvas = h("canvas", { class: "cc-canvas", id: "cc-canvas" });
    const holder = h("div", { class: "tl-scroll cc-holder" }, this.canvas);
    this.root.replaceChildren(this.summary(), this.legend(), holder, this.tables());
    this.canvas.addEventListener("mousedown", (e) => this.down(e));
    this.canvas.addEventListener("mousemove", (e) => this.move(e));
    this.canvas.addEventListener("mouseleave", () => hideTooltip());
    this.canvas.addEventListener("dblclick", () => this.setWindow(0, this.data.t_max));
    window.addEventListener("mouseup", (e) => this.up(e));
    this.onResize = () => this.draw();
    window.addEventListener("resize", this.onResize);
  }

  tables() {
    return ccTables(this);
  }

  openRank(rank) {
    window.location.href = `/profile_cc/${encodeURIComponent(this.group.id)}?rank=${rank}`;
  }

  /** [first, last] ns of an operation on the shared axis (device rows and, when drawn, its host side). */
  extent(op) {
    if (!op.ranks) return bandExtent(this, op);
    let a = Infinity;
    let b = -Infinity;
    for (const w of op.ranks) {
      a = Math.min(a, w.arrival);
      b = Math.max(b, w.arrival + w.duration);
      if (this.host && w.host_arrival !== null && w.host_arrival !== undefined) {
        a = Math.min(a, w.host_arrival);
        b = Math.max(b, w.host_arrival + (op.clock === "host" ? w.duration : w.host_wait_ns));
      }
    }
    return [a, b];
  }

  zoomOp(op) {
    if (this.waits) this.waits.show(op.id);
    const [first, last] = this.extent(op);
    const pad = Math.max(1, (last - first) * 0.15);
    this.setWindow(first - pad, last + pad);
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

  /** The pieces an operation draws on one rank: [lane, t0, t1, color, what] (see the module doc). */
  pieces(op, w) {
    const out = [];
    const lane = op.clock === "host" ? "host" : "device";
    const [wc, xc] = op.clock === "host" ? [HWAIT, HXFER] : [WAIT, XFER];
    if (w.wait_ns > 0) out.push([lane, w.arrival, w.arrival + w.wait_ns, wc, "wait"]);
    out.push([lane, w.arrival + w.wait_ns, w.arrival + w.duration, xc, "transfer"]);
    if (op.clock !== "host" && this.host && w.host_wait_ns > 0) {
      out.push(["host", w.host_arrival, w.host_arrival + w.host_wait_ns, HWAIT, "host wait"]);
    }
    return out;
  }

  drawAxis(g, height) {
    const [t0, t1] = this.window;
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
  }

  drawRanks(g) {
    const d = this.data;
    const [t0, t1] = this.window;
    const binNs = d.bin_ns;
    const maxBusy = Math.max(0.001, ...d.ranks.map((r) => Math.max(...r.busy)));
    const two = this.host && this.device;
    d.ranks.forEach((r, i) => {
      const y = AXIS_H + i * this.rowH;
      g.fillStyle = r.rank === d.straggler ? "#c62828" : "#1f2630";
      g.font = r.rank === d.straggler ? "bold 11px system-ui, sans-serif" : "11px system-ui, sans-serif";
      g.fillText(`Rank ${r.rank}${r.rank === d.straggler ? " ⚑" : ""}`, 6, y + 13);
      if (two) {
        g.font = "9px system-ui, sans-serif";
        g.fillStyle = "#6b7584";
        g.fillText("host", 56, y + 10);
        g.fillText("device (sim.)", 30, y + 24);
      }
      g.font = "11px system-ui, sans-serif";
      g.fillStyle = i % 2 ? "#fafbfc" : "#ffffff";
      g.fillRect(this.labelW, y, this.width - this.labelW, this.rowH);
      const [ly, lh] = this.lane("device");
      const b0 = Math.max(0, Math.floor(t0 / binNs));
      const b1 = Math.min(r.busy.length - 1, Math.ceil(t1 / binNs));
      for (let b = b0; b <= b1; b++) {
        const v = r.busy[b];
        if (!v) continue;
        const xa = this.x(b * binNs);
        g.fillStyle = `rgba(90,98,110,${0.15 + 0.7 * (v / maxBusy)})`;
        g.fillRect(xa, y + ly + 1, Math.max(1, this.x((b + 1) * binNs) - xa), lh - 2);
      }
    });
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
    this.drawAxis(g, height);
    if (d.lod) {
      drawBands(this, g, AXIS_H);
      this.drawDrag(g, height);
      return;
    }
    this.drawRanks(g);
    const rowOf = new Map(d.ranks.map((r, i) => [r.rank, i]));
    let labelEnd = -Infinity;
    for (const op of d.ops) {
      const [first, last] = this.extent(op);
      if (last < t0 || first > t1) continue;
      let top = Infinity;
      let bottom = -Infinity;
      for (const w of op.ranks) {
        const i = rowOf.get(w.rank);
        if (i === undefined) continue;
        const y = AXIS_H + i * this.rowH;
        for (const [lane, a, b, color] of this.pieces(op, w)) {
          const [ly, lh] = this.lane(lane);
          g.fillStyle = color;
          g.fillRect(this.x(a), y + ly, Math.max(1, this.x(b) - this.x(a)), lh);
        }
        top = Math.min(top, y);
        bottom = Math.max(bottom, y + this.rowH);
      }
      if (top === Infinity) continue;
      const left = this.x(Math.min(...op.ranks.map((w) => w.arrival)));
      const right = this.x(Math.max(...op.ranks.map((w) => w.arrival + w.duration)));
      g.strokeStyle = op.clock === "host" ? "rgba(0,100,90,0.9)" : "rgba(30,60,120,0.9)";
      g.lineWidth = 1;
      g.setLineDash(op.launch_skew_ns > 0 && op.clock !== "host" ? [4, 3] : []); // ranks placed at their own launches
      g.strokeRect(left - 1.5, top + 0.5, right - left + 3, bottom - top - 1);
      g.setLineDash([]);
      const label = `#${op.id} ${op.kind}`;
      const lx = Math.max(this.labelW, left);
      if (lx > labelEnd) {
        g.fillStyle = "#1e3c78";
        g.fillText(label, lx, AXIS_H - 4);
        labelEnd = lx + g.measureText(label).width + 4;
      }
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

  /** What is under canvas point (x, y): {rank, op, wait, piece} or {rank, label} or {rank, t} or null. */
  hit(x, y) {
    if (this.data.lod) return bandHit(this, x, y, AXIS_H);
    const i = Math.floor((y - AXIS_H) / this.rowH);
    const r = this.data.ranks[i];
    if (!r) return null;
    if (x < this.labelW) return { rank: r.rank, label: true };
    const t = this.t(x);
    const dy = y - AXIS_H - i * this.rowH;
    const tol = ((this.window[1] - this.window[0]) / (this.width - this.labelW)) * 2;
    for (const op of this.data.ops) {
      const w = op.ranks.find((q) => q.rank === r.rank);
      if (!w) continue;
      for (const piece of this.pieces(op, w)) {
        const [ly, lh] = this.lane(piece[0]);
        if (this.host && this.device && (dy < ly - 1 || dy > ly + lh + 1)) continue;
        if (t >= piece[1] - tol && t <= piece[2] + tol) return { rank: r.rank, op, wait: w, piece: piece[4] };
      }
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
      const w = hit.wait;
      const clock = op.clock === "host" ? MEAS : SIM;
      const onHost = op.clock === "host" || hit.piece === "host wait";
      const lines = [`#${op.id} ${op.kind} · rank ${hit.rank} · ${onHost ? `host clock (${MEAS})` : `device clock (${SIM})`}`,
        `${fmtBytes(op.bytes)} per rank · ${op.algorithm || "ring"}`];
      if (hit.piece === "host wait") {
        lines.push(`host: entered the exchange at ${fmtTime(w.host_arrival)}, waited ${fmtTime(w.host_wait_ns)} for the other ranks (${MEAS})`);
        lines.push(op.host_max_wait_ns > 0 ? `host straggler: rank ${op.host_straggler}` : "no host waited");
      } else {
        lines.push(`arrived ${fmtTime(w.arrival)}, waited ${fmtTime(w.wait_ns)} (${clock})`);
        lines.push(`transfer ${fmtTime(op.transfer_ns)} (${clock})`);
        lines.push(op.max_wait_ns > 0 ? `straggler: rank ${op.straggler}` : "no rank waited");
        if (op.clock !== "host" && w.host_wait_ns !== null && w.host_wait_ns !== undefined) {
          lines.push(`its host waited ${fmtTime(w.host_wait_ns)} in the exchange (${MEAS})`);
        }
        if (op.clock !== "host" && op.launch_skew_ns > 0) {
          lines.push(`placed at its host launch: the ranks' launches are ${fmtTime(op.launch_skew_ns)} apart (host clock)`);
        }
      }
      showTooltip(lines, e.clientX, e.clientY);
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
