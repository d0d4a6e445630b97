// system.js — system profiles (docs/system.md) in the viewer: the System tab and the
// links between a system profile and the device profiles of its graph executions.
// Contract:
// * isSystem(info): the profile is a system profile (manifest meta `system` == "1").
// * deviceLink(view, details): for an `nc_exec_running` event whose execution has a stored
//   device profile (GET /links), an "Open device profile" link to /profile/<device id>; else null.
// * systemLink(view): on a device profile page, a "Show in system view" link (filled in
//   once its execution is found) to /profile/<system id>?t0=&t1=&ev=<that execution>; else null.
// * SystemPanel: the System tab — one row per training step of the `system_steps` table,
//   two stacked bars on one time scale: the host's wall time (compile, launch, copies, host
//   ops, gaps) and, below it, the simulated device time (forward, backward; it overlaps the
//   launches, so it is not stacked onto them) and the phases overlapping those parts (optimizer,
//   host collectives and their measured wait), then the table and the host-side findings;
//   clicking a step zooms the timeline to it.

import { api } from "./api.js";
import { h, help, loadOnce } from "./dom.js";
import { fmtTime } from "./fmt.js";
import { analysisTable } from "./tables.js";
import { toSearch } from "./url.js";

export const SYSTEM_FINDINGS = ["recompile", "host_bound", "launch_gap", "repeated_copies"];

/** The parts of a step's bar: [column, label, colour, help]. */
export const PARTS = [
  ["forward_device_ns", "device fwd", "#2f7ed8", "simulated device time of the forward graph executions"],
  ["backward_device_ns", "device bwd", "#8e5bd1", "simulated device time of the backward graph executions"],
  ["compile_ns", "compile", "#d9822b", "torch.compile tracing, nprof lowering and compile-cache loads"],
  ["launch_ns", "launch", "#e0b400", "host wall time in graph calls (on the virtual device: the simulator's time)"],
  ["copy_ns", "copies", "#2a9d8f", "host<->device copies of graph inputs and outputs"],
  ["host_ops_ns", "host ops", "#7a8594", "torch ops outside graph calls: Python, loss, optimizer, data"],
  ["host_gap_ns", "gaps", "#d5d9e0", "step wall time with no host row recorded"],
];

export function isSystem(info) {
  const meta = (info && info.manifest && info.manifest.meta) || {};
  return meta.system === "1";
}

/** The `hlo_name` field of an event's details (the execution `module#k`), or null. */
function hloName(d) {
  const f = (d.groups || []).flatMap((g) => g.fields).find((x) => x.key === "hlo_name");
  return f && f.value ? String(f.value) : null;
}

export function deviceLink(view, d) {
  if (!d || d.opcode !== "nc_exec_running" || !view.links) return null;
  const hlo = hloName(d);
  const dev = view.links.device_profiles.find((x) => x.hlo_name === hlo);
  if (!dev) return h("span", { class: "muted", id: "device-link" }, "no device profile kept for this execution");
  return h(
    "a",
    { class: "btn small", id: "device-link", href: `/profile/${encodeURIComponent(dev.profile_id)}`, title: `instruction-level profile of ${hlo}` },
    "Open device profile",
  );
}

export function systemLink(view) {
  const sys = view.links && view.links.system;
  if (!sys) return null;
  const a = h(
    "a",
    { class: "btn small sys-link", id: "system-link", href: `/profile/${encodeURIComponent(sys.profile_id)}`, title: `${sys.hlo_name} in its system profile` },
    "Show in system view",
  );
  api
    .search(sys.profile_id, [["hlo_name", sys.hlo_name], ["opcode", "nc_exec_running"]], { limit: 1 })
    .then((r) => {
      const ev = r.hits && r.hits[0];
      if (!ev) return;
      const pad = Math.max(1000, Math.round(ev.dur * 0.25));
      const st = { t0: ev.ts - pad, t1: ev.ts + ev.dur + pad, ev: ev.id, tab: "details", query: [], color: "opcode", depth: 0, view: "minimal", mode: "zoom", warn: true };
      a.href = `/profile/${encodeURIComponent(sys.profile_id)}${toSearch(st)}`;
      a.dataset.ready = "1";
    })
    .catch((e) => {
      a.title = `could not find ${sys.hlo_name} in ${sys.profile_id}: ${e.message}`;
    });
  return a;
}

function rowsOf(resp) {
  const names = resp.columns.map((c) => c.name);
  return resp.rows.map((r) => Object.fromEntries(names.map((n, i) => [n, r[i]])));
}

const DEVICE = PARTS.slice(0, 2);
const HOST = PARTS.slice(2);

/** A stacked bar of `parts` of one step, scaled so `longest` fills the width. */
function stepBar(step, longest, parts, cls) {
  const segs = parts.filter(([k]) => step[k] > 0).map(([k, label, color]) =>
    h("span", {
      class: "seg",
      dataset: { part: k },
      title: `${label}: ${fmtTime(step[k])}`,
      style: { width: `${(100 * step[k]) / longest}%`, background: color },
    }),
  );
  return h("div", { class: `stepbar ${cls}`, dataset: { step: String(step.step) } }, segs);
}

/** The phases that overlap the bar's parts (optimizer, host collectives with their measured wait), or null. */
function phases(s) {
  const parts = [];
  if (s.optimizer_ns > 0) parts.push(`optimizer ${fmtTime(s.optimizer_ns)}`);
  if (s.collectives_ns > 0) parts.push(`collectives ${fmtTime(s.collectives_ns)} (waiting ${fmtTime(s.collective_wait_ns || 0)}, measured)`);
  return parts.length ? h("span", { class: "muted steps-phases", title: "overlap the parts of the bar" }, parts.join(" · ")) : null;
}

export class SystemPanel {
  constructor(el, view) {
    this.el = el;
    this.view = view;
    this.busy = false;
    this.loaded = false;
  }

  async activate() {
    const v = this.view;
    await loadOnce(
      this,
      "the system steps",
      () => Promise.all([api.table(v.id, "system_steps", 0, 1000), api.table(v.id, "findings", 0, 500)]),
      ([steps, findings]) => this._render(steps, findings),
    );
  }

  _zoom(t0, t1) {
    const pad = Math.max(10, (t1 - t0) * 0.02);
    this.view.setWindow(t0 - pad, t1 + pad, true);
  }

  _render(steps, findings) {
    const list = rowsOf(steps);
    const sum = (s, parts) => parts.reduce((a, [k]) => a + (s[k] || 0), 0);
    const longest = Math.max(1, ...list.map((s) => Math.max(s.wall_ns, sum(s, HOST), sum(s, DEVICE))));
    const legend = h(
      "div",
      { class: "steplegend" },
      PARTS.map(([, label, color, text]) => h("span", { class: "chip", title: text }, h("i", { style: { background: color } }), label)),
    );
    const bars = h(
      "div",
      { class: "stepbars", id: "step-bars" },
      list.map((s) =>
        h(
          "div",
          { class: "steprow", title: "click to zoom the timeline to this step", onclick: () => this._zoom(s.start, s.end) },
          h("span", { class: "steplabel" }, `step ${s.step}`),
          h("div", { class: "stepbars2" }, stepBar(s, longest, HOST, "host"), stepBar(s, longest, DEVICE, "device")),
          h("span", { class: "steptimes" }, h("span", {}, fmtTime(s.wall_ns)), h("span", { class: "muted" }, `device ${fmtTime(s.device_busy_ns)}`), phases(s)),
        ),
      ),
    );
    const tbl = analysisTable(steps, {
      hide: ["start", "end"],
      onRow: (s) => this._zoom(s.start, s.end),
      rowTitle: "click to zoom the timeline to this step",
    });
    tbl.id = "step-table";
    const found = rowsOf(findings).filter((f) => SYSTEM_FINDINGS.includes(f.kind));
    const items = found.map((f) =>
      h(
        "li",
        { class: `finding ${f.severity}`, dataset: { kind: f.kind }, onclick: () => this._zoom(f.ts, f.end), title: "click to zoom the timeline to this region" },
        h("div", { class: "f-title" }, h("span", { class: `badge ${f.severity}` }, f.severity), f.title),
        h("div", { class: "f-msg" }, f.message),
        h("div", { class: "f-meta muted" }, `${fmtTime(f.ts)} – ${fmtTime(f.end)}`),
      ),
    );
    this.el.replaceChildren(
      h(
        "section",
        { class: "wide" },
        h("h3", {}, `Steps (${list.length})`, help("Where each training step's time went (system_steps table); click a step to zoom to it")),
        list.length ? [legend, bars, tbl] : h("p", { class: "muted" }, "No steps: call prof.step() (or nprof.torch.step()) at the end of each step."),
      ),
      h(
        "section",
        { class: "wide" },
        h("h3", {}, `Host-side findings (${items.length})`, help("recompile, host_bound, launch_gap, repeated_copies")),
        items.length ? h("ul", { class: "findings", id: "system-findings" }, items) : h("p", { class: "muted" }, "No host-side findings."),
      ),
    );
  }
}
