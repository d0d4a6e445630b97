// overlays.js — turns analysis tables into timeline overlays and builds hover text.
// Contract: loadBoxes(id, t0, t1, ccText, signal) -> {warnings, collectives} boxes of a window,
// each over the rows it concerns (GET /boxes); collectiveTexts(groupAnswer, rank) -> op id ->
// {label, text}; hoverText(view, hit, mouseEvent) shows
// the tooltip for a timeline hit (fetching an event's source line lazily, cached per id).

import { api } from "./api.js";
import { fmtBytes, fmtCounter, fmtInt, fmtTime, trim } from "./fmt.js";
import { showTooltip } from "./tooltip.js";

/**
 * Op id -> {label, text} for the collective operations `rank` took part in, from the group's
 * collectives answer (GET /api/groups/{id}/collectives). "straggler" is only said when some rank
 * actually waited (max_wait_ns > 0): on identical ranks nobody is late. Every wait names its clock:
 * a device op's waits are the model's (simulated), a host op's and the host exchange's were measured.
 */
export function collectiveTexts(group, rank) {
  const out = new Map();
  for (const op of group.ops || []) {
    const mine = (op.ranks || []).find((r) => r.rank === rank);
    if (!mine) continue;
    const clock = op.clock === "host" ? "measured on the host" : "simulated";
    const parts = [`${op.kind} #${op.id}`, `${fmtBytes(op.bytes)} per rank`, op.algorithm].filter(Boolean);
    const transfer = op.transfer_ns ?? op.end - op.start;
    let text = `${parts.join(" · ")}; transfer ${fmtTime(transfer)} (${clock})`;
    if (mine.wait_ns > 0) text += `; this rank waited ${fmtTime(mine.wait_ns)} for rank ${op.straggler} (${clock})`;
    else if (op.straggler === rank && op.max_wait_ns > 0) text += `; this rank was the straggler (others waited up to ${fmtTime(op.max_wait_ns)}, ${clock})`;
    else if (!(op.max_wait_ns > 0)) text += `; no rank waited (${clock})`;
    if (op.clock !== "host" && mine.host_wait_ns != null) text += `; its host waited ${fmtTime(mine.host_wait_ns)} in the exchange (measured)`;
    out.set(op.id, { label: `${op.kind} #${op.id}`, text });
  }
  return out;
}

/**
 * The warning and collective boxes of a window (GET /profiles/{id}/boxes): each box only over the
 * rows it concerns (`rows`; empty = drawn as a band under the time axis). `ccText` (from
 * collectiveTexts) names and explains the collective ops of a group's rank.
 */
export async function loadBoxes(id, t0, t1, ccText, signal) {
  const r = await api.boxes(id, { t0, t1, limit: 60 }, signal);
  const warnings = r.warnings.map((w) => ({ ...w, text: w.text || w.kind }));
  const collectives = r.collectives.map((c) => {
    const t = ccText && ccText.get(c.id);
    return { ...c, kind: "collective", label: t ? t.label : `${c.kind} #${c.id}`, text: t ? t.text : `${c.kind} #${c.id}` };
  });
  return { warnings, collectives, total: r.warnings_total, truncated: r.truncated };
}

function annotationLines(view, hit) {
  const lines = [];
  const key = hit.row && hit.row.key;
  if (view.st.warn === false) return lines;
  for (const w of view.tl.overlays.warnings || []) {
    const tol = (3 * view.tl.layout.span) / view.tl.layout.plotW;
    if ((w.events || []).some(([k, a, b]) => k === key && hit.t >= a - tol && hit.t <= b + tol)) lines.push(`⚠ ${w.text}`);
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
