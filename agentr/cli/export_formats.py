"""Owns the export formats the CLI makes on this machine rather than the API: ``tokenized``
(pre-tokenised Parquet for ``--model``) and ``hf`` (a Hugging Face ``datasets`` folder), both from
the chat samples (train_service.tokenized_export), and the atomic JSONL file of the DPO / PRM
records (core.formats.pair_records)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from core.domain.trajectory import TrainingSample
from core.formats.pair_records import PAIR_FORMATS
from core.store.ports import EventStore

LOCAL_FORMATS = ("tokenized", "hf")
__all__ = ["FORMAT_HELP", "LOCAL_FORMATS", "PAIR_FORMATS", "convert_download", "write_local"]
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


def convert_download(
    downloaded: Path, source: str, fmt: str, out: Path, model: str | None, max_length: int
) -> int:
    """A downloaded ``samples`` (ids kept) or OpenAI chat JSONL file as ``tokenized`` or ``hf``."""
    from core.formats.export import read_general_chat, read_samples_jsonl

    samples = read_samples_jsonl(downloaded) if source == "samples" else read_general_chat(downloaded)
    return write_local(fmt, samples, out, model, max_length)


def write_records_jsonl(out: Path, lines: Iterable[str]) -> int:
    from core.formats.export import write_lines

    return write_lines(out, lines)


async def pair_lines_from_store(store: EventStore, run_id: str, iteration: int, fmt: str) -> list[str]:
    from core.formats.pair_records import pair_lines
    from core.store.pair_reads import iteration_records

    return list(pair_lines(await iteration_records(store, None, run_id, iteration, fmt)))
