// details.js — the Details tab: every field of the clicked event, grouped (Timing,
// IDs, Source, Operands, Memory, Other) with a "?" help tooltip per field, and its
// dependencies / dependents as clickable lists (also outlined on the timeline); the
// operands field gets a breakdown table (operands.js).
// Contract: show(details|null), loading(id), error(id, err); `busy` while loading.

import { fieldGroup, h, help } from "./dom.js";
import { fmtBytes, fmtInt, fmtTime } from "./fmt.js";
import { operandBreakdown } from "./operands.js";
import { deviceLink } from "./system.js";

function fmtField(f) {
  const v = f.value;
  if (v === null || v === undefined || v === "") return "–";
  if (Array.isArray(v)) return v.length ? v.join(", ") : "–";
  if (typeof v === "number") {
    if (f.unit === "ns") return `${fmtTime(v)}${Math.abs(v) >= 1000 ? ` (${fmtInt(v)} ns)` : ""}`;
    if (f.unit === "B" || f.unit === "bytes") return `${fmtBytes(v)}${v >= 1024 ? ` (${fmtInt(v)} B)` : ""}`;
    return `${Number.isInteger(v) ? fmtInt(v) : v}${f.unit ? ` ${f.unit}` : ""}`;
  }
  if (typeof v === "boolean") return v ? "yes" : "no";
  return `${v}${f.unit ? ` ${f.unit}` : ""}`;
}

export class DetailsPanel {
  constructor(el, view) {
    this.el = el;
    this.view = view;
    this.busy = false;
    this.show(null);
  }

  loading(id) {
    this.busy = true;
    this.el.replaceChildren(h("p", { class: "loading" }, `Loading event ${id}…`));
  }

  error(id, e) {
    this.busy = false;
    this.el.replaceChildren(h("p", { class: "error-inline" }, `Event ${id}: ${e.message}`));
  }

  show(d) {
    this.busy = false;
    if (!d) {
      this.el.replaceChildren(
        h(
          "p",
          { class: "hint" },
          "Click an instruction or DMA on the timeline to see all its fields and its dependencies. ",
          "Drag to zoom, wheel or W/S to zoom, A/D or arrows to pan, 0 to reset, right-click to drop a marker, ",
          "Shift+drag (or Box select mode) to summarise a region.",
        ),
      );
      return;
    }
    const rowLabel = (key) => {
      const r = this.view.rowsResp.rows.find((x) => x.key === key);
      return r ? r.label : key;
    };
    const head = h(
      "div",
      { class: "details-head" },
      h("h2", { id: "details-title" }, d.opcode),
      h("span", { class: "muted" }, `${d.kind} · ${rowLabel(d.row)} · id ${d.id}`),
      h("span", { class: "muted" }, `${fmtTime(d.ts)} → ${fmtTime(d.ts + d.dur)} (${fmtTime(d.dur)})`),
      h("button", { class: "btn small", type: "button", onclick: () => this.view.reveal(d) }, "Show on timeline"),
      deviceLink(this.view, d),
    );
    const groups = (d.groups || [])
      .filter((g) => g.fields && g.fields.length)
      .map((g) =>
        fieldGroup(
          "field-group",
          g.name,
          g.fields.map((f) => ({
            key: f.key,
            label: f.label,
            help: f.help,
            value: [fmtField(f), f.key === "operands" ? operandBreakdown(f.value) : null],
          })),
        ),
      );
    const evList = (title, list, cls, helpText) =>
      h(
        "section",
        { class: `field-group deps ${cls}` },
        h("h3", {}, `${title} (${list.length})`, help(helpText)),
        list.length
          ? h(
              "ul",
              {},
              list.slice(0, 200).map((x) =>
                h(
                  "li",
                  {},
                  h(
                    "a",
                    {
                      href: "#",
                      onclick: (e) => {
                        e.preventDefault();
                        this.view.update({ ev: x.id }, true);
                        this.view.reveal(x);
                      },
                    },
                    `${x.opcode}`,
                  ),
                  ` ${rowLabel(x.row)} · ${fmtTime(x.ts)} (+${fmtTime(x.dur)}) · id ${x.id}`,
                ),
              ),
            )
          : h("p", { class: "muted" }, "none"),
      );
    this.el.replaceChildren(
      head,
      h(
        "div",
        { class: "field-groups" },
        groups,
        evList("Depends on", d.deps || [], "dep", "Events this one waited for (outlined in blue on the timeline)"),
        evList("Dependents", d.dependents || [], "dependent", "Events that waited for this one (outlined in green)"),
      ),
    );
  }
}
