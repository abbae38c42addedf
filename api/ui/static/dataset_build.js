// Owns building a named dataset in the UI: the query form (POST /v1/datasets's query fields), a
// preview of the samples the query takes (read from the trace list and the runs' sample lists and
// matched with the same rules as core.domain.trace_datasets.selects), excluding samples from the
// preview, and turning the kept samples back into the query the API builds from.
//
// A selection becomes the query plus `exclude_sample_ids` (the previewed samples left unchecked;
// the API refuses an id its other filters do not take, so nothing is sent approximately). The
// builder opened from a dataset's "exclude samples" link previews the same query with that
// dataset's exclusions unchecked, so the next version can exclude more or take some back.

import { all, may, post } from "./api.js";
import { h, link, needsScope, shortId } from "./dom.js";
import { dataTable } from "./table.js";

const KINDS = ["revision", "good"];
const SOURCES = ["traces", "runs"];
const STRATEGIES = ["model", "direct", "rules"];

const list = (text) => [...new Set(String(text || "").split(/[\s,]+/).map((x) => x.trim()).filter(Boolean))];

/** The query a form's fields ask for (the fields of DatasetQueryIn; empty lists mean "any"). */
export function formQuery(fields) {
  const checked = (name) => [...fields.querySelectorAll(`input[name="${name}"]:checked`)].map((x) => x.value);
  const value = (name) => fields.querySelector(`[name="${name}"]`).value.trim();
  const query = {
    kinds: checked("kinds"), sources: checked("sources"), task_keys: list(value("task_keys")),
    run_ids: list(value("run_ids")), trace_ids: list(value("trace_ids")), critic_strategies: checked("critic_strategies"),
    include_reasoning: fields.querySelector('[name="include_reasoning"]').checked,
  };
  const only = list(value("sample_ids"));
  if (only.length) query.sample_ids = only;
  if (value("outcome")) query.outcome = value("outcome");
  for (const name of ["since", "until"]) if (value(name)) query[name] = value(name);
  return query;
}

/** Whether `query` takes sample `c` (core.domain.trace_datasets.selects; recorded_at approximated). */
export function selects(query, c) {
  if ((query.sample_ids || []).length && !query.sample_ids.includes(c.sample_id)) return false;
  if (!query.kinds.includes(c.kind) || !query.sources.includes(c.source)) return false;
  if (query.task_keys.length && !query.task_keys.includes(c.task_key)) return false;
  if (query.run_ids.length && !query.run_ids.includes(c.run_id)) return false;
  if (query.trace_ids.length && !query.trace_ids.includes(c.trace_id)) return false;
  if (c.at && query.since && Date.parse(c.at) < Date.parse(query.since)) return false;
  if (c.at && query.until && Date.parse(c.at) >= Date.parse(query.until)) return false;
  if (query.outcome) {
    if (c.source !== "traces") return false;
    if ((query.outcome === "failure") !== (c.kind === "revision")) return false;
  }
  return !query.critic_strategies.length || query.critic_strategies.includes(c.strategy);
}

/** The samples `query` would take, from the read models the list routes serve. */
export async function candidates(query) {
  const out = [];
  if (query.sources.includes("traces")) {
    const params = { task_key: query.task_keys.length === 1 ? query.task_keys[0] : null };
    for (const t of await all("/v1/traces", params, 5000)) {
      if (!t.sample_id) continue; // no sample (yet): waiting for an outcome, no error found, ...
      out.push({ sample_id: t.sample_id, kind: t.outcome === "success" ? "good" : "revision", source: "traces", task_key: t.task_key,
        trace_id: t.trace_id, run_id: null, strategy: t.strategy, at: t.created_at });
    }
  }
  if (query.sources.includes("runs")) {
    const runIds = query.run_ids.length ? query.run_ids : (await all("/v1/runs", {}, 500)).map((r) => r.run_id);
    for (const runId of runIds) {
      let items = [];
      try {
        items = await all(`/v1/runs/${runId}/samples`, {}, 5000);
      } catch (_) {
        continue; // a run id of no run of this project: the server's query takes nothing from it
      }
      for (const x of items) {
        const p = x.sample.provenance || {};
        const fromTrace = p.source === "trace" || Boolean(p.trace_id);
        out.push({ sample_id: x.sample_id, kind: x.kind, source: fromTrace ? "traces" : "runs", task_key: p.task_key || p.task_id || null,
          trace_id: p.trace_id || null, run_id: x.run_id, strategy: p.critic_strategy || null, at: null, iteration: x.iteration });
      }
    }
  }
  return out.filter((c) => selects(query, c));
}

/**
 * The query that takes exactly `kept` of the previewed `shown` samples: `query` itself when none
 * was dropped, else `query` with the dropped ones in `exclude_sample_ids`. Returns { query } or { error }.
 */
export function queryForSelection(query, shown, kept) {
  const keep = new Set(kept.map((c) => c.sample_id));
  const dropped = shown.filter((c) => !keep.has(c.sample_id)).map((c) => c.sample_id).sort();
  if (!dropped.length) return { query };
  if (!kept.length) return { error: "Every previewed sample is excluded: keep at least one." };
  return { query: { ...query, exclude_sample_ids: dropped } };
}

const CANDIDATE_COLUMNS = [
  { key: "sample", label: "sample", value: (c) => c.sample_id, cell: (c) => link(`#/samples/${c.sample_id}`, shortId(c.sample_id)) },
  { key: "kind", label: "kind", value: (c) => c.kind },
  { key: "source", label: "source", value: (c) => c.source },
  { key: "task", label: "task key", value: (c) => c.task_key },
  { key: "from", label: "from", value: (c) => c.trace_id || c.run_id,
    cell: (c) => (c.trace_id ? link(`#/traces/${c.trace_id}`, `trace ${shortId(c.trace_id)}`) : c.run_id ? link(`#/runs/${c.run_id}`, `run ${shortId(c.run_id)}`) : "–") },
  { key: "critic", label: "critic", value: (c) => c.strategy },
];

function checkboxes(name, values, chosen) {
  return values.map((v) => h("label", { class: "check" }, h("input", { type: "checkbox", name, value: v, checked: chosen.includes(v) }), ` ${v}`));
}

/** The builder: a form prefilled from the page's query string, its preview and its Create button.
 * `created(dataset)` is called with POST /v1/datasets's answer. */
export function builder(params, created) {
  const given = (name) => list(params.get(name));
  const sources = given("sources").length ? given("sources") : SOURCES;
  const kinds = given("kinds").length ? given("kinds") : KINDS;
  const field = (label, input) => h("label", { class: "field" }, h("span", {}, label), input);
  const fields = h("div", { class: "fields" },
    field("name", h("input", { name: "name", id: "ds-name", required: true, pattern: "[A-Za-z0-9][A-Za-z0-9._\\-]{0,99}", value: params.get("name") || "", placeholder: "refunds" })),
    h("div", { class: "field" }, h("span", {}, "kinds"), checkboxes("kinds", KINDS, kinds)),
    h("div", { class: "field" }, h("span", {}, "sources"), checkboxes("sources", SOURCES, sources)),
    field("task keys", h("input", { name: "task_keys", value: given("task_keys").join(", "), placeholder: "any" })),
    field("run ids", h("input", { name: "run_ids", id: "ds-run-ids", value: given("run_ids").join(", "), placeholder: "any" })),
    field("trace ids", h("textarea", { name: "trace_ids", id: "ds-trace-ids", rows: 2, placeholder: "any" }, given("trace_ids").join(", "))),
    field("sample ids", h("textarea", { name: "sample_ids", id: "ds-sample-ids", rows: 1, placeholder: "any" }, given("sample_ids").join(", "))),
    field("outcome", h("select", { name: "outcome" }, ["", "failure", "success"].map((v) => h("option", { value: v, selected: v === (params.get("outcome") || "") }, v || "any")))),
    h("div", { class: "field" }, h("span", {}, "critic"), checkboxes("critic_strategies", STRATEGIES, given("critic_strategies"))),
    field("since", h("input", { name: "since", placeholder: "2026-11-01T00:00:00Z", value: params.get("since") || "" })),
    field("until", h("input", { name: "until", placeholder: "2026-12-01T00:00:00Z", value: params.get("until") || "" })),
    h("label", { class: "check" }, h("input", { type: "checkbox", name: "include_reasoning" }), " train on reasoning"));
  const status = h("p", { id: "build-status", class: "muted" }, "Preview the samples, exclude the ones you do not want, then create.");
  const previewButton = h("button", { type: "button", id: "preview-dataset" }, "Preview samples");
  const createButton = h("button", { type: "submit", id: "create-dataset" }, "Create dataset");
  const excludedBefore = new Set(given("exclude_sample_ids")); // a dataset's exclusions (its next version)
  let previewed = null; // the samples the last preview showed (null: none yet)
  let previewedQuery = null;
  const preview = dataTable(CANDIDATE_COLUMNS, {
    id: "candidates", rowKey: (c) => c.sample_id, status: (c) => c.kind, select: true, empty: "No sample matches the query.",
    rowAttrs: (c) => ({ dataset: { sampleId: c.sample_id, source: c.source } }),
    onSelect: (rows) => { if (previewed) status.textContent = `${rows.length} of ${previewed.length} previewed sample(s) kept.`; },
  });
  const previewBox = h("div", { id: "dataset-preview", hidden: true }, preview.el);
  async function runPreview() {
    previewed = null;
    status.className = "muted";
    status.textContent = "Reading the samples…";
    const query = formQuery(fields);
    const found = await candidates(query);
    previewed = found;
    previewedQuery = query;
    preview.update(found);
    const kept = found.filter((c) => !excludedBefore.has(c.sample_id));
    preview.select(kept.map((c) => c.sample_id));
    previewBox.hidden = false;
    const approx = query.since || query.until ? " (since / until compare the trace's time here; the server uses the sample's)" : "";
    status.textContent = `${found.length} sample(s) match${approx}. ${kept.length} kept.`;
  }
  previewButton.addEventListener("click", () => runPreview().catch((err) => { status.className = "error"; status.textContent = err.message; }));
  const form = h("form", { id: "dataset-builder", class: "card" }, h("h2", {}, "Build a named dataset"), fields,
    h("p", { class: "toolbar" }, previewButton, " ", may("run") ? createButton : needsScope("run", "create a dataset (preview is open to it)")), status, previewBox);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    let query = formQuery(fields);
    let expected = null;
    if (previewed && JSON.stringify(query) === JSON.stringify(previewedQuery)) {
      const chosen = queryForSelection(query, previewed, preview.selected());
      if (chosen.error) {
        status.className = "error";
        status.textContent = chosen.error;
        return;
      }
      query = chosen.query;
      expected = preview.selected().length;
    } else if (excludedBefore.size) {
      query = { ...query, exclude_sample_ids: [...excludedBefore].sort() }; // not previewed: keep the exclusions
    }
    createButton.disabled = true;
    try {
      const dataset = await post("/v1/datasets", { name: fields.querySelector('[name="name"]').value.trim(), query });
      status.className = expected === null || expected === dataset.samples ? "ok" : "error";
      status.textContent = `Created ${dataset.name} v${dataset.version}: ${dataset.samples} sample(s)` +
        (expected === null || expected === dataset.samples ? "." : ` (the preview kept ${expected}: the log changed since, or since / until differ).`);
      created(dataset);
    } catch (err) {
      status.className = "error";
      status.textContent = err.status === 403 ? "Creating a dataset needs a key with scope run." : err.message;
    } finally {
      createButton.disabled = false;
    }
  });
  const open = ["sources", "kinds", "trace_ids", "run_ids", "task_keys", "name"].some((k) => params.has(k));
  if (open && ["trace_ids", "run_ids", "sample_ids", "exclude_sample_ids"].some((k) => params.has(k))) runPreview().catch(() => {});
  return h("details", { id: "builder", open: open || null }, h("summary", {}, "Build a named dataset from a filter or a selection"), form);
}
