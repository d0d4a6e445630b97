// cc_waits.js — the per-collective wait distribution of the CC Aggregated view.
// Contract: waitsPanel(group, ops) returns a section with an operation picker ("all operations" or
// one of `ops`), a bar chart of the waits in equal buckets (GET /api/groups/<id>/waits?op=&buckets=)
// and the last ranks to arrive (the stragglers of that operation). `panel.show(opId)` selects an
// operation (null: all); a line under the title names the clock of the waits; the chart is drawn as <div> bars (one per bucket, height by count, title
// with the bucket's range and count) so it needs no canvas.

import { counters } from "./api.js";
import { h, table } from "./dom.js";
import { fmtTime } from "./fmt.js";

const BUCKETS = 20;
const TOP = 10;

async function fetchWaits(gid, op) {
  const q = new URLSearchParams({ buckets: String(BUCKETS), top: String(TOP) });
  if (op !== null) q.set("op", String(op));
  counters.inflight += 1;
  try {
    const res = await fetch(`/api/groups/${encodeURIComponent(gid)}/waits?${q}`);
    const data = await res.json();
    if (!res.ok) throw new Error(data && data.error ? data.error : `${res.status}`);
    return data;
  } finally {
    counters.inflight -= 1;
  }
}

function chart(w) {
  const top = Math.max(1, ...w.counts);
  const bars = w.counts.map((c, i) =>
    h(
      "div",
      {
        class: "cc-hbar",
        title: `${fmtTime(w.edges[i])} – ${fmtTime(w.edges[i + 1])}: ${c} rank-operation${c === 1 ? "" : "s"}`,
        style: { height: `${c ? Math.max(2, (100 * c) / top) : 0}%` },
      },
      c ? h("span", { class: "cc-hcount" }, String(c)) : null,
    ),
  );
  return h(
    "div",
    {},
    h("div", { class: "cc-hist", id: "cc-hist" }, bars),
    h("div", { class: "cc-haxis muted small" }, h("span", {}, "0"), h("span", {}, `wait → ${fmtTime(w.max || 0)}`)),
    h(
      "p",
      { class: "small" },
      `${w.n} waits · min ${fmtTime(w.min || 0)} · median ${fmtTime(w.median || 0)} · max ${fmtTime(w.max || 0)}`,
    ),
  );
}

// The clock the waits are on (an operation's waits are on its own clock: "device" simulated, "host" measured).
function clockNote(ops) {
  const clocks = new Set(ops.map((o) => o.clock || "device"));
  const named = { device: "device clock (simulated)", host: "host clock (measured)" };
  const text = clocks.size === 1 ? `waits on the ${named[[...clocks][0]] || [...clocks][0]}` : "each operation's waits on its own clock (see the table's clock column)";
  return h("p", { class: "muted small", id: "cc-waits-clock" }, text);
}

export function waitsPanel(group, ops) {
  const body = h("div", { class: "cc-waits-body" }, h("p", { class: "loading" }, "Loading…"));
  const pick = h(
    "select",
    { id: "cc-waits-op", onchange: () => panel.show(pick.value === "" ? null : Number(pick.value)) },
    h("option", { value: "" }, "all operations"),
    ops.map((o) => h("option", { value: String(o.id) }, `#${o.id} ${o.kind}`)),
  );
  const panel = h("section", { class: "cc-waits" }, h("h3", {}, "Wait distribution ", pick), clockNote(ops), body);
  panel.show = async (op) => {
    pick.value = op === null ? "" : String(op);
    try {
      const w = await fetchWaits(group.id, op);
      const latest = table(
        [
          { label: "rank", key: "rank", cls: "num" },
          { label: "op", key: "op", cls: "num", fmt: (v) => `#${v}` },
          { label: "arrived", key: "arrival", cls: "num", fmt: (v) => fmtTime(v) },
          { label: "waited", key: "wait_ns", cls: "num", fmt: (v) => fmtTime(v) },
        ],
        w.latest,
        { cls: "cc-latest" },
      );
      body.replaceChildren(chart(w), h("h4", {}, "Last to arrive"), latest);
    } catch (e) {
      body.replaceChildren(h("p", { class: "error" }, `cannot load the waits: ${e.message}`));
    }
  };
  panel.show(null);
  return panel;
}
