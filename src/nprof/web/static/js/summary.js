// summary.js — the Summary tab (U7): the memory/compute-bound verdict on top (then, for a trn3 profile, the
// line naming the figures that rest on assumed hardware numbers), every
// summary metric grouped with value + unit and a help tooltip (its description),
// program info (inputs/outputs/weights, FLOPs), engine, opcode, layer and DMA queue
// tables, memory usage and a terminology list built from the metric descriptions.
// Contract: activate() loads everything once (lazily, on first show); `busy` while loading.

import { api } from "./api.js";
import { fieldGroup, h, help, loadOnce, table } from "./dom.js";
import { fmtBytes, fmtInt, fmtValue } from "./fmt.js";
import { drawRoofline } from "./roofline.js";
import { analysisTable } from "./tables.js";

/** The roofline chart (run and layers against the device's compute and HBM roofs), or a note why not. */
function rooflineSection(roof) {
  if (!roof || !roof.peak_flops || !roof.hbm_bandwidth || !roof.run.intensity) {
    return h("p", { class: "muted", id: "roofline-none" }, "Roofline: needs device peaks (FLOP/s, HBM bandwidth), FLOPs and HBM traffic.");
  }
  const canvas = h("canvas", { id: "roofline", width: 640, height: 300 });
  requestAnimationFrame(() => drawRoofline(canvas, roof));
  return h(
    "section",
    { class: "roofline" },
    h("h3", {}, "Roofline", help("Achieved FLOP/s against arithmetic intensity (FLOP per HBM byte); the roofs are the preset's peak FLOP/s and HBM bandwidth × intensity. Large dot: the run; small dots: layers (over each layer's span).")),
    canvas,
  );
}

const ROW_TERMS = [
  ["DMA q0…q15", "Direct-memory-access queues moving data between HBM and on-chip SBUF (top of the timeline)."],
  ["TensorE (LoadStationary)", "The Tensor engine loading the stationary (weights) matrix into the systolic array."],
  ["TensorMatrix (MultiplyMoving)", "The Tensor engine streaming the moving matrix through: the matrix multiplications."],
  ["VectorE / ScalarE / GpSimdE", "Element-wise, reduction, activation and general-purpose SIMD engines."],
  ["SyncE", "The engine that coordinates the others through semaphores."],
  ["CC-core", "Collective-communication cores synchronising all-reduce / all-gather operations across workers."],
  ["TensorMatrix utilization", "Share of time the TensorMatrix row is busy, per time bin."],
  ["Pending DMA count", "DMA transfers in flight at each instant."],
  ["DMA throughput", "Bytes moved per nanosecond (GB/s) by all DMA queues."],
];

export class SummaryPanel {
  constructor(el, view) {
    this.el = el;
    this.view = view;
    this.busy = false;
    this.loaded = false;
  }

  async activate() {
    const v = this.view;
    const tables = v.info.tables || [];
    const want = ["engines", "opcodes", "layers", "dma_queues", "findings"].filter((t) => tables.includes(t));
    await loadOnce(
      this,
      "the summary",
      () => Promise.all([api.summary(v.id), api.roofline(v.id), ...want.map((t) => api.table(v.id, t, 0, 500))]),
      ([sum, roof, ...tabs]) => this._render(sum, Object.fromEntries(want.map((t, i) => [t, tabs[i]])), roof),
    );
  }

  _render(sum, tabs, roof) {
    const v = this.view;
    const verdict = sum.verdict || {};
    const vcls = ["memory", "compute", "latency"].includes(verdict.bound) ? verdict.bound : "unknown";
    const big = { memory: "Memory-bound", compute: "Compute-bound", latency: "Latency/overhead-bound" }[verdict.bound] || "Bound: unknown";
    const verdictEl = h(
      "div",
      { class: `verdict ${vcls}`, id: "verdict" },
      h("div", { class: "verdict-big" }, big),
      h("div", {}, verdict.text || "No matmuls or no device peaks: the memory/compute verdict needs both."),
    );
    const groups = (sum.groups || []).map((g) =>
      fieldGroup(
        "metric-group",
        g.name,
        g.metrics.map((m) => ({ key: m.key, label: m.label, help: m.description, value: fmtValue(m.value, m.unit) })),
      ),
    );
    const prog = v.info.program;
    const progEl = prog
      ? h(
          "section",
          { class: "metric-group" },
          h("h3", {}, "Program"),
          h(
            "dl",
            {},
            [
              ["model FLOPs", fmtInt(prog.flops)],
              ["hardware FLOPs", fmtInt(prog.hw_flops)],
              ["instructions", fmtInt(prog.instruction_count)],
              ["DMA transfers", fmtInt(prog.dma_count)],
              prog.path ? ["file", prog.path] : null,
            ]
              .filter(Boolean)
              .map(([k, val]) => [h("dt", {}, k), h("dd", {}, val)]),
          ),
          prog.tensors && prog.tensors.length
            ? table(
                [{ label: "tensor" }, { label: "kind" }, { label: "shape" }, { label: "dtype" }, { label: "size", cls: "num", fmt: fmtBytes }],
                prog.tensors.map((t) => [t.name, t.kind, `[${(t.shape || []).join(", ")}]`, t.dtype, t.bytes]),
              )
            : h("p", { class: "muted" }, "No tensor table in this profile."),
        )
      : null;
    const findings = findingsList(tabs.findings, v);
    const section = (title, tip, body) => h("section", { class: "summary-table" }, h("h3", {}, title, help(tip)), body);
    const parts = [];
    if (tabs.engines) parts.push(section("Engines", "Per-engine instruction time, active time and count", analysisTable(tabs.engines)));
    if (tabs.layers && tabs.layers.rows.length) {
      parts.push(
        section(
          "Layers",
          "Framework layers in order of first appearance; click one to zoom to its span and highlight its events",
          analysisTable(tabs.layers, {
            rowTitle: "zoom to this layer and search its events",
            onRow: (r) => {
              v.panels.search.setQuery([["layer", r.layer]], false);
              v.setWindow(r.start_ns, Math.max(r.end_ns, r.start_ns + 10), true);
            },
          }),
        ),
      );
    }
    if (tabs.dma_queues) parts.push(section("DMA queues", "Transfers, bytes, active time and throughput per queue", analysisTable(tabs.dma_queues)));
    if (tabs.opcodes) {
      parts.push(
        section(
          "Opcodes",
          "Per-opcode counts and durations, longest total first; click one to search it",
          analysisTable(tabs.opcodes, { onRow: (r) => v.panels.search.setQuery([["opcode", r.opcode]], false) }),
        ),
      );
    }
    const terms = [
      ...ROW_TERMS,
      ...(sum.groups || []).flatMap((g) => g.metrics.filter((m) => m.description).map((m) => [m.label, m.description])),
    ];
    const termEl = h(
      "details",
      { class: "terminology" },
      h("summary", {}, `Terminology (${terms.length} terms)`),
      h("dl", {}, terms.map(([k, d]) => [h("dt", {}, k), h("dd", {}, d)])),
    );
    const assumedEl = v.info.assumptions ? h("p", { class: "assumed-figures", id: "assumed-figures" }, v.info.assumptions) : null;
    // replaceChildren writes a null argument as the text "null": absent sections are dropped first
    const sections = [
      verdictEl,
      assumedEl,
      rooflineSection(roof),
      findings,
      h("div", { class: "metric-groups" }, groups, progEl),
      h("div", { class: "summary-tables" }, parts),
      termEl,
    ];
    this.el.replaceChildren(...sections.filter(Boolean));
  }
}

/** The top findings (plain words, most costly first) with a link to the Warnings tab. */
function findingsList(resp, view) {
  if (!resp || !resp.rows.length) return null;
  const c = Object.fromEntries(resp.columns.map((col, i) => [col.name, i]));
  const top = resp.rows.slice(0, 6);
  return h(
    "section",
    { class: "summary-findings", id: "summary-findings", style: { marginBottom: "12px", maxWidth: "1100px" } },
    h("h3", {}, `Findings (${resp.rows.length})`, help("Performance problems found by the analysis, most costly first")),
    h(
      "ul",
      { class: "findings" },
      top.map((r) =>
        h(
          "li",
          {
            class: `finding ${r[c.severity]}`,
            title: "click to zoom the timeline to this region",
            onclick: () => view.setWindow(r[c.ts], Math.max(r[c.end], r[c.ts] + 10), true),
          },
          h("div", { class: "f-title" }, h("span", { class: `badge ${r[c.severity]}` }, r[c.severity]), r[c.title]),
          h("div", { class: "f-msg" }, r[c.message]),
        ),
      ),
    ),
    resp.rows.length > top.length
      ? h("p", {}, h("a", { href: "#", onclick: (e) => (e.preventDefault(), view.showTab("warnings")) }, "All findings and warnings →"))
      : null,
  );
}
