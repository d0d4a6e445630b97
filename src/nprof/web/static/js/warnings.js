// warnings.js — the Warnings tab (U8, A3): the findings (plain-words performance
// problems with evidence) and the timeline warning annotations (orange boxes).
// Contract: activate() loads the `findings` table and the first WARN_LIMIT rows of the
// `warnings` table once (the timeline itself only fetches the boxes of its window);
// clicking an entry zooms the timeline to its region (and, for tensor warnings,
// searches that tensor's DMA transfers so they are highlighted).

import { api } from "./api.js";
import { h, help, loadOnce } from "./dom.js";
import { fmtInt, fmtTime } from "./fmt.js";

const WARN_LIMIT = 500;

/** The warnings table's rows as {kind, t0, t1, text, tensor, source}. */
function warningRows(resp) {
  if (!resp) return [];
  const c = Object.fromEntries(resp.columns.map((col, i) => [col.name, i]));
  return resp.rows.map((r) => ({
    kind: r[c.kind],
    t0: r[c.ts],
    t1: Math.max(r[c.end], r[c.ts] + 1),
    text: r[c.message] || r[c.kind],
    tensor: c.tensor !== undefined ? r[c.tensor] : null,
    source: c.source !== undefined ? r[c.source] : null,
  }));
}

export class WarningsPanel {
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
      "findings",
      () => {
        const has = (t) => (v.info.tables || []).includes(t);
        return Promise.all([
          has("findings") ? api.table(v.id, "findings", 0, 500) : null,
          has("warnings") ? api.table(v.id, "warnings", 0, WARN_LIMIT) : null,
        ]);
      },
      ([findings, warnings]) => {
        this.warnTotal = warnings ? warnings.total : 0;
        this.warnings = warningRows(warnings);
        this._render(findings);
      },
    );
  }

  _zoom(t0, t1) {
    const pad = Math.max(10, (t1 - t0) * 0.05);
    this.view.setWindow(t0 - pad, t1 + pad, true);
  }

  _render(findings) {
    const v = this.view;
    const items = [];
    if (findings && findings.rows.length) {
      const c = Object.fromEntries(findings.columns.map((col, i) => [col.name, i]));
      for (const r of findings.rows) {
        const sev = r[c.severity];
        const t0 = r[c.ts];
        const t1 = r[c.end];
        const sources = c.sources !== undefined && r[c.sources] ? r[c.sources] : [];
        items.push(
          h(
            "li",
            { class: `finding ${sev}`, onclick: () => this._zoom(t0, t1), title: "click to zoom the timeline to this region" },
            h("div", { class: "f-title" }, h("span", { class: `badge ${sev}` }, sev), r[c.title]),
            h("div", { class: "f-msg" }, r[c.message]),
            h(
              "div",
              { class: "f-meta muted" },
              `${fmtTime(t0)} – ${fmtTime(t1)}`,
              c.impact_ns !== undefined ? ` · at stake ${fmtTime(r[c.impact_ns])}` : "",
              sources.length ? ` · ${sources.slice(0, 3).join(", ")}` : "",
            ),
          ),
        );
      }
    }
    const ws = (this.warnings || []).map((w) =>
      h(
        "li",
        {
          class: "finding warning annot",
          title: "click to zoom to this box",
          onclick: () => {
            this._zoom(w.t0, w.t1);
            if (w.tensor) v.panels.search.setQuery([["tensor", w.tensor], ["kind", "dma"]], false);
          },
        },
        h("div", { class: "f-title" }, h("span", { class: "badge box" }, w.kind), w.tensor ? `tensor ${w.tensor}` : ""),
        h("div", { class: "f-msg" }, w.text),
        h("div", { class: "f-meta muted" }, `${fmtTime(w.t0)} – ${fmtTime(w.t1)}${w.source ? ` · ${w.source}` : ""}`),
      ),
    );
    this.el.replaceChildren(
      h(
        "div",
        { class: "cols" },
        h(
          "section",
          { class: "wide" },
          h("h3", {}, `Findings (${items.length})`, help("Performance problems found by the analysis, most costly first")),
          items.length ? h("ul", { class: "findings", id: "findings" }, items) : h("p", { class: "muted" }, "No findings."),
        ),
        h(
          "section",
          { class: "wide" },
          h(
            "h3",
            {},
            this.warnTotal > ws.length ? `Timeline warnings (first ${fmtInt(ws.length)} of ${fmtInt(this.warnTotal)})` : `Timeline warnings (${ws.length})`,
            help("Drawn as orange boxes on the timeline: tensors loaded more than twice, small DMA transfers, throttling"),
          ),
          ws.length ? h("ul", { class: "findings", id: "warning-list" }, ws) : h("p", { class: "muted" }, "No warning annotations."),
        ),
      ),
    );
  }
}
