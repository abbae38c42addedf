"""Owns the ml tests' shared model fixtures: a tiny model folder, the same model loaded locally, and
`agentr model serve` over it as a subprocess (module-scoped: built and started once per test file).

A test file that uses them says which model it wants by defining a module-scoped ``tiny_spec``
fixture that returns a ``tests.support.TinySpec`` (its folder name, which the server also serves
it as, its seed and sizes); a file that defines its own ``tiny_folder`` (as test_hf_policy.py
does) overrides the one here.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from core.llm.hf import HFPolicy
from core.llm.tiny import build_tiny_model, default_corpus
from tests.support import TinySpec, free_port, start_http_process


@pytest.fixture(scope="module")
def tiny_folder(tiny_spec: TinySpec, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tiny") / tiny_spec.name
    return build_tiny_model(
        folder,
        default_corpus(),
        hidden=tiny_spec.hidden,
        layers=tiny_spec.layers,
        heads=tiny_spec.heads,
        vocab_size=tiny_spec.vocab_size,
        seed=tiny_spec.seed,
    )


@pytest.fixture(scope="module")
def local(tiny_folder: Path) -> HFPolicy:
    torch.set_num_threads(1)
    return HFPolicy.from_folder(tiny_folder, device="cpu")


@pytest.fixture(scope="module")
def server(tiny_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Base URL (``http://127.0.0.1:PORT/v1``) of `agentr model serve` over ``tiny_folder``."""
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    script = Path(sys.executable).with_name("agentr")  # the installed console script `agentr`
    agentr = (
        [str(script)] if script.exists() else [sys.executable, "-c", "from agentr.cli import main; main()"]
    )
    base = f"http://127.0.0.1:{port}/v1"
    with start_http_process(
        [*agentr, "model", "serve", str(tiny_folder), "--port", str(port), "--device", "cpu"],
        f"{base}/models",
        what="agentr model serve",
        env=env,
        log_path=tmp_path_factory.mktemp("serve") / "serve.log",
        timeout_s=240,  # a loaded shared machine can take minutes to import torch and load
    ):
        yield base
