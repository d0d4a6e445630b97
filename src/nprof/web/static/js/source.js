// source.js — the Source tab: the kernel / user source files a profile points at, every line with
// its instruction count and total time as a heat bar (GET /profiles/{id}/source). Click a line: its
// instructions are highlighted on the timeline (Search nki_source_location=<file:line>); Ctrl+click an
// event on the timeline opens its line here. The selected line lives in the URL (src=file:line).
// Contract: activate() loads once and shows st.src; `busy` while loading.

import { api } from "./api.js";
import { h, help, loadOnce } from "./dom.js";
import { fmtInt, fmtTime } from "./fmt.js";

/** "file.py:12" -> ["file.py", 12] (null line when there is none). */
export function splitLoc(loc) {
  const m = /^(.*):(\d+)$/.exec(loc || "");
  return m ? [m[1], Number(m[2])] : [loc || "", null];
}

export class SourcePanel {
  constructor(el, view) {
    this.el = el;
    this.view = view;
    this.busy = false;
    this.loaded = false;
  }

  async activate() {
    await loadOnce(this, "the source view", () => api.source(this.view.id), (d) => {
      this.files = d.files;
      this.root = d.root;
      this._render();
    });
    if (this.loaded) this._render();
  }

  _pick(loc) {
    this.view.update({ src: loc }, true);
    this.view.panels.search.setQuery([["nki_source_location", loc]], false, true);
  }

  _render() {
    if (!this.files.length) {
      this.el.replaceChildren(h("p", { class: "muted", id: "source-none" }, "No event of this profile carries a source line (file:line)."));
      return;
    }
    const [selFile, selLine] = splitLoc(this.view.st.src);
    const file = this.files.find((f) => f.name === selFile) || this.files[0];
    const stats = new Map(file.lines.map((l) => [l.line, l]));
    const maxT = Math.max(1, ...file.lines.map((l) => l.time_ns));
    const picker = h(
      "select",
      { id: "source-file", onchange: () => this.view.update({ src: picker.value }, true) },
      ...this.files.map((f) => h("option", { value: f.name, selected: f === file }, `${f.name} — ${fmtInt(f.count)} events, ${fmtTime(f.time_ns)}`)),
    );
    const text = file.text;
    const lines = text !== null ? text.replace(/\n$/, "").split("\n") : null;
    const numbers = lines ? lines.map((_, i) => i + 1) : file.lines.map((l) => l.line);
    const rows = numbers.map((n) => {
      const s = stats.get(n);
      const on = n === selLine && file.name === selFile;
      return h(
        "tr",
        {
          class: `src-line${s ? " hot" : ""}${on ? " on" : ""}`,
          dataset: { line: n },
          title: s ? `${fmtInt(s.count)} events, ${fmtTime(s.time_ns)} — click to highlight them` : "",
          onclick: s ? () => this._pick(`${file.name}:${n}`) : undefined,
        },
        h("td", { class: "num ln" }, String(n)),
        h("td", { class: "heat" }, s ? h("i", { style: { width: `${Math.max(2, (100 * s.time_ns) / maxT)}%` } }) : null),
        h("td", { class: "num" }, s ? fmtInt(s.count) : ""),
        h("td", { class: "num" }, s ? fmtTime(s.time_ns) : ""),
        h("td", { class: "code" }, lines ? lines[n - 1] : ""),
      );
    });
    const origin = file.origin === "root" ? `read from ${this.root}` : file.origin === "profile" ? "stored in the profile at capture" : null;
    this.el.replaceChildren(
      h(
        "div",
        { class: "search-head" },
        h("strong", {}, "Source "),
        picker,
        " ",
        h("span", { class: "muted", id: "source-origin" }, origin || "text not available: start nprof view with --nki-source-root DIR"),
        help("Each line: events attributed to it and their total time (bar: share of the busiest line). Click a line to highlight its events; Ctrl+click an event on the timeline to jump to its line."),
      ),
      h(
        "div",
        { class: "source-scroll" },
        h("table", { class: "source", id: "source" }, h("thead", {}, h("tr", {}, ["line", "time", "events", "total", "code"].map((t) => h("th", {}, t)))), h("tbody", {}, rows)),
      ),
    );
    // the selected line, else the busiest one, in view (scrolling only the listing, not the page)
    const hottest = file.lines.reduce((a, b) => (b.time_ns > a.time_ns ? b : a), file.lines[0]);
    const target = this.el.querySelector("tr.src-line.on") || this.el.querySelector(`tr.src-line[data-line="${hottest.line}"]`);
    const box = this.el.querySelector(".source-scroll");
    if (target && box) box.scrollTop = Math.max(0, target.offsetTop - box.clientHeight / 2);
  }
}
