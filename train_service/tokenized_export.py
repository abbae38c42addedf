"""Owns the model-ready exports: pre-tokenised Parquet for a named model, and a Hugging Face
``datasets`` folder.

* ``tokenized`` (Parquet): one row per sample, ``sample_id``, ``input_ids``, ``labels``,
  ``attention_mask``, made by the trainer's own tokenisation (``train_service.tokenize``: the
  model's chat template, tools included; a token's label is its id exactly when it lies in a
  weight-1 assistant message, else -100), cut at ``max_length`` from the right as the SFT trainer
  does. ``attention_mask`` is all ones (no padding: rows keep their own length). Samples whose
  trained tokens all fall past ``max_length`` are dropped, as the trainer drops them; the count
  is returned. Samples with tool calls on a template that drops them (``core.llm.chat_template.
  tool_call_problem``) refuse the whole export with ``TemplateError`` naming the model and the first
  such sample: their calls would not be among the trained tokens.
* ``hf`` (a folder written by ``datasets.Dataset.save_to_disk``, read by ``load_from_disk``): the
  OpenAI chat records (``messages`` with role, content, weight, tool calls as JSON text in
  ``arguments``, tool_call_id) plus ``sample_id``, ``kind``, ``reward`` and ``tools`` as JSON text
  (tool schemas differ per sample, so one Arrow type cannot hold them); with a tokenizer, the
  ``input_ids`` / ``labels`` / ``attention_mask`` columns of ``tokenized`` are added. Publish with
  ``datasets.load_from_disk(folder).push_to_hub("org/name")`` (docs/datasets.md).

Both write to a temporary path and rename, so a failure never leaves half a dataset behind.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from core.domain.trajectory import TrainingSample
from core.formats.records import openai_record
from core.llm.chat_template import TemplateError, calls_tools, tool_call_problem
from train_service.tokenize import IGNORE_INDEX, tokenize_sample

DEFAULT_MAX_LENGTH = 1024  # train_service.sft.SFTConfig.max_length's default


def load_tokenizer(model: str) -> Any:
    """The tokenizer of ``model`` (a local folder or a Hugging Face model id), as the trainer loads it."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model)


def tokenized_rows(
    tokenizer: Any, samples: Iterable[TrainingSample], max_length: int | None = DEFAULT_MAX_LENGTH
) -> Iterator[dict[str, Any]]:
    tools_checked = False
    for sample in samples:
        if not tools_checked and calls_tools(sample.messages):
            problem = tool_call_problem(tokenizer)
            if problem is not None:
                raise TemplateError(f"sample {sample.sample_id} calls tools, and {problem}")
            tools_checked = True
        tok = tokenize_sample(tokenizer, sample, max_length)
        if not any(label != IGNORE_INDEX for label in tok.labels):
            continue  # nothing left to train on (as the trainer drops it)
        yield {
            "sample_id": sample.sample_id,
            "input_ids": tok.input_ids,
            "labels": tok.labels,
            "attention_mask": [1] * len(tok.input_ids),
        }


def write_tokenized_parquet(
    path: Path, tokenizer: Any, samples: Iterable[TrainingSample], max_length: int | None = DEFAULT_MAX_LENGTH
) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema(
        [
            ("sample_id", pa.string()),
            ("input_ids", pa.list_(pa.int32())),
            ("labels", pa.list_(pa.int32())),
            ("attention_mask", pa.list_(pa.int8())),
        ]
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    os.close(handle)
    count = 0
    try:
        with pq.ParquetWriter(tmp, schema) as writer:
            batch: list[dict[str, Any]] = []
            for row in tokenized_rows(tokenizer, samples, max_length):
                batch.append(row)
                count += 1
                if len(batch) == 500:
                    writer.write_table(pa.Table.from_pylist(batch, schema))
                    batch = []
            if batch or not count:
                writer.write_table(pa.Table.from_pylist(batch, schema))
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return count


def hf_row(sample: TrainingSample) -> dict[str, Any]:
    record = openai_record(sample)
    messages = []
    for message in record["messages"]:
        messages.append(
            {
                "role": message["role"],
                "content": message.get("content"),
                "weight": message.get("weight"),
                "tool_calls": [
                    {"id": c["id"], "name": c["function"]["name"], "arguments": c["function"]["arguments"]}
                    for c in message.get("tool_calls", [])
                ],
                "tool_call_id": message.get("tool_call_id"),
            }
        )
    return {
        "sample_id": sample.sample_id,
        "kind": sample.kind,
        "reward": sample.reward,
        "messages": messages,
        "tools": json.dumps(record.get("tools", []), ensure_ascii=False),
    }


def write_hf_dataset(
    folder: Path,
    samples: Iterable[TrainingSample],
    tokenizer: Any | None = None,
    max_length: int | None = DEFAULT_MAX_LENGTH,
) -> int:
    import datasets

    kept = list(samples)
    rows = [hf_row(sample) for sample in kept]
    if tokenizer is not None:
        tokenized = {r["sample_id"]: r for r in tokenized_rows(tokenizer, kept, max_length)}
        rows = [row | tokenized[row["sample_id"]] for row in rows if row["sample_id"] in tokenized]
    dataset = datasets.Dataset.from_list(rows) if rows else _empty_dataset(tokenizer is not None)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}."))
    try:
        dataset.save_to_disk(str(tmp), num_shards=None if rows else 1)  # none: no file load_from_disk reads
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return len(rows)


def _empty_dataset(tokenized: bool) -> Any:
    """No rows: ``from_list`` would infer no columns, so they are named and typed here."""
    import datasets

    text, number = datasets.Value("string"), datasets.Value("int64")
    call = {"id": text, "name": text, "arguments": text}
    message = {"role": text, "content": text, "weight": number, "tool_calls": [call], "tool_call_id": text}
    columns: dict[str, Any] = {
        "sample_id": text,
        "kind": text,
        "reward": datasets.Value("float64"),
        "messages": [message],
        "tools": text,
    }
    if tokenized:
        columns |= {"input_ids": [number], "labels": [number], "attention_mask": [number]}
    features = datasets.Features(columns)
    return datasets.Dataset.from_dict({name: [] for name in columns}, features=features)
