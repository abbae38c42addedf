// Owns the run page's data-quality dashboard: for one iteration (chosen in a select), the figures
// of GET /v1/runs/{run}/iterations/{i}/quality (critic-oracle agreement, fallback share, verified
// share, ...) and small SVG bar charts of the t' distribution (critic vs oracle), the bad actions
// after the divergence, the verdict margins and the revision lengths. Every bar carries its label,
// series and value as data attributes (what the browser tests read). A chart's title, legend and
// bar values never overlap, every value bin is drawn (empty ones too: the API keeps them), and the
// agreement chart's baselines ("direct", "first step") are explained under it.

import { get } from "../api.js";
import { h, mount, s } from "../dom.js";

const CRITIC = "#2563eb";
const ORACLE = "#f59e0b";

function share(value, part, whole) {
  if (value === null || value === undefined || !whole) return "–";
  return `${(100 * value).toFixed(0)}% (${part}/${whole})`;
}

function number(value, digits = 2) {
  return value === null || value === undefined ? "–" : Number.isInteger(value) ? String(value) : value.toFixed(digits);
}

/**
 * A bar chart: one group per bin, one bar per series. bins: [{label, values: [n, ...]}]; series:
 * [{name, colour}]; `max` fixes the axis (shares: 1), `format` writes a bar's value.
 */
export function barChart(id, title, bins, series, { max, format = (v) => String(v), xLabel = "" } = {}) {
  // the title on the first line, the legend (two series or more) on its own line under it, and the
  // plot below both with room for the value over its tallest bar: nothing overlaps
  const legend = series.length > 1;
  const width = 300, left = 30, bottom = 34, top = legend ? 46 : 32;
  const height = top + 114 + bottom;
  const ceiling = max ?? Math.max(1, ...bins.flatMap((b) => b.values));
  const plotW = width - left - 8, plotH = height - top - bottom;
  const group = bins.length ? plotW / bins.length : plotW;
  const barW = Math.max(1, Math.min(28, (group - 2) / Math.max(1, series.length)));
  const every = Math.max(1, Math.ceil(16 / group)); // tick labels at least 16 px apart
  const y = (v) => top + plotH - (v / ceiling) * plotH;
  const svg = s("svg", { id, class: "bar-chart", viewBox: `0 0 ${width} ${height}`, width, height, role: "img", "aria-label": title },
    s("text", { x: left, y: 13, class: "chart-title" }, title),
    s("line", { x1: left, y1: y(0), x2: width - 8, y2: y(0), class: "axis" }),
    s("text", { x: left - 4, y: y(ceiling) + 4, class: "tick", "text-anchor": "end" }, format(ceiling)),
    s("text", { x: left - 4, y: y(0) + 4, class: "tick", "text-anchor": "end" }, "0"));
  if (xLabel) svg.append(s("text", { x: left + plotW / 2, y: height - 3, class: "tick", "text-anchor": "middle" }, xLabel));
  bins.forEach((bin, i) => {
    const x0 = left + i * group + (group - barW * series.length) / 2;
    if (i % every === 0 || i === bins.length - 1) {
      svg.append(s("text", { x: left + i * group + group / 2, y: y(0) + 13, class: "tick", "text-anchor": "middle" }, bin.label));
    }
    series.forEach((serie, k) => {
      const value = bin.values[k];
      const x = x0 + k * barW;
      svg.append(s("rect", {
        x, y: y(value), width: barW - 1, height: Math.max(0, y(0) - y(value)), fill: serie.colour, class: "bar",
        dataset: { label: bin.label, series: serie.name, value: String(value) },
      }, s("title", {}, `${serie.name} ${bin.label}: ${format(value)}`)));
      if (value) svg.append(s("text", { x: x + barW / 2, y: y(value) - 2, class: "bar-value", "text-anchor": "middle" }, format(value)));
    });
  });
  if (!bins.length) svg.append(s("text", { x: left + plotW / 2, y: top + plotH / 2, class: "muted", "text-anchor": "middle" }, "nothing to count yet"));
  if (legend) {
    let x = left;
    series.forEach((serie) => {
      svg.append(s("rect", { x, y: 20, width: 10, height: 10, fill: serie.colour, class: "legend-swatch" }),
        s("text", { x: x + 14, y: 29, class: "legend" }, serie.name));
      x += 14 + 7 * serie.name.length + 14;
    });
  }
  return svg;
}

function described(el, id) {
  el.setAttribute("aria-describedby", id);
  return el;
}

function figures(q) {
  const rows = [
    ["critiqued", "critiqued pairs", `${q.critiqued} of ${q.pairs}`],
    ["agreement", "critic t' = oracle first error", q.oracle_pairs ? share(q.agreement, q.agree, q.oracle_pairs) : "no oracle verdicts"],
    ["distance", "mean |t' − oracle| (actions)", number(q.mean_abs_distance)],
    ["fallback", "critic fell back (nothing judged bad)", share(q.fallback_share, q.fallback, q.critiqued)],
    ["uncertain", "pairs with an uncertain verdict", String(q.uncertain)],
    ["low-margin", `verdict margin under ${q.margin_threshold}`, q.margin_pairs ? `${q.low_margin} of ${q.margin_pairs}` : "no label scores"],
    ["revisions", "revision samples", String(q.revision_samples)],
    ["revision-length", "mean revision length (actions)", number(q.revision_length_mean)],
    ["verified", "verified share of checked revisions", share(q.verified_share, q.verified, q.checked)],
  ];
  return h("dl", { class: "facts", id: "quality-figures" }, rows.map(([key, label, value]) => [
    h("dt", {}, label), h("dd", { dataset: { quality: key } }, value)]));
}

function charts(q) {
  const pct = (v) => `${Math.round(v * 100)}%`;
  const matches = q.oracle_pairs
    ? [["critic", q.agreement], ["direct", q.direct_exact_match], ["first step", q.first_step_match]]
      .filter(([, v]) => v !== null && v !== undefined).map(([label, v]) => ({ label, values: [v] }))
    : [];
  return h("div", { class: "charts" },
    barChart("chart-t-prime", "t' at the k-th action after divergence",
      q.t_prime.map((b) => ({ label: b.label, values: [b.critic, b.oracle] })),
      [{ name: "critic", colour: CRITIC }, { name: "oracle", colour: ORACLE }], { xLabel: "k" }),
    h("figure", { class: "chart", id: "agreement-figure" },
      described(barChart("chart-agreement", "t' = oracle, critic vs baselines", matches, [{ name: "share", colour: CRITIC }], { max: 1, format: pct }), "baselines-note"),
      h("figcaption", { id: "baselines-note", class: "muted" },
        "Share of pairs whose t' equals the oracle's first error, for ", h("strong", {}, "critic"), ": the critic's own t'; ",
        h("strong", {}, "direct"), ": always the last bad action (the Direct-Revision baseline, which revises only the failing step); ",
        h("strong", {}, "first step"), ": always the first bad action after the divergence.")),
    barChart("chart-actions", "bad actions after the divergence",
      q.actions_after_divergence.map((b) => ({ label: b.label, values: [b.count] })), [{ name: "pairs", colour: "#64748b" }], { xLabel: "actions" }),
    barChart("chart-margins", "verdict margins", q.margins.map((b) => ({ label: b.label, values: [b.count] })),
      [{ name: "pairs", colour: "#9333ea" }], { xLabel: "best − second label score" }),
    barChart("chart-revision-lengths", "revision lengths", q.revision_lengths.map((b) => ({ label: b.label, values: [b.count] })),
      [{ name: "samples", colour: "#16a34a" }], { xLabel: "actions kept" }),
  );
}

/** The dashboard section for `run` (its iterations from GET /v1/runs/{id}); `chosen` keeps the
 * iteration across the run page's live refreshes. */
export function qualitySection(run, chosen = { iteration: null }) {
  const its = run.iterations.map((it) => it.iteration);
  if (chosen.iteration === null || !its.includes(chosen.iteration)) chosen.iteration = its.length ? its[its.length - 1] : null;
  const body = h("div", { id: "quality", dataset: { iteration: chosen.iteration === null ? "" : String(chosen.iteration) } });
  const picker = h("select", { id: "quality-iteration", "aria-label": "iteration" },
    its.map((i) => h("option", { value: String(i), selected: i === chosen.iteration }, `iteration ${i}`)));
  async function load() {
    if (chosen.iteration === null) {
      mount(body, h("p", { class: "muted" }, "No iteration yet."));
      return;
    }
    const iteration = chosen.iteration;
    try {
      const q = await get(`/v1/runs/${run.run_id}/iterations/${iteration}/quality`);
      if (iteration !== chosen.iteration) return; // another iteration was chosen meanwhile
      body.dataset.iteration = String(iteration);
      body.dataset.loaded = String(iteration);
      mount(body, figures(q), charts(q));
    } catch (err) {
      mount(body, h("p", { class: "error" }, `Data quality: ${err.message}`));
    }
  }
  picker.addEventListener("change", () => {
    chosen.iteration = Number(picker.value);
    load();
  });
  load();
  return [h("h2", {}, "Data quality ", picker), body];
}
