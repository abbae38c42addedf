// Owns the Pair diff: the bad and the good path aligned from the divergence node, the first
// differing step highlighted, the critic's per-step verdicts (label and label scores) beside the bad
// path, the oracle's first error where the environment has one, the chosen transition point t', and
// the correction form (review scope): move t' or rewrite the reflection, then watch the re-splice;
// once re-spliced, the confirmation stays and the sample before and after are shown side by side;
// or accept t' as it is (the critic was right). A click on a bad step picks t'. With more than one
// reviewer: who holds the pair (claim / release, assign for an admin or the holder), each reviewer's
// standing verdict and how far they agree ("2 of 3 agree on step 4"), and "Undo my last review" (the
// splice worker restores the sample before an undone correction). `render` draws into any element
// (the Review page shows a pair in its detail pane and moves on once it is reviewed).

import { ApiError, get, may, myKeyId, post } from "../api.js";
import { fmt, h, link, needsScope, shortId, table, mount } from "../dom.js";
import { announce } from "../live.js";
import { whyTag } from "../reasons.js";

function stepCell(step, extra = {}) {
  if (!step) return h("td", { class: "empty" }, "—");
  return h("td", extra,
    step.thought ? h("div", { class: "thought" }, `Thought: ${step.thought}`) : null,
    h("div", { class: "action" }, `Action: ${step.action}`),
    h("div", { class: "observation" }, step.observation));
}

/** The critic's verdict on a step: its label, the label scores (mean log-probability per label token,
 * labelled as such), and its reason. */
export function verdictCell(verdict) {
  if (!verdict) return h("td", { class: "verdict none" }, "");
  const scores = Object.entries(verdict.scores || {}).map(([label, value]) => `${label} ${fmt(value, 2)}`).join(" · ");
  return h("td", { class: `verdict ${verdict.label}`, dataset: { label: verdict.label } },
    h("strong", {}, verdict.label),
    scores ? h("div", { class: "scores", title: "mean log-probability of each label's tokens (higher = more likely)" }, `log-prob: ${scores}`) : null,
    verdict.reason ? h("div", { class: "muted" }, verdict.reason) : null);
}

/**
 * The correction form: t' (also picked by clicking a bad step of the diff), a new reflection, a note,
 * "Re-splice" (`submit(body, status)`) and, with `accept` given, "Accept t'" (`accept(body, status)`:
 * the reviewer confirms the current t', nothing is re-spliced).
 */
export function correctionForm(detail, submit, accept = null) {
  const first = detail.shared_steps;
  const last = detail.bad.steps.length - 1;
  const select = h("select", { id: "correct-t", name: "transition_index" });
  for (let i = first; i <= last; i++) {
    select.append(h("option", { value: String(i), selected: i === detail.transition_index }, `step ${i}: ${detail.bad.steps[i].action}`));
  }
  const reflection = h("textarea", { id: "correct-reflection", rows: 2, cols: 70, placeholder: "keep the reflection chosen for the wrong action" });
  reflection.value = "";
  const note = h("input", { id: "correct-note", size: 50, placeholder: "why (optional)" });
  const status = h("p", { id: "correct-status", class: "muted", role: "status", "aria-live": "polite" });
  const acceptButton = accept
    ? h("button", { type: "button", id: "accept-submit", title: "the critic was right: mark the pair reviewed (a)" }, `Accept t'=${fmt(detail.transition_index)} (a)`)
    : null;
  const form = h("form", { id: "correct-form", class: "card" },
    h("h2", {}, "Review this pair"),
    h("p", { class: "muted" }, `Current t' = ${fmt(detail.transition_index)}; reflection: ${detail.reflection || "(unknown)"}. Click a bad step in the table above to pick t'.`),
    h("label", {}, "First error t' ", select), h("br"),
    h("label", {}, "New reflection ", reflection), h("br"),
    h("label", {}, "Note ", note), " ",
    h("button", { type: "submit", id: "correct-submit", title: "re-splice the sample at the chosen t' (s)" }, "Re-splice"),
    acceptButton ? [" ", acceptButton] : null,
    status);
  const failed = (err) => {
    status.className = "error";
    status.textContent = err instanceof ApiError && err.status === 403
      ? "This key lacks the review scope (403): reviews need a key with scope review."
      : err.message;
  };
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const body = { transition_index: Number(select.value) };
    if (reflection.value.trim()) body.reflection = reflection.value.trim();
    if (note.value.trim()) body.note = note.value.trim();
    status.className = "muted";
    status.textContent = "Sending…";
    try {
      await submit(body, status);
    } catch (err) {
      failed(err);
    }
  });
  if (acceptButton) {
    acceptButton.addEventListener("click", async () => {
      const body = note.value.trim() ? { note: note.value.trim() } : {};
      status.className = "muted";
      status.textContent = "Sending…";
      acceptButton.disabled = true;
      try {
        await accept(body, status);
      } catch (err) {
        failed(err);
      } finally {
        acceptButton.disabled = false;
      }
    });
  }
  /** Pick t' (from a click on the diff): the select follows. */
  form.pick = (step) => {
    if (step < first || step > last) return false;
    select.value = String(step);
    select.dispatchEvent(new Event("change"));
    return true;
  };
  form.select = select;
  return form;
}

export function acceptsList(accepts) {
  return h("ul", { id: "accepts" }, accepts.map((a) => h("li", { dataset: { acceptanceId: a.acceptance_id } },
    `${new Date(a.accepted_at).toLocaleString()} · ${a.reviewer} accepted t'=${a.transition_index}`, a.note ? ` · ${a.note}` : "", a.undone ? " (undone)" : "")));
}

/** Poll the pair until `correctionId` is no longer pending; returns its final view. */
export async function waitForCorrection(pairId, correctionId, status, timeoutMs = 120000) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const detail = await get(`/v1/pairs/${pairId}`);
    const found = detail.corrections.find((c) => c.correction_id === correctionId);
    if (found && found.status !== "pending") return found;
    status.textContent = "Re-splicing…";
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
  throw new Error("the splice worker did not answer within 2 minutes (is `agentr worker splice` running?)");
}

export function correctionsTable(corrections) {
  return table(["when", "who", "t' old → new", "reflection", "status"], corrections.map((c) => [
    new Date(c.corrected_at).toLocaleString(), c.reviewer,
    `${fmt(c.old_transition_index)} → ${c.new_transition_index}`,
    c.new_reflection || "(template)", c.status + (c.reason ? `: ${c.reason}` : "") + (c.undone ? " (undone)" : ""),
  ]), { id: "corrections" });
}

/** A sample's messages with their loss weights and why; those that differ from `other`'s are marked. */
function sampleMessages(sample, other, id) {
  const against = other ? other.messages : [];
  return h("ol", { id, class: "messages compact", start: 0 }, sample.messages.map((m, i) => {
    const was = against[i];
    const changed = other && (!was || was.content !== m.content || was.weight !== m.weight || was.role !== m.role);
    return h("li", { class: `message ${m.weight ? "trained" : "context"}${changed ? " changed" : ""}`, dataset: { index: String(i), weight: String(m.weight), changed: changed ? "1" : "0" } },
      h("div", { class: "meta" }, h("span", { class: "role" }, m.role), " ", h("span", { class: `weight w${m.weight}` }, `weight ${m.weight}`), " ", whyTag(m.why), changed ? h("span", { class: "tag human" }, "changed") : null),
      h("pre", {}, m.content));
  }));
}

/** What a finished correction did: the confirmation, and the sample before and after it. */
function correctionResult(outcome, after) {
  const { done, before } = outcome;
  return h("section", { id: "correction-result", class: "card wide" },
    h("p", { id: "correct-result-status", class: "ok" }, `Re-spliced at t'=${done.new_transition_index}.`),
    h("div", { id: "sample-compare", class: "two-col" },
      h("section", { id: "sample-before" }, h("h3", {}, "Before"),
        before ? sampleMessages(before, null, "sample-before-messages") : h("p", { class: "muted" }, "The pair had no sample before.")),
      h("section", { id: "sample-after" }, h("h3", {}, "After (human-corrected)"),
        after ? sampleMessages(after, before, "sample-after-messages") : h("p", { class: "muted" }, "No sample."))));
}

/** Who holds the pair, with Claim / Release / Assign as the key may; `changed()` redraws. */
function claimBar(detail, changed) {
  const me = myKeyId();
  const claim = detail.claim;
  const mine = claim && me && claim.reviewer_key === me;
  const status = h("span", { id: "claim-status", role: "status", "aria-live": "polite" });
  const say = (err) => { status.className = "error"; status.textContent = err.message; };
  const act = (path, body) => async () => {
    try {
      await post(`/v1/pairs/${detail.pair_id}/${path}`, body ? body() : {});
      await changed();
    } catch (err) {
      say(err);
    }
  };
  const text = claim
    ? (mine ? "Claimed by you" : `Claimed by ${claim.reviewer}`) + (claim.by && claim.by !== claim.reviewer ? ` (assigned by ${claim.by})` : "")
    : "Not claimed";
  const controls = [];
  if (may("review")) {
    if (!claim) controls.push(h("button", { type: "button", id: "claim-pair", onclick: act("claim") }, "Claim"));
    if (claim && (mine || may("admin"))) controls.push(h("button", { type: "button", id: "release-pair", onclick: act("release") }, "Release"));
    if (mine || may("admin")) {
      // the project's reviewers by name (GET /v1/reviewers), the current holder left out
      const key = h("select", { id: "assign-key", "aria-label": "reviewer to assign the pair to" },
        h("option", { value: "" }, "assign to…"));
      const assign = h("button", { type: "button", id: "assign-pair", disabled: true, onclick: act("assign", () => ({ key_id: key.value })) }, "Assign");
      key.addEventListener("change", () => { assign.disabled = !key.value; });
      get("/v1/reviewers").then((reviewers) => {
        for (const r of reviewers) {
          if (!claim || r.key_id !== claim.reviewer_key) key.append(h("option", { value: r.key_id }, r.key_id === me ? `${r.name} (you)` : r.name));
        }
      }).catch(say);
      controls.push(h("span", { class: "assign" }, key, " ", assign));
    }
  }
  return h("div", { id: "claim-bar", class: `toolbar claim${claim ? (mine ? " mine" : " theirs") : ""}`, dataset: { claimed: claim ? claim.reviewer_key : "" } },
    h("strong", { id: "claimed-by" }, text), " ", controls, " ", status);
}

/** Each reviewer's standing verdict and the agreement, with "Undo my last review" for the key. */
function verdictsBox(detail, changed) {
  const me = myKeyId();
  const verdicts = detail.verdicts || [];
  const mine = me ? verdicts.find((v) => v.reviewer_key === me) : null;
  const status = h("p", { id: "undo-status", class: "muted", role: "status", "aria-live": "polite" });
  const undo = mine && may("review") ? h("button", { type: "button", id: "undo-review", title: "take back your last correction or acceptance of this pair" }, `Undo my last review (${mine.kind} t'=${mine.transition_index})`) : null;
  if (undo) {
    undo.addEventListener("click", async () => {
      undo.disabled = true;
      try {
        const done = await post(`/v1/pairs/${detail.pair_id}/undo`, {});
        const what = done.resplice === "restore" ? " The splice worker restores the sample before it." : done.resplice === "withdraw" ? " The splice worker withdraws its sample." : "";
        announce(`Undid your ${done.target_kind} (t'=${done.transition_index}).${what}`);
        await changed();
      } catch (err) {
        status.className = "error";
        status.textContent = err.message;
        undo.disabled = false;
      }
    });
  }
  return h("section", { id: "verdicts", class: "card" },
    h("h2", {}, "Reviewers"),
    h("p", { id: "pair-agreement", class: detail.disputed ? "error" : "muted", dataset: { disputed: detail.disputed ? "1" : "0" } }, detail.agreement),
    verdicts.length ? h("ul", { id: "verdict-list" }, verdicts.map((v) => h("li", { dataset: { reviewerKey: v.reviewer_key } },
      `${v.reviewer}${v.reviewer_key === me ? " (you)" : ""}: ${v.kind === "acceptance" ? "accepted" : "corrected to"} t'=${v.transition_index}`))) : null,
    undo, status);
}

function divergenceText(shared, nodeId) {
  const node = nodeId ? ` (node ${shortId(nodeId)})` : "";
  if (shared <= 0) return `at the first step${node}: the paths share no step`;
  return `after step ${shared - 1}${node}; the paths first differ at step ${shared}`;
}

/**
 * The pair diff into `main`. `options.onCorrected(done)` is called once a correction is re-spliced or
 * rejected; `outcome` ({done, before}) is the correction this render follows (its result is shown).
 */
export async function render(main, [pairId], _query = null, options = {}, outcome = null) {
  const detail = await get(`/v1/pairs/${pairId}`);
  const after = outcome && detail.sample_id ? (await get(`/v1/samples/${detail.sample_id}`)).sample : null;
  const bad = detail.bad.steps;
  const good = detail.good.steps;
  const shared = detail.shared_steps;
  const critic = detail.critic;
  const verdicts = new Map((critic ? critic.verdicts : []).map((v) => [v.step_index, v]));
  const t = detail.transition_index;
  const oracle = critic ? critic.oracle_index : null;
  const rows = [];
  for (let i = shared; i < Math.max(bad.length, good.length); i++) {
    const marks = [];
    if (i === shared) marks.push(h("span", { class: "tag diverge" }, "first difference"));
    if (i === t) marks.push(h("span", { class: "tag transition" }, "t' (sample)"));
    if (critic && i === critic.transition_index && i !== t) marks.push(h("span", { class: "tag critic" }, "critic t'"));
    if (oracle !== null && i === oracle) marks.push(h("span", { class: "tag oracle" }, "oracle first error"));
    const classes = [i === shared ? "first-diff" : "", i === t ? "transition" : "", i === oracle ? "oracle" : "", t !== null && i > t ? "after-t" : ""].filter(Boolean).join(" ");
    const pickable = i < bad.length && may("review"); // a key that may not review picks nothing
    rows.push(h("tr", { class: `${classes}${pickable && critic ? " pickable" : ""}`, dataset: { step: String(i) }, title: pickable && critic ? `click: pick t' = ${i}` : null },
      h("td", { class: "step" }, String(i), h("div", {}, marks)),
      stepCell(bad[i], { class: "bad" }),
      verdictCell(verdicts.get(i)),
      stepCell(good[i], { class: "good" })));
  }
  const sharedRows = bad.slice(0, shared).map((step, i) => h("tr", { dataset: { step: String(i) } }, h("td", { class: "step" }, String(i)), stepCell(step)));
  const accepts = detail.accepts || [];
  const history = h("div", { id: "corrections-wrap" },
    h("h2", {}, `Corrections (${detail.corrections.length})`),
    detail.corrections.length ? correctionsTable(detail.corrections) : h("p", { class: "muted" }, "None yet."),
    accepts.length ? [h("h2", {}, `Accepted (${accepts.length})`), acceptsList(accepts)] : null);
  const redraw = async () => {
    await render(main, [pairId], _query, options, null);
    if (options.onChanged) options.onChanged();
  };
  const form = critic && may("review") ? correctionForm(detail, async (body, status) => {
    const before = detail.sample_id ? (await get(`/v1/samples/${detail.sample_id}`)).sample : null;
    const accepted = await post(`/v1/pairs/${pairId}/corrections`, body);
    if (options.onReviewed) {
      // the review queue moves on at once; the re-splice is followed in the background and announced
      status.className = "ok";
      status.textContent = `Correction sent (t'=${accepted.new_transition_index}); re-splicing.`;
      options.onReviewed("corrected", accepted);
      waitForCorrection(pairId, accepted.correction_id, status).then((done) => {
        if (options.onCorrected) options.onCorrected(done);
      }).catch((err) => announce(`Pair ${shortId(pairId)}: ${err.message}`));
      return;
    }
    const done = await waitForCorrection(pairId, accepted.correction_id, status);
    status.className = done.status === "respliced" ? "ok" : "error";
    status.textContent = done.status === "respliced" ? `Re-spliced at t'=${done.new_transition_index}.` : `Rejected: ${done.reason}`;
    announce(status.textContent);
    if (done.status === "respliced") await render(main, [pairId], _query, options, { done, before });
    if (options.onCorrected) options.onCorrected(done);
  }, async (body, status) => {
    const accepted = await post(`/v1/pairs/${pairId}/accept`, body);
    status.className = "ok";
    status.textContent = `Accepted t'=${accepted.transition_index}.`;
    announce(`Pair ${shortId(pairId)}: accepted t'=${accepted.transition_index}.`);
    if (options.onReviewed) options.onReviewed("accepted", accepted);
    else await render(main, [pairId], _query, options, outcome);
  }) : null;
  const diff = h("table", { id: "pair-diff", class: "diff" },
    h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "step"), h("th", { scope: "col" }, `bad path (reward ${fmt(detail.bad.reward)})`), h("th", { scope: "col" }, "critic verdict"), h("th", { scope: "col" }, `good path (reward ${fmt(detail.good.reward)})`))),
    h("tbody", {}, rows));
  if (form) {
    diff.addEventListener("click", (event) => {
      const row = event.target.closest("tr.pickable");
      if (!row || !form.pick(Number(row.dataset.step))) return;
      for (const r of diff.querySelectorAll("tr.picked")) r.classList.remove("picked");
      row.classList.add("picked");
      main.dataset.picked = row.dataset.step;
    });
  }
  main.review = form ? { accept: () => form.querySelector("#accept-submit")?.click(), submit: () => form.requestSubmit() } : null;

  mount(main,
    h("h1", {}, "Pair ", h("code", {}, pairId), " ", h("span", { class: `status ${detail.status}` }, detail.status)),
    h("p", { class: "muted" },
      detail.run_id ? link(`#/runs/${detail.run_id}`, `run ${shortId(detail.run_id)}`) : `trace pair (${detail.source})`,
      detail.tree_id ? [" · ", link(`#/trees/${detail.tree_id}?pair=${pairId}`, `tree ${shortId(detail.tree_id)}`)] : null,
      detail.bad_leaf_id && detail.source === "trace" ? [" · ", link(`#/traces/${detail.bad_leaf_id}`, "failed trace")] : null,
      ` · task ${detail.task_key}`,
      detail.sample_id ? [" · ", link(`#/samples/${detail.sample_id}`, `sample ${shortId(detail.sample_id)}`), detail.sample_origin ? ` (${detail.sample_origin})` : ""] : null),
    h("dl", { class: "facts", id: "pair-facts" },
      h("dt", {}, "divergence"), h("dd", { id: "divergence", dataset: { step: String(shared), node: detail.divergence_node_id || "" } },
        divergenceText(shared, detail.divergence_node_id)),
      h("dt", {}, "critic"), h("dd", {}, critic ? `${critic.strategy}, t'=${critic.transition_index}${critic.fallback ? " (fallback: nothing judged bad, = Direct-Revision)" : ""}${critic.model_version ? `, model ${critic.model_version}` : ""}` : "not judged yet"),
      h("dt", {}, "transition point"), h("dd", { id: "transition", dataset: { step: t === null ? "" : String(t) } }, t === null ? "–" : `t' = ${t}`),
      h("dt", {}, "oracle first error"), h("dd", { id: "oracle" }, oracle === null ? "none (no oracle, or no error)" : `step ${oracle}`),
      h("dt", {}, "rewards"), h("dd", {}, `bad ${fmt(detail.bad.reward)} · good ${fmt(detail.good.reward)}`),
      detail.reason ? [h("dt", {}, "reason"), h("dd", { class: "error" }, detail.reason)] : null),
    h("details", { id: "shared-prefix" }, h("summary", {}, `Shared prefix (${shared} step${shared === 1 ? "" : "s"})`),
      h("p", { class: "observation" }, detail.bad.task),
      h("table", {}, h("tbody", {}, sharedRows))),
    diff,
    outcome ? correctionResult(outcome, after) : null,
    claimBar(detail, redraw),
    form || (critic ? needsScope("review", "correct or accept this pair's t'") : null),
    verdictsBox(detail, redraw),
    history,
  );
}
