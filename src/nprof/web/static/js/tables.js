// tables.js — renders an analysis table of the tables API ({columns, rows}) as an
// HTML table, formatting columns by name: *_ns -> time, *bytes* -> bytes,
// *_percent -> %, *_gbps -> GB/s, counts and FLOPs with separators.
// Contract: analysisTable(resp, {onRow(rowObject), hide: [names]}) -> <table>.

import { h, table } from "./dom.js";
import { fmtBytes, fmtInt, fmtTime, trim } from "./fmt.js";

export function formatterFor(name, type) {
  if (/(_ns|^ns)$/.test(name) || name === "duration") return (v) => (v === null ? "–" : fmtTime(v));
  if (name === "ts" || name === "end" || name === "t0" || name === "t1") return (v) => (v === null ? "–" : fmtTime(v));
  if (/bytes/.test(name)) return (v) => (v === null ? "–" : fmtBytes(v));
  if (/_percent$/.test(name)) return (v) => (v === null ? "–" : `${trim(v)} %`);
  if (/_gbps$/.test(name)) return (v) => (v === null ? "–" : `${trim(v)} GB/s`);
  if (Array.isArray && /ids$/.test(name)) return (v) => (Array.isArray(v) ? `${v.length} events` : v);
  if (type && /int|float|double/.test(type)) {
    return (v) => (v === null ? "–" : Number.isInteger(v) ? fmtInt(v) : trim(v));
  }
  return (v) => (Array.isArray(v) ? v.join(", ") : v);
}

function pretty(name) {
  return name.replace(/_ns$/, "").replace(/_/g, " ");
}

export function analysisTable(resp, opts = {}) {
  const hide = new Set(opts.hide || []);
  const cols = resp.columns.map((c, i) => ({ ...c, i })).filter((c) => !hide.has(c.name));
  const numeric = (c) => /int|float|double|decimal/.test(c.type || "");
  const columns = cols.map((c) => ({
    label: pretty(c.name),
    key: c.i,
    cls: numeric(c) ? "num" : "",
    fmt: formatterFor(c.name, c.type),
  }));
  if (!resp.rows.length) return h("p", { class: "muted" }, "(empty)");
  const asObj = (r) => Object.fromEntries(resp.columns.map((c, i) => [c.name, r[i]]));
  return table(columns, resp.rows, {
    cls: opts.onRow ? "clickable" : "",
    rowAttrs: opts.onRow ? (r) => ({ onclick: () => opts.onRow(asObj(r)), title: opts.rowTitle || "" }) : undefined,
  });
}
