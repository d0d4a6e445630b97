// layers.js — colour by layer (U6) with the documented API only: the `layers` table gives the
// layer names; one search per layer group (the layer path cut at the chosen depth) over the
// current window maps the drawn events' ids to their group. Aggregated buckets carry no layer,
// so they stay grey until the viewport answer itself carries layers (`vp.layers`, preferred).
// Contract: new LayerLookup(view); groups(depth) -> [{name, ns}] (largest first, at most
// MAX_GROUPS); lookup(t0, t1, depth, signal) -> Map(event id -> group name); `busy` while pending.

import { api } from "./api.js";
import { layerAtDepth } from "./colors.js";

export const MAX_GROUPS = 24;
const HIT_LIMIT = 20000;
const reEscape = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

export class LayerLookup {
  constructor(view) {
    this.view = view;
    this.names = null; // [{layer, ns}]
    this.busy = false;
  }

  async _names() {
    if (this.names) return this.names;
    if (!(this.view.info.tables || []).includes("layers")) return (this.names = []);
    const t = await api.table(this.view.id, "layers", 0, 100000);
    const c = Object.fromEntries(t.columns.map((col, i) => [col.name, i]));
    this.names = t.rows.map((r) => ({ layer: r[c.layer], ns: Number(r[c.instruction_time_ns] || 0) }));
    return this.names;
  }

  /** Layer groups at `depth` (0 = full path), by instruction time, capped at MAX_GROUPS. */
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

  async lookup(t0, t1, depth, signal) {
    this.busy = true;
    try {
      await this._names();
      const groups = this.groups(depth);
      const answers = await Promise.all(
        groups.map((g) => {
          const value = depth ? `/^${reEscape(g.name)}(\\.|$)/` : g.name;
          return api.search(this.view.id, [["layer", value]], { t0, t1, limit: HIT_LIMIT }, signal);
        }),
      );
      const out = new Map();
      answers.forEach((a, i) => {
        for (const hit of a.hits) out.set(hit.id, groups[i].name);
      });
      return out;
    } finally {
      this.busy = false;
    }
  }
}
