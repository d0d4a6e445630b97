// toolbar.js — the timeline toolbar: reset / zoom buttons, Zoom vs Box-select mode,
// view settings (minimal/full view, colour by, layer depth, warning boxes), the window readout and
// the loading indicator. Contract: new Toolbar(el, handlers) builds the DOM;
// sync(state) reflects the state; setWindow(t0, t1, items) and setBusy(bool) update
// the readout (`status` element, placed by the owner). Handlers: onReset, onZoomIn, onZoomOut, onMode(m), onStyle({...}),
// onAnnotations().

import { h } from "./dom.js";
import { fmtInt, fmtTime, fmtTimeAt } from "./fmt.js";

export class Toolbar {
  constructor(el, hd) {
    this.el = el;
    const btn = (text, title, on, cls = "", id = undefined) =>
      h("button", { class: `btn ${cls}`, title, onclick: on, type: "button", id }, text);
    this.modeZoom = btn("Zoom", "Drag across the timeline to zoom into that window", () => hd.onMode("zoom"), "seg", "mode-zoom");
    this.modeSel = btn(
      "Box select",
      "Drag a rectangle over rows to get totals and breakdowns of the events inside (Shift+drag works in any mode)",
      () => hd.onMode("select"),
      "seg",
      "mode-select",
    );
    this.viewMin = btn("Minimal", "Compact rows, no labels inside bars", () => hd.onStyle({ view: "minimal" }), "seg");
    this.viewFull = btn("Full", "Taller rows with opcode labels inside wide bars", () => hd.onStyle({ view: "full" }), "seg");
    this.color = h(
      "select",
      {
        id: "color-by",
        title: "Colour events by opcode, framework layer, engine or DMA queue",
        onchange: () => hd.onStyle({ color: this.color.value }),
      },
      ["opcode", "layer", "engine", "queue"].map((c) => h("option", { value: c }, c === "queue" ? "DMA queue" : c)),
    );
    this.depth = h("input", {
      id: "layer-depth",
      type: "number",
      min: "0",
      max: "32",
      step: "1",
      title: "Layer depth: colour by the first N components of the layer path (0 = the full path)",
      onchange: () => hd.onStyle({ depth: Math.max(0, Number(this.depth.value) || 0) }),
    });
    this.warn = h("input", { type: "checkbox", id: "show-warnings", onchange: () => hd.onStyle({ warn: this.warn.checked }) });
    this.readout = h("span", { class: "readout", id: "window-readout" });
    this.busy = h("span", { class: "spinner", id: "busy", title: "loading", hidden: true });
    el.append(
      h(
        "div",
        { class: "tb-group" },
        btn("⟲ Reset", "Show the whole profile (key 0)", hd.onReset, "reset-btn"),
        btn("−", "Zoom out (S / ↓ / wheel)", hd.onZoomOut, "zoom-out"),
        btn("+", "Zoom in (W / ↑ / wheel)", hd.onZoomIn, "zoom-in"),
      ),
      h("div", { class: "tb-group segmented", role: "group", "aria-label": "mouse mode" }, this.modeZoom, this.modeSel),
      h("div", { class: "tb-group segmented", role: "group", "aria-label": "view" }, this.viewMin, this.viewFull),
      h("label", { class: "tb-group" }, "Colour by ", this.color),
      h("label", { class: "tb-group" }, "Layer depth ", this.depth),
      h("label", { class: "tb-group", title: "Draw the orange warning boxes and collective-op boxes" }, this.warn, "Warnings"),
      h("div", { class: "tb-group" }, btn("Annotations", "Markers and saved marker sets", hd.onAnnotations, "annot-btn")),
    );
    this.status = h("div", { class: "tl-status" }, this.busy, this.readout);
  }

  sync(st) {
    this.modeZoom.classList.toggle("on", st.mode === "zoom");
    this.modeSel.classList.toggle("on", st.mode === "select");
    this.viewMin.classList.toggle("on", st.view === "minimal");
    this.viewFull.classList.toggle("on", st.view === "full");
    this.color.value = st.color;
    this.depth.value = String(st.depth || 0);
    this.depth.disabled = st.color !== "layer";
    this.warn.checked = st.warn !== false;
  }

  setWindow(t0, t1, info) {
    const res = Math.max(1, (t1 - t0) / 100);
    const parts = [`${fmtTimeAt(t0, res)} – ${fmtTimeAt(t1, res)}`, `span ${fmtTime(t1 - t0)}`];
    if (info.events) parts.push(`${fmtInt(info.events)} events`);
    if (info.buckets) parts.push(`${fmtInt(info.buckets)} buckets`);
    this.readout.textContent = parts.join("  ·  ");
    this.readout.title = "window shown; events drawn individually and aggregated pixel buckets (zoom in to see events)";
  }

  setBusy(b) {
    this.busy.hidden = !b;
  }
}
