// annotations.js — the Annotations tab (U3): markers (dropped by right-clicking the
// timeline) listed by time with rename, delete, go-to and the time between any two
// markers; named marker sets saved, loaded and deleted. Everything is persisted via
// the markers / marker-sets API. Contract: render() redraws from view.markers;
// activate() refreshes the saved sets; error(e) shows a failure inline.

import { api } from "./api.js";
import { h, help, table } from "./dom.js";
import { fmtDate, fmtInt, fmtTime } from "./fmt.js";

export class AnnotationsPanel {
  constructor(el, view) {
    this.el = el;
    this.view = view;
    this.busy = false;
    this.sets = [];
    this.a = null;
    this.b = null;
    this.msg = h("p", { class: "annot-msg", role: "status" });
    this.markersEl = h("div", { id: "marker-list" });
    this.between = h("div", { class: "between", id: "marker-between" });
    this.setName = h("input", { type: "text", id: "set-name", placeholder: "set name", maxlength: "64", pattern: "[A-Za-z0-9._ \\-]{1,64}" });
    this.setsEl = h("div", { id: "marker-sets" });
    el.append(
      h(
        "div",
        { class: "cols" },
        h(
          "section",
          { class: "wide" },
          h(
            "h3",
            {},
            "Markers",
            help("Right-click the timeline to drop a marker. Markers are stored with the profile and stay across zooms."),
          ),
          h(
            "div",
            { class: "annot-actions" },
            h("button", { class: "btn small", type: "button", onclick: () => this._addCentre() }, "+ marker at window centre"),
            h("button", { class: "btn small", type: "button", id: "markers-clear", onclick: () => this._clear() }, "Clear all"),
          ),
          this.markersEl,
          this.between,
        ),
        h(
          "section",
          {},
          h("h3", {}, "Marker sets", help("Save the current markers under a name, or replace them by a saved set.")),
          h(
            "form",
            {
              class: "set-form",
              onsubmit: (e) => {
                e.preventDefault();
                this._save();
              },
            },
            this.setName,
            h("button", { class: "btn primary small", type: "submit", id: "set-save" }, "Save current markers"),
          ),
          this.setsEl,
        ),
      ),
      this.msg,
    );
    this.render();
  }

  activate() {
    this._loadSets();
  }

  error(e) {
    this.msg.textContent = e.message;
    this.msg.className = "annot-msg error-inline";
  }

  _ok(text) {
    this.msg.textContent = text;
    this.msg.className = "annot-msg muted";
  }

  async _do(fn, okText) {
    this.busy = true;
    try {
      await fn();
      if (okText) this._ok(okText);
    } catch (e) {
      this.error(e);
    } finally {
      this.busy = false;
    }
  }

  render() {
    const v = this.view;
    const ms = v.markers || [];
    if (!ms.length) {
      this.markersEl.replaceChildren(h("p", { class: "muted" }, "No markers yet: right-click the timeline to drop one."));
      this.between.replaceChildren();
      return;
    }
    this.markersEl.replaceChildren(
      table(
        [
          {
            label: "label",
            fmt: (m) =>
              h("input", {
                type: "text",
                class: "marker-label",
                value: m.label || "",
                placeholder: m.id,
                dataset: { id: m.id },
                onchange: (e) => this._do(() => api.patchMarker(v.id, m.id, { label: e.target.value }).then(() => v.loadMarkers()), "renamed"),
              }),
          },
          { label: "time", cls: "num", fmt: (m) => fmtTime(m.ts) },
          { label: "Δ previous", cls: "num", fmt: (i) => (i > 0 ? fmtTime(ms[i].ts - ms[i - 1].ts) : "–") },
          {
            label: "",
            fmt: (m) =>
              h(
                "span",
                { class: "row-actions" },
                h("button", { class: "btn small", type: "button", title: "centre the timeline on this marker", onclick: () => this._goto(m) }, "go to"),
                h(
                  "button",
                  {
                    class: "btn small danger",
                    type: "button",
                    title: "delete this marker",
                    onclick: () => this._do(() => api.deleteMarker(v.id, m.id).then(() => v.loadMarkers()), "deleted"),
                  },
                  "delete",
                ),
              ),
          },
        ],
        ms.map((m, i) => [m, m, i, m]),
        { cls: "markers" },
      ),
    );
    this._renderBetween(ms);
  }

  _renderBetween(ms) {
    const opt = (sel) => ms.map((m) => h("option", { value: m.id, selected: m.id === sel }, `${m.label || m.id} (${fmtTime(m.ts)})`));
    if (!ms.some((m) => m.id === this.a)) this.a = ms[0].id;
    if (!ms.some((m) => m.id === this.b) || (this.b === this.a && ms.length > 1)) {
      this.b = ms[ms.length - 1].id === this.a ? ms[0].id : ms[ms.length - 1].id;
    }
    const selA = h("select", { id: "between-a", onchange: (e) => ((this.a = e.target.value), this._renderBetween(ms)) }, opt(this.a));
    const selB = h("select", { id: "between-b", onchange: (e) => ((this.b = e.target.value), this._renderBetween(ms)) }, opt(this.b));
    const ma = ms.find((m) => m.id === this.a);
    const mb = ms.find((m) => m.id === this.b);
    const d = Math.abs(mb.ts - ma.ts);
    this.between.replaceChildren(
      h("span", {}, "Time between "),
      selA,
      h("span", {}, " and "),
      selB,
      h("strong", { id: "between-value", dataset: { ns: d } }, ` = ${fmtTime(d)}`),
      h("span", { class: "muted" }, ` (${fmtInt(d)} ns)`),
    );
  }

  _goto(m) {
    const st = this.view.st;
    const span = st.t1 - st.t0;
    this.view.setWindow(m.ts - span / 2, m.ts + span / 2, true);
  }

  _addCentre() {
    const st = this.view.st;
    this._do(() => this.view.addMarker(Math.round((st.t0 + st.t1) / 2)));
  }

  _clear() {
    const v = this.view;
    this._do(() => api.clearMarkers(v.id).then(() => v.loadMarkers()), "all markers deleted");
  }

  async _loadSets() {
    this.busy = true;
    try {
      const r = await api.markerSets(this.view.id);
      this.sets = r.sets;
      this._renderSets();
    } catch (e) {
      this.error(e);
    } finally {
      this.busy = false;
    }
  }

  _save() {
    const name = this.setName.value.trim();
    if (!/^[A-Za-z0-9._ -]{1,64}$/.test(name)) {
      this.error(new Error("set names use letters, digits, space, '.', '_' or '-' (1-64 characters)"));
      return;
    }
    this._do(async () => {
      const r = await api.saveMarkerSet(this.view.id, name);
      await this._loadSets();
      this._ok(`saved ${r.count} markers as "${r.name}"`);
    });
  }

  _renderSets() {
    const v = this.view;
    if (!this.sets.length) {
      this.setsEl.replaceChildren(h("p", { class: "muted" }, "No saved marker sets."));
      return;
    }
    this.setsEl.replaceChildren(
      table(
        [
          { label: "name" },
          { label: "markers", cls: "num", fmt: fmtInt },
          { label: "saved", fmt: fmtDate },
          {
            label: "",
            fmt: (name) =>
              h(
                "span",
                { class: "row-actions" },
                h(
                  "button",
                  {
                    class: "btn small",
                    type: "button",
                    dataset: { set: name },
                    onclick: () =>
                      this._do(async () => {
                        await api.loadMarkerSet(v.id, name);
                        await v.loadMarkers();
                        this._ok(`loaded "${name}"`);
                      }),
                  },
                  "load",
                ),
                h(
                  "button",
                  {
                    class: "btn small danger",
                    type: "button",
                    onclick: () => this._do(() => api.deleteMarkerSet(v.id, name).then(() => this._loadSets()), "set deleted"),
                  },
                  "delete",
                ),
              ),
          },
        ],
        this.sets.map((s) => [s.name, s.count, s.saved, s.name]),
        { cls: "sets" },
      ),
    );
  }
}
