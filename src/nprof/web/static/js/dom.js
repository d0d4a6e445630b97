// dom.js — tiny DOM helpers: `h(tag, attrs, ...children)` element builder,
// `clear(el)`, `help(text)` (a "?" icon whose title is the help text),
// `table(columns, rows)` for simple data tables, `fieldGroup(cls, name, items)` for a
// titled list of label/value pairs, and `loadOnce(panel, what, fetch, render)` for
// panels that load their content once on first show. No framework, no state.

/** Build an element. attrs: class, text, title, dataset {..}, on{Event} handlers, any attribute. */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") el.className = v;
    else if (k === "text") el.textContent = v;
    else if (k === "dataset") Object.assign(el.dataset, v);
    else if (k === "style" && typeof v === "object") Object.assign(el.style, v);
    else if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2).toLowerCase(), v);
    else if (v === true) el.setAttribute(k, "");
    else el.setAttribute(k, String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

/** A small "?" badge carrying a help text as tooltip (title) and aria-label. */
export function help(text) {
  if (!text) return null;
  return h("span", { class: "help", title: text, "aria-label": text, tabindex: "0" }, "?");
}

/**
 * A data table. columns: [{label, help?, cls?, fmt?(value,row)}]; rows: arrays of values
 * (or objects when column.key is given).
 */
export function table(columns, rows, opts = {}) {
  const thead = h(
    "thead",
    {},
    h("tr", {}, columns.map((c) => h("th", { class: c.cls || "" }, c.label, c.help ? help(c.help) : null))),
  );
  const tbody = h(
    "tbody",
    {},
    rows.map((r, ri) =>
      h(
        "tr",
        opts.rowAttrs ? opts.rowAttrs(r, ri) : {},
        columns.map((c, ci) => {
          const v = c.key !== undefined ? r[c.key] : r[ci];
          const out = c.fmt ? c.fmt(v, r) : v;
          return h("td", { class: c.cls || "" }, out instanceof Node ? out : out === null || out === undefined ? "–" : String(out));
        }),
      ),
    ),
  );
  return h("table", { class: `data ${opts.cls || ""}` }, thead, tbody);
}

/**
 * A titled group of label/value pairs: <section class=cls data-group=name><h3>name</h3><dl>,
 * one dt (label + help badge) and dd (value: a node, text or array of them) per item,
 * both carrying data-key = item.key. items: [{key, label, help?, value}].
 */
export function fieldGroup(cls, name, items) {
  return h(
    "section",
    { class: cls, dataset: { group: name } },
    h("h3", {}, name),
    h(
      "dl",
      {},
      items.map((it) => [
        h("dt", { dataset: { key: it.key } }, it.label, help(it.help)),
        h("dd", { dataset: { key: it.key } }, it.value),
      ]),
    ),
  );
}

/**
 * Load a lazily shown panel once: unless `panel.loaded` or `panel.busy`, sets `busy`, shows
 * "Loading <what>…" in `panel.el`, awaits `fetch()`, sets `loaded` and calls `render(data)`;
 * on failure shows "Could not load <what>: <message>". `busy` is cleared in every case.
 */
export async function loadOnce(panel, what, fetch, render) {
  if (panel.loaded || panel.busy) return;
  panel.busy = true;
  panel.el.replaceChildren(h("p", { class: "loading" }, `Loading ${what}…`));
  try {
    const data = await fetch();
    panel.loaded = true;
    render(data);
  } catch (e) {
    panel.el.replaceChildren(h("p", { class: "error-inline" }, `Could not load ${what}: ${e.message}`));
  } finally {
    panel.busy = false;
  }
}
