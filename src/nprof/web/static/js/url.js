// url.js — the view state <-> URL mapping (every setting lives in the URL).
// Contract: parseLocation(location) -> state object; toSearch(state) -> "?..." string.
// Keys: t0,t1 (zoom window, ns), tab, ev (selected event id), q.<field> (search,
// in order), color (opcode|layer|engine|queue), depth (layer depth, 0 = full),
// view (minimal|full), mode (zoom|select), sel (t0-t1), selrows (row keys, comma-
// separated), rank (multi-worker tab), compare (other profile id), warn=0 (hide
// warning boxes), osort / ofilter (Operators tab sort column and filter), tsort (Tensors tab
// sort column), src (Source tab: the selected file:line), hide (system profiles: hidden track groups,
// comma-separated ids of tracks.js). Defaults are omitted from the URL.

export const TABS = ["details", "search", "selection", "summary", "operators", "tensors", "source", "memory", "annotations", "warnings", "compare", "system"];
export const COLORS = ["opcode", "layer", "engine", "queue"];
export const DEFAULTS = { tab: "details", color: "opcode", depth: 0, view: "minimal", mode: "zoom" };

function int(v) {
  if (v === null || v === undefined || v === "") return null;
  const n = Number(v);
  return Number.isFinite(n) ? Math.round(n) : null;
}

export function parseLocation(loc) {
  const path = decodeURIComponent(loc.pathname);
  const p = new URLSearchParams(loc.search);
  const st = {
    page: "list",
    id: null,
    group: null,
    t0: int(p.get("t0")),
    t1: int(p.get("t1")),
    tab: TABS.includes(p.get("tab")) ? p.get("tab") : DEFAULTS.tab,
    ev: int(p.get("ev")),
    query: [],
    color: COLORS.includes(p.get("color")) ? p.get("color") : DEFAULTS.color,
    depth: Math.max(0, int(p.get("depth")) || 0),
    view: p.get("view") === "full" ? "full" : "minimal",
    mode: p.get("mode") === "select" ? "select" : "zoom",
    sel: null,
    rank: int(p.get("rank")),
    compare: p.get("compare") || null,
    warn: p.get("warn") !== "0",
    osort: p.get("osort") || null,
    ofilter: p.get("ofilter") || null,
    tsort: p.get("tsort") || null,
    src: p.get("src") || null,
    hide: (p.get("hide") || "").split(",").filter(Boolean),
  };
  for (const [k, v] of p.entries()) {
    if (k.startsWith("q.") && k.length > 2) st.query.push([k.slice(2), v]);
  }
  const sel = p.get("sel");
  if (sel && /^\d+-\d+$/.test(sel)) {
    const [a, b] = sel.split("-").map(Number);
    if (b > a) st.sel = { t0: a, t1: b, rows: (p.get("selrows") || "").split(",").filter(Boolean) };
  }
  let m = path.match(/^\/profile\/([^/]+)\/?$/);
  if (m) {
    st.page = "profile";
    st.id = m[1];
  }
  m = path.match(/^\/profile_cc\/([^/]+)\/?$/);
  if (m) {
    st.page = "group";
    st.group = m[1];
  }
  if (st.page === "list" && path !== "/" && path !== "/index.html") st.page = "notfound";
  return st;
}

export function toSearch(st) {
  const p = new URLSearchParams();
  if (st.rank !== null && st.rank !== undefined) p.set("rank", String(st.rank));
  if (st.t0 !== null && st.t1 !== null && st.t0 !== undefined && st.t1 !== undefined) {
    p.set("t0", String(Math.round(st.t0)));
    p.set("t1", String(Math.round(st.t1)));
  }
  if (st.tab !== DEFAULTS.tab) p.set("tab", st.tab);
  if (st.ev !== null && st.ev !== undefined) p.set("ev", String(st.ev));
  for (const [k, v] of st.query || []) p.append(`q.${k}`, v);
  if (st.color !== DEFAULTS.color) p.set("color", st.color);
  if (st.depth) p.set("depth", String(st.depth));
  if (st.view !== DEFAULTS.view) p.set("view", st.view);
  if (st.mode !== DEFAULTS.mode) p.set("mode", st.mode);
  if (st.sel) {
    p.set("sel", `${Math.round(st.sel.t0)}-${Math.round(st.sel.t1)}`);
    if (st.sel.rows && st.sel.rows.length) p.set("selrows", st.sel.rows.join(","));
  }
  if (st.compare) p.set("compare", st.compare);
  if (st.warn === false) p.set("warn", "0");
  for (const k of ["osort", "ofilter", "tsort", "src"]) if (st[k]) p.set(k, st[k]);
  if (st.hide && st.hide.length) p.set("hide", st.hide.join(","));
  const s = p.toString();
  return s ? `?${s}` : "";
}
