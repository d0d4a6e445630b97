// list.js — the profile list page at "/": every stored profile (name, device, date,
// total time, event count) with open, rename and delete, newest first.
// Contract: renderList(root) fetches /api/profiles and renders; errors show the
// error panel. Rename uses PATCH (display name only), delete asks for confirmation.

import { api } from "./api.js";
import { errorPanel } from "./errors.js";
import { h } from "./dom.js";
import { fmtDate, fmtInt, fmtTime } from "./fmt.js";

export async function renderList(root) {
  root.replaceChildren(h("p", { class: "loading" }, "Loading profiles…"));
  let data;
  try {
    data = await api.profiles();
  } catch (e) {
    root.replaceChildren(errorPanel("Could not list the stored profiles", e.message, false));
    return;
  }
  document.title = "Profiles · nprof";
  const profiles = data.profiles;
  const status = h("p", { class: "annot-msg", role: "status", id: "list-status" });
  const body = h("tbody");
  const heading = h("h1", { id: "list-heading" }, `Profiles (${profiles.length})`);
  const rowOf = (p) => {
    const name = h("a", { href: `/profile/${encodeURIComponent(p.id)}`, class: "pname" }, p.display_name || p.name || p.id);
    const tr = h(
      "tr",
      { dataset: { id: p.id } },
      h("td", {}, name, h("div", { class: "muted small" }, p.id), p.group ? h("a", { class: "small rank-link", href: `/profile_cc/${encodeURIComponent(p.group)}?rank=${p.rank}` }, `group ${p.group} · rank ${p.rank}`) : null),
      h("td", {}, p.device + (p.preset ? ` (${p.preset})` : "")),
      h("td", {}, fmtDate(p.created)),
      h("td", { class: "num" }, fmtTime(p.total_time_ns)),
      h("td", { class: "num" }, fmtInt(p.event_count)),
      h(
        "td",
        {},
        h(
        "span",
        { class: "row-actions" },
        h("a", { class: "btn small", href: `/profile/${encodeURIComponent(p.id)}` }, "open"),
        h(
          "a",
          {
            class: "btn small",
            href: `/profile/${encodeURIComponent(p.id)}?tab=compare`,
            title: "open this profile's Compare tab to pick the profile to compare it with",
          },
          "compare",
        ),
        h(
          "button",
          {
            class: "btn small rename",
            type: "button",
            onclick: async () => {
              const next = window.prompt(`New display name for ${p.id}`, p.display_name || p.name || "");
              if (next === null || !next.trim()) return;
              try {
                const r = await api.rename(p.id, next.trim());
                p.display_name = r.display_name;
                name.textContent = r.display_name;
                status.textContent = `renamed ${p.id}`;
              } catch (e) {
                status.textContent = `rename failed: ${e.message}`;
              }
            },
          },
          "rename",
        ),
        h(
          "button",
          {
            class: "btn small danger delete",
            type: "button",
            onclick: async () => {
              if (!window.confirm(`Delete profile "${p.display_name || p.id}" and its markers? This cannot be undone.`)) return;
              try {
                await api.remove(p.id);
                tr.remove();
                profiles.splice(profiles.indexOf(p), 1);
                heading.textContent = `Profiles (${profiles.length})`;
                status.textContent = `deleted ${p.id}`;
              } catch (e) {
                status.textContent = `delete failed: ${e.message}`;
              }
            },
          },
          "delete",
        ),
        ),
      ),
    );
    return tr;
  };
  body.append(...profiles.map(rowOf));
  const filter = h("input", {
    type: "search",
    id: "profile-filter",
    placeholder: "filter by name, id or device",
    "aria-label": "filter profiles",
    oninput: () => {
      const q = filter.value.trim().toLowerCase();
      let shown = 0;
      const byId = new Map(profiles.map((p) => [p.id, p]));
      for (const tr of body.children) {
        const p = byId.get(tr.dataset.id);
        const hit = !q || [p.display_name, p.name, p.id, p.device].some((x) => (x || "").toLowerCase().includes(q));
        tr.hidden = !hit;
        shown += hit ? 1 : 0;
      }
      status.textContent = q ? `${shown} of ${profiles.length} shown` : "";
    },
  });
  root.replaceChildren(
    h(
      "section",
      { class: "list-page" },
      h("div", { class: "list-head" }, heading, profiles.length > 1 ? filter : null),
      profiles.length
        ? h(
            "table",
            { class: "data profiles", id: "profiles" },
            h(
              "thead",
              {},
              h("tr", {}, ["name", "device", "captured", "total time", "events", ""].map((t, i) => h("th", { class: i === 3 || i === 4 ? "num" : "" }, t))),
            ),
            body,
          )
        : h("p", { class: "hint" }, "No profiles stored yet. Ingest one with ", h("code", {}, "nprof view -s PROFILE.ntff"), "."),
      status,
    ),
  );
}
