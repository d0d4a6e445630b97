// app.js — entry point: routes on location.pathname ("/" list, "/profile/<id>" one
// profile, "/profile_cc/<group>" multi-worker group with a tab per rank), shows the
// error panel when loading fails, and re-applies URL states on back/forward.
// Contract: the page only talks to the JSON API (api.js); all view state is in the URL.

import { ApiError, api } from "./api.js";
import { h } from "./dom.js";
import { errorPanel } from "./errors.js";
import { renderList } from "./list.js";
import { ProfileView } from "./profile.js";
import { parseLocation } from "./url.js";

const main = document.getElementById("main");
const crumb = document.getElementById("crumb");
let view = null;
let current = null; // {page, id, group, rank}

function failure(e, what) {
  if (e instanceof ApiError && e.status === 404) {
    return errorPanel(`${what} not found`, `${e.message}`);
  }
  return errorPanel(`Could not open ${what.toLowerCase()}`, e.message || String(e));
}

async function mountProfile(root, st, profileId) {
  if (view) view.destroy();
  view = new ProfileView(root, st, { profileId });
  try {
    await view.start();
  } catch (e) {
    view.destroy();
    view = null;
    root.replaceChildren(failure(e, "Profile"));
    window.__nprof = { error: e.message, idle: () => true, state: st };
  }
}

const MAX_RANK_TABS = 16; // more ranks: the open rank's tab and a picker over all of them

function rankPicker(g, ranks) {
  const go = (e) => {
    if (e.target.value !== "") window.location.href = `/profile_cc/${encodeURIComponent(g.id)}?rank=${e.target.value}`;
  };
  return h(
    "select",
    { id: "rank-pick", class: "rank-pick", onchange: go, "aria-label": "open a rank" },
    h("option", { value: "" }, `open a rank (${ranks.length})…`),
    ranks.map((r) => h("option", { value: String(r.rank) }, `Rank ${r.rank}${r.ingested ? " ·" : ""}`)),
  );
}

async function mountGroup(st) {
  main.replaceChildren(h("p", { class: "loading" }, "Loading workers…"));
  let g;
  try {
    g = await api.group(st.group);
  } catch (e) {
    main.replaceChildren(failure(e, "Worker group"));
    window.__nprof = { error: e.message, idle: () => true, state: st };
    return;
  }
  const ranks = g.ranks || [];
  if (!ranks.length) {
    main.replaceChildren(errorPanel("Empty worker group", `group ${g.id} has no ranks`));
    return;
  }
  const agg = new URLSearchParams(window.location.search).get("agg") === "1"; // CC Aggregated tab (cc_view.js)
  const rank = ranks.some((r) => r.rank === st.rank) ? st.rank : ranks[0].rank;
  st.rank = rank;
  const entry = ranks.find((r) => r.rank === rank);
  const tabs = h(
    "nav",
    { class: "rank-tabs", role: "tablist", "aria-label": "workers" },
    h("span", { class: "muted" }, `${g.display_name || g.id}: `),
    h("a", { class: `tab${agg ? " on" : ""}`, role: "tab", id: "tab-agg", href: `/profile_cc/${encodeURIComponent(g.id)}?agg=1` }, "CC Aggregated"),
    (ranks.length > MAX_RANK_TABS ? ranks.filter((r) => r.rank === rank && !agg) : ranks).map((r) =>
      h(
        "a",
        {
          class: `tab${r.rank === rank && !agg ? " on" : ""}`,
          role: "tab",
          href: `/profile_cc/${encodeURIComponent(g.id)}?rank=${r.rank}`,
        },
        `Rank ${r.rank}`,
      ),
    ),
    ranks.length > MAX_RANK_TABS ? rankPicker(g, ranks) : null,
  );
  const holder = h("div");
  main.replaceChildren(tabs, holder);
  if (agg) {
    if (view) view.destroy();
    view = null;
    current = { page: "group-agg", group: st.group };
    const { renderAggregate } = await import("./cc_view.js");
    try {
      await renderAggregate(holder, g, st);
    } catch (e) {
      holder.replaceChildren(failure(e, "Aggregated view"));
      window.__nprof = { error: e.message, idle: () => true, state: st };
    }
    return;
  }
  current = { page: "group", group: st.group, rank };
  if (entry.ingested === false) {
    // a large group's ranks are ingested when first opened (nprof.store.group_ingest)
    holder.replaceChildren(h("p", { class: "loading" }, `Ingesting rank ${rank} (first open)…`));
    try {
      await api.ensureRank(g.id, rank);
    } catch (e) {
      holder.replaceChildren(failure(e, `Rank ${rank}`));
      window.__nprof = { error: e.message, idle: () => true, state: st };
      return;
    }
  }
  await mountProfile(holder, st, entry.profile_id);
}

async function route() {
  const st = parseLocation(window.location);
  crumb.textContent = "";
  if (st.page === "profile") {
    if (view && current && current.page === "profile" && current.id === st.id) {
      view.applyState(st);
      return;
    }
    current = { page: "profile", id: st.id };
    main.replaceChildren(h("p", { class: "loading" }, "Loading profile…"));
    crumb.textContent = "/ profile";
    await mountProfile(main, st, st.id);
  } else if (st.page === "group") {
    if (view && current && current.page === "group" && current.group === st.group && (st.rank ?? current.rank) === current.rank) {
      st.rank = current.rank;
      view.applyState(st);
      return;
    }
    crumb.textContent = "/ workers";
    await mountGroup(st);
  } else if (st.page === "list") {
    if (view) view.destroy();
    view = null;
    current = { page: "list" };
    await renderList(main);
    window.__nprof = { idle: () => true, state: st };
  } else {
    if (view) view.destroy();
    view = null;
    current = { page: "notfound" };
    main.replaceChildren(errorPanel("Page not found", `nothing lives at ${window.location.pathname}`));
    window.__nprof = { error: "not found", idle: () => true, state: st };
  }
}

window.addEventListener("popstate", () => route());
route();
