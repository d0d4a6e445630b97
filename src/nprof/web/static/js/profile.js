// profile.js — the profile page controller: loads a profile's rows, owns the view
// state (mirrored in the URL), drives the timeline and the panels.
// Contract: new ProfileView(root, state, env).start() renders the page for state.id;
// applyState(state) re-applies a URL state (back/forward). Data flow: every window
// change redraws at once from the last viewport response, then re-queries the
// viewport API after a short debounce, aborting the previous request.
// Test hook: window.__nprof = {view, state, idle(), timeline, layerGroups()}.

import { api, counters } from "./api.js";
import { seedPalette } from "./colors.js";
import { h } from "./dom.js";
import { downloadMenu, renderLegend, titleBar } from "./header.js";
import { eventGroups, LayerNames } from "./layers.js";
import { PanelSet } from "./panels.js";
import { Timeline } from "./timeline.js";
import { systemLink } from "./system.js";
import { Toolbar } from "./toolbar.js";
import { trackPicker, visibleRows } from "./tracks.js";
import { hideTooltip } from "./tooltip.js";
import { toSearch } from "./url.js";
import { collectiveTexts, hoverCancel, hoverText, loadBoxes } from "./overlays.js";

const DEBOUNCE_MS = 40;

export class ProfileView {
  constructor(root, st, env) {
    this.root = root;
    this.st = { ...st };
    this.env = env;
    this.id = env.profileId || st.id;
    this.vp = null;
    this.vpTimer = 0;
    this.vpAbort = null;
    this.urlTimer = 0;
    this.markers = [];
    this.details = null;
    this.evCache = new Map();
    this.dead = false;
    // timings for bench/first_paint.py: ms since navigation start of the first draw with data,
    // and the latency of each viewport request
    this.metrics = { firstPaint: null, viewportMs: [] };
    this.layerNames = new LayerNames(this);
  }

  async start() {
    const [info, rows, links] = await Promise.all([api.profile(this.id), api.rows(this.id), api.links(this.id)]);
    this.links = links; // system profile <-> device profiles (system.js)
    performance.mark("nprof:info");
    this.info = info;
    this.rowsResp = rows;
    seedPalette("opcode", rows.opcodes || []); // the profile's opcode table: distinct colours in a stable order
    seedPalette("queue", rows.rows.filter((r) => r.kind === "dma").map((r) => r.key));
    this.tmin = rows.t_min;
    this.tmax = Math.max(rows.t_max, rows.t_min + 1);
    this._build();
    performance.mark("nprof:built");
    const st = this.st;
    if (st.t0 === null || st.t1 === null || !(st.t1 > st.t0)) {
      st.t0 = this.tmin;
      st.t1 = this.tmax;
    }
    this._clampWindow();
    this.tl.setBounds(this.tmin, this.tmax);
    this.tl.setRows(visibleRows(rows.rows, st.hide), st.view);
    this.tl.setWindow(st.t0, st.t1);
    this._syncStyle();
    this.panels.show(st.tab);
    this._commit(false);
    // first paint first: the viewport goes out at once, markers and warning boxes after it
    this.toolbar.setBusy(true);
    performance.mark("nprof:viewport");
    await this._doFetch();
    this.loadMarkers();
    this._loadCollectiveTexts();
    if (st.ev !== null) this.selectEvent(st.ev, false);
    if (st.query.length) this.panels.search.setQuery(st.query, true);
    if (st.sel) this.panels.selection.run(st.sel);
    window.__nprof = {
      view: this,
      timeline: this.tl,
      state: this.st,
      idle: () => this.idle(),
      layerGroups: () => eventGroups(this.vp, this.st.depth),
    };
  }

  _build() {
    const p = this.info.profile;
    this.titleEl = titleBar(this.info);
    const sysLink = systemLink(this);
    if (sysLink) this.titleEl.append(sysLink);
    const tbEl = h("div", { class: "toolbar", role: "toolbar" });
    this.toolbar = new Toolbar(tbEl, {
      onReset: () => this.setWindow(this.tmin, this.tmax, true),
      onZoomIn: () => this.tl.zoomIn(),
      onZoomOut: () => this.tl.zoomOut(),
      onMode: (m) => this.update({ mode: m }, true),
      onStyle: (s) => this.update(s, true),
      onAnnotations: () => this.showTab("annotations"),
    });
    this.legend = h("div", { class: "legend", id: "legend" });
    this.legendMore = h("button", {
      class: "btn small legend-more",
      type: "button",
      hidden: true,
      title: "show every legend entry",
      onclick: () => {
        this.legend.classList.toggle("open");
        this._legend();
      },
    });
    this.tlHost = h("div", { class: "timeline", id: "timeline", dataset: { ready: "0" } });
    this.errBar = h("div", { class: "errbar", hidden: true, role: "alert" });
    this.tl = new Timeline(this.tlHost, {
      onWindow: (t0, t1, o) => this.setWindow(t0, t1, o.push),
      onClick: (hit, e) => this._onClick(hit, e),
      onSelect: (sel) => this.update({ sel, tab: "selection" }, true),
      onMarker: (ts) => this.addMarker(ts),
      onHover: (hit, e) => this._onHover(hit, e),
      onDrawn: (info) => this._onDrawn(info),
      onResize: () => this._fetchViewport(),
    });
    const picker = trackPicker(this.rowsResp.rows, this.st.hide, (hide) => this.update({ hide }, true));
    if (picker) tbEl.append(picker); // a system profile's track groups (tracks.js)
    tbEl.append(h("div", { class: "tb-group" }, downloadMenu(this.id)));
    this.panels = new PanelSet(this);
    this.root.replaceChildren(
      h(
        "section",
        { class: "profile-page" },
        this.titleEl,
        tbEl,
        h("div", { class: "legend-row" }, this.legend, this.legendMore, this.toolbar.status),
        this.errBar,
        h("div", { class: "tl-scroll" }, this.tlHost),
        this.panels.el,
      ),
    );
    document.title = `${p.display_name || p.id} · nprof`;
    this._keys = (e) => {
      const tag = (e.target && e.target.tagName) || "";
      if (["INPUT", "TEXTAREA", "SELECT"].includes(tag) || e.ctrlKey || e.metaKey || e.altKey) return;
      if (e.key === "0" || e.key === "Home") this.setWindow(this.tmin, this.tmax, true);
      else if (e.key === "Escape") this.update({ sel: null, ev: null }, true);
      else if (!this.tl.handleKey(e)) return;
      e.preventDefault();
    };
    document.addEventListener("keydown", this._keys);
  }

  destroy() {
    this.dead = true;
    document.removeEventListener("keydown", this._keys);
    if (this.vpAbort) this.vpAbort.abort();
    if (this.boxAbort) this.boxAbort.abort();
    clearTimeout(this.vpTimer);
    clearTimeout(this.urlTimer);
    if (this.tl) this.tl.destroy();
  }

  // ---- state ------------------------------------------------------------------------------------------

  _clampWindow() {
    const st = this.st;
    const full = this.tmax - this.tmin;
    let span = Math.min(full, Math.max(10, st.t1 - st.t0));
    let t0 = Math.max(this.tmin, Math.min(this.tmax - span, st.t0));
    span = Math.min(span, this.tmax - t0);
    // whole nanoseconds: the URL, the viewport query and the drawn window agree exactly
    st.t0 = Math.round(t0);
    st.t1 = Math.max(st.t0 + 1, Math.round(t0 + span));
  }

  _commit(push) {
    const url = `${window.location.pathname}${toSearch(this.st)}`;
    clearTimeout(this.urlTimer);
    this.urlTimer = 0;
    if (url === `${window.location.pathname}${window.location.search}`) return;
    if (push) window.history.pushState(null, "", url);
    else window.history.replaceState(null, "", url);
  }

  _commitSoon() {
    clearTimeout(this.urlTimer);
    this.urlTimer = setTimeout(() => this._commit(false), 150);
  }

  setWindow(t0, t1, push) {
    this.st.t0 = t0;
    this.st.t1 = t1;
    this._clampWindow();
    this.tl.setWindow(this.st.t0, this.st.t1);
    if (push) this._commit(true);
    else this._commitSoon();
    this._fetchViewport();
    this.panels.onWindow();
  }

  /** Apply a partial state change from the UI; push=true adds a history entry. */
  update(patch, push) {
    const prev = this.st;
    const st = { ...prev, ...patch };
    this.st = st;
    if (window.__nprof) window.__nprof.state = st;
    if (patch.mode !== undefined) {
      this.tl.setMode(st.mode);
      this.toolbar.sync(st);
    }
    if (patch.view !== undefined || patch.color !== undefined || patch.depth !== undefined || patch.warn !== undefined) {
      this._syncStyle();
    }
    if (st.color === "layer" && prev.color !== "layer") this._fetchViewport(); // loads the layer names
    if (patch.tab !== undefined) this.panels.show(st.tab);
    if ("hide" in patch) this.tl.setRows(visibleRows(this.rowsResp.rows, st.hide), st.view);
    if ("ev" in patch && patch.ev !== prev.ev) this.selectEvent(st.ev, false);
    if ("sel" in patch) this.panels.selection.run(st.sel);
    this._commit(push);
    if ("compare" in patch && st.tab === "compare") this.panels.compare.activate();
    if (["osort", "ofilter", "tsort", "src"].some((k) => k in patch)) this.panels.show(st.tab);
  }

  /** Re-apply a state parsed from the URL (popstate). */
  applyState(next) {
    const prev = this.st;
    const windowChanged = next.t0 !== null && next.t1 !== null && (next.t0 !== Math.round(prev.t0) || next.t1 !== Math.round(prev.t1));
    this.st = { ...next };
    if (this.st.t0 === null || this.st.t1 === null) {
      this.st.t0 = this.tmin;
      this.st.t1 = this.tmax;
    }
    this._clampWindow();
    if (window.__nprof) window.__nprof.state = this.st;
    this.tl.setMode(this.st.mode);
    this.tl.setRows(visibleRows(this.rowsResp.rows, this.st.hide), this.st.view);
    this._syncStyle();
    this.tl.setWindow(this.st.t0, this.st.t1);
    if (windowChanged || next.t0 === null || (next.color === "layer" && prev.color !== "layer")) this._fetchViewport();
    this.panels.show(this.st.tab);
    if (next.ev !== prev.ev) this.selectEvent(next.ev, false);
    if (JSON.stringify(next.query) !== JSON.stringify(prev.query)) this.panels.search.setQuery(next.query, true);
    if (JSON.stringify(next.sel) !== JSON.stringify(prev.sel)) this.panels.selection.run(next.sel);
    this.panels.onWindow();
  }

  _syncStyle() {
    const st = this.st;
    this.tl.setMode(st.mode);
    this.tl.setStyle({ color: st.color, depth: st.depth, view: st.view, warn: st.warn !== false });
    this.toolbar.sync(st);
    this.tl.setOverlays({ sel: st.sel });
    if (this.vp) this._legend();
  }

  showTab(tab) {
    this.update({ tab }, true);
    this.panels.el.scrollIntoView({ block: "nearest" });
  }

  idle() {
    return (
      !this.vpTimer &&
      !this.vpAbort &&
      !this.boxAbort &&
      !this.urlTimer &&
      counters.inflight === 0 &&
      !this.tl.frame &&
      this.panels.idle() &&
      this.settled &&
      this.drawnT0 === this.st.t0 &&
      this.drawnT1 === this.st.t1
    );
  }

  // ---- data -------------------------------------------------------------------------------------------

  _fetchViewport() {
    clearTimeout(this.vpTimer);
    if (this.vpAbort) this.vpAbort.abort(); // its answer would be for a stale window
    this.toolbar.setBusy(true);
    this.tlHost.dataset.ready = "0";
    this.vpTimer = setTimeout(() => {
      this.vpTimer = 0;
      this._doFetch();
    }, DEBOUNCE_MS);
  }

  async _doFetch() {
    if (this.vpAbort) this.vpAbort.abort();
    const ac = new AbortController();
    this.vpAbort = ac;
    const st = this.st;
    const params = {
      t0: Math.floor(st.t0),
      t1: Math.ceil(st.t1),
      width: this.tl.plotWidth(),
      rows: this.rowsResp.rows.map((r) => r.key).join(","),
    };
    if (st.color === "layer") params.color = "layer";
    const asked = performance.now();
    try {
      const vp = await api.viewport(this.id, params, ac.signal);
      if (ac.signal.aborted || this.dead) return;
      this.metrics.viewportMs.push(performance.now() - asked);
      if (st.color === "layer") {
        await this.layerNames.load(); // legend names (once)
        seedPalette(`layer:${st.depth}`, this.layerNames.groups(st.depth).map((g) => g.name));
        if (ac.signal.aborted || this.dead) return;
      }
      this.vp = vp;
      this.errBar.hidden = true;
      this.tl.setData(vp);
      this._legend();
      this._loadBoxes();
    } catch (e) {
      if (e.name === "AbortError") return;
      this.errBar.hidden = false;
      this.errBar.textContent = `Could not load the timeline window: ${e.message}`;
    } finally {
      if (this.vpAbort === ac) {
        this.vpAbort = null;
        this.settled = true; // a first answer (or error) arrived: idle() may report true
        this.toolbar.setBusy(false);
        this.tl.schedule();
      }
    }
  }

  _onDrawn(info) {
    if (this.vp && this.metrics.firstPaint === null) this.metrics.firstPaint = performance.now();
    this.drawnT0 = this.tl.layout.t0;
    this.drawnT1 = this.tl.layout.t1;
    this.toolbar.setWindow(this.st.t0, this.st.t1, info);
    this._legendFit();
    const ready = this.idle();
    this.tlHost.dataset.ready = ready ? "1" : "0";
    this.tlHost.dataset.items = String(info.items);
    this.tlHost.dataset.draws = String(this.tl.drawCount);
  }

  _legend() {
    const onSearch = (fields) => this.panels.search.setQuery(fields, false);
    const groups = this.st.color === "layer" ? this.layerNames.groups(this.st.depth) : [];
    renderLegend(this.legend, this.vp, this.st, this.rowsResp.rows, onSearch, groups);
    this._legendFit();
  }

  /** Two legend lines at most unless expanded (the timeline must not jump); re-checked after each draw. */
  _legendFit() {
    const open = this.legend.classList.contains("open");
    const over = open || this.legend.scrollHeight > this.legend.clientHeight + 2;
    this.legendMore.hidden = !over;
    this.legendMore.textContent = open ? "less" : `all ${this.legend.children.length}`;
  }

  async loadMarkers() {
    try {
      const r = await api.markers(this.id);
      this.markers = r.markers;
      this.tl.setOverlays({ markers: this.markers });
      this.panels.annotations.render();
    } catch (e) {
      this.panels.annotations.error(e);
    }
  }

  async addMarker(ts) {
    try {
      await api.addMarker(this.id, ts);
      await this.loadMarkers();
    } catch (e) {
      this.panels.annotations.error(e);
    }
  }

  /** For a rank of a group: the collective ops' names and wait texts (once), then redraw the boxes. */
  async _loadCollectiveTexts() {
    const p = this.info.profile;
    if (!p.group) return;
    try {
      this.ccText = collectiveTexts(await api.groupCollectives(p.group, 16), p.rank);
      this._loadBoxes();
    } catch (e) {
      this.errBar.hidden = false;
      this.errBar.textContent = `Could not load the collective operations: ${e.message}`;
    }
  }

  /** Warning and collective boxes of the drawn window (only what can be drawn: GET /boxes). */
  async _loadBoxes() {
    if (this.boxAbort) this.boxAbort.abort();
    const ac = new AbortController();
    this.boxAbort = ac;
    try {
      const b = await loadBoxes(this.id, Math.floor(this.st.t0), Math.ceil(this.st.t1), this.ccText, ac.signal);
      if (ac.signal.aborted || this.dead) return;
      this.tl.setOverlays({ warnings: b.warnings, collectives: b.collectives });
    } catch (e) {
      if (e.name === "AbortError") return;
      this.errBar.hidden = false;
      this.errBar.textContent = `Could not load warning annotations: ${e.message}`;
    } finally {
      if (this.boxAbort === ac) this.boxAbort = null;
    }
  }

  // ---- interaction ------------------------------------------------------------------------------------

  _onClick(hit, e) {
    if (!hit || !hit.row) return;
    if (hit.kind === "event" && e && (e.ctrlKey || e.metaKey)) {
      this.openSource(hit.vr.id[hit.i]);
    } else if (hit.kind === "event") {
      this.update({ ev: hit.vr.id[hit.i], tab: "details" }, true);
    } else if (hit.kind === "bucket") {
      const a = hit.vr.ts[hit.i];
      const d = hit.vr.dur[hit.i];
      this.setWindow(a - d * 4, a + d * 5, true);
    } else if (this.st.ev !== null) {
      this.update({ ev: null }, true);
    }
  }

  /** Ctrl+click: open the Source tab at the event's source line (the event is selected too). */
  async openSource(id) {
    try {
      const d = await api.event(this.id, id);
      const f = (d.groups || []).flatMap((g) => g.fields).find((x) => x.key === "nki_source_location");
      const loc = f && f.value ? String(f.value) : null;
      this.update(loc ? { ev: id, tab: "source", src: loc } : { ev: id, tab: "details" }, true);
    } catch (err) {
      this.panels.details.error(id, err);
    }
  }

  async selectEvent(id, push) {
    if (id === null || id === undefined) {
      this.details = null;
      this.tl.setOverlays({ selected: null, deps: [], dependents: [] });
      this.panels.details.show(null);
      return;
    }
    this.panels.details.loading(id);
    try {
      const d = await api.event(this.id, id);
      if (this.st.ev !== id) return;
      this.details = d;
      this.evCache.set(id, d);
      this.tl.setOverlays({ selected: d, deps: d.deps || [], dependents: d.dependents || [] });
      this.panels.details.show(d);
    } catch (e) {
      this.panels.details.error(id, e);
    }
    if (push) this._commit(true);
  }

  /** Centre the window on an event (keeping the zoom unless it is too small to show it). */
  reveal(ev) {
    const span = Math.max(this.st.t1 - this.st.t0, ev.dur * 3);
    const mid = ev.ts + ev.dur / 2;
    if (ev.ts >= this.st.t0 && ev.ts + ev.dur <= this.st.t1 && span === this.st.t1 - this.st.t0) return;
    this.setWindow(mid - span / 2, mid + span / 2, true);
  }

  _onHover(hit, e) {
    if (!hit || !e) {
      hoverCancel();
      hideTooltip();
      return;
    }
    hoverText(this, hit, e);
  }
}

