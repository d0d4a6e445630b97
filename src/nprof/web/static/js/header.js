// header.js — the profile page's title bar (name and key facts), the download menu
// and the colour legend under the toolbar.
// Contract: titleBar(info) (name, key facts, and the manifest's notes: `incomplete` — the script failed —,
// a system profile's `system` note, e.g. no device graph launched, and `info.assumptions` — a trn3 profile's
// assumed hardware figures, listed in the note's tooltip) and downloadMenu(id) return elements; renderLegend(el, vp,
// style, rows, onSearch) fills `el` with one chip per colour of the current colour
// mode (opcode, layer at the chosen depth, engine, DMA queue); clicking a chip runs
// the matching search through onSearch(fields).

import { api } from "./api.js";
import { engineColor, layerAtDepth, paletteColor } from "./colors.js";
import { h } from "./dom.js";
import { fmtDate, fmtInt, fmtTime } from "./fmt.js";

const FORMATS = ["json", "perfetto", "parquet", "csv"];

export function titleBar(info) {
  const p = info.profile;
  const prog = info.program || {};
  const facts = [
    ["device", p.device + (p.preset ? ` (${p.preset})` : "")],
    ["captured", fmtDate(p.created)],
    ["total time", fmtTime(p.total_time_ns)],
    ["events", fmtInt(p.event_count)],
    prog.flops ? ["FLOPs", fmtInt(prog.flops)] : null,
    p.world_size > 1 ? ["rank", `${p.rank} / ${p.world_size}`] : null,
  ].filter(Boolean);
  const meta = (info.manifest && info.manifest.meta) || {};
  const notes = [
    meta.incomplete ? h("span", { class: "title-note warn", id: "incomplete-note", title: meta.incomplete }, `incomplete: ${meta.incomplete}`) : null,
    meta.system && meta.system !== "1" ? h("span", { class: "title-note muted", id: "system-note" }, meta.system) : null,
    info.assumptions
      ? h("span", { class: "title-note assumed", id: "assumed-note", title: info.assumptions }, `${p.preset ? `${p.preset}: ` : ""}simulated times rest partly on assumed hardware figures (Summary tab lists them)`)
      : null,
  ];
  return h(
    "div",
    { class: "titlebar" },
    h("h1", { id: "profile-title", title: p.id }, p.display_name || p.name || p.id),
    h("dl", { class: "facts" }, facts.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
    notes,
  );
}

export function downloadMenu(id) {
  return h(
    "select",
    {
      class: "download",
      title: "Download this profile in another format",
      onchange: (e) => {
        if (e.target.value) window.location.href = api.downloadUrl(id, e.target.value);
        e.target.value = "";
      },
    },
    h("option", { value: "" }, "Download…"),
    FORMATS.map((f) => h("option", { value: f }, f)),
  );
}

function chip(color, text, title, onclick) {
  return h("button", { class: "chip", type: "button", title, onclick }, h("i", { style: { background: color } }), text);
}

const reEscape = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

export function renderLegend(el, vp, style, rows, onSearch, layerGroups = []) {
  const chips = [];
  if (style.color === "opcode" && vp && vp.opcodes) {
    for (const op of vp.opcodes.slice(0, 48)) {
      chips.push(chip(paletteColor("opcode", op), op, `Search opcode ${op}`, () => onSearch([["opcode", op]])));
    }
  } else if (style.color === "engine" || style.color === "queue") {
    const engines = [...new Set(rows.filter((r) => r.kind === "engine" || r.kind === "track").map((r) => r.engine || "other"))];
    if (style.color === "queue") {
      for (const r of rows.filter((x) => x.kind === "dma")) {
        chips.push(chip(paletteColor("queue", r.key), r.label, `Search DMA queue ${r.key}`, () => onSearch([["queue", r.key]])));
      }
    } else if (rows.some((r) => r.kind === "dma")) {
      chips.push(chip(engineColor("dma"), "DMA", "Search DMA transfers", () => onSearch([["kind", "dma"]])));
    }
    for (const e of engines) chips.push(chip(engineColor(e), e, `Search engine ${e}`, () => onSearch([["engine", e]])));
  } else if (style.color === "layer") {
    // layers of the drawn events when there are any, else every layer of the profile
    const inWindow = vp && vp.layers ? [...new Set(vp.layers.map((l) => layerAtDepth(l, style.depth)))] : [];
    const names = (inWindow.length ? inWindow : layerGroups.map((g) => g.name)).slice(0, 48);
    for (const n of names) {
      const q = style.depth ? `/^${reEscape(n)}(\\.|$)/` : n;
      chips.push(chip(paletteColor(`layer:${style.depth}`, n), n, `Search layer ${n}`, () => onSearch([["layer", q]])));
    }
    if (!names.length) chips.push(h("span", { class: "muted", id: "legend-note" }, "no event of this profile has a layer"));
    else if (vp && vp.rows.some((r) => r.mode === "buckets")) {
      chips.push(h("span", { class: "muted", id: "legend-note" }, "aggregated bars: the layer with the most time in each pixel"));
    }
  }
  el.replaceChildren(...chips);
}
