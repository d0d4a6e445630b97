// layers.js — layer names for colouring by layer (U6). The viewport answer carries, for rows
// in `events` mode, a per-event index into its `layers` list; aggregated buckets carry none and
// stay grey. This module supplies the legend when the window holds no individual events: the
// `layers` table's names grouped at the chosen depth, largest first.
// Contract: new LayerNames(view); await load() (one tables request, cached); groups(depth) ->
// [{name, ns}] (at most MAX_GROUPS); eventGroups(vp, depth) -> [[event id, group]] for the
// drawn events (what the timeline colours them by; a test hook).

import { api } from "./api.js";
import { layerAtDepth } from "./colors.js";

export const MAX_GROUPS = 48;

export class LayerNames {
  constructor(view) {
    this.view = view;
    this.names = null; // [{layer, ns}]
  }

  async load() {
    if (this.names) return this.names;
    if (!(this.view.info.tables || []).includes("layers")) return (this.names = []);
    const t = await api.table(this.view.id, "layers", 0, 100000);
    const c = Object.fromEntries(t.columns.map((col, i) => [col.name, i]));
    this.names = t.rows.map((r) => ({ layer: r[c.layer], ns: Number(r[c.instruction_time_ns] || 0) }));
    return this.names;
  }

  /** Layer groups at `depth` (0 = full path), by instruction time. */
  groups(depth) {
    const sums = new Map();
    for (const { layer, ns } of this.names || []) {
      const g = layerAtDepth(layer, depth);
      sums.set(g, (sums.get(g) || 0) + ns);
    }
    return [...sums.entries()]
      .map(([name, ns]) => ({ name, ns }))
      .sort((a, b) => b.ns - a.ns)
      .slice(0, MAX_GROUPS);
  }
}

export function eventGroups(vp, depth) {
  const out = [];
  if (!vp || !vp.layers) return out;
  for (const r of vp.rows) {
    if (r.mode !== "events" || !r.layer) continue;
    r.layer.forEach((li, i) => {
      if (li >= 0) out.push([r.id[i], layerAtDepth(vp.layers[li], depth)]);
    });
  }
  return out;
}
