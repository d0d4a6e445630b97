// tracks.js — the System view's track groups, shown or hidden as a whole (as Neuron Explorer selects
// process / thread / NeuronCore tracks).
// Contract: trackGroups(rows) -> [{id, label, count}] of the groups a system profile's rows fall in
// (host threads cpu:*, nprof runtime nprof.*, copies h2d:/d2h:, NeuronCore nc:*, collectives cc:*),
// [] for other profiles (fewer than two groups, or no runtime/NeuronCore rows);
// visibleRows(rows, hidden) -> the rows whose group is not in `hidden` (ids; rows in no group stay);
// trackPicker(rows, hidden, onChange) -> a toolbar element with one toggle per group (null when
// trackGroups is empty); onChange(newHidden) is called with the new list of hidden group ids.
// The hidden groups live in the URL (`hide=host,copies`, url.js).

import { h } from "./dom.js";

const GROUPS = [
  ["host", "Host threads", (k) => k.startsWith("cpu:")],
  ["runtime", "nprof runtime", (k) => k.startsWith("nprof.")],
  ["copies", "Copies", (k) => /^(h2d|d2h):/.test(k)],
  ["device", "NeuronCore", (k) => k.startsWith("nc:")],
  ["cc", "Collectives", (k) => k.startsWith("cc:")],
];

function groupOf(key) {
  const g = GROUPS.find(([, , test]) => test(String(key)));
  return g ? g[0] : null;
}

export function trackGroups(rows) {
  const counts = new Map();
  for (const r of rows) {
    const g = groupOf(r.key);
    if (g) counts.set(g, (counts.get(g) || 0) + 1);
  }
  if (counts.size < 2 || !(counts.has("runtime") || counts.has("device"))) return [];
  return GROUPS.filter(([id]) => counts.has(id)).map(([id, label]) => ({ id, label, count: counts.get(id) }));
}

export function visibleRows(rows, hidden) {
  const off = new Set(hidden || []);
  if (!off.size) return rows;
  return rows.filter((r) => !off.has(groupOf(r.key)));
}

export function trackPicker(rows, hidden, onChange) {
  const groups = trackGroups(rows);
  if (!groups.length) return null;
  const off = new Set(hidden || []);
  const boxes = groups.map((g) => {
    const input = h("input", { type: "checkbox", checked: !off.has(g.id), dataset: { group: g.id } });
    input.addEventListener("change", () => {
      const now = groups.filter((x) => !boxes.find((b) => b.dataset.group === x.id).checked).map((x) => x.id);
      onChange(now);
    });
    return input;
  });
  const labels = groups.map((g, i) => h("label", { class: "tb-check", title: `${g.count} track(s)` }, boxes[i], ` ${g.label}`));
  return h("div", { class: "tb-group track-picker", id: "track-picker", role: "group", "aria-label": "tracks" }, "Tracks:", ...labels);
}
