// Owns the Traces pages: production traces filtered by task key, outcome and critic result (the
// trace's status; server-side), sorted and filtered in the page and selected to build a dataset;
// and one trace with its steps, its critique (per-step verdicts, t') and its sample, with the
// correction form when the trace has a pair (a finished correction redraws the trace from the API).

import { get, may, post } from "../api.js";
import { fmt, h, link, needsScope, shortId, mount } from "../dom.js";
import { announce, every, POLL_MS } from "../live.js";
import { dataTable, dateColumn } from "../table.js";
import { correctionForm, correctionsTable, verdictCell, waitForCorrection } from "./pair.js";

const STATUSES = ["", "waiting_for_outcome", "ingested", "critiqued", "no_error_found", "unpaired", "revised", "rejected"];
const TRACE_COLUMNS = [
  { key: "trace", label: "trace", value: (t) => t.trace_id, cell: (t) => link(`#/traces/${t.trace_id}`, shortId(t.trace_id)) },
  { key: "task", label: "task key", value: (t) => t.task_key },
  { key: "outcome", label: "outcome", value: (t) => t.outcome },
  { key: "status", label: "critic result", value: (t) => t.status, class: (t) => `status ${t.status}`, title: (t) => t.reason || "" },
  { key: "t", label: "t'", value: (t) => t.transition_index, cell: (t) => fmt(t.transition_index) },
  { key: "format", label: "format", value: (t) => t.source_format },
  dateColumn("created_at", "created"),
];

export async function list(main, _params, query) {
  const taskKey = h("input", { id: "f-task", name: "task_key", "aria-label": "task key", value: query.get("task_key") || "", placeholder: "task key" });
  const outcome = h("select", { id: "f-outcome", name: "outcome", "aria-label": "outcome" }, ["", "success", "failure", "unknown"].map((v) =>
    h("option", { value: v, selected: v === (query.get("outcome") || "") }, v || "any outcome")));
  const status = h("select", { id: "f-status", name: "status", "aria-label": "critic result" }, STATUSES.map((v) =>
    h("option", { value: v, selected: v === (query.get("status") || "") }, v || "any critic result")));
  const form = h("form", { id: "trace-filters", class: "toolbar" }, taskKey, outcome, status, h("button", { type: "submit" }, "Filter"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const q = new URLSearchParams();
    if (taskKey.value.trim()) q.set("task_key", taskKey.value.trim());
    if (outcome.value) q.set("outcome", outcome.value);
    if (status.value) q.set("status", status.value);
    window.location.hash = `#/traces?${q}`;
  });
  const params = { task_key: query.get("task_key"), outcome: query.get("outcome"), status: query.get("status"), limit: 200 };
  const page = await get("/v1/traces", params);
  const build = h("button", { type: "button", id: "dataset-from-traces", disabled: true }, "Build a dataset from the selected traces");
  const traceTable = dataTable(TRACE_COLUMNS, {
    id: "traces", rowKey: (t) => t.trace_id, status: (t) => t.status, select: true, empty: "No traces match.",
    rowAttrs: (t) => ({ dataset: { traceId: t.trace_id } }), sort: { key: "created_at", descending: true },
    onSelect: (rows) => {
      build.disabled = !rows.length;
      build.textContent = rows.length ? `Build a dataset from the ${rows.length} selected trace(s)` : "Build a dataset from the selected traces";
    },
  });
  build.addEventListener("click", () => {
    const ids = traceTable.selected().map((t) => t.trace_id);
    window.location.hash = `#/datasets?sources=traces&trace_ids=${ids.map(encodeURIComponent).join(",")}`;
  });
  traceTable.update(page.items);
  const more = h("p", { class: "muted", hidden: !page.next_cursor }, "Showing the newest 200.");
  mount(main,
    h("h1", {}, "Traces"),
    form,
    h("p", { class: "toolbar" }, build),
    traceTable.el,
    more,
  );
  // live: new traces and status changes (critiqued, revised, ...) appear without a reload
  let seen = new Set(page.items.map((t) => t.trace_id));
  return every(POLL_MS, async () => {
    const fresh = await get("/v1/traces", params);
    traceTable.update(fresh.items);
    more.hidden = !fresh.next_cursor;
    const added = fresh.items.filter((t) => !seen.has(t.trace_id)).length;
    seen = new Set(fresh.items.map((t) => t.trace_id));
    if (added) announce(`${added} new trace(s).`);
  });
}

/**
 * One trace into `main`. After a correction through its form the page draws itself again from the
 * API (the trace's new t', its re-spliced sample, the corrections table), keeping the correction's
 * outcome (`outcome`: the finished correction) on top of the form, so nothing stays stale until a reload.
 */
export async function detail(main, [traceId], query = null, outcome = null) {
  const trace = await get(`/v1/traces/${traceId}`);
  const critique = trace.critique;
  const verdicts = new Map((critique ? critique.verdicts : []).map((v) => [v.step_index, v]));
  const steps = trace.trajectory ? trace.trajectory.steps : [];
  const t = trace.transition_index;
  const pairDetail = trace.pair_id ? await get(`/v1/pairs/${trace.pair_id}`) : null;
  const traj = trace.trajectory || {};
  mount(main,
    h("h1", {}, "Trace ", h("code", {}, traceId), " ", h("span", { class: `status ${trace.status}` }, trace.status)),
    h("p", { class: "muted", id: "trace-facts" }, `task key ${trace.task_key} · outcome ${trace.outcome} · ${trace.source_format}`,
      trace.transition_index !== null && trace.transition_index !== undefined ? ` · first error at step ${trace.transition_index}` : "",
      trace.external_id ? ` · external id ${trace.external_id}` : "",
      pairDetail ? [" · ", link(`#/pairs/${pairDetail.pair_id}`, "pair diff")] : null,
      trace.sample ? [" · ", link(`#/samples/${trace.sample.sample_id}`, "sample")] : null),
    trace.reason ? h("p", { class: "error", id: "trace-reason" }, trace.reason) : null,
    h("h2", {}, "Messages before the first step"),
    h("ol", { id: "trace-context", class: "messages", start: 0 },
      traj.instruction ? h("li", { class: "message system", dataset: { role: "system" } }, h("div", { class: "meta" }, h("span", { class: "role" }, "system")), h("pre", {}, traj.instruction)) : null,
      traj.task ? h("li", { class: "message user", dataset: { role: "user" } }, h("div", { class: "meta" }, h("span", { class: "role" }, "user (task)")), h("pre", {}, traj.task)) : null),
    traj.instruction || traj.task ? null : h("p", { class: "muted" }, "The trace has no system or task message."),
    h("h2", {}, "Critique"),
    h("p", { id: "critique" }, critique ? `${critique.strategy}: first error at step ${fmt(critique.transition_index)}${critique.model_version ? ` (model ${critique.model_version})` : ""}` : "not critiqued"),
    h("table", { id: "trace-steps", class: "diff" },
      h("thead", {}, h("tr", {}, h("th", {}, "step"), h("th", {}, "thought · action · observation"), h("th", {}, "critic verdict"))),
      h("tbody", {}, steps.map((step, i) => {
        const v = verdicts.get(i);
        return h("tr", { class: i === t ? "transition" : "", dataset: { step: String(i) } },
          h("td", { class: "step" }, String(i), i === t ? h("div", {}, h("span", { class: "tag transition" }, "t'")) : null),
          h("td", {}, step.thought ? h("div", { class: "thought" }, step.thought) : null,
            h("div", { class: "action" }, step.action || (step.tool_calls || []).map((c) => `${c.name}(${c.arguments})`).join("; ")),
            h("div", { class: "observation" }, step.observation)),
          verdictCell(v));
      }))),
    h("h2", {}, "Sample"),
    trace.sample ? h("p", { id: "trace-sample" }, link(`#/samples/${trace.sample.sample_id}`, `sample ${shortId(trace.sample.sample_id)}`),
      ` · ${trace.sample.messages.length} messages${(trace.sample.provenance || {}).origin ? ` · ${trace.sample.provenance.origin}` : ""}`) : h("p", { class: "muted" }, "none"),
    outcome ? h("p", { id: "trace-correction-result", class: outcome.status === "respliced" ? "ok" : "error", dataset: { status: outcome.status } },
      outcome.status === "respliced" ? `Re-spliced at t'=${outcome.new_transition_index}.` : `Rejected: ${outcome.reason}`) : null,
    pairDetail && pairDetail.critic && !may("review") ? needsScope("review", "correct this trace's first error") : null,
    pairDetail && pairDetail.critic && may("review") ? correctionForm(pairDetail, async (body, status) => {
      const accepted = await post(`/v1/traces/${traceId}/corrections`, body);
      const done = await waitForCorrection(pairDetail.pair_id, accepted.correction_id, status);
      status.className = done.status === "respliced" ? "ok" : "error";
      status.textContent = done.status === "respliced" ? `Re-spliced at t'=${done.new_transition_index}.` : `Rejected: ${done.reason}`;
      if (window.location.hash.startsWith(`#/traces/${traceId}`)) await detail(main, [traceId], query, done); // still on this page
    }) : null,
    pairDetail && pairDetail.corrections.length ? correctionsTable(pairDetail.corrections) : null,
  );
}
