// Owns the Runs pages: the project's runs with status and progress (refreshed live from the SSE
// event stream), and one run: its iterations with their report metrics, a plot of those metrics
// over iterations, dataset downloads per format, and links to its trees, pairs and samples.

import { all, download, follow, get, post } from "../api.js";
import { fmt, h, link, s, shortId, table, mount } from "../dom.js";

const PROGRESS_EVENTS = [
  "RunRequested", "IterationStarted", "TreeCompleted", "SearchFailed", "PairFound",
  "RevisionMaterialized", "RevisionRejected", "IterationDatasetReady", "IterationDatasetEmpty",
  "ModelTrained", "TrainingFailed", "IterationEvaluated", "RunCompleted", "RunCancelled", "RunFailed",
  "SampleRespliced", "CorrectionRejected",
];
// chat samples, DPO / PRM records from the iteration's pairs and trees, then tokenized Parquet for
// the iteration's model and a zip of an hf datasets folder (docs/datasets.md)
const FORMATS = [["openai", "jsonl"], ["sharegpt", "jsonl"], ["parquet", "parquet"], ["dpo", "jsonl"], ["prm", "jsonl"], ["prm-values", "jsonl"],
  ["tokenized", "parquet"], ["hf", "zip"]];

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

/** A failed or cancelled run (or iteration) colours its bar so; otherwise the iteration's status. */
function barStatus(runStatus, iterationStatus) {
  return runStatus === "failed" || runStatus === "cancelled" ? runStatus : iterationStatus;
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

export async function list(main) {
  const body = h("tbody", { id: "runs-body" });
  const live = h("span", { class: "muted", id: "live" }, "");
  mount(main,
    h("h1", {}, "Runs ", live),
    h("table", { id: "runs" },
      h("thead", {}, h("tr", {}, ["run", "status", "model", "environment", "tasks", "iteration", "trees", "pairs", "revisions", "goods", "created", ""].map((x) => h("th", {}, x)))),
      body),
  );
  async function refresh() {
    const items = await all("/v1/runs", {}, 200);
    const rows = await Promise.all(items.map(async (run) => {
      const detail = await get(`/v1/runs/${run.run_id}`);
      const it = detail.iterations[detail.iterations.length - 1];
      const config = detail.config || {};
      return h("tr", { dataset: { runId: run.run_id, status: run.status } },
        h("td", {}, link(`#/runs/${run.run_id}`, shortId(run.run_id))),
        h("td", { class: `status ${run.status}`, title: detail.reason || "" }, run.status),
        h("td", { class: "model", title: config.model || "" }, modelName(config.model)),
        h("td", { class: "env" }, config.env || "–"),
        h("td", { class: "tasks" }, tasksText(config)),
        h("td", {}, String(run.current_iteration)),
        h("td", {}, it ? progressBar(it.trees_done + it.trees_failed, it.trees_expected, barStatus(run.status, it.status)) : "–"),
        h("td", {}, it ? String(it.pairs) : "–"),
        h("td", {}, it ? String(it.revisions) : "–"),
        h("td", {}, it ? String(it.goods) : "–"),
        h("td", {}, new Date(run.created_at).toLocaleString()),
        h("td", {}, TERMINAL.has(run.status) ? null : cancelButton(run.run_id, refresh)));
    }));
    mount(body, ...(rows.length ? rows : [h("tr", {}, h("td", { colspan: 12, class: "muted" }, "No runs yet."))]));
  }
  await refresh();
  const later = debounce(() => refresh().catch(() => {}), 400);
  return follow(PROGRESS_EVENTS, (type) => {
    live.textContent = `live · last event ${type}`;
    later();
  });
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
  const svg = s("svg", { id: "metrics-plot", viewBox: `0 0 ${width} ${height}`, width, height, role: "img" },
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
  return h("span", { class: "downloads" }, FORMATS.map(([format, ext]) =>
    h("button", {
      type: "button",
      class: "download",
      dataset: { format, iteration: String(it.iteration) },
      onclick: () => download(`/v1/runs/${run.run_id}/iterations/${it.iteration}/dataset`, { format },
        `${run.run_id}-iter${it.iteration}-${format}.${ext}`),
    }, format)));
}

export async function detail(main, [runId]) {
  const section = h("div", {});
  mount(main, section);
  async function refresh() {
    const run = await get(`/v1/runs/${runId}`);
    const [trees, pairs, samples] = await Promise.all([
      all(`/v1/runs/${runId}/trees`), all(`/v1/runs/${runId}/pairs`), all(`/v1/runs/${runId}/samples`, {}, 500),
    ]);
    // critic vs oracle needs each judged pair's detail (at most DETAILED of them)
    const pairDetails = run.config.data_only
      ? await Promise.all(pairs.filter((p) => p.strategy).slice(0, DETAILED).map((p) => get(`/v1/pairs/${p.pair_id}`)))
      : [];
    const metricRows = run.iterations.map((it) => {
      const flat = numericMetrics(it.metrics);
      const shown = Object.entries(flat).slice(0, 12).map(([k, v]) => `${k}=${fmt(v)}`).join("  ");
      return h("tr", { dataset: { iteration: String(it.iteration) } },
        h("td", {}, String(it.iteration)),
        h("td", { class: `status ${it.status}` }, it.status),
        h("td", {}, progressBar(it.trees_done + it.trees_failed, it.trees_expected, barStatus(run.status, it.status))),
        h("td", {}, String(it.pairs)), h("td", {}, String(it.revisions)), h("td", {}, String(it.goods)),
        h("td", {}, fmt(it.revision_length_mean, 2)),
        h("td", { class: "metrics" }, shown || "–"),
        h("td", {}, downloads(run, it)));
    });
    mount(section,
      h("h1", {}, "Run ", h("code", {}, runId), " ", h("span", { class: `status ${run.status}`, id: "run-status" }, run.status)),
      run.reason ? h("p", { class: "error" }, run.reason) : null,
      h("p", { class: "muted", id: "run-facts" }, `model ${run.config.model || "–"} · env ${run.config.env || "–"} · tasks ${tasksText(run.config)} · ${run.iterations.length} iteration(s)${run.config.data_only ? " · data only" : ""}`),
      h("h2", {}, "Iterations"),
      h("table", { id: "iterations" },
        h("thead", {}, h("tr", {}, ["iter", "status", "trees", "pairs", "revisions", "goods", "revision length", "report metrics", "dataset"].map((x) => h("th", {}, x)))),
        h("tbody", {}, metricRows)),
      run.config.data_only ? [h("h2", {}, "Data figures"), dataFigures(run, pairs, samples, pairDetails)]
        : [h("h2", {}, "Metrics over iterations"), plot(run.iterations)],
      h("h2", {}, `Trees (${trees.length})`),
      table(["tree", "iter", "task", "status", "nodes", "best reward"], trees.map((t) => [
        link(`#/trees/${t.tree_id}`, shortId(t.tree_id)), String(t.iteration), t.task_id, t.status, String(t.node_count), fmt(t.best_reward),
      ]), { id: "trees" }),
      h("h2", {}, `Pairs (${pairs.length})`),
      table(["pair", "iter", "tree", "status", "shared steps", "t'", "critic"], pairs.map((p) => [
        link(`#/pairs/${p.pair_id}`, shortId(p.pair_id)), String(p.iteration),
        p.tree_id ? link(`#/trees/${p.tree_id}?pair=${p.pair_id}`, shortId(p.tree_id)) : "–",
        p.status, String(p.shared_steps), fmt(p.transition_index), p.strategy || "–",
      ]), { id: "pairs" }),
      h("h2", {}, `Samples (${samples.length})`),
      table(["sample", "kind", "iter", "pair", "verified", "revision length", "origin"], samples.map((x) => [
        link(`#/samples/${x.sample_id}`, shortId(x.sample_id)), x.kind, String(x.iteration),
        x.pair_id ? link(`#/pairs/${x.pair_id}`, shortId(x.pair_id)) : "–", fmt(x.verified), fmt(x.revision_length),
        (x.sample.provenance || {}).origin || "search",
      ]), { id: "samples" }),
    );
  }
  await refresh();
  const later = debounce(() => refresh().catch(() => {}), 600);
  return follow(PROGRESS_EVENTS, (_type, envelope) => {
    const data = envelope.data || {};
    if (!data.run_id || data.run_id === runId) later();
  });
}
