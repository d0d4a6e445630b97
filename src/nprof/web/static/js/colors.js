// colors.js — stable colours for opcodes, layers, engines and DMA queues.
// Contract: paletteColor(space, name) gives names of one space (opcode, layer, queue) distinct
// colours from a 19-colour categorical palette, in the order seedPalette(space, names) listed them
// (the profile's opcode table, its layers largest first, its queues), then in first-use order;
// past 19 names it falls back to hashColor (FNV-1a + murmur3 finaliser -> hue). Engines and
// warning/highlight colours are fixed.

const ENGINE_COLORS = {
  tensor: "#3b6fd8",
  vector: "#2e9e5b",
  scalar: "#e08a1e",
  gpsimd: "#8b52c7",
  sync: "#7a8799",
  cc: "#1a9aa0",
  other: "#a0674b",
  dma: "#c2457a",
};

export const THEME = {
  marker: "#d81b60",
  warning: "#ff8c00",
  collective: "#1a9aa0",
  hit: "#ffd400",
  selected: "#111111",
  dep: "#1565c0",
  dependent: "#2e7d32",
  select: "rgba(30, 110, 220, 0.14)",
  selectEdge: "#1e6edc",
  zoom: "rgba(80, 80, 80, 0.14)",
  grid: "#e6e8ec",
  axis: "#5b6472",
};

/** 32-bit FNV-1a hash of a string, avalanched. */
export function hash(str) {
  let h = 0x811c9dc5;
  for (let i = 0; i < str.length; i += 1) {
    h ^= str.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  // murmur3 finaliser: names differing in one character (layer.1, layer.2) get unrelated hues
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

// Kenneth Kelly's colours of maximum contrast (1965; white, black and the two yellows that would
// read as search hits dropped) plus cyan, ordered so neighbours in a list differ most
export const PALETTE = [
  "#0067a5", "#f38400", "#008856", "#be0032", "#875692", "#a1caf1", "#c2b280", "#e68fac", "#604e97", "#f99379",
  "#8db600", "#882d17", "#b3446c", "#848482", "#f6a600", "#654522", "#e25822", "#2b3d26", "#17becf",
];

const spaces = new Map();

/** Give `names` the palette colours in this order (names already coloured keep theirs). */
export function seedPalette(space, names) {
  for (const n of names) paletteColor(space, n);
}

/** A colour distinct from every other name of `space` while the palette lasts (see module doc). */
export function paletteColor(space, name) {
  let m = spaces.get(space);
  if (!m) spaces.set(space, (m = new Map()));
  const key = String(name);
  let c = m.get(key);
  if (c) return c;
  c = m.size < PALETTE.length ? PALETTE[m.size] : hashColor(key);
  m.set(key, c);
  return c;
}

const cache = new Map();

/** A stable colour for a name: hue from the hash, saturation/lightness from other hash bits. */
export function hashColor(name) {
  const key = String(name);
  let c = cache.get(key);
  if (c) return c;
  const x = hash(key);
  const hue = x % 360;
  const sat = 52 + ((x >>> 9) % 4) * 8; // 52..76 %
  const light = 44 + ((x >>> 13) % 4) * 5; // 44..59 %
  c = `hsl(${hue}, ${sat}%, ${light}%)`;
  cache.set(key, c);
  return c;
}

export function engineColor(engine) {
  return ENGINE_COLORS[engine] || hashColor(engine || "other");
}

/** Layer name truncated to `depth` dot-separated components (0 = full name). */
export function layerAtDepth(layer, depth) {
  if (!layer) return "(no layer)";
  if (!depth) return layer;
  return layer.split(".").slice(0, depth).join(".");
}

const textCache = new Map();

/** Readable label colour (white or near-black) on a fill given as "hsl(h, s%, l%)" or "#rrggbb". */
export function textOn(color) {
  let t = textCache.get(color);
  if (t) return t;
  let r;
  let g;
  let b;
  const m = /^hsl\((\d+), (\d+)%, (\d+)%\)$/.exec(color);
  if (m) {
    const [hh, ss, ll] = [Number(m[1]), Number(m[2]) / 100, Number(m[3]) / 100];
    const k = (n) => (n + hh / 30) % 12;
    const a = ss * Math.min(ll, 1 - ll);
    const f = (n) => ll - a * Math.max(-1, Math.min(k(n) - 3, 9 - k(n), 1));
    [r, g, b] = [f(0), f(8), f(4)];
  } else {
    const x = parseInt(color.slice(1), 16);
    [r, g, b] = [((x >> 16) & 255) / 255, ((x >> 8) & 255) / 255, (x & 255) / 255];
  }
  const lin = (c) => (c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4);
  const lum = 0.2126 * lin(r) + 0.7152 * lin(g) + 0.0722 * lin(b);
  t = lum > 0.32 ? "#16202b" : "#ffffff";
  textCache.set(color, t);
  return t;
}
