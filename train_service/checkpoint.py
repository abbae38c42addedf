"""Owns checkpoints: a folder of weights + tokenizer (``save_pretrained``) + ``meta.json``.

``meta.json`` says what the checkpoint is: run, iteration, dataset id, base model, the training
config and its metrics, and ``runtime``: the conditions it was trained under (torch threads,
precision, CPU model and ISA: ``core.runtime.torch_threads.checkpoint_conditions``), since the same
seed gives other weights on other kernels. A checkpoint is written into a temporary sibling
folder and renamed into place, so a folder with ``meta.json`` is always complete; a training retry
that finds a complete checkpoint for the same dataset reuses it.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

META_FILE = "meta.json"
FORMAT_VERSION = 1


class CheckpointError(Exception):
    """A checkpoint folder is missing, incomplete or not what the caller asked for."""


@dataclass(frozen=True)
class CheckpointMeta:
    iteration: int
    dataset_id: str
    base_model: str
    config: dict[str, Any]
    run_id: str | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    lora: dict[str, Any] | None = None  # the adapter settings, when LoRA was merged into these weights
    created_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())
    format_version: int = FORMAT_VERSION
    # threads, precision and CPU of the training ({} in checkpoints written before it was recorded)
    runtime: dict[str, Any] = field(default_factory=dict)


def precision_name(metrics: dict[str, Any]) -> str:
    """``fp32``, ``bf16`` (bfloat16 weights) or ``mixed_bf16`` from a learner's precision metrics."""
    if metrics.get("bf16"):
        return "bf16"
    return "mixed_bf16" if metrics.get("mixed_bf16") else "fp32"


def write_checkpoint(model: Any, tokenizer: Any, out_dir: str | Path, meta: CheckpointMeta) -> Path:
    """Save model, tokenizer and meta.json into ``out_dir`` atomically; returns ``out_dir``."""
    target = Path(out_dir)
    if target.exists():
        raise CheckpointError(f"checkpoint folder already exists: {target}")
    if not meta.runtime:  # recorded now, in the training phase: the threads it trained with
        from core.runtime.torch_threads import checkpoint_conditions

        meta = replace(meta, runtime=checkpoint_conditions(precision_name(meta.metrics)))
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / META_FILE).write_text(json.dumps(asdict(meta), indent=2, sort_keys=True))
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def read_meta(path: str | Path) -> CheckpointMeta:
    folder = Path(path)
    meta_path = folder / META_FILE
    if not folder.is_dir():
        raise CheckpointError(f"checkpoint folder not found: {folder}")
    if not meta_path.is_file():
        raise CheckpointError(f"{folder} is not an agentr checkpoint (no {META_FILE})")
    try:
        data = json.loads(meta_path.read_text())
        return CheckpointMeta(**data)
    except (json.JSONDecodeError, TypeError) as exc:
        raise CheckpointError(f"{meta_path}: unreadable checkpoint metadata: {exc}") from exc


def load_checkpoint(path: str | Path, dtype: Any = None) -> tuple[Any, Any, CheckpointMeta]:
    """(model, tokenizer, meta) of a checkpoint, loaded through the ordinary ``from_pretrained``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from core.llm.hf_folder import load_pretrained

    meta = read_meta(path)
    kwargs: dict[str, Any] = {} if dtype is None else {"dtype": dtype}
    model = load_pretrained(AutoModelForCausalLM, path, **kwargs)
    tokenizer = AutoTokenizer.from_pretrained(path)
    return model, tokenizer, meta


def existing_checkpoint(path: str | Path, dataset_id: str) -> Path | None:
    """``path`` when it already holds a complete checkpoint of ``dataset_id`` (a retry), else None.

    A complete checkpoint of a DIFFERENT dataset is an error: nothing is overwritten silently.
    """
    folder = Path(path)
    if not (folder / META_FILE).is_file():
        if folder.exists() and any(folder.iterdir()):
            raise CheckpointError(f"{folder} exists and is not a complete checkpoint; remove it first")
        return None
    meta = read_meta(folder)
    if meta.dataset_id != dataset_id:
        raise CheckpointError(
            f"{folder} already holds a checkpoint of dataset {meta.dataset_id}, not {dataset_id}"
        )
    return folder
