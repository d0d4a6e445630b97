// overlays.js — turns analysis tables into timeline overlays and builds hover text.
// Contract: parseWarnings(table, rows) -> [{t0, t1, rows, kind, text, ids, tensor, source}]
// from the `warnings` table (columns kind, message, ts, end, event_ids, tensor, source;
// optional `rows`); collectiveBoxes(groupAnswer, rank, rows) -> boxes over the CC rows;
// loadAnnotations(id, info, rows) fetches both; hoverText(view, hit, mouseEvent) shows
// the tooltip for a timeline hit (fetching an event's source line lazily, cached per id).

import { api } from "./api.js";
import { fmtBytes, fmtCounter, fmtInt, fmtTime, trim } from "./fmt.js";
import { showTooltip } from "./tooltip.js";

function columnsOf(table) {
  const idx = {};
  table.columns.forEach((c, i) => {
    idx[c.name] = i;
  });
  return idx;
}

function rowsFor(kind, raw, allRows) {
  if (Array.isArray(raw)) return raw.map(String);
  if (typeof raw === "string" && raw) return raw.split(",").map((s) => s.trim());
  if (kind === "tensor_reload" || kind === "small_dma" || (kind || "").includes("dma")) {
    return allRows.filter((r) => r.kind === "dma").map((r) => r.key);
  }
  return [];
}

export function parseWarnings(table, allRows) {
  const c = columnsOf(table);
  const get = (r, ...names) => {
    for (const n of names) if (c[n] !== undefined) return r[c[n]];
    return undefined;
  };
  return table.rows.map((r) => {
    const kind = get(r, "kind") || "warning";
    const t0 = Number(get(r, "t0", "ts") ?? 0);
    const t1 = Number(get(r, "t1", "end") ?? t0 + Number(get(r, "duration") ?? 0));
    return {
      kind,
      t0,
      t1: Math.max(t1, t0 + 1),
      rows: rowsFor(kind, get(r, "rows"), allRows),
      text: get(r, "message", "text", "description") || kind,
      ids: get(r, "event_ids", "ids") || [],
      tensor: get(r, "tensor") || null,
      source: get(r, "source") || null,
      count: get(r, "count"),
      bytes: get(r, "bytes"),
    };
  });
}

/**
 * Boxes around the collective operations this rank took part in, from the group's
 * collectives answer (GET /api/groups/{id}/collectives): arrival on this rank -> end of the op,
 * over the CC-core rows (every engine row when the profile has none).
 */
export function collectiveBoxes(group, rank, allRows) {
  const cc = allRows.filter((r) => r.key.startsWith("cc.")).map((r) => r.key);
  const rows = cc.length ? cc : allRows.filter((r) => r.kind === "engine").map((r) => r.key);
  const out = [];
  for (const op of group.ops || []) {
    const mine = (op.ranks || []).find((r) => r.rank === rank);
    if (!mine) continue;
    const parts = [`${op.kind} #${op.id}`, `${fmtBytes(op.bytes)} per rank`, op.algorithm].filter(Boolean);
    let text = `${parts.join(" · ")}; transfer ${fmtTime(op.end - op.start)}`;
    if (mine.wait_ns > 0) text += `; this rank waited ${fmtTime(mine.wait_ns)} for rank ${op.straggler}`;
    else if (op.straggler === rank) text += "; this rank was the straggler";
    out.push({ t0: mine.arrival, t1: Math.max(op.end, mine.arrival + 1), rows, kind: "collective", label: `${op.kind} #${op.id}`, text });
  }
  return out;
}

/** The warning boxes and (for a worker of a group) collective-op boxes of a profile. */
export async function loadAnnotations(id, info, rows) {
  const out = { warnings: [], collectives: [] };
  if ((info.tables || []).includes("warnings")) out.warnings = parseWarnings(await api.table(id, "warnings", 0, 5000), rows);
  const p = info.profile;
  if (p.group) out.collectives = collectiveBoxes(await api.groupCollectives(p.group, 16), p.rank, rows);
  return out;
}

function annotationLines(view, hit) {
  const lines = [];
  const key = hit.row && hit.row.key;
  if (view.st.warn === false) return lines;
  for (const w of view.warnings || []) {
    if (hit.t >= w.t0 && hit.t <= w.t1 && (!w.rows.length || w.rows.includes(key))) lines.push(`⚠ ${w.text}`);
    if (lines.length >= 3) break;
  }
  for (const c of view.tl.overlays.collectives || []) {
    if (hit.t >= c.t0 && hit.t <= c.t1 && c.rows.includes(key)) lines.push(`⟳ ${c.text}`);
  }
  return lines;
}

let hoverTimer = 0;
let hoverSeq = 0;

/** Forget the pending hover (pointer left the plot): a late detail fetch must not re-show it. */
export function hoverCancel() {
  clearTimeout(hoverTimer);
  hoverSeq += 1;
}

export function hoverText(view, hit, e) {
  hoverCancel();
  const seq = hoverSeq;
  const row = hit.row;
  if (!row) {
    showTooltip([fmtTime(hit.t)], e.clientX, e.clientY);
    return;
  }
  const lines = [];
  const { vr, i } = hit;
  if (hit.kind === "event") {
    const id = vr.id[i];
    const op = view.vp.opcodes[vr.op[i]];
    lines.push(op, `${row.label}  ·  id ${id}`);
    lines.push(`start ${fmtTime(vr.ts[i])}  ·  duration ${fmtTime(vr.dur[i])}  ·  end ${fmtTime(vr.ts[i] + vr.dur[i])}`);
    const d = view.evCache.get(id);
    if (d) lines.push(...sourceLines(d));
    else {
      hoverTimer = setTimeout(async () => {
        try {
          const det = await api.event(view.id, id);
          view.evCache.set(id, det);
          if (view.evCache.size > 300) view.evCache.delete(view.evCache.keys().next().value);
          if (seq === hoverSeq) hoverText(view, hit, e);
        } catch {
          /* the hover keeps its basic text */
        }
      }, 150);
    }
    lines.push("click for details");
  } else if (hit.kind === "bucket") {
    const op = view.vp.opcodes[vr.op[i]];
    lines.push(`${fmtInt(vr.count[i])} events (mostly ${op})`, row.label);
    lines.push(`${fmtTime(vr.ts[i])} – ${fmtTime(vr.ts[i] + vr.dur[i])}  ·  busy ${trim(100 * vr.busy_frac[i])} %`);
    lines.push("click to zoom in");
  } else if (hit.kind === "counter") {
    lines.push(`${row.label}: ${fmtCounter(vr.mean[i], row)}`);
    lines.push(`min ${fmtCounter(vr.min[i], row)}  ·  max ${fmtCounter(vr.max[i], row)}`);
    lines.push(`${fmtTime(vr.ts[i])} – ${fmtTime(vr.ts[i] + vr.dur[i])}`);
  } else {
    lines.push(row.label, fmtTime(hit.t));
  }
  lines.push(...annotationLines(view, hit));
  showTooltip(lines, e.clientX, e.clientY);
}

function sourceLines(d) {
  const out = [];
  for (const g of d.groups || []) {
    for (const f of g.fields || []) {
      if (["nki_source_location", "layer", "hlo_name", "tensor", "bytes"].includes(f.key) && f.value !== null && f.value !== "") {
        out.push(`${f.label}: ${f.key === "bytes" ? fmtBytes(f.value) : f.value}`);
      }
    }
  }
  return out;
}
