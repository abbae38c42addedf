// Owns the Datasets page: the project's named trace datasets with download buttons per format.

import { all, download } from "../api.js";
import { h, table, mount } from "../dom.js";

// chat samples, then DPO / PRM records from the pairs behind the revision samples, then tokenized
// Parquet (the project's newest run's model) and a zip of an hf datasets folder (docs/datasets.md)
const FORMATS = [["openai", "jsonl"], ["sharegpt", "jsonl"], ["parquet", "parquet"], ["dpo", "jsonl"], ["prm", "jsonl"],
  ["tokenized", "parquet"], ["hf", "zip"]];

export async function list(main) {
  const items = await all("/v1/datasets", {}, 500);
  mount(main,
    h("h1", {}, "Datasets"),
    h("p", { class: "muted" }, "Named datasets built with POST /v1/datasets (iteration datasets are on each run's page)."),
    table(["name", "version", "samples", "revisions", "goods", "created", "download"], items.map((d) => [
      d.name, String(d.version), String(d.samples), String(d.revisions), String(d.goods), new Date(d.created_at).toLocaleString(),
      h("span", {}, FORMATS.map(([format, ext]) => h("button", {
        type: "button", class: "download", dataset: { format },
        onclick: () => download(`/v1/datasets/${d.dataset_id}/download`, { format }, `${d.name}-v${d.version}.${ext}`),
      }, format))),
    ]), { id: "datasets" }),
  );
}
