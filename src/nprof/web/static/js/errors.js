// errors.js — the error panel shown instead of a blank page when the API fails.
// Contract: errorPanel(title, message, linkToList=true) -> element with a clear
// message and (by default) a link back to the profile list.

import { h } from "./dom.js";

export function errorPanel(title, message, linkToList = true) {
  return h(
    "div",
    { class: "error-panel", id: "error-panel", role: "alert" },
    h("h1", {}, title),
    h("p", { class: "error-msg" }, message),
    linkToList ? h("p", {}, h("a", { href: "/", class: "btn primary" }, "← All profiles")) : null,
  );
}
