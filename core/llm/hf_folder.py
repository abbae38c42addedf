"""Owns model-folder handling for the hf backend: checking a folder's files, fingerprinting its
weights (for ``model_version``), resolving the torch dtype to load it in, and loading weights
one at a time in a process (``load_pretrained``)."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path
from typing import Any

from core.llm.ports import PolicyError

WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")
_FULL_HASH_LIMIT = 256 * 1024 * 1024  # bytes; bigger weight files are fingerprinted by size + ends

_LOAD_LOCK = threading.RLock()
"""Serialises ``from_pretrained`` in a process: transformers builds the model under process-wide
state (an empty-weights / default-device context), so two threads loading at once leave meta
tensors in each other's models ("Cannot copy out of meta tensor"; reproduced: 3 threads loading
the demo model at once failed every time). The embedded run's search, critic and train workers
are threads of one process and load models concurrently (a run's first search and the starting
model's evaluation)."""


def load_pretrained(loader: Any, *args: Any, **kwargs: Any) -> Any:
    """``loader.from_pretrained(*args, **kwargs)`` (an ``AutoModel*`` class) under the process's load
    lock, so concurrent loads from worker threads each get a whole model."""
    with _LOAD_LOCK:
        return loader.from_pretrained(*args, **kwargs)


def check_folder(folder: Path) -> None:
    if not folder.exists():
        raise PolicyError(f"model folder {folder} does not exist")
    if not folder.is_dir():
        raise PolicyError(f"model path {folder} is not a folder")
    missing: list[str] = []
    if not (folder / "config.json").is_file():
        missing.append("config.json")
    if not any((folder / name).is_file() for name in WEIGHT_FILES):
        missing.append("weights (" + " or ".join(WEIGHT_FILES) + ")")
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        missing.append("tokenizer (" + " or ".join(TOKENIZER_FILES) + ")")
    if missing:
        raise PolicyError(f"model folder {folder} is missing: {', '.join(missing)}")


def weights_fingerprint(folder: Path) -> str:
    """A short hash of the weight files (full content up to 256 MiB each, else size + both ends)."""
    digest = hashlib.sha256()
    files = sorted(p for p in folder.iterdir() if p.suffix in (".safetensors", ".bin") and p.is_file())
    for path in files:
        digest.update(path.name.encode())
        size = path.stat().st_size
        digest.update(str(size).encode())
        with path.open("rb") as handle:
            if size <= _FULL_HASH_LIMIT:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
            else:
                digest.update(handle.read(16 << 20))
                handle.seek(size - (16 << 20))
                digest.update(handle.read())
    return digest.hexdigest()[:16]


def resolve_dtype(torch: Any, dtype: Any, device: str) -> Any:
    if dtype is None:
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    if isinstance(dtype, str):
        named = {
            "float32": torch.float32,
            "fp32": torch.float32,
            "bfloat16": torch.bfloat16,
            "bf16": torch.bfloat16,
            "float16": torch.float16,
            "fp16": torch.float16,
        }
        if dtype not in named:
            raise PolicyError(f"unknown dtype {dtype!r}; use one of {', '.join(sorted(named))}")
        return named[dtype]
    return dtype
