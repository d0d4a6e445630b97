// panels.js — the tab strip under the timeline and its panels.
// Contract: new PanelSet(view) builds tabs Details, Search, Box select, Summary,
// Annotations, Warnings (+ Compare, + System for system profiles: system.js); show(tab) activates one (lazy-loading the
// Summary and Warnings tabs the first time); onWindow() tells window-dependent
// panels (search summary) the zoom changed; idle() is true when no panel waits
// for the server.

import { AnnotationsPanel } from "./annotations.js";
import { ComparePanel } from "./compare.js";
import { DetailsPanel } from "./details.js";
import { h } from "./dom.js";
import { SearchPanel } from "./search.js";
import { SelectionPanel } from "./selection.js";
import { OperatorsPanel } from "./operators.js";
import { SummaryPanel } from "./summary.js";
import { SystemPanel, isSystem } from "./system.js";
import { MemoryPanel } from "./memory.js";
import { SourcePanel } from "./source.js";
import { TensorsPanel } from "./tensors.js";
import { WarningsPanel } from "./warnings.js";

const TABS = [
  ["details", "Details"],
  ["search", "Search"],
  ["selection", "Box select"],
  ["summary", "Summary"],
  ["operators", "Operators"],
  ["tensors", "Tensors"],
  ["source", "Source"],
  ["memory", "Memory"],
  ["annotations", "Annotations"],
  ["warnings", "Warnings"],
  ["compare", "Compare"],
  ["system", "System"],
];

export class PanelSet {
  constructor(view) {
    this.view = view;
    const mk = (key) => h("div", { class: "panel", id: `panel-${key}`, role: "tabpanel", hidden: true });
    this.bodies = Object.fromEntries(TABS.map(([k]) => [k, mk(k)]));
    this.buttons = Object.fromEntries(
      TABS.map(([k, label]) => [
        k,
        h(
          "button",
          { class: "tab", role: "tab", type: "button", id: `tab-${k}`, onclick: () => view.update({ tab: k }, true) },
          label,
        ),
      ]),
    );
    this.details = new DetailsPanel(this.bodies.details, view);
    this.search = new SearchPanel(this.bodies.search, view);
    this.selection = new SelectionPanel(this.bodies.selection, view);
    this.summary = new SummaryPanel(this.bodies.summary, view);
    this.operators = new OperatorsPanel(this.bodies.operators, view);
    this.tensors = new TensorsPanel(this.bodies.tensors, view);
    this.source = new SourcePanel(this.bodies.source, view);
    this.memory = new MemoryPanel(this.bodies.memory, view);
    this.annotations = new AnnotationsPanel(this.bodies.annotations, view);
    this.warnings = new WarningsPanel(this.bodies.warnings, view);
    this.compare = new ComparePanel(this.bodies.compare, view);
    this.system = new SystemPanel(this.bodies.system, view);
    this.hasSystem = isSystem(view.info);
    this.buttons.system.hidden = !this.hasSystem; // only system profiles have the System tab
    this.all = [this.system, this.details, this.search, this.selection, this.summary, this.operators, this.tensors, this.source, this.memory, this.annotations, this.warnings, this.compare];
    this.el = h(
      "div",
      { class: "panels" },
      h("nav", { class: "tabs", role: "tablist" }, Object.values(this.buttons)),
      Object.values(this.bodies),
    );
    this.current = null;
  }

  show(tab) {
    if (!this.bodies[tab] || (tab === "system" && !this.hasSystem)) tab = "details";
    for (const [k, b] of Object.entries(this.buttons)) {
      b.classList.toggle("on", k === tab);
      b.setAttribute("aria-selected", String(k === tab));
      this.bodies[k].hidden = k !== tab;
    }
    this.current = tab;
    const p = { summary: this.summary, operators: this.operators, tensors: this.tensors, source: this.source, memory: this.memory, warnings: this.warnings, compare: this.compare, annotations: this.annotations, system: this.system }[tab];
    if (p && p.activate) p.activate();
  }

  onWindow() {
    this.search.onWindow();
  }

  idle() {
    return this.all.every((p) => !p.busy);
  }
}
