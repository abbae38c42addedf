// Owns the Review page: the queue of pairs that need a human (GET /v1/review/queue: the critic's t'
// differs from the oracle's first error, the critic fell back, a verdict was uncertain or scored
// with a low margin), filtered by reason, run, iteration, task, source and reviewed or not; reviewed /
// remaining counts; next / previous with the keyboard (j / k) or buttons; the current pair's diff and
// correction form beside the queue (the pair page's own rendering), whose re-splice shows the sample
// before and after and counts the pair as reviewed.

import { all, get } from "../api.js";
import { fmt, h, mount, shortId } from "../dom.js";
import * as pair from "./pair.js";

const REASONS = [
  ["any", "any reason"],
  ["disagree", "critic t' ≠ oracle"],
  ["fallback", "critic fell back"],
  ["uncertain", "uncertain verdict"],
  ["low_margin", "low margin"],
];
const REASON_TEXT = { disagree: "critic ≠ oracle", fallback: "fallback", uncertain: "uncertain", low_margin: "low margin" };
const MAX_ITEMS = 2000;
const FILTERS = ["reason", "max_margin", "run_id", "iteration", "task_key", "source", "reviewed"];

function filtersOf(query) {
  const out = {};
  for (const key of FILTERS) if (query.get(key)) out[key] = query.get(key);
  return out;
}

function hashOf(filters, pairId) {
  const params = new URLSearchParams(filters);
  if (pairId) params.set("pair", pairId);
  const text = params.toString();
  return `#/review${text ? `?${text}` : ""}`;
}

async function loadQueue(filters) {
  const items = [];
  let cursor = null;
  let counts = null;
  do {
    const page = await get("/v1/review/queue", { ...filters, limit: 200, cursor });
    if (!counts) counts = { total: page.total, reviewed: page.reviewed, remaining: page.remaining };
    items.push(...page.items);
    cursor = page.next_cursor;
  } while (cursor && items.length < MAX_ITEMS);
  return { items, counts, truncated: Boolean(cursor) };
}

export async function render(main, _params, query) {
  const filters = filtersOf(query);
  const [{ items, counts, truncated }, runs] = await Promise.all([loadQueue(filters), all("/v1/runs", {}, 500)]);
  let at = Math.max(0, items.findIndex((i) => i.pair_id === query.get("pair")));

  // ---- filters
  const reason = h("select", { id: "review-reason", name: "reason" },
    REASONS.map(([value, text]) => h("option", { value, selected: (filters.reason || "any") === value }, text)));
  const run = h("select", { id: "review-run", name: "run_id" },
    h("option", { value: "" }, "all runs"),
    runs.map((r) => h("option", { value: r.run_id, selected: filters.run_id === r.run_id }, `run ${shortId(r.run_id)} · ${r.status}`)));
  const iteration = h("input", { id: "review-iteration", name: "iteration", type: "number", min: 0, size: 4, placeholder: "all", value: filters.iteration || "" });
  const task = h("input", { id: "review-task", name: "task_key", size: 18, placeholder: "all tasks", value: filters.task_key || "" });
  const source = h("select", { id: "review-source", name: "source" },
    [["", "runs and traces"], ["search", "run trees"], ["trace", "failed traces"]].map(([value, text]) => h("option", { value, selected: (filters.source || "") === value }, text)));
  const reviewed = h("select", { id: "review-reviewed", name: "reviewed" },
    [["", "reviewed or not"], ["false", "still to review"], ["true", "reviewed"]].map(([value, text]) => h("option", { value, selected: (filters.reviewed || "") === value }, text)));
  const form = h("form", { id: "review-filters", class: "toolbar" },
    h("label", {}, "why ", reason), h("label", {}, run), h("label", {}, "iteration ", iteration),
    h("label", {}, "task ", task), h("label", {}, source), h("label", {}, reviewed),
    h("button", { type: "submit" }, "Filter"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const next = {};
    for (const el of [reason, run, iteration, task, source, reviewed]) if (el.value.trim() && !(el === reason && el.value === "any")) next[el.name] = el.value.trim();
    if (filters.max_margin) next.max_margin = filters.max_margin;
    window.location.hash = hashOf(next, null);
  });

  // ---- counts, queue, detail
  const reviewedCount = h("strong", { id: "review-reviewed-count" }, String(counts.reviewed));
  const remainingCount = h("strong", { id: "review-remaining-count" }, String(counts.remaining));
  const countsLine = h("p", { id: "review-counts" }, "reviewed ", reviewedCount, " · remaining ", remainingCount, ` · ${counts.total} in the queue`,
    truncated ? ` (the first ${items.length} listed)` : "");
  const position = h("span", { id: "review-position", class: "muted" });
  const prev = h("button", { type: "button", id: "review-prev", title: "previous pair (k)" }, "← previous (k)");
  const next = h("button", { type: "button", id: "review-next", title: "next pair (j)" }, "next (j) →");
  const detail = h("div", { id: "review-detail" });
  const rows = items.map((item, i) => h("tr", { dataset: { pairId: item.pair_id, index: String(i), reviewed: item.reviewed ? "1" : "0" }, class: item.reviewed ? "reviewed" : null, onclick: () => go(i) },
    h("td", {}, String(i + 1)),
    h("td", {}, h("code", {}, shortId(item.pair_id))),
    h("td", {}, item.run_id ? `${shortId(item.run_id)} · it ${item.iteration}` : "trace"),
    h("td", { class: "task" }, item.task_key),
    h("td", { class: "reasons" }, item.reasons.map((r) => h("span", { class: `tag reason ${r}` }, REASON_TEXT[r] || r))),
    h("td", {}, `${item.critic_index} / ${fmt(item.oracle_index)}`),
    h("td", {}, fmt(item.margin, 2)),
    h("td", { class: "mark" }, item.reviewed ? "✓" : "")));
  const queue = h("table", { id: "review-queue", class: "queue" },
    h("thead", {}, h("tr", {}, ["#", "pair", "run", "task", "why", "t' critic / oracle", "margin", "reviewed"].map((x) => h("th", {}, x)))),
    h("tbody", {}, rows));

  let token = 0;
  async function go(index) {
    if (!items.length) return;
    at = Math.max(0, Math.min(items.length - 1, index));
    for (const row of rows) row.classList.toggle("current", Number(row.dataset.index) === at);
    rows[at].scrollIntoView({ block: "nearest" });
    position.textContent = `${at + 1} of ${items.length}`;
    prev.disabled = at === 0;
    next.disabled = at === items.length - 1;
    const item = items[at];
    history.replaceState(null, "", hashOf(filters, item.pair_id));
    detail.dataset.pairId = item.pair_id;
    const mine = ++token;
    mount(detail, h("p", { class: "muted" }, "Loading the pair…"));
    const target = h("div", {});
    try {
      await pair.render(target, [item.pair_id], null, { onCorrected: (done) => corrected(item, done) });
    } catch (err) {
      mount(target, h("p", { class: "error" }, String(err.message || err)));
    }
    if (mine === token) {
      mount(detail, target);
      detail.dataset.shown = item.pair_id;
    }
  }
  function corrected(item, done) {
    if (done.status !== "respliced" || item.reviewed) return;
    item.reviewed = true;
    counts.reviewed += 1;
    counts.remaining -= 1;
    reviewedCount.textContent = String(counts.reviewed);
    remainingCount.textContent = String(counts.remaining);
    const row = rows[items.indexOf(item)];
    row.classList.add("reviewed");
    row.dataset.reviewed = "1";
    row.querySelector("td.mark").textContent = "✓";
  }
  prev.addEventListener("click", () => go(at - 1));
  next.addEventListener("click", () => go(at + 1));
  const onKey = (event) => {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    const tag = (event.target && event.target.tagName) || "";
    if (["INPUT", "TEXTAREA", "SELECT"].includes(tag) || (event.target && event.target.isContentEditable)) return;
    if (event.key === "j") { event.preventDefault(); go(at + 1); }
    else if (event.key === "k") { event.preventDefault(); go(at - 1); }
  };
  document.addEventListener("keydown", onKey);

  mount(main,
    h("h1", {}, "Review queue"),
    h("p", { class: "muted" }, "Pairs whose first error a human should check: the critic's t' differs from the environment oracle's first error, the critic fell back (nothing judged bad), a verdict was uncertain, or a verdict's two best labels scored close together. j / k: next / previous."),
    form,
    countsLine,
    items.length ? h("div", { class: "review-layout" },
      h("div", { class: "queue-wrap" }, queue),
      h("div", { class: "review-main" }, h("div", { class: "toolbar" }, prev, next, position), detail))
      : h("p", { id: "review-empty", class: "muted" }, "Nothing to review with these filters."),
  );
  if (items.length) go(at);
  return () => document.removeEventListener("keydown", onKey);
}
