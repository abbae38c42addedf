// Owns the UI shell: the key gate (no page renders without a project key) and the hash router
// that gives every object a deep link (#/runs/ID, #/trees/ID?pair=ID, #/pairs/ID, #/samples/ID,
// #/traces/ID, #/datasets, #/review?reason=...&pair=ID).

import { ApiError, forgetKey, get, getKey, keyScopes, loadKeyScopes, setKey } from "./api.js";
import { h } from "./dom.js";
import * as datasets from "./pages/datasets.js";
import * as pair from "./pages/pair.js";
import * as review from "./pages/review.js";
import * as runs from "./pages/runs.js";
import * as sample from "./pages/sample.js";
import * as traces from "./pages/traces.js";
import * as tree from "./pages/tree.js";

const ROUTES = [
  [/^\/?$/, runs.list],
  [/^\/runs$/, runs.list],
  [/^\/runs\/([^/]+)$/, runs.detail],
  [/^\/trees\/([^/]+)$/, tree.render],
  [/^\/pairs\/([^/]+)$/, pair.render],
  [/^\/samples\/([^/]+)$/, sample.render],
  [/^\/traces$/, traces.list],
  [/^\/traces\/([^/]+)$/, traces.detail],
  [/^\/datasets$/, datasets.list],
  [/^\/review$/, review.render],
];

const main = document.getElementById("main");
let cleanup = null;

function parseHash() {
  const raw = window.location.hash.replace(/^#/, "") || "/runs";
  const [path, query = ""] = raw.split("?");
  return { path, query: new URLSearchParams(query) };
}

function keyForm(message) {
  document.getElementById("who").textContent = "";
  document.getElementById("signout").hidden = true;
  const input = h("input", {
    id: "key-input",
    type: "password",
    autocomplete: "off",
    placeholder: "agr_…",
    size: 60,
  });
  const form = h(
    "form",
    { id: "key-form", class: "card" },
    h("h2", {}, "Project key"),
    h("p", {}, "Enter a key of your project. It is kept in this browser tab only (sessionStorage) and sent with every request to the /v1 API."),
    message ? h("p", { class: "error", id: "key-error" }, message) : null,
    input,
    " ",
    h("button", { type: "submit" }, "Open"),
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    setKey(input.value);
    await route();
  });
  main.replaceChildren(form);
  input.focus();
}

async function whoAmI() {
  try {
    const projects = await get("/v1/projects");
    const names = projects.map((p) => p.name).join(", ");
    await loadKeyScopes(); // pages show only the controls the key may use
    const scopes = keyScopes();
    document.getElementById("who").textContent = [names ? `project: ${names}` : "", scopes ? `key: ${scopes.join(", ")}` : ""].filter(Boolean).join(" · ");
    return true;
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) {
      forgetKey();
      keyForm("That key was not accepted (401). Check it and try again.");
      return false;
    }
    if (err instanceof ApiError && err.status === 403) return true; // the key lacks read: pages say so
    throw err;
  }
}

async function route() {
  if (cleanup) {
    cleanup();
    cleanup = null;
  }
  if (!getKey()) {
    keyForm();
    return;
  }
  main.replaceChildren(h("p", { class: "muted" }, "Loading…")); // the old page goes at once
  if (!(await whoAmI())) return;
  document.getElementById("signout").hidden = false;
  const { path, query } = parseHash();
  for (const [pattern, page] of ROUTES) {
    const match = path.match(pattern);
    if (!match) continue;
    try {
      const result = await page(main, match.slice(1).map(decodeURIComponent), query);
      if (typeof result === "function") cleanup = result;
    } catch (err) {
      const text = err instanceof ApiError ? err.message : String(err);
      main.replaceChildren(h("p", { class: "error", id: "page-error" }, text));
    }
    return;
  }
  main.replaceChildren(h("p", { class: "error" }, `No page at #${path}`));
}

window.addEventListener("hashchange", route);
window.addEventListener("agentr:unauthorized", () => {
  forgetKey();
  keyForm("The API answered 401: enter a valid key.");
});
document.getElementById("signout").addEventListener("click", () => {
  forgetKey();
  keyForm();
});
route();
