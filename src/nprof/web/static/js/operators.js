// operators.js — the Operators tab: the operator hierarchy layer -> op (hlo_name) -> instruction
// (opcode) with instruction time, active %, FLOPs, MFU, HBM bytes and DMA count per node, from
// GET /profiles/{id}/operators. Sortable (click a header) and filterable; the sort column and the
// filter live in the URL (osort, ofilter). Click a row with ▸ to expand it; right-click any row to
// highlight its instructions (and DMAs) on the timeline through the Search tab.
// Contract: activate() loads once; `busy` while loading.

import { api } from "./api.js";
import { h, help, loadOnce } from "./dom.js";
import { fmtBytes, fmtInt, fmtTime, trim } from "./fmt.js";

const COLS = [
  ["name", "node", null],
  ["time_ns", "instruction time", "Summed duration of the node's instructions"],
  ["active", "active %", "Instruction time / profile duration"],
  ["flops", "FLOPs", "Model FLOPs of the node's instructions"],
  ["mfu", "MFU %", "FLOPs / (peak FLOP/s × instruction time): how well the node used the compute peak while it ran"],
  ["hbm_bytes", "HBM bytes", "HBM bytes of the node's instructions and DMA transfers"],
  ["dma_count", "DMAs", "DMA transfers attributed to the node"],
  ["count", "instructions", "Instruction count"],
];

const esc = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

/** Sum nodes into a tree: [{name, kind, query, ...sums, children}] (layer -> op -> opcode). */
export function buildTree(nodes) {
  const mk = (name, kind, query) => ({ name, kind, query, time_ns: 0, flops: 0, hbm_bytes: 0, dma_count: 0, count: 0, children: new Map() });
  const root = mk("", "root", []);
  const add = (n, x) => {
    for (const k of ["time_ns", "flops", "hbm_bytes", "dma_count", "count"]) n[k] += x[k];
  };
  const exact = (v) => `/^${esc(v)}$/`;
  for (const x of nodes) {
    const lq = x.layer === "(none)" ? [] : [["layer", exact(x.layer)]];
    const oq = x.op === "(none)" ? lq : [...lq, ["hlo_name", exact(x.op)]];
    let l = root.children.get(x.layer);
    if (!l) root.children.set(x.layer, (l = mk(x.layer, "layer", lq)));
    let o = l.children.get(x.op);
    if (!o) l.children.set(x.op, (o = mk(x.op, "op", oq)));
    add(root, x);
    add(l, x);
    add(o, x);
    if (x.opcode !== null) {
      const i = mk(x.opcode, "instruction", [...oq, ["opcode", x.opcode]]);
      add(i, x);
      o.children.set(x.opcode, i);
    }
  }
  return root;
}

export class OperatorsPanel {
  constructor(el, view) {
    this.el = el;
    this.view = view;
    this.busy = false;
    this.loaded = false;
    this.open = new Set();
  }

  async activate() {
    await loadOnce(this, "the operators", () => api.operators(this.view.id), (d) => {
      this.data = d;
      this.tree = buildTree(d.nodes);
      this._render();
    });
    if (this.loaded) this._render();
  }

  _value(n, key) {
    const d = this.data;
    if (key === "active") return d.total_ns ? (100 * n.time_ns) / d.total_ns : null;
    if (key === "mfu") return d.peak_flops && n.time_ns && n.flops ? (100 * n.flops) / (d.peak_flops * n.time_ns * 1e-9) : null;
    if (key === "name") return n.name;
    return n[key];
  }

  _fmt(key, v) {
    if (v === null || v === undefined) return "–";
    if (key === "time_ns") return fmtTime(v);
    if (key === "active" || key === "mfu") return `${trim(v)} %`;
    if (key === "hbm_bytes") return fmtBytes(v);
    if (key === "name") return v;
    return fmtInt(v);
  }

  _sorted(children) {
    const key = this.view.st.osort || "time_ns";
    const list = [...children.values()];
    return list.sort((a, b) => (key === "name" ? a.name.localeCompare(b.name) : (this._value(b, key) ?? -1) - (this._value(a, key) ?? -1)));
  }

  _matches(n, q) {
    if (!q) return true;
    if (n.name.toLowerCase().includes(q)) return true;
    return [...n.children.values()].some((c) => this._matches(c, q));
  }

  _rows(node, depth, path, q, out) {
    for (const n of this._sorted(node.children)) {
      if (!this._matches(n, q)) continue;
      const id = `${path}/${n.name}`;
      const kids = n.children.size > 0;
      const isOpen = this.open.has(id) || Boolean(q && kids);
      out.push(
        h(
          "tr",
          {
            class: `op-row ${n.kind}`,
            dataset: { kind: n.kind, name: n.name },
            title: "click: expand · right-click: highlight on the timeline",
            onclick: () => {
              if (!kids) return;
              if (this.open.has(id)) this.open.delete(id);
              else this.open.add(id);
              this._render();
            },
            oncontextmenu: (e) => {
              e.preventDefault();
              if (n.query.length) this.view.panels.search.setQuery(n.query, false, true);
            },
          },
          COLS.map(([key], ci) =>
            h(
              "td",
              { class: ci ? "num" : "op-name", style: ci ? undefined : { paddingLeft: `${6 + depth * 18}px` } },
              ci ? "" : kids ? (isOpen ? "▾ " : "▸ ") : "  ",
              this._fmt(key, this._value(n, key)),
            ),
          ),
        ),
      );
      if (isOpen) this._rows(n, depth + 1, id, n.name.toLowerCase().includes(q) ? "" : q, out); // a matching node shows all its children
    }
    return out;
  }

  _render() {
    const st = this.view.st;
    const q = (st.ofilter || "").toLowerCase();
    const filter = h("input", {
      type: "search",
      id: "op-filter",
      value: st.ofilter || "",
      placeholder: "filter layers, ops, opcodes",
      onchange: () => this.view.update({ ofilter: filter.value.trim() || null }, true),
    });
    const head = h(
      "tr",
      {},
      COLS.map(([key, label, tip]) =>
        h(
          "th",
          { class: `${key === "name" ? "" : "num"} sortable${(st.osort || "time_ns") === key ? " sorted" : ""}`, dataset: { key }, onclick: () => this.view.update({ osort: key === "time_ns" ? null : key }, true) },
          label,
          help(tip),
        ),
      ),
    );
    const rows = this._rows(this.tree, 0, "", q, []);
    this.el.replaceChildren(
      h("div", { class: "search-head" }, h("strong", {}, `Operators (${this.tree.children.size} layers)`), " ", filter, help("Layer → compiled op (hlo_name) → instruction. Click ▸ to expand, a header to sort, right-click a row to highlight its events on the timeline.")),
      h("table", { class: "data operators", id: "operators" }, h("thead", {}, head), h("tbody", {}, rows)),
    );
  }
}
