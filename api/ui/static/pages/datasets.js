// Owns the Datasets page (#/datasets): the project's named datasets (sortable, filterable, a download
// button per format), the builder (dataset_build.js: from a filter, or from a selection made on the
// traces page / a run page, passed in the query string), and one dataset (#/datasets?dataset=ID):
// its query, warnings and entries, each sample previewable, and "exclude samples" as the builder
// prefilled with its query (datasets are immutable: excluding makes the next version).

import { all, get } from "../api.js";
import { builder } from "../dataset_build.js";
import { fmt, h, link, mount, shortId } from "../dom.js";
import { every, POLL_MS } from "../live.js";
import { DATASET_FORMATS, downloadButtons } from "../downloads.js";
import { dataTable, dateColumn } from "../table.js";

const QUERY_LISTS = ["kinds", "sources", "task_keys", "run_ids", "trace_ids", "critic_strategies"];

function downloadsOf(d) {
  return downloadButtons(DATASET_FORMATS, `/v1/datasets/${d.dataset_id}/download`, (format, ext) => `${d.name}-v${d.version}-${format}.${ext}`,
    { datasetId: d.dataset_id });
}

const DATASET_COLUMNS = [
  { key: "name", label: "name", value: (d) => d.name, cell: (d) => link(`#/datasets?dataset=${d.dataset_id}`, d.name) },
  { key: "version", label: "version", value: (d) => d.version },
  { key: "samples", label: "samples", value: (d) => d.samples },
  { key: "revisions", label: "revisions", value: (d) => d.revisions },
  { key: "goods", label: "goods", value: (d) => d.goods },
  dateColumn("created_at", "created"),
  { key: "download", label: "download", sortable: false, value: () => null, cell: downloadsOf },
];

const ID_LISTS = ["sample_ids", "exclude_sample_ids"];

/** The query in words: only the fields that narrow it (sample id lists as counts). */
function queryText(query) {
  const parts = [];
  for (const key of QUERY_LISTS) if ((query[key] || []).length) parts.push(`${key} ${query[key].join(", ")}`);
  if ((query.sample_ids || []).length) parts.push(`${query.sample_ids.length} selected sample(s)`);
  if ((query.exclude_sample_ids || []).length) parts.push(`${query.exclude_sample_ids.length} excluded sample(s)`);
  for (const key of ["outcome", "since", "until"]) if (query[key]) parts.push(`${key} ${query[key]}`);
  if (query.include_reasoning) parts.push("reasoning trained");
  return parts.join(" · ") || "every sample";
}

/** The builder's query string for `dataset`'s name and query (its next version). */
function rebuildHash(dataset) {
  const q = new URLSearchParams({ name: dataset.name });
  const query = dataset.query || {};
  for (const key of [...QUERY_LISTS, ...ID_LISTS]) if ((query[key] || []).length) q.set(key, query[key].join(","));
  for (const key of ["outcome", "since", "until"]) if (query[key]) q.set(key, query[key]);
  return `#/datasets?${q}`;
}

function messagesOf(sample) {
  return h("ol", { class: "messages", start: 0 }, (sample.sample.messages || []).map((m) =>
    h("li", { class: `message ${m.role}`, dataset: { role: m.role } },
      h("div", { class: "meta" }, h("span", { class: "role" }, m.role),
        m.weight === null || m.weight === undefined ? null : h("span", { class: "tag" }, `weight ${m.weight}`)),
      h("pre", {}, m.content || (m.tool_calls || []).map((c) => `${c.name}(${c.arguments})`).join("; ")))));
}

async function datasetView(datasetId) {
  const d = await get(`/v1/datasets/${datasetId}`);
  const panel = h("div", { id: "sample-preview", class: "card", hidden: true });
  async function showSample(sampleId) {
    panel.hidden = false;
    mount(panel, h("p", { class: "muted" }, "Loading…"));
    try {
      const sample = await get(`/v1/samples/${sampleId}`);
      mount(panel, h("h3", {}, "Sample ", link(`#/samples/${sampleId}`, shortId(sampleId)), ` · ${sample.kind}`), messagesOf(sample));
      panel.dataset.sampleId = sampleId;
    } catch (err) {
      mount(panel, h("p", { class: "error" }, err.message));
    }
  }
  const entries = dataTable([
    { key: "index", label: "#", value: (e) => e.index },
    { key: "sample", label: "sample", value: (e) => e.sample_id, cell: (e) => link(`#/samples/${e.sample_id}`, shortId(e.sample_id)) },
    { key: "kind", label: "kind", value: (e) => e.kind },
    { key: "position", label: "event position", value: (e) => e.position },
    { key: "template", label: "reflection template", value: (e) => e.template_id },
    { key: "preview", label: "", sortable: false, value: () => null,
      cell: (e) => h("button", { type: "button", class: "preview-sample", onclick: () => showSample(e.sample_id) }, "preview") },
  ], { id: "entries", rowKey: (e) => e.sample_id, status: (e) => e.kind, empty: "The dataset is empty.",
    rowAttrs: (e) => ({ dataset: { sampleId: e.sample_id } }) });
  entries.update(d.entries.map((e, index) => ({ ...e, index })));
  return h("section", { id: "dataset", dataset: { datasetId } },
    h("h2", {}, `${d.name} v${d.version}`),
    h("dl", { class: "facts", id: "dataset-facts" },
      h("dt", {}, "samples"), h("dd", { dataset: { fact: "samples" } }, `${d.samples} (${d.revisions} revisions, ${d.goods} good)`),
      h("dt", {}, "query"), h("dd", { dataset: { fact: "query" } }, queryText(d.query || {})),
      h("dt", {}, "built at log position"), h("dd", {}, fmt(d.log_position)),
      h("dt", {}, "entries sha256"), h("dd", {}, h("code", {}, d.entries_sha256))),
    d.warnings.length ? h("ul", { class: "error", id: "dataset-warnings" }, d.warnings.map((w) => h("li", {}, w))) : null,
    h("p", {}, "Download: ", downloadsOf(d)),
    h("p", {}, link(rebuildHash(d), "Exclude samples (builds the next version from this query)")),
    entries.el,
    panel);
}

export async function list(main, _params, query) {
  const datasets = dataTable(DATASET_COLUMNS, {
    id: "datasets", rowKey: (d) => d.dataset_id, empty: "No named datasets yet.",
    rowAttrs: (d) => ({ dataset: { datasetId: d.dataset_id, name: d.name } }), sort: { key: "created_at", descending: true },
  });
  async function refresh() {
    datasets.update(await all("/v1/datasets", {}, 500));
  }
  const shown = query.get("dataset");
  const view = shown ? await datasetView(shown) : null;
  mount(main,
    h("h1", {}, "Datasets"),
    view,
    builder(query, async (dataset) => {
      await refresh();
      window.location.hash = `#/datasets?dataset=${dataset.dataset_id}`;
    }),
    h("h2", {}, "Named datasets"),
    h("p", { class: "muted" }, "Built with POST /v1/datasets or the form above (iteration datasets are on each run's page)."),
    datasets.el,
  );
  await refresh();
  return every(POLL_MS, refresh); // live: datasets built elsewhere appear without a reload
}
