// Owns the Review page: the queue of pairs that need a human (GET /v1/review/queue: the critic's t'
// differs from the oracle's first error, the critic fell back, a verdict was uncertain or scored
// with a low margin), most urgent first (the API's priority: disagreement, verdict margin, distance
// between strategies), sortable by any column, filtered by reason, run, iteration, task, source and
// reviewed or not; reviewed / remaining counts; the queue stays live (polled: new pairs appear, counts
// follow other reviewers). Next / previous with j / k or the buttons; the current pair's diff and
// review form beside the queue (the pair page's own rendering): click a bad step to pick t' and
// "Re-splice" (s), or "Accept t'" (a) when the critic was right; either moves on to the next pair
// still to review, the re-splice followed in the background and announced. With more than one
// reviewer: a pair another reviewer claimed shows "claimed by" and is skipped when moving on; each
// row shows the reviewers' agreement ("2 of 3 agree on step 4", disputed when tied); "my reviews"
// keeps the pairs this key claimed or reviewed (the API's `mine`); the overall agreement figure
// (GET /v1/review/agreement: percent agreement, Cohen's kappa for two reviewers) sits above the queue.

import { all, get, myKeyId } from "../api.js";
import { fmt, h, mount, shortId } from "../dom.js";
import { announce, every, POLL_MS } from "../live.js";
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
const FILTERS = ["reason", "max_margin", "run_id", "iteration", "task_key", "source", "reviewed", "mine"];
const COLUMNS = [
  { key: "rank", label: "#", value: (item) => item.rank },
  { key: "pair", label: "pair", value: (item) => item.pair_id },
  { key: "run", label: "run", value: (item) => (item.run_id ? `${item.run_id}:${String(item.iteration).padStart(5, "0")}` : "") },
  { key: "task", label: "task", value: (item) => item.task_key },
  { key: "why", label: "why", value: (item) => item.reasons.join(" ") },
  { key: "t", label: "t' critic / oracle", value: (item) => item.critic_index },
  { key: "margin", label: "margin", value: (item) => item.margin },
  { key: "priority", label: "priority", value: (item) => item.priority },
  { key: "reviewed", label: "reviewed", value: (item) => (item.reviewed ? 1 : 0) },
  { key: "agreement", label: "agreement", value: (item) => (item.disputed ? -1 : item.reviewers ? item.agree / item.reviewers : null) },
  { key: "claimed", label: "claimed by", value: (item) => item.claimed_by },
];

/** Claimed by another key: auto-advance skips it. */
function theirs(item) {
  const me = myKeyId();
  return Boolean(item.claimed_key) && item.claimed_key !== me;
}

function agreementLine(figures) {
  if (!figures.compared) return `Agreement: no pair has two reviews yet (${figures.reviewed} reviewed).`;
  const kappa = figures.kappa === null ? "" : ` · Cohen's κ ${fmt(figures.kappa, 2)} (${figures.kappa_reviewers.join(" vs ")})`;
  return `Agreement: ${fmt(figures.percent, 1)}% (${figures.agreeing} of ${figures.compared} pairs with two reviews or more)${kappa}`;
}

function filtersOf(query) {
  const out = {};
  for (const key of FILTERS) if (query.get(key)) out[key] = query.get(key);
  return out;
}

function hashOf(filters, pairId, sort) {
  const params = new URLSearchParams(filters);
  if (sort) params.set("sort", `${sort.descending ? "-" : ""}${sort.key}`);
  if (pairId) params.set("pair", pairId);
  const text = params.toString();
  return `#/review${text ? `?${text}` : ""}`;
}

function sortOf(query) {
  const raw = query.get("sort") || "";
  const key = raw.replace(/^-/, "");
  return COLUMNS.some((c) => c.key === key) ? { key, descending: raw.startsWith("-") } : null;
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
  items.forEach((item, i) => { item.rank = i + 1; });
  return { items, counts, truncated: Boolean(cursor) };
}

function compare(a, b) {
  if (a === null || a === undefined) return b === null || b === undefined ? 0 : 1;
  if (b === null || b === undefined) return -1;
  if (typeof a === "number" && typeof b === "number") return a - b;
  return String(a).localeCompare(String(b), undefined, { numeric: true });
}

export async function render(main, _params, query) {
  const filters = filtersOf(query);
  const [loaded, runs, figures] = await Promise.all([loadQueue(filters), all("/v1/runs", {}, 500), get("/v1/review/agreement")]);
  let { items, counts, truncated } = loaded;
  let sort = sortOf(query); // null: the API's priority order
  let view = [];
  let current = query.get("pair");

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
  const mine = h("select", { id: "review-mine", name: "mine" },
    [["", "everyone's"], ["true", "my reviews"]].map(([value, text]) => h("option", { value, selected: (filters.mine || "") === value }, text)));
  const form = h("form", { id: "review-filters", class: "toolbar", "aria-label": "queue filters" },
    h("label", {}, "why ", reason), h("label", {}, "run ", run), h("label", {}, "iteration ", iteration),
    h("label", {}, "task ", task), h("label", {}, "source ", source), h("label", {}, "state ", reviewed),
    h("label", {}, "whose ", mine),
    h("button", { type: "submit" }, "Filter"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const next = {};
    for (const el of [reason, run, iteration, task, source, reviewed, mine]) if (el.value.trim() && !(el === reason && el.value === "any")) next[el.name] = el.value.trim();
    if (filters.max_margin) next.max_margin = filters.max_margin;
    window.location.hash = hashOf(next, null, sort);
  });

  // ---- counts, queue, detail
  const reviewedCount = h("strong", { id: "review-reviewed-count" });
  const remainingCount = h("strong", { id: "review-remaining-count" });
  const totalText = h("span", { id: "review-total" });
  const countsLine = h("p", { id: "review-counts" }, "reviewed ", reviewedCount, " · remaining ", remainingCount, " · ", totalText);
  const agreementText = h("p", { id: "review-agreement", dataset: { percent: figures.percent === null ? "" : String(figures.percent) } }, agreementLine(figures));
  const position = h("span", { id: "review-position", class: "muted" });
  const prev = h("button", { type: "button", id: "review-prev", title: "previous pair (k)" }, "← previous (k)");
  const next = h("button", { type: "button", id: "review-next", title: "next pair (j)" }, "next (j) →");
  const detail = h("div", { id: "review-detail" });
  const body = h("tbody", {});
  const headers = COLUMNS.map((c) => {
    const button = h("button", { type: "button", class: "sort", dataset: { key: c.key } }, c.label);
    button.addEventListener("click", () => {
      sort = sort && sort.key === c.key ? { key: c.key, descending: !sort.descending } : { key: c.key, descending: ["priority", "margin"].includes(c.key) ? c.key === "priority" : false };
      history.replaceState(null, "", hashOf(filters, current, sort));
      draw();
    });
    return h("th", { scope: "col", dataset: { key: c.key } }, button);
  });
  const queue = h("table", { id: "review-queue", class: "queue" },
    h("caption", { class: "sr-only" }, "Pairs to review, most urgent first unless sorted by a column"),
    h("thead", {}, h("tr", {}, headers)), body);
  const empty = h("p", { id: "review-empty", class: "muted" }, "Nothing to review with these filters.");
  const layout = h("div", { class: "review-layout" },
    h("div", { class: "queue-wrap" }, queue),
    h("div", { class: "review-main" }, h("div", { class: "toolbar" }, prev, next, position), detail));

  function drawCounts() {
    reviewedCount.textContent = String(counts.reviewed);
    remainingCount.textContent = String(counts.remaining);
    totalText.textContent = `${counts.total} in the queue${truncated ? ` (the first ${items.length} listed)` : ""}`;
  }

  function row(item, i) {
    const tr = h("tr", {
      tabindex: 0,
      "aria-current": item.pair_id === current ? "true" : null,
      "aria-label": `pair ${shortId(item.pair_id)}, task ${item.task_key}, ${item.reviewed ? "reviewed" : "to review"}${item.claimed_by ? `, claimed by ${item.claimed_by}` : ""}`,
      dataset: { pairId: item.pair_id, index: String(i), reviewed: item.reviewed ? "1" : "0", priority: String(item.priority), claimed: item.claimed_key || "", disputed: item.disputed ? "1" : "0" },
      class: [item.reviewed ? "reviewed" : "", item.pair_id === current ? "current" : ""].filter(Boolean).join(" ") || null,
      onclick: () => go(i),
      onkeydown: (event) => { if (event.key === "Enter" || event.key === " ") { event.preventDefault(); go(i); } },
    },
    h("td", {}, String(item.rank)),
    h("td", {}, h("code", {}, shortId(item.pair_id))),
    h("td", {}, item.run_id ? `${shortId(item.run_id)} · it ${item.iteration}` : "trace"),
    h("td", { class: "task" }, item.task_key),
    h("td", { class: "reasons" }, item.reasons.map((r) => h("span", { class: `tag reason ${r}` }, REASON_TEXT[r] || r))),
    h("td", {}, `${item.critic_index} / ${fmt(item.oracle_index)}`),
    h("td", {}, fmt(item.margin, 2)),
    h("td", { class: "priority" }, fmt(item.priority, 2)),
    h("td", { class: "mark" }, item.reviewed ? (item.accepts && !item.corrections ? "✓ accepted" : "✓") : ""),
    h("td", { class: `agreement${item.disputed ? " disputed" : ""}` }, item.reviewers ? item.agreement : ""),
    h("td", { class: "claimed" }, item.claimed_key ? (item.claimed_key === myKeyId() ? "you" : item.claimed_by) : ""));
    return tr;
  }

  function draw() {
    view = items.slice();
    if (sort) {
      const column = COLUMNS.find((c) => c.key === sort.key);
      view.sort((a, b) => compare(column.value(a), column.value(b)) * (sort.descending ? -1 : 1) || compare(a.rank, b.rank));
    }
    for (const th of headers) {
      th.setAttribute("aria-sort", sort && th.dataset.key === sort.key ? (sort.descending ? "descending" : "ascending") : (!sort && th.dataset.key === "rank" ? "ascending" : "none"));
    }
    mount(body, view.map(row));
    drawCounts();
    layout.hidden = !items.length;
    empty.hidden = Boolean(items.length);
    const at = view.findIndex((item) => item.pair_id === current);
    position.textContent = at >= 0 ? `${at + 1} of ${view.length}` : "";
    prev.disabled = at <= 0;
    next.disabled = at < 0 || at === view.length - 1;
  }

  let token = 0;
  async function go(index) {
    if (!view.length) return;
    const at = Math.max(0, Math.min(view.length - 1, index));
    const item = view[at];
    current = item.pair_id;
    draw();
    body.children[at].scrollIntoView({ block: "nearest" });
    history.replaceState(null, "", hashOf(filters, item.pair_id, sort));
    detail.dataset.pairId = item.pair_id;
    const mine = ++token;
    mount(detail, h("p", { class: "muted" }, "Loading the pair…"));
    const target = h("div", {});
    try {
      await pair.render(target, [item.pair_id], null, {
        onReviewed: (kind) => reviewedOne(item, kind),
        onChanged: () => refresh(),
        onCorrected: (done) => announce(done.status === "respliced"
          ? `Pair ${shortId(item.pair_id)} re-spliced at t'=${done.new_transition_index}.`
          : `Pair ${shortId(item.pair_id)}: correction rejected: ${done.reason}`),
      });
    } catch (err) {
      mount(target, h("p", { class: "error" }, String(err.message || err)));
    }
    if (mine === token) {
      mount(detail, target);
      detail.dataset.shown = item.pair_id;
      detailEl = target;
    }
  }
  let detailEl = null;

  /** The current pair was accepted or corrected: count it, then move to the next pair still to review. */
  function reviewedOne(shown, kind) {
    // the live refresh may have replaced the queue's items since the pair was opened: use the current one
    const item = items.find((x) => x.pair_id === shown.pair_id) || shown;
    if (!item.reviewed) {
      item.reviewed = true;
      counts.reviewed += 1;
      counts.remaining -= 1;
    }
    if (kind === "accepted") item.accepts = (item.accepts || 0) + 1;
    else item.corrections = (item.corrections || 0) + 1;
    const at = view.findIndex((x) => x.pair_id === item.pair_id);
    const following = view.slice(at + 1).concat(view.slice(0, Math.max(at, 0)))
      .find((x) => !x.reviewed && !theirs(x) && x.pair_id !== item.pair_id);
    announce(`Pair ${shortId(item.pair_id)} ${kind}. ${counts.remaining} remaining.`);
    if (following) go(view.indexOf(following));
    else {
      draw();
      mount(detail, h("p", { id: "review-done", class: "ok" }, "Every pair in this queue is reviewed."));
      detail.dataset.shown = "";
    }
  }

  // ---- live: the queue and its counts follow the API
  async function refresh() {
    const [fresh, agreed] = await Promise.all([loadQueue(filters), get("/v1/review/agreement")]);
    agreementText.textContent = agreementLine(agreed);
    agreementText.dataset.percent = agreed.percent === null ? "" : String(agreed.percent);
    const known = new Map(items.map((item) => [item.pair_id, item]));
    const added = fresh.items.filter((item) => !known.has(item.pair_id)).length;
    items = fresh.items;
    counts = fresh.counts;
    truncated = fresh.truncated;
    draw();
    if (added) announce(`${added} new pair(s) in the review queue.`);
    if (!detail.dataset.shown && current === null && items.length) go(0);
  }
  const stop = every(POLL_MS, refresh);

  prev.addEventListener("click", () => go(view.findIndex((x) => x.pair_id === current) - 1));
  next.addEventListener("click", () => go(view.findIndex((x) => x.pair_id === current) + 1));
  const onKey = (event) => {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    const tag = (event.target && event.target.tagName) || "";
    if (["INPUT", "TEXTAREA", "SELECT"].includes(tag) || (event.target && event.target.isContentEditable)) return;
    const at = view.findIndex((x) => x.pair_id === current);
    if (event.key === "j") { event.preventDefault(); go(at + 1); }
    else if (event.key === "k") { event.preventDefault(); go(at - 1); }
    else if (event.key === "a" && detailEl && detailEl.review) { event.preventDefault(); detailEl.review.accept(); }
    else if (event.key === "s" && detailEl && detailEl.review) { event.preventDefault(); detailEl.review.submit(); }
  };
  document.addEventListener("keydown", onKey);

  mount(main,
    h("h1", {}, "Review queue"),
    h("p", { class: "muted" }, "Pairs whose first error a human should check, most urgent first: the critic's t' differs from the environment oracle's first error, the critic fell back (nothing judged bad), a verdict was uncertain, or a verdict's two best labels scored close together. Click a bad step to pick t', then Re-splice (s); or Accept t' (a) when the critic was right. j / k: next / previous."),
    form,
    countsLine,
    agreementText,
    empty,
    layout,
  );
  draw();
  if (items.length) {
    const at = view.findIndex((x) => x.pair_id === current);
    go(at >= 0 ? at : Math.max(view.findIndex((x) => !theirs(x)), 0)); // first: one nobody else holds
  }
  return () => {
    stop();
    document.removeEventListener("keydown", onKey);
  };
}
