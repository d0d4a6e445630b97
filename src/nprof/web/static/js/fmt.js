// fmt.js — number/time/byte formatting for the viewer.
// Contract: pure functions, no DOM. Times are nanoseconds (numbers); every
// function returns a short human string with an explicit unit.

const TIME_UNITS = [
  [1e9, "s"],
  [1e6, "ms"],
  [1e3, "µs"],
  [1, "ns"],
];

/** A duration or timestamp in ns as "12.3 µs" (3 significant digits, unit chosen by magnitude). */
export function fmtTime(ns) {
  if (ns === null || ns === undefined || Number.isNaN(ns)) return "–";
  const a = Math.abs(ns);
  for (const [scale, unit] of TIME_UNITS) {
    if (a >= scale || scale === 1) {
      const v = ns / scale;
      return `${trim(v)} ${unit}`;
    }
  }
  return `${ns} ns`;
}

/** A timestamp label for an axis tick: unit fixed by the tick step so labels line up. */
export function fmtTick(ns, stepNs) {
  let scale = 1;
  let unit = "ns";
  for (const [s, u] of TIME_UNITS) {
    if (stepNs >= s) {
      scale = s;
      unit = u;
      break;
    }
  }
  const step = stepNs / scale;
  const decimals = step >= 1 ? 0 : Math.min(6, Math.ceil(-Math.log10(step) - 1e-9));
  return `${(ns / scale).toFixed(decimals)} ${unit}`;
}

/**
 * A time in ns with enough digits to resolve `resolutionNs` (unit chosen by the magnitude of `ns`):
 * fmtTimeAt(315451500, 100) = "315.4515 ms". Used where two nearby instants must read differently.
 */
export function fmtTimeAt(ns, resolutionNs) {
  if (ns === null || ns === undefined || Number.isNaN(ns)) return "–";
  const a = Math.abs(ns);
  let scale = 1;
  let unit = "ns";
  for (const [s, u] of TIME_UNITS) {
    if (a >= s) {
      scale = s;
      unit = u;
      break;
    }
  }
  const res = Math.max(1, resolutionNs) / scale;
  const decimals = res >= 1 ? 0 : Math.min(9, Math.ceil(-Math.log10(res) - 1e-9));
  return `${(ns / scale).toFixed(decimals)} ${unit}`;
}

/**
 * The axis origin for a window: null when absolute tick labels stay short (under 5 digits in the
 * step's unit), else a round instant at or before t0 that the ticks are labelled relative to.
 */
export function axisOrigin(t0, stepNs) {
  if (Math.abs(t0) / stepNs < 1e4) return null;
  return Math.floor(t0 / stepNs) * stepNs;
}

/** Trim a number to 3 significant digits without exponent noise. */
export function trim(v) {
  if (!Number.isFinite(v)) return String(v);
  const a = Math.abs(v);
  if (a === 0) return "0";
  if (a >= 100) return v.toFixed(a >= 1000 ? 0 : 1).replace(/\.0$/, "");
  if (a >= 10) return v.toFixed(2).replace(/\.?0+$/, "");
  if (a >= 0.01) return v.toFixed(3).replace(/\.?0+$/, "");
  return v.toPrecision(3);
}

const BYTE_UNITS = ["B", "KiB", "MiB", "GiB", "TiB"];

/** Bytes as "4 KiB" (binary units). */
export function fmtBytes(b) {
  if (b === null || b === undefined) return "–";
  let v = Number(b);
  let i = 0;
  while (Math.abs(v) >= 1024 && i < BYTE_UNITS.length - 1) {
    v /= 1024;
    i += 1;
  }
  return `${trim(v)} ${BYTE_UNITS[i]}`;
}

/** An integer with thousands separators. */
export function fmtInt(n) {
  if (n === null || n === undefined) return "–";
  return Number(n).toLocaleString("en-US");
}

/** A summary-metric value with its unit, scaled to a readable magnitude where the unit allows. */
export function fmtValue(value, unit) {
  if (value === null || value === undefined) return "–";
  if (typeof value === "string") return unit ? `${value} ${unit}` : value;
  if (typeof value === "boolean") return value ? "yes" : "no";
  switch (unit) {
    case "s":
      return fmtTime(value * 1e9);
    case "ns":
      return fmtTime(value);
    case "B":
    case "bytes":
      return fmtBytes(value);
    case "%":
      return `${trim(value)} %`;
    case "":
    case undefined:
    case null:
      return Number.isInteger(value) ? fmtInt(value) : trim(value);
    default:
      return `${Number.isInteger(value) && Math.abs(value) < 1e15 ? fmtInt(value) : trim(value)} ${unit}`;
  }
}

/** An ISO date as "2026-11-21 00:40" in local time. */
export function fmtDate(iso) {
  if (!iso) return "–";
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return iso;
  const p = (x) => String(x).padStart(2, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}`;
}

/** Choose a "nice" axis step (1-2-5 series) so ticks are about `targetPx` apart. */
export function niceStep(spanNs, widthPx, targetPx = 110) {
  const raw = (spanNs / Math.max(1, widthPx)) * targetPx;
  const p = 10 ** Math.floor(Math.log10(Math.max(raw, 1e-9)));
  for (const m of [1, 2, 5, 10]) {
    if (m * p >= raw) return Math.max(m * p, 1e-3);
  }
  return 10 * p;
}

/** A counter row value with its unit (byte counters in binary units). */
export function fmtCounter(v, row) {
  if (v === null || v === undefined) return "–";
  if (!row.unit && /bytes/i.test(row.key)) return fmtBytes(v);
  return row.unit ? `${trim(v)} ${row.unit}` : trim(v);
}
