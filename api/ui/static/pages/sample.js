// Owns the Sample inspector: the sample's messages with their loss weights, why each has its weight
// (the reason the code that built the sample recorded, `why`), and provenance, and the same sample rendered through the target model's chat template by the trainer's tokenizer code
// (GET /v1/samples/{id}/tokens), every token coloured by whether it carries loss, its tooltip naming
// the assistant message it belongs to and that message's reason; a warning when the
// sample calls tools and the model's template drops the calls (template_drops_tool_calls).

import { ApiError, get } from "../api.js";
import { fmt, h, link, mount, shortId } from "../dom.js";
import { reasonLabel, whyTag } from "../reasons.js";

function messages(sample, meanings) {
  return h("ol", { id: "messages", class: "messages", start: 0 }, sample.messages.map((m, i) =>
    h("li", { class: `message ${m.role} ${m.weight ? "trained" : "context"}`, dataset: { index: String(i), weight: String(m.weight), why: m.why || "" } },
      h("div", { class: "meta" }, h("span", { class: "role" }, m.role), " ",
        h("span", { class: `weight w${m.weight}` }, `weight ${m.weight}`), " ", whyTag(m.why, meanings)),
      h("pre", {}, m.content),
      (m.tool_calls || []).length ? h("pre", { class: "tool-calls" }, JSON.stringify(m.tool_calls, null, 1)) : null)));
}

async function tokens(sampleId, model, box) {
  mount(box, h("p", { class: "muted" }, "Rendering through the chat template…"));
  let data;
  try {
    data = await get(`/v1/samples/${sampleId}/tokens`, { model });
  } catch (err) {
    mount(box, h("p", { class: "error", id: "tokens-error" }, err instanceof ApiError ? err.message : String(err)));
    return;
  }
  const owner = (t) => (t.message === null || t.message === undefined ? "" : ` · message ${t.message}: ${reasonLabel(t.why)}`);
  const strip = h("div", { id: "tokens", class: "tokens" }, data.tokens.map((t, i) =>
    h("span", { class: `tok ${t.trained ? "trained" : "masked"}`, title: `#${i} id ${t.id}${t.trained ? " (loss)" : " (label -100)"}${owner(t)}`, dataset: { i: String(i), id: String(t.id), trained: t.trained ? "1" : "0", message: t.message === null || t.message === undefined ? "" : String(t.message), why: t.why || "" } }, t.text)));
  const dropped = data.template_drops_tool_calls
    ? h("p", { id: "tool-call-warning", class: "error", role: "alert" },
      h("strong", {}, "Tool calls are not trained: "), data.tool_call_problem || `the chat template of ${data.model} drops tool calls`)
    : null;
  mount(box,
    dropped,
    h("p", { id: "tokens-summary" },
      `${data.trained_tokens} of ${data.total_tokens} tokens carry loss · model ${data.model} · max_length ${data.max_length} · `,
      h("span", { class: "tok trained" }, "trained"), " ", h("span", { class: "tok masked" }, "masked (-100)")),
    strip);
}

/** The tree leaf a sample's path ends at (provenance `node_ids`: root -> leaf), when it has one. */
function leafLink(out, prov) {
  const treeId = out.tree_id || prov.tree_id;
  const nodes = Array.isArray(prov.node_ids) ? prov.node_ids : [];
  if (!treeId || !nodes.length) return null;
  const leaf = nodes[nodes.length - 1];
  return [" · ", h("a", { id: "leaf-link", href: `#/trees/${treeId}?node=${leaf}`, dataset: { node: leaf } }, `tree leaf ${shortId(leaf)}`)];
}

export async function render(main, [sampleId], query) {
  const out = await get(`/v1/samples/${sampleId}`);
  const sample = out.sample;
  const prov = sample.provenance || {};
  const box = h("div", { id: "tokens-box" });
  const modelInput = h("input", { id: "token-model", size: 60, placeholder: "default: the iteration's model, else the project's newest run's", value: query.get("model") || "" });
  mount(main,
    h("h1", {}, "Sample ", h("code", {}, sampleId), " ", h("span", { class: "tag" }, out.kind),
      prov.origin ? h("span", { class: "tag human", id: "origin" }, prov.origin) : null),
    h("p", { class: "muted" },
      // a run's sample names its run and iteration; a trace's has neither (its "iteration 0" means nothing)
      out.run_id ? [link(`#/runs/${out.run_id}`, `run ${shortId(out.run_id)}`), ` · iteration ${out.iteration}`] : h("span", { id: "sample-source" }, prov.trace_id ? "from a production trace (no run)" : "no run"),
      out.pair_id ? [" · ", link(`#/pairs/${out.pair_id}`, `pair ${shortId(out.pair_id)}`)] : null,
      prov.trace_id ? [" · ", link(`#/traces/${prov.trace_id}`, `trace ${shortId(prov.trace_id)}`)] : null,
      leafLink(out, prov),
      ` · reward ${fmt(sample.reward)} · verified ${fmt(out.verified)}`),
    h("details", {}, h("summary", {}, "Provenance"), h("pre", { id: "provenance" }, JSON.stringify(prov, null, 2))),
    h("div", { class: "two-col" },
      h("section", {}, h("h2", {}, "Messages, weights and why"), messages(sample, out.weight_reasons)),
      h("section", {}, h("h2", {}, "Chat template and loss mask"),
        h("form", { id: "token-form", onsubmit: (e) => { e.preventDefault(); tokens(sampleId, modelInput.value.trim() || undefined, box); } },
          h("label", {}, "model ", modelInput), " ", h("button", { type: "submit" }, "Render")),
        box)),
  );
  await tokens(sampleId, query.get("model") || undefined, box);
}
