// tensors.js — the Tensors tab: every tensor of the program (inputs, outputs, weights, spills and
// other DMA-moved tensors) with kind, shape, dtype, size, DMA count, loads, repeat factor and bytes
// moved, from GET /profiles/{id}/tensors. Click a row: its DMA transfers are highlighted on the
// timeline (Search tab, tensor=<name> kind=dma). Sort column in the URL (tsort).
// Contract: activate() loads once; `busy` while loading.

import { api } from "./api.js";
import { h, help, loadOnce } from "./dom.js";
import { fmtBytes, fmtInt, trim } from "./fmt.js";

const COLS = [
  ["name", "tensor", null, (v) => v],
  ["kind", "kind", null, (v) => v],
  ["shape", "shape", null, (v) => (v ? `[${v.join(", ")}]` : "–")],
  ["dtype", "dtype", null, (v) => v || "–"],
  ["bytes", "size", null, (v) => (v === null ? "–" : fmtBytes(v))],
  ["dma_count", "DMAs", "DMA transfers of this tensor", fmtInt],
  ["loads", "loads", "Transfers out of HBM (reads of the tensor)", fmtInt],
  ["repeat", "times loaded", "Bytes loaded / tensor size: 1 = read once; above 1 the tensor was re-read", (v) => (v === null ? "–" : `${trim(v)}×`)],
  ["bytes_moved", "bytes moved", "Bytes of every transfer of this tensor", fmtBytes],
];

export class TensorsPanel {
  constructor(el, view) {
    this.el = el;
    this.view = view;
    this.busy = false;
    this.loaded = false;
  }

  async activate() {
    await loadOnce(this, "the tensors", () => api.tensors(this.view.id), (d) => {
      this.data = d.tensors;
      this._render();
    });
    if (this.loaded) this._render();
  }

  _render() {
    const key = this.view.st.tsort || "bytes_moved";
    const rows = [...this.data].sort((a, b) => (typeof a[key] === "string" || typeof b[key] === "string" ? String(a[key]).localeCompare(String(b[key])) : (b[key] ?? -1) - (a[key] ?? -1)));
    const head = h(
      "tr",
      {},
      COLS.map(([k, label, tip]) =>
        h("th", { class: `sortable${k === key ? " sorted" : ""}`, dataset: { key: k }, onclick: () => this.view.update({ tsort: k === "bytes_moved" ? null : k }, true) }, label, help(tip)),
      ),
    );
    const body = rows.map((t) =>
      h(
        "tr",
        {
          class: "tensor-row",
          dataset: { name: t.name },
          title: t.dma_count ? "click: highlight this tensor's DMA transfers on the timeline" : "no DMA moved this tensor",
          onclick: () => {
            if (t.dma_count) this.view.panels.search.setQuery([["tensor", t.name], ["kind", "dma"]], false, true);
          },
        },
        COLS.map(([k, , , fmt]) => h("td", { class: ["name", "kind", "shape", "dtype"].includes(k) ? "" : "num" }, fmt(t[k]))),
      ),
    );
    this.el.replaceChildren(
      h("div", { class: "search-head" }, h("strong", {}, `Tensors (${rows.length})`), help("Program tensors and every other tensor a DMA moved; click one to see its transfers")),
      h("table", { class: "data clickable tensors", id: "tensors" }, h("thead", {}, head), h("tbody", {}, body)),
    );
  }
}
