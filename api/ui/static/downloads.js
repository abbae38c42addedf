// Owns the download buttons of every dataset the UI offers: the formats each download route serves
// (docs/datasets.md) and one button per format that fetches the file with the key (api.download).

import { download } from "./api.js";
import { h } from "./dom.js";

// chat samples, DPO / PRM records from the iteration's pairs and trees, then tokenized Parquet for
// the iteration's model and a zip of an hf datasets folder
export const ITERATION_FORMATS = [["openai", "jsonl"], ["sharegpt", "jsonl"], ["parquet", "parquet"], ["dpo", "jsonl"], ["prm", "jsonl"],
  ["prm-values", "jsonl"], ["tokenized", "parquet"], ["hf", "zip"]];
// a named dataset: the same without prm-values (no search trees behind it), plus the internal samples
// JSONL; tokenized uses the project's newest run's model
export const DATASET_FORMATS = [["openai", "jsonl"], ["sharegpt", "jsonl"], ["parquet", "parquet"], ["samples", "jsonl"], ["dpo", "jsonl"],
  ["prm", "jsonl"], ["tokenized", "parquet"], ["hf", "zip"]];

/** One button per format: GET `path?format=` saved as `name(format, ext)`; `dataset` attributes on each. */
export function downloadButtons(formats, path, name, dataset = {}) {
  return h("span", { class: "downloads" }, formats.map(([format, ext]) => {
    const button = h("button", { type: "button", class: "download", dataset: { format, ...dataset } }, format);
    button.addEventListener("click", async () => {
      button.disabled = true;
      try {
        await download(path, { format }, name(format, ext));
        button.classList.remove("failed");
        button.title = "";
      } catch (err) {
        button.classList.add("failed");
        button.title = err.message;
      } finally {
        button.disabled = false;
      }
    });
    return button;
  }));
}
