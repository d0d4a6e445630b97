// selection.js — the Box select tab (U5): totals of the events of the selected rows
// overlapping the selected time range (count, total duration, busy time in window,
// DMA bytes) and breakdowns by row, opcode, transfer size and source line, as
// returned by the select API. Contract: run(sel|null) queries and renders (null
// clears); `busy` while pending; `last` holds the last API response (test hook).

import { api } from "./api.js";
import { h, help, table } from "./dom.js";
import { fmtBytes, fmtInt, fmtTime } from "./fmt.js";

export class SelectionPanel {
  constructor(el, view) {
    this.el = el;
    this.view = view;
    this.busy = false;
    this.abort = null;
    this.last = null;
    this.run(null);
  }

  async run(sel) {
    const view = this.view;
    view.tl.setOverlays({ sel });
    if (this.abort) this.abort.abort();
    if (!sel) {
      this.last = null;
      this.busy = false;
      this.el.replaceChildren(
        h(
          "p",
          { class: "hint" },
          "Choose Box select in the toolbar (or hold Shift) and drag a rectangle over the timeline rows ",
          "to get the total duration, counts and breakdowns of the events inside.",
        ),
      );
      return;
    }
    const ac = new AbortController();
    this.abort = ac;
    this.busy = true;
    this.el.replaceChildren(h("p", { class: "loading" }, "Summarising the selection…"));
    try {
      const params = { t0: sel.t0, t1: sel.t1 };
      if (sel.rows && sel.rows.length) params.rows = sel.rows.join(",");
      const r = await api.select(view.id, params, ac.signal);
      if (ac.signal.aborted) return;
      this.last = r;
      this._render(r, sel);
    } catch (e) {
      if (e.name === "AbortError") return;
      this.el.replaceChildren(h("p", { class: "error-inline" }, `Box select failed: ${e.message}`));
    } finally {
      if (this.abort === ac) {
        this.abort = null;
        this.busy = false;
      }
    }
  }

  _render(r, sel) {
    const view = this.view;
    const rowLabel = (key) => {
      const row = view.rowsResp.rows.find((x) => x.key === key);
      return row ? row.label : key;
    };
    const stat = (label, value, tip, id) =>
      h("div", { class: "stat", id }, h("div", { class: "stat-v" }, value), h("div", { class: "stat-l" }, label, help(tip)));
    const t = (cols, rows) => table(cols, rows);
    const num = (label, fmt) => ({ label, cls: "num", fmt });
    this.el.replaceChildren(
      h(
        "div",
        { class: "sel-head" },
        h("strong", {}, `${fmtTime(r.t0)} – ${fmtTime(r.t1)}`),
        h("span", { class: "muted" }, ` (${fmtTime(r.t1 - r.t0)}) over ${r.rows.length} rows`),
        h("button", { class: "btn small", type: "button", onclick: () => view.setWindow(sel.t0, sel.t1, true) }, "Zoom to selection"),
        h("button", { class: "btn small", type: "button", onclick: () => view.update({ sel: null }, true) }, "Clear"),
      ),
      h(
        "div",
        { class: "stats" },
        stat("events", fmtInt(r.count), "Events of the selected rows overlapping the selected time range", "sel-count"),
        stat("total duration", fmtTime(r.total_duration), "Sum of the whole durations of those events", "sel-total"),
        stat("busy in window", fmtTime(r.busy_in_window), "Sum of their durations clipped to the selected range", "sel-busy"),
        stat("DMA bytes", fmtBytes(r.dma_bytes), "Bytes moved by the DMA transfers among them", "sel-bytes"),
        stat(
          "first → last",
          r.count ? `${fmtTime(r.first_ts)} → ${fmtTime(r.last_end)}` : "–",
          "Start of the first and end of the last selected event",
          "sel-span",
        ),
      ),
      h(
        "div",
        { class: "cols" },
        h(
          "section",
          {},
          h("h3", {}, "By opcode"),
          t([{ label: "opcode" }, num("count", fmtInt), num("duration", fmtTime)], r.by_opcode.map((x) => [x.opcode, x.count, x.duration])),
        ),
        h(
          "section",
          {},
          h("h3", {}, "By row"),
          t([{ label: "row" }, num("count", fmtInt), num("duration", fmtTime)], r.by_row.map((x) => [rowLabel(x.row), x.count, x.duration])),
        ),
        h(
          "section",
          {},
          h("h3", {}, "By transfer size", help("DMA transfers grouped by size (powers of 4)")),
          t(
            [{ label: "size" }, num("count", fmtInt), num("bytes", fmtBytes), num("duration", fmtTime)],
            r.by_transfer_size.map((x) => [x.bucket, x.count, x.bytes, x.duration]),
          ),
        ),
        h(
          "section",
          {},
          h("h3", {}, "By source line", help("nki_source_location, else the framework layer, else (none)")),
          t([{ label: "source" }, num("count", fmtInt), num("duration", fmtTime)], r.by_source.map((x) => [x.source, x.count, x.duration])),
        ),
      ),
    );
  }
}
