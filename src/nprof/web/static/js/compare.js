// compare.js — the Compare tab (U10): this profile (A) against another stored profile
// (B): per-engine, per-opcode and per-layer time deltas computed from both profiles'
// analysis tables, plus the headline summary metrics side by side.
// Contract: activate() lists the other profiles; choosing one (kept in the URL as
// compare=<id>) loads both sides and renders delta tables sorted by |Δ|.

import { api } from "./api.js";
import { h, help, table } from "./dom.js";
import { fmtInt, fmtTime, fmtValue, trim } from "./fmt.js";

const KEYS = [
  ["engines", "engine", "active_time_ns", "Engine active time"],
  ["opcodes", "opcode", "total_ns", "Opcode total time"],
  ["layers", "layer", "instruction_time_ns", "Layer instruction time"],
];

function byKey(resp, key, val) {
  const c = Object.fromEntries(resp.columns.map((col, i) => [col.name, i]));
  const out = new Map();
  if (c[key] === undefined || c[val] === undefined) return out;
  for (const r of resp.rows) {
    const k = key === "opcode" && c.engine !== undefined ? `${r[c.engine]} ${r[c[key]]}` : r[c[key]];
    out.set(k, (out.get(k) || 0) + Number(r[c[val]] || 0));
  }
  return out;
}

export class ComparePanel {
  constructor(el, view) {
    this.el = el;
    this.view = view;
    this.busy = false;
    this.pick = h("select", { id: "compare-with", onchange: () => this.view.update({ compare: this.pick.value || null }, true) });
    this.body = h("div", { id: "compare-body" });
    el.append(
      h("div", { class: "compare-head" }, h("strong", {}, "Compare with "), this.pick, help("Deltas are B − A: positive means B spends more time")),
      this.body,
    );
    this.shown = null;
  }

  async activate() {
    const v = this.view;
    this.busy = true;
    try {
      if (!this.list) {
        const r = await api.profiles();
        this.list = r.profiles.filter((p) => p.id !== v.id);
        this.names = new Map(r.profiles.map((p) => [p.id, p.display_name || p.name || p.id]));
        this.pick.replaceChildren(
          h("option", { value: "" }, this.list.length ? "choose a profile…" : "no other stored profile"),
          ...this.list.map((p) => h("option", { value: p.id }, `${p.display_name || p.id} (${fmtTime(p.total_time_ns)})`)),
        );
      }
      this.pick.value = v.st.compare || "";
      if (v.st.compare && v.st.compare !== this.shown) await this._load(v.st.compare);
      else if (!v.st.compare) this.body.replaceChildren(h("p", { class: "hint" }, "Choose a second profile to see where time moved."));
    } catch (e) {
      this.body.replaceChildren(h("p", { class: "error-inline" }, `Compare failed: ${e.message}`));
    } finally {
      this.busy = false;
    }
  }

  async _load(other) {
    const v = this.view;
    this.body.replaceChildren(h("p", { class: "loading" }, "Loading both profiles…"));
    const get = (id, t) => api.table(id, t, 0, 100000).catch(() => null);
    const [sa, sb, ...tabs] = await Promise.all([
      api.summary(v.id),
      api.summary(other),
      ...KEYS.flatMap(([t]) => [get(v.id, t), get(other, t)]),
    ]);
    this.shown = other;
    const nameA = v.info.profile.display_name || v.id;
    const nameB = (this.names && this.names.get(other)) || other;
    const flat = (s) => new Map(s.groups.flatMap((g) => g.metrics.map((m) => [m.key, m])));
    const fa = flat(sa);
    const fb = flat(sb);
    const headline = ["total_time", "event_count", "mfu_estimated_percent", "mbu_estimated_percent", "dma_transfer_total_bytes", "dma_active_time_percent"]
      .filter((k) => fa.has(k) || fb.has(k))
      .map((k) => {
        const a = fa.get(k);
        const b = fb.get(k);
        const m = a || b;
        const d = typeof a?.value === "number" && typeof b?.value === "number" ? b.value - a.value : null;
        return [m.label, fmtValue(a?.value ?? null, m.unit), fmtValue(b?.value ?? null, m.unit), d === null ? "–" : `${d > 0 ? "+" : ""}${fmtValue(d, m.unit)}`];
      });
    const names = h(
      "p",
      { class: "compare-names", id: "compare-names" },
      h("strong", {}, "A"),
      ` = ${nameA} (this profile)  ·  `,
      h("strong", {}, "B"),
      ` = ${nameB}  `,
      h("a", { href: `/profile/${encodeURIComponent(other)}`, id: "compare-open-b" }, "open B"),
    );
    const sections = [
      h("section", {}, h("h3", {}, "Headline"), table([{ label: "metric" }, { label: `A: ${nameA}`, cls: "num" }, { label: `B: ${nameB}`, cls: "num" }, { label: "Δ (B − A)", cls: "num" }], headline)),
    ];
    KEYS.forEach(([, key, val, title], i) => {
      const ta = tabs[2 * i];
      const tb = tabs[2 * i + 1];
      if (!ta || !tb) return;
      const ma = byKey(ta, key, val);
      const mb = byKey(tb, key, val);
      const keys = [...new Set([...ma.keys(), ...mb.keys()])];
      if (!keys.length) return;
      const rows = keys
        .map((k) => {
          const a = ma.get(k) || 0;
          const b = mb.get(k) || 0;
          return [k, a, b, b - a, a ? (100 * (b - a)) / a : b ? "new" : a === b ? 0 : null];
        })
        .sort((x, y) => Math.abs(y[3]) - Math.abs(x[3]))
        .slice(0, 100);
      const sign = (d) => `${d > 0 ? "+" : ""}${fmtTime(d)}`;
      sections.push(
        h(
          "section",
          {},
          h("h3", {}, `${title} (${fmtInt(keys.length)})`),
          table(
            [
              { label: key },
              { label: `A: ${nameA}`, cls: "num", fmt: fmtTime },
              { label: `B: ${nameB}`, cls: "num", fmt: fmtTime },
              { label: "Δ", cls: "num", fmt: sign },
              { label: "Δ %", cls: "num", fmt: (p) => (typeof p === "string" ? p : p === null ? "–" : `${p > 0 ? "+" : ""}${trim(p)} %`) },
            ],
            rows,
            { cls: "compare" },
          ),
        ),
      );
    });
    this.body.replaceChildren(names, h("div", { class: "cols" }, sections));
  }
}
