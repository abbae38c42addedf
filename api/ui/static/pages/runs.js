// Owns the Runs pages: the project's runs with status and progress (refreshed live from the SSE
// event stream), and one run: its iterations with their report metrics, a plot of those metrics
// over iterations (for a data-only run its data figures), the data-quality dashboard (quality.js),
// dataset downloads per format, and its trees, pairs and samples in sortable, filterable tables.

import { all, eventPosition, follow, get, may, post } from "../api.js";
import { fmt, h, link, s, scrollBox, shortId, mount } from "../dom.js";
import { downloadButtons, ITERATION_FORMATS } from "../downloads.js";
import { dataTable } from "../table.js";
import { qualitySection } from "./quality.js";

const PROGRESS_EVENTS = [
  "RunRequested", "IterationStarted", "TreeCompleted", "SearchFailed", "PairFound",
  "RevisionMaterialized", "RevisionRejected", "IterationDatasetReady", "IterationDatasetEmpty",
  "ModelTrained", "TrainingFailed", "IterationEvaluated", "RunCompleted", "RunCancelled", "RunFailed",
  "SampleRespliced", "CorrectionRejected",
];
function debounce(fn, ms) {
  let timer = null;
  return () => {
    clearTimeout(timer);
    timer = setTimeout(fn, ms);
  };
}

const TERMINAL = new Set(["completed", "cancelled", "failed"]);

/** A progress bar of trees done; `status` (the run's or iteration's) colours it: a failed or cancelled
 * bar never looks like a completed one. */
export function progressBar(done, expected, status = "") {
  const share = expected ? Math.min(1, done / expected) : 0;
  return h(
    "span",
    { class: `progress ${status}`.trim(), title: `${done}/${expected} trees${status ? ` · ${status}` : ""}`, dataset: { status } },
    h("span", { class: "bar", style: `width:${Math.round(share * 100)}%` }),
    h("span", { class: "label" }, `${done}/${expected}`),
  );
}

/** The last part of a model path or URL (the full name is the cell's tooltip). */
function modelName(model) {
  if (!model) return "–";
  const parts = String(model).replace(/\/+$/, "").split("/");
  return parts[parts.length - 1] || String(model);
}

function tasksText(config) {
  const tasks = config.tasks || [];
  if (tasks.length) return tasks.length <= 3 ? tasks.join(", ") : `${tasks.slice(0, 3).join(", ")} +${tasks.length - 3}`;
  return `split ${config.split || "train"}${config.max_tasks ? ` (≤ ${config.max_tasks})` : ""}`;
}

/** A finished run colours its bar by how it ended (a completed trained run's last iteration is
 * "evaluated", which must not look unfinished); otherwise the iteration's status. */
function barStatus(runStatus, iterationStatus) {
  return TERMINAL.has(runStatus) ? runStatus : iterationStatus;
}

function cancelButton(runId, refresh) {
  const button = h("button", { type: "button", class: "cancel-run", dataset: { runId } }, "Cancel");
  button.addEventListener("click", async () => {
    if (!window.confirm(`Cancel run ${shortId(runId)}?`)) return;
    button.disabled = true;
    try {
      await post(`/v1/runs/${runId}/cancel`, { reason: "cancelled in the web UI" });
      await refresh();
    } catch (err) {
      button.disabled = false;
      button.title = err.message;
      button.textContent = err.status === 403 ? "Cancel (needs scope run)" : "Cancel (failed)";
    }
  });
  return button;
}

function runColumns(refresh) {
  const it = (r) => r.it;
  return [
    { key: "run", label: "run", value: (r) => r.run.run_id, cell: (r) => link(`#/runs/${r.run.run_id}`, shortId(r.run.run_id)) },
    { key: "status", label: "status", value: (r) => r.run.status, class: (r) => `status ${r.run.status}`, title: (r) => r.detail.reason || "" },
    { key: "model", label: "model", value: (r) => modelName(r.config.model), class: "model", title: (r) => r.config.model || "" },
    { key: "env", label: "environment", value: (r) => r.config.env || null, class: "env" },
    { key: "tasks", label: "tasks", value: (r) => tasksText(r.config), class: "tasks" },
    { key: "iteration", label: "iteration", value: (r) => r.run.current_iteration },
    { key: "trees", label: "trees", value: (r) => (it(r) && it(r).trees_expected ? (it(r).trees_done + it(r).trees_failed) / it(r).trees_expected : null),
      cell: (r) => (it(r) ? progressBar(it(r).trees_done + it(r).trees_failed, it(r).trees_expected, barStatus(r.run.status, it(r).status)) : "–") },
    { key: "pairs", label: "pairs", value: (r) => (it(r) ? it(r).pairs : null) },
    { key: "revisions", label: "revisions", value: (r) => (it(r) ? it(r).revisions : null) },
    { key: "goods", label: "goods", value: (r) => (it(r) ? it(r).goods : null) },
    { key: "created", label: "created", value: (r) => Date.parse(r.run.created_at), cell: (r) => new Date(r.run.created_at).toLocaleString() },
    { key: "cancel", label: "", sortable: false, value: () => null, cell: (r) => (TERMINAL.has(r.run.status) || !may("run") ? "" : cancelButton(r.run.run_id, refresh)) },
  ];
}

export async function list(main) {
  const live = h("span", { class: "muted", id: "live" }, "");
  const runsTable = dataTable(runColumns(() => refresh()), {
    id: "runs", bodyId: "runs-body", rowKey: (r) => r.run.run_id, status: (r) => r.run.status, empty: "No runs yet.",
    rowAttrs: (r) => ({ dataset: { runId: r.run.run_id, status: r.run.status } }), sort: { key: "created", descending: true },
  });
  mount(main, h("h1", {}, "Runs ", live), runsTable.el);
  async function refresh() {
    const items = await all("/v1/runs", {}, 200);
    runsTable.update(await Promise.all(items.map(async (run) => {
      const detail = await get(`/v1/runs/${run.run_id}`);
      return { run, detail, config: detail.config || {}, it: detail.iterations[detail.iterations.length - 1] };
    })));
  }
  const start = await eventPosition(); // read before the runs: what came later is followed
  await refresh();
  const later = debounce(() => refresh().catch(() => {}), 400);
  return follow(PROGRESS_EVENTS, (type) => {
    live.textContent = `live · last event ${type}`;
    later();
  }, { after: start });
}

function numericMetrics(metrics, prefix = "", out = {}) {
  for (const [key, value] of Object.entries(metrics || {})) {
    const name = prefix ? `${prefix}.${key}` : key;
    if (typeof value === "number" && Number.isFinite(value)) out[name] = value;
    else if (value && typeof value === "object" && !Array.isArray(value) && !prefix) numericMetrics(value, name, out);
  }
  return out;
}

const PLOTTED = ["success_rate", "average_reward", "invalid_action_rate", "dead_loop_rate"];

/** An SVG line plot of a few metrics over iterations (values in [0, 1] share one axis). */
function plot(iterations) {
  const series = {};
  for (const it of iterations) {
    const flat = numericMetrics(it.metrics);
    for (const [name, value] of Object.entries(flat)) {
      if (!PLOTTED.some((p) => name.endsWith(p)) || value < 0 || value > 1) continue;
      (series[name] ||= []).push([it.iteration, value]);
    }
  }
  const names = Object.keys(series).sort().slice(0, 6);
  const width = 520, height = 220, pad = 36;
  const maxX = Math.max(1, ...iterations.map((i) => i.iteration));
  const x = (v) => pad + (v / maxX) * (width - 2 * pad);
  const y = (v) => height - pad - v * (height - 2 * pad);
  const palette = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2"];
  const markers = ["circle", "rect", "circle", "rect", "circle", "rect"];
  const svg = s("svg", { id: "metrics-plot", viewBox: `0 0 ${width} ${height}`, width, height, role: "img", "aria-label": `metrics per iteration: ${names.join(", ")}` },
    s("line", { x1: pad, y1: y(0), x2: width - pad, y2: y(0), class: "axis" }),
    s("line", { x1: pad, y1: y(0), x2: pad, y2: y(1), class: "axis" }),
    [0, 0.5, 1].map((v) => s("text", { x: pad - 6, y: y(v) + 4, class: "tick", "text-anchor": "end" }, String(v))),
    iterations.map((it) => s("text", { x: x(it.iteration), y: height - pad + 16, class: "tick", "text-anchor": "middle" }, String(it.iteration))));
  names.forEach((name, k) => {
    const points = series[name];
    svg.append(s("polyline", { points: points.map(([a, b]) => `${x(a)},${y(b)}`).join(" "), fill: "none", stroke: palette[k], "stroke-width": 2 }));
    for (const [a, b] of points) {
      svg.append(markers[k] === "rect"
        ? s("rect", { x: x(a) - 4, y: y(b) - 4, width: 8, height: 8, fill: palette[k] })
        : s("circle", { cx: x(a), cy: y(b), r: 4, fill: palette[k] }));
    }
    svg.append(s("text", { x: width - pad + 4 - 150, y: pad + 14 * k, fill: palette[k], class: "legend" }, name));
  });
  if (!names.length) svg.append(s("text", { x: width / 2, y: height / 2, "text-anchor": "middle", class: "muted" }, "no evaluation metrics yet"));
  return svg;
}

const pct = (v) => (v === null || v === undefined ? "–" : `${(100 * v).toFixed(0)}%`);

/** "Did training help?": the start model then each iteration's, per figure, with 95% Wilson intervals. */
function progressSection(progress) {
  const models = progress.models;
  if (!models.length) {
    return h("section", { id: "progress", "aria-labelledby": "progress-title" }, h("h2", { id: "progress-title" }, "Did training help?"),
      h("p", { class: "muted", id: "progress-empty" }, "No evaluation yet: the start model and each iteration's model are compared once evaluated on the held-out tasks."));
  }
  const at = new Map(progress.points.map((p) => [`${p.metric}|${p.model}`, p]));
  const rows = progress.metrics.map((m) => h("tr", { dataset: { metric: m.key } },
    h("th", { scope: "row" }, m.label, h("span", { class: "muted" }, m.higher_is_better ? " (higher is better)" : " (lower is better)")),
    models.map((model) => {
      const p = at.get(`${m.key}|${model}`);
      if (!p || p.rate === null) return h("td", { class: "muted", dataset: { model } }, "–");
      return h("td", { dataset: { model, rate: String(p.rate), low: String(p.low), high: String(p.high), count: String(p.count), n: String(p.n) } },
        h("strong", {}, pct(p.rate)), ` [${pct(p.low)}–${pct(p.high)}]`, h("div", { class: "muted" }, `${p.count}/${p.n}`));
    })));
  const width = 180, height = 120, pad = 24;
  const panels = progress.metrics.map((m) => {
    const points = models.map((model, i) => [i, at.get(`${m.key}|${model}`)]).filter(([, p]) => p && p.rate !== null);
    const x = (i) => pad + ((i + 0.5) / models.length) * (width - 2 * pad);
    const y = (v) => height - pad - v * (height - 2 * pad);
    const described = points.map(([i, p]) => `${models[i]} ${pct(p.rate)} (${pct(p.low)} to ${pct(p.high)})`).join("; ");
    return s("svg", { class: "progress-plot", viewBox: `0 0 ${width} ${height}`, width, height, role: "img", "aria-label": `${m.label}: ${described || "no data"}`, dataset: { metric: m.key } },
      s("text", { x: width / 2, y: 12, "text-anchor": "middle", class: "tick" }, m.label),
      s("line", { x1: pad, y1: y(0), x2: width - pad, y2: y(0), class: "axis" }),
      s("line", { x1: pad, y1: y(0), x2: pad, y2: y(1), class: "axis" }),
      [0, 1].map((v) => s("text", { x: pad - 4, y: y(v) + 4, class: "tick", "text-anchor": "end" }, String(v))),
      models.map((model, i) => s("text", { x: x(i), y: height - pad + 14, class: "tick", "text-anchor": "middle" }, model === "start" ? "start" : model.replace("iteration ", "it "))),
      points.map(([i, p]) => [
        p.low !== null ? s("line", { x1: x(i), x2: x(i), y1: y(p.low), y2: y(p.high), class: "interval" }) : null,
        s("circle", { cx: x(i), cy: y(p.rate), r: 4, class: `point ${models[i] === "start" ? "start" : "trained"}`, dataset: { model: models[i] } }),
      ]));
  });
  return h("section", { id: "progress", "aria-labelledby": "progress-title" },
    h("h2", { id: "progress-title" }, "Did training help?"),
    h("p", { class: "muted" }, "Held-out tasks: the model before training (start) and after each iteration. Brackets: 95% Wilson interval from the counts; recovery: the start model's failed episodes, cut at seeded steps, that a model completes."),
    h("div", { class: "progress-plots" }, panels),
    scrollBox(h("table", { id: "progress-table" },
      h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "figure"), models.map((m) => h("th", { scope: "col" }, m)))),
      h("tbody", {}, rows)), "did training help, per model"));
}

const DETAILED = 100;

function share(part, whole) {
  return whole ? `${(100 * part / whole).toFixed(0)}% (${part}/${whole})` : "–";
}

/** A data-only run trains nothing, so it has no evaluation metrics to plot: its data figures instead. */
function dataFigures(run, pairs, samples, pairDetails) {
  const revised = pairs.filter((p) => p.status === "revised").length;
  const checked = samples.filter((x) => x.verified !== null && x.verified !== undefined);
  const verified = checked.filter((x) => x.verified).length;
  const withOracle = pairDetails.filter((d) => d.critic && d.critic.oracle_index !== null && d.critic.oracle_index !== undefined);
  const agree = withOracle.filter((d) => d.critic.transition_index === d.critic.oracle_index).length;
  const fallback = pairDetails.filter((d) => d.critic && d.critic.fallback).length;
  const kinds = {};
  for (const x of samples) kinds[x.kind] = (kinds[x.kind] || 0) + 1;
  const rows = [
    ["pairs", "pairs", String(pairs.length)],
    ["revised", "pairs revised", share(revised, pairs.length)],
    ["revisions", "revision samples", String(run.iterations.reduce((n, it) => n + it.revisions, 0))],
    ["goods", "good samples", String(run.iterations.reduce((n, it) => n + it.goods, 0))],
    ["verified", "verified share of checked samples", share(verified, checked.length)],
    ["critic-oracle", "critic t' = oracle first error", withOracle.length ? share(agree, withOracle.length) : "no oracle verdicts"],
    ["fallback", "critic fell back (nothing judged bad)", share(fallback, pairDetails.length)],
  ];
  if (pairs.filter((p) => p.strategy).length > DETAILED) rows.push(["note", "note", `critic figures from the first ${DETAILED} judged pairs`]);
  return h("dl", { class: "facts", id: "data-figures" }, rows.map(([key, label, value]) => [
    h("dt", {}, label), h("dd", { dataset: { figure: key } }, value)]),
    h("dt", {}, "samples by kind"), h("dd", {}, Object.entries(kinds).map(([k, n]) => `${k} ${n}`).join(" · ") || "none"));
}

function downloads(run, it) {
  if (!it.dataset_id) return h("span", { class: "muted" }, it.status);
  return downloadButtons(ITERATION_FORMATS, `/v1/runs/${run.run_id}/iterations/${it.iteration}/dataset`,
    (format, ext) => `${run.run_id}-iter${it.iteration}-${format}.${ext}`, { iteration: String(it.iteration) });
}

const TREE_COLUMNS = [
  { key: "tree", label: "tree", value: (t) => t.tree_id, cell: (t) => link(`#/trees/${t.tree_id}`, shortId(t.tree_id)) },
  { key: "iteration", label: "iter", value: (t) => t.iteration },
  { key: "task", label: "task", value: (t) => t.task_id },
  { key: "status", label: "status", value: (t) => t.status, class: (t) => `status ${t.status}` },
  { key: "nodes", label: "nodes", value: (t) => t.node_count },
  { key: "best", label: "best reward", value: (t) => t.best_reward, cell: (t) => fmt(t.best_reward) },
];
const PAIR_COLUMNS = [
  { key: "pair", label: "pair", value: (p) => p.pair_id, cell: (p) => link(`#/pairs/${p.pair_id}`, shortId(p.pair_id)) },
  { key: "iteration", label: "iter", value: (p) => p.iteration },
  { key: "tree", label: "tree", value: (p) => p.tree_id, cell: (p) => (p.tree_id ? link(`#/trees/${p.tree_id}?pair=${p.pair_id}`, shortId(p.tree_id)) : "–") },
  { key: "task", label: "task", value: (p) => p.task_key },
  { key: "status", label: "status", value: (p) => p.status, class: (p) => `status ${p.status}`, title: (p) => p.reason || "" },
  { key: "shared", label: "shared steps", value: (p) => p.shared_steps },
  { key: "t", label: "t'", value: (p) => p.transition_index, cell: (p) => fmt(p.transition_index) },
  { key: "critic", label: "critic", value: (p) => p.strategy },
];
const SAMPLE_COLUMNS = [
  { key: "sample", label: "sample", value: (x) => x.sample_id, cell: (x) => link(`#/samples/${x.sample_id}`, shortId(x.sample_id)) },
  { key: "kind", label: "kind", value: (x) => x.kind },
  { key: "iteration", label: "iter", value: (x) => x.iteration },
  { key: "pair", label: "pair", value: (x) => x.pair_id, cell: (x) => (x.pair_id ? link(`#/pairs/${x.pair_id}`, shortId(x.pair_id)) : "–") },
  { key: "verified", label: "verified", value: (x) => x.verified, cell: (x) => fmt(x.verified) },
  { key: "length", label: "revision length", value: (x) => x.revision_length },
  { key: "origin", label: "origin", value: (x) => (x.sample.provenance || {}).origin || "search" },
];

function iterationRow(run, it) {
  const flat = numericMetrics(it.metrics);
  const shown = Object.entries(flat).slice(0, 12).map(([k, v]) => `${k}=${fmt(v)}`).join("  ");
  return h("tr", { dataset: { iteration: String(it.iteration) } },
    h("td", {}, String(it.iteration)),
    h("td", { class: `status ${it.status}` }, it.status, it.reason ? h("div", { class: "reason muted" }, it.reason) : null),
    h("td", {}, progressBar(it.trees_done + it.trees_failed, it.trees_expected, barStatus(run.status, it.status))),
    h("td", {}, String(it.pairs)), h("td", {}, String(it.revisions)), h("td", {}, String(it.goods)),
    h("td", {}, fmt(it.revision_length_mean, 2)),
    h("td", { class: "metrics" }, shown || "–"),
    h("td", {}, downloads(run, it)));
}

export async function detail(main, [runId]) {
  const section = h("div", {});
  mount(main, section);
  const treeTable = dataTable(TREE_COLUMNS, { id: "trees", rowKey: (t) => t.tree_id, status: (t) => t.status, empty: "No trees yet." });
  const pairTable = dataTable(PAIR_COLUMNS, {
    id: "pairs", rowKey: (p) => p.pair_id, status: (p) => p.status, empty: "No pairs yet.", rowAttrs: (p) => ({ dataset: { pairId: p.pair_id } }),
  });
  const sampleTable = dataTable(SAMPLE_COLUMNS, {
    id: "samples", rowKey: (x) => x.sample_id, status: (x) => x.kind, empty: "No samples yet.", rowAttrs: (x) => ({ dataset: { sampleId: x.sample_id } }),
  });
  const chosen = { iteration: null }; // the dashboard's iteration, kept across live refreshes
  async function refresh() {
    const run = await get(`/v1/runs/${runId}`);
    const [trees, pairs, samples, progress] = await Promise.all([
      all(`/v1/runs/${runId}/trees`), all(`/v1/runs/${runId}/pairs`), all(`/v1/runs/${runId}/samples`, {}, 500),
      run.config.data_only ? null : get(`/v1/runs/${runId}/progress`),
    ]);
    // critic vs oracle needs each judged pair's detail (at most DETAILED of them)
    const pairDetails = run.config.data_only
      ? await Promise.all(pairs.filter((p) => p.strategy).slice(0, DETAILED).map((p) => get(`/v1/pairs/${p.pair_id}`)))
      : [];
    treeTable.update(trees);
    pairTable.update(pairs);
    sampleTable.update(samples);
    mount(section,
      h("h1", {}, "Run ", h("code", {}, runId), " ", h("span", { class: `status ${run.status}`, id: "run-status" }, run.status),
        " ", TERMINAL.has(run.status) || !may("run") ? null : cancelButton(runId, refresh)),
      run.reason ? h("p", { class: "error", id: "run-reason" }, run.reason) : null,
      h("p", { class: "muted", id: "run-facts" }, `model ${run.config.model || "–"} · env ${run.config.env || "–"} · tasks ${tasksText(run.config)} · ${run.iterations.length} iteration(s)${run.config.data_only ? " · data only" : ""}`,
        " · ", link(`#/datasets?sources=runs&run_ids=${encodeURIComponent(runId)}`, "build a named dataset from this run")),
      h("h2", {}, "Iterations"),
      scrollBox(h("table", { id: "iterations" },
        h("thead", {}, h("tr", {}, ["iter", "status", "trees", "pairs", "revisions", "goods", "revision length", "report metrics", "dataset"].map((x) => h("th", {}, x)))),
        h("tbody", {}, run.iterations.map((it) => iterationRow(run, it)))), "iterations table"),
      run.config.data_only ? [h("h2", {}, "Data figures"), dataFigures(run, pairs, samples, pairDetails)]
        : [progressSection(progress), h("h2", {}, "Metrics over iterations"), plot(run.iterations)],
      qualitySection(run, chosen),
      h("h2", {}, `Trees (${trees.length})`), treeTable.el,
      h("h2", {}, `Pairs (${pairs.length})`), pairTable.el,
      h("h2", {}, `Samples (${samples.length})`), sampleTable.el,
    );
  }
  const start = await eventPosition(); // read before the run: no replay from 0, nothing missed
  await refresh();
  const later = debounce(() => refresh().catch(() => {}), 600);
  return follow(PROGRESS_EVENTS, (_type, envelope) => {
    const data = envelope.data || {};
    if (!data.run_id || data.run_id === runId) later();
  }, { after: start });
}
