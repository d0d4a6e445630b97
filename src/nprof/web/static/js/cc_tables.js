// cc_tables.js — the tables of the CC Aggregated view (cc_view.js): collective operations, ranks and
// the wait matrices, each number labelled with its clock: device waits are simulated by the model,
// host waits were measured (docs/system.md "Two clocks").
// Contract: ccTables(view) -> the tables' element, from view.data (GET /api/groups/<id>/collectives),
// view.host / view.device (whether the group has host data / device ops), view.zoomOp(op) and
// view.openRank(rank) (row clicks). Under level of detail over ranks (`view.data.lod`, cc_bands.js) the
// ranks table lists the stragglers and the device matrix is the band x operation one; the wait
// distribution panel (cc_waits.js) is `view.waits`.

import { bandMatrix, stragglerRows } from "./cc_bands.js";
import { waitsPanel } from "./cc_waits.js";
import { h, table } from "./dom.js";
import { fmtBytes, fmtTime } from "./fmt.js";

export const WAIT = "rgba(255,140,0,0.85)"; // device wait (simulated)
export const HWAIT = "rgba(142,36,170,0.85)"; // host wait (measured)
export const SIM = "simulated";
export const MEAS = "measured";
const MAX_MATRIX_OPS = 64;
const MAX_RANK_ROWS = 20; // the ranks table under level of detail: the stragglers only
const waitFmt = (v) => (v === null || v === undefined ? "N/A" : fmtTime(v));

export function ccTables(view) {
  const d = view.data;
  const strag = (v, r, max) => (max > 0 ? `rank ${v}` : max === null || max === undefined ? "N/A" : "–");
  const opCols = [
    { label: "op", key: "id", cls: "num" },
    { label: "kind", key: "kind" },
    { label: "bytes/rank", key: "bytes", cls: "num", fmt: (v) => fmtBytes(v) },
    { label: "algorithm", key: "algorithm" },
    { label: "clock", key: "clock", fmt: (v) => (v === "host" ? `host (${MEAS})` : `device (${SIM})`) },
    { label: "transfer", key: "transfer_ns", cls: "num", fmt: (v) => fmtTime(v) },
    { label: "max wait (op's clock)", key: "max_wait_ns", cls: "num", fmt: (v) => fmtTime(v) },
    { label: "total wait (op's clock)", key: "total_wait_ns", cls: "num", fmt: (v) => fmtTime(v) },
    { label: "straggler", key: "straggler", fmt: (v, r) => strag(v, r, r.max_wait_ns) },
  ];
  if (view.host && view.device) {
    opCols.push(
      { label: `host wait (${MEAS}, max)`, key: "host_max_wait_ns", cls: "num", fmt: waitFmt },
      { label: "host straggler", key: "host_straggler", fmt: (v, r) => strag(v, r, r.host_max_wait_ns) },
    );
  }
  const ops = table(opCols, d.ops, { cls: "cc-ops", rowAttrs: (r) => ({ class: "clickable", onclick: () => view.zoomOp(r) }) });
  const rankCols = [
    { label: "rank", key: "rank", cls: "num" },
    { label: "nd/nc", key: "nd_idx", fmt: (v, r) => `${v}/${r.nc_idx}` },
    { label: "total time", key: "total_time_ns", cls: "num", fmt: (v) => fmtTime(v) },
    { label: "cc_op_time", key: "cc_op_time_ns", cls: "num", fmt: (v) => fmtTime(v) },
    { label: "cc_op_count", key: "cc_op_count", cls: "num" },
  ];
  if (view.device) {
    rankCols.push(
      { label: `device waited (${SIM})`, key: "cc_wait_ns", cls: "num", fmt: (v) => fmtTime(v) },
      { label: `made others wait (${SIM})`, key: "caused_wait_ns", cls: "num", fmt: (v) => fmtTime(v) },
    );
  }
  if (view.host) {
    rankCols.push(
      { label: `host waited (${MEAS})`, key: "host_wait_ns", cls: "num", fmt: (v) => fmtTime(v) },
      { label: `made others wait (host, ${MEAS})`, key: "caused_host_wait_ns", cls: "num", fmt: (v) => fmtTime(v) },
    );
  }
  const ranks = table(rankCols, d.lod ? stragglerRows(d.ranks, MAX_RANK_ROWS) : d.ranks, {
    cls: "cc-ranks clickable",
    rowAttrs: (r) => ({ class: r.rank === d.straggler ? "cc-straggler-row" : "", onclick: () => view.openRank(r.rank) }),
  });
  const rankTitle = d.lod ? `Stragglers (${Math.min(MAX_RANK_ROWS, d.ranks.length)} of ${d.ranks.length} ranks, by wait caused)` : "Ranks";
  view.waits = waitsPanel(view.group, d.ops);
  const sections = [
    h("section", { class: "wide" }, h("h3", {}, "Collective operations"), ops),
    view.waits,
    h("section", {}, h("h3", {}, rankTitle), ranks),
  ];
  const devTitle = `Device wait (${SIM}) per rank and operation`;
  if (view.device && d.lod) sections.push(h("section", {}, h("h3", {}, devTitle), bandMatrix(view)));
  else if (view.device) sections.push(matrix(d, devTitle, "wait_ns", WAIT, "cc-matrix", (o) => o.clock !== "host"));
  if (view.host && !d.lod) sections.push(matrix(d, `Host wait (${MEAS}) per rank and operation`, "host_wait_ns", HWAIT, "cc-host-matrix", () => true));
  return h("div", { class: "cols cc-tables" }, ...sections);
}

/** A ranks x operations table of one wait field (cells shaded by `color`), the first MAX_MATRIX_OPS ops. */
function matrix(d, title, field, color, cls, keep) {
  const all = d.ops.filter(keep);
  const shown = all.slice(0, MAX_MATRIX_OPS);
  const waitOf = new Map();
  for (const op of shown) for (const w of op.ranks) waitOf.set(`${w.rank}:${op.id}`, w[field]);
  const maxWait = Math.max(1, ...[...waitOf.values()].filter((v) => v !== null && v !== undefined));
  const [r, g, b] = color.match(/\d+/g);
  const cell = (w) => {
    if (w === undefined || w === null) return h("td", { class: "num muted" }, w === null ? "N/A" : "·");
    const a = w > 0 ? 0.15 + 0.75 * (w / maxWait) : 0;
    return h("td", { class: "num", style: { background: `rgba(${r},${g},${b},${a})` } }, w > 0 ? fmtTime(w) : "0");
  };
  const body = d.ranks.map((rk) =>
    h("tr", {}, h("td", { class: "num" }, String(rk.rank)), shown.map((o) => cell(waitOf.get(`${rk.rank}:${o.id}`)))),
  );
  const head = h("thead", {}, h("tr", {}, h("th", {}, "rank"), shown.map((o) => h("th", { class: "num" }, `#${o.id}`))));
  const more = all.length > MAX_MATRIX_OPS ? h("p", { class: "muted" }, `first ${MAX_MATRIX_OPS} operations shown`) : null;
  return h("section", {}, h("h3", {}, title), h("table", { class: `data ${cls}` }, head, h("tbody", {}, body)), more);
}
