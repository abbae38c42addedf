"""Owns the export formats the CLI makes on this machine rather than the API: ``tokenized``
(pre-tokenised Parquet for ``--model``) and ``hf`` (a Hugging Face ``datasets`` folder), both from
the chat samples (train_service.tokenized_export), and the atomic JSONL file of the DPO / PRM
records (core.formats.pair_records)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from core.domain.trajectory import TrainingSample

LOCAL_FORMATS = ("tokenized", "hf")
PAIR_FORMATS = ("dpo", "prm", "prm-values")
FORMAT_HELP = (
    "openai, sharegpt, parquet (chat samples); dpo (OpenAI preference JSONL), prm / prm-values (TRL "
    "stepwise supervision from first errors / tree Q values); tokenized (Parquet for --model), hf "
    "(a datasets save_to_disk folder; tokenised too with --model). See docs/datasets.md."
)


def write_local(
    fmt: str, samples: Iterable[TrainingSample], out: Path, model: str | None, max_length: int
) -> int:
    """Write ``samples`` as ``tokenized`` or ``hf``; returns the rows written."""
    from train_service.tokenized_export import load_tokenizer, write_hf_dataset, write_tokenized_parquet

    if fmt == "tokenized":
        if not model:
            raise ValueError("--format tokenized needs --model (a model folder or Hugging Face id)")
        return write_tokenized_parquet(out, load_tokenizer(model), samples, max_length)
    return write_hf_dataset(out, samples, load_tokenizer(model) if model else None, max_length)


def convert_download(openai_jsonl: Path, fmt: str, out: Path, model: str | None, max_length: int) -> int:
    """A downloaded OpenAI chat JSONL file (weights kept) as ``tokenized`` or ``hf``."""
    from core.formats.export import read_general_chat

    return write_local(fmt, read_general_chat(openai_jsonl), out, model, max_length)


def write_records_jsonl(out: Path, lines: Iterable[str]) -> int:
    out.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".part")
    count = 0
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as fh:
            for line in lines:
                fh.write(line)
                count += 1
        os.replace(tmp, out)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return count


async def pair_lines_from_store(store: Any, run_id: str, iteration: int, fmt: str) -> list[str]:
    from core.formats.pair_records import pair_lines
    from core.store.pair_reads import iteration_records

    return list(pair_lines(await iteration_records(store, None, run_id, iteration, fmt)))
