// search.js — the Search tab (U4): one or more field/value conditions (ANDed), exact
// values or /regex/ (RE2), hits highlighted on the timeline, totals for the whole
// profile and a summary by opcode/engine of the hits in the current window.
// Contract: setQuery(fields, fromUrl) fills the form and runs the search (fromUrl=false
// also records it in the URL); onWindow() re-runs the range summary (debounced).
// `busy` while a search is pending. The query lives in the URL as q.<field>=<value>.

import { api } from "./api.js";
import { h, help, table } from "./dom.js";
import { fmtInt, fmtTime } from "./fmt.js";

const FIELDS = [
  "opcode",
  "engine",
  "track",
  "queue",
  "layer",
  "hlo_name",
  "nki_source_location",
  "operands",
  "tensor",
  "direction",
  "kind",
  "id",
];
const HIT_LIMIT = 5000;
const SYNTAX =
  "Each condition is field = value; all conditions must hold. A plain value matches exactly " +
  "(case-sensitive). A value written /like this/ is a regular expression (RE2, unanchored): " +
  "/./ matches any non-empty value (e.g. every instruction with an NKI source line), " +
  "/(?i)matmul/ ignores case, /^q1[0-5]$/ anchors. track matches a timeline row key (vector, q3…).";

/** What the timeline highlights: every hit in range, merged per pixel column (`marks`) when there are more than HIT_LIMIT. */
export function highlights(r) {
  const m = r.marks;
  if (!m) return r.hits;
  return m.row.map((row, i) => ({ row, ts: m.ts[i], dur: m.dur[i], count: m.count[i] }));
}

export class SearchPanel {
  constructor(el, view) {
    this.el = el;
    this.view = view;
    this.busy = false;
    this.timer = 0;
    this.abort = null;
    this.fields = [];
    this.hits = [];
    this.cursor = -1;
    this.form = h("form", {
      class: "search-form",
      id: "search-form",
      onsubmit: (e) => {
        e.preventDefault();
        this.submit();
      },
    });
    this.result = h("div", { class: "search-result", id: "search-result" });
    el.append(
      h("div", { class: "search-head" }, h("strong", {}, "Find events"), help(SYNTAX)),
      this.form,
      this.result,
    );
    this._renderForm([["opcode", ""]]);
  }

  _renderForm(fields) {
    const rows = (fields.length ? fields : [["opcode", ""]]).map(([k, v]) => this._row(k, v));
    this.rowsEl = h("div", { class: "search-rows" }, rows);
    this.form.replaceChildren(
      this.rowsEl,
      h(
        "div",
        { class: "search-actions" },
        h("button", { type: "button", class: "btn small", onclick: () => this.rowsEl.append(this._row("layer", "")) }, "+ condition"),
        h("button", { type: "submit", class: "btn primary", id: "search-go" }, "Search"),
        h("button", { type: "button", class: "btn small", onclick: () => this.clear() }, "Clear"),
      ),
    );
  }

  _row(field, value) {
    const sel = h("select", { class: "s-field", "aria-label": "field" }, FIELDS.map((f) => h("option", { value: f }, f)));
    sel.value = FIELDS.includes(field) ? field : "opcode";
    const row = h(
      "div",
      { class: "search-row" },
      sel,
      h("span", { class: "eq" }, "="),
      h("input", { class: "s-value", type: "text", value, placeholder: "value or /regex/", "aria-label": "value", spellcheck: "false" }),
      h("button", { type: "button", class: "btn small", title: "remove this condition", onclick: () => row.remove() }, "×"),
    );
    return row;
  }

  _formFields() {
    return [...this.rowsEl.querySelectorAll(".search-row")]
      .map((r) => [r.querySelector(".s-field").value, r.querySelector(".s-value").value.trim()])
      .filter(([, v]) => v !== "");
  }

  submit() {
    const fields = this._formFields();
    if (!fields.length) {
      this.clear();
      return;
    }
    this.setQuery(fields, false);
  }

  clear() {
    this._renderForm([]);
    this.fields = [];
    this.hits = [];
    this.view.tl.setOverlays({ hits: [] });
    this.result.replaceChildren();
    this.view.update({ query: [] }, true);
  }

  /** Fill the form and run; fromUrl=false records the query in the URL (and shows this tab unless `stay`). */
  setQuery(fields, fromUrl, stay = false) {
    this.fields = fields.slice();
    this._renderForm(this.fields);
    if (!fromUrl) this.view.update(stay ? { query: this.fields } : { query: this.fields, tab: "search" }, true);
    if (!this.fields.length) {
      this.hits = [];
      this.view.tl.setOverlays({ hits: [] });
      this.result.replaceChildren();
      return;
    }
    this.run();
  }

  onWindow() {
    if (!this.fields.length) return;
    clearTimeout(this.timer);
    this.busy = true;
    this.timer = setTimeout(() => {
      this.timer = 0;
      this.run();
    }, 150);
  }

  async run() {
    if (this.abort) this.abort.abort();
    const ac = new AbortController();
    this.abort = ac;
    this.busy = true;
    const st = this.view.st;
    if (!this.result.firstChild) this.result.replaceChildren(h("p", { class: "loading" }, "Searching…"));
    try {
      const r = await api.search(
        this.view.id,
        this.fields,
        { t0: Math.floor(st.t0), t1: Math.ceil(st.t1), limit: HIT_LIMIT, width: this.view.tl.plotWidth() },
        ac.signal,
      );
      if (ac.signal.aborted) return;
      this.hits = r.hits;
      this.view.tl.setOverlays({ hits: highlights(r) });
      this._render(r);
    } catch (e) {
      if (e.name === "AbortError") return;
      this.hits = [];
      this.view.tl.setOverlays({ hits: [] });
      this.result.replaceChildren(h("p", { class: "error-inline", id: "search-error" }, e.message));
    } finally {
      if (this.abort === ac) {
        this.abort = null;
        this.busy = Boolean(this.timer);
      }
    }
  }

  _jump(step) {
    if (!this.hits.length) return;
    this.cursor = (this.cursor + step + this.hits.length) % this.hits.length;
    const hit = this.hits[this.cursor];
    this.view.update({ ev: hit.id }, true);
    this.view.reveal(hit);
  }

  _render(r) {
    const rowLabel = (key) => {
      const row = this.view.rowsResp.rows.find((x) => x.key === key);
      return row ? row.label : key;
    };
    const count = h(
      "p",
      { class: "search-count", id: "search-count", dataset: { total: r.total, inRange: r.in_range } },
      h("strong", {}, `${fmtInt(r.total)} hits`),
      ` in the profile, ${fmtInt(r.in_range)} in the current range`,
      r.truncated ? ` (all highlighted, merged per pixel; the first ${fmtInt(r.hits.length)} listed)` : "",
      "  ",
      h("button", { type: "button", class: "btn small", onclick: () => this._jump(-1), disabled: !r.hits.length }, "◀ prev"),
      h("button", { type: "button", class: "btn small", onclick: () => this._jump(1), disabled: !r.hits.length }, "next ▶"),
    );
    const sum = r.summary || {};
    const byOp = table(
      [
        { label: "opcode" },
        { label: "count", cls: "num", fmt: fmtInt },
        { label: "duration", cls: "num", fmt: fmtTime },
      ],
      (sum.by_opcode || []).map((x) => [x.opcode, x.count, x.duration]),
    );
    const byEng = table(
      [
        { label: "engine" },
        { label: "count", cls: "num", fmt: fmtInt },
        { label: "duration", cls: "num", fmt: fmtTime },
      ],
      (sum.by_engine || []).map((x) => [x.engine, x.count, x.duration]),
    );
    const hitsTable = table(
      [{ label: "id" }, { label: "opcode" }, { label: "row" }, { label: "start", cls: "num" }, { label: "duration", cls: "num" }],
      r.hits.slice(0, 100).map((x) => [x.id, x.opcode, rowLabel(x.row), fmtTime(x.ts), fmtTime(x.dur)]),
      {
        cls: "clickable",
        rowAttrs: (row, i) => ({
          onclick: () => {
            this.cursor = i;
            this._jump(0);
          },
        }),
      },
    );
    this.result.replaceChildren(
      count,
      h(
        "div",
        { class: "cols" },
        h("section", {}, h("h3", {}, "Hits in range by opcode"), byOp),
        h("section", {}, h("h3", {}, "by engine"), byEng),
        h("section", { class: "wide" }, h("h3", {}, `Hits in range (first ${Math.min(100, r.hits.length)})`), hitsTable),
      ),
    );
  }
}
