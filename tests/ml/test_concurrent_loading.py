"""Models loaded from several threads at once (the embedded run's search, critic and train workers
are threads of one process): every load gets a whole model. transformers' ``from_pretrained`` builds
under process-wide state, so without ``core.llm.hf_folder.load_pretrained``'s lock concurrent loads
left meta tensors ("Cannot copy out of meta tensor"; seen in bench/paper.py when a run's first
search and the starting model's evaluation loaded the same folder together)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from core.llm.hf import HFPolicy
from tests.support import TinySpec
from train_service.hf_trainer import load_causal_lm


@pytest.fixture(scope="module")
def tiny_spec() -> TinySpec:
    return TinySpec(name="tiny-concurrent-load", seed=5, hidden=32, layers=2, vocab_size=512)


def test_models_loaded_in_threads_at_once_are_whole(tiny_folder: Path) -> None:
    loaders = [
        lambda: HFPolicy.from_folder(tiny_folder, device="cpu").model,
        lambda: HFPolicy.from_folder(tiny_folder, device="cpu").model,
        lambda: load_causal_lm(tiny_folder, bf16=False),
        lambda: HFPolicy.from_folder(tiny_folder, device="cpu").model,
    ]
    start = threading.Barrier(len(loaders))
    models: list[Any] = [None] * len(loaders)
    errors: list[BaseException] = []

    def run(index: int) -> None:
        start.wait()  # every thread calls from_pretrained at the same moment
        try:
            models[index] = loaders[index]()
        except BaseException as exc:  # noqa: BLE001 - collected and re-raised below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(loaders))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    reference = {name: p.detach() for name, p in models[0].named_parameters()}
    for model in models:
        params = dict(model.named_parameters())
        assert not any(p.is_meta for p in params.values())
        assert params.keys() == reference.keys()
        # the same weights as the folder holds: no parameter was left freshly initialised
        assert all(bool((params[n].detach() == reference[n]).all()) for n in reference)
