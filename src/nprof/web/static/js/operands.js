// operands.js — breakdown of an instruction's operand text for the Details tab.
// The virtual device writes operands as `DST <- SRC, SRC ; key=value`, each operand
// `memory tensor[p0:p1, f0:f1] dtype` (partition range, then free-axis byte/element range).
// Contract: parseOperands(text) -> {operands: [{role, memory, tensor, ranges, dtype, raw}],
// options: [[key, value]]} or null when the text does not follow that form;
// operandBreakdown(text) -> a <details> element with a table and a generic example.

import { h, table } from "./dom.js";

const OPERAND = /^(\w+)\s+([^\s[]+)\[([^\]]*)\](?:\s+(\w+))?$/;

function splitTop(text) {
  const out = [];
  let depth = 0;
  let cur = "";
  for (const ch of text) {
    if (ch === "[") depth += 1;
    if (ch === "]") depth -= 1;
    if (ch === "," && depth === 0) {
      out.push(cur.trim());
      cur = "";
    } else cur += ch;
  }
  if (cur.trim()) out.push(cur.trim());
  return out;
}

export function parseOperands(text) {
  if (typeof text !== "string" || !text.includes("<-")) return null;
  const [body, ...opts] = text.split(" ; ");
  const [dst, src] = body.split("<-");
  const operands = [];
  const add = (role, raw) => {
    const m = OPERAND.exec(raw);
    operands.push(m ? { role, memory: m[1], tensor: m[2], ranges: m[3], dtype: m[4] || "", raw } : { role, raw });
  };
  for (const d of splitTop(dst)) add("destination", d);
  for (const s of splitTop(src)) add("source", s);
  const options = opts.flatMap((o) => splitTop(o)).map((o) => o.split("=", 2));
  if (!operands.length || operands.every((o) => !o.memory)) return null;
  return { operands, options };
}

export function operandBreakdown(text) {
  const p = parseOperands(text);
  if (!p) return null;
  const rows = p.operands.map((o) => [o.role, o.memory || "", o.tensor || o.raw, o.ranges || "", o.dtype || ""]);
  return h(
    "details",
    { class: "operand-breakdown" },
    h("summary", {}, "breakdown"),
    table(
      [{ label: "role" }, { label: "memory" }, { label: "tensor" }, { label: "[partitions, free range]" }, { label: "dtype" }],
      rows,
    ),
    p.options.length ? h("p", { class: "muted" }, `options: ${p.options.map(([k, v]) => `${k} = ${v}`).join(", ")}`) : null,
    h(
      "p",
      { class: "muted small" },
      "Form: DST <- SRC, SRC ; options. Each operand is memory tensor[p0:p1, f0:f1] dtype, e.g. ",
      h("code", {}, "psum acc[0:128, 0:512] fp32 <- sbuf w[0:128, 0:128] fp32, sbuf x[0:128, 0:512] fp32"),
      " multiplies a 128x128 stationary tile by a 128x512 moving tile into a PSUM bank (generic example).",
    ),
  );
}
