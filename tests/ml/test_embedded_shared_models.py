"""An embedded run (one process: search, critic and splice services) opens each model ONCE: the
three share one model cache, where each used to hold its own copy (three times the weights and
prefix caches of every iteration's model). The warm-started tiny model of ``agentr run --quick``,
searched, judged by the model critic and reflected on by the model, on SQLite."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from core.domain.events import FirstErrorMarked, RevisionMaterialized
from core.llm.hf import HFPolicy
from tests.e2e.services import quick_run_config

pytestmark = pytest.mark.slow


def test_search_critic_and_splice_of_an_embedded_run_share_one_copy_of_the_model(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentr.cli.embedded_run import embedded_settings, run_config
    from core.store.factory import open_store

    config = quick_run_config(
        tmp_path_factory.getbasetemp() / "agentr-quick-home",
        iterations=1,
        data_only=True,
        critic={"strategy": "model"},
        splice={"reflection": "model", "verify": False},
    )
    opened: Counter[str] = Counter()
    original = HFPolicy.from_folder.__func__  # type: ignore[attr-defined]

    def counted(cls: type[HFPolicy], folder: Any, *args: Any, **kwargs: Any) -> HFPolicy:
        opened[str(Path(folder).resolve())] += 1
        return original(cls, folder, *args, **kwargs)  # type: ignore[no-any-return]

    monkeypatch.setattr(HFPolicy, "from_folder", classmethod(counted))
    settings, home = embedded_settings(tmp_path / "home")
    code, run_id = run_config(settings, home, config, show_report=False)
    assert code == 0

    async def events() -> list[Any]:
        store = await open_store(settings.effective_database_url)
        try:
            return [r.event for r in await store.read_all(limit=100_000)]
        finally:
            await store.close()

    recorded = asyncio.run(events())
    marked = [e for e in recorded if isinstance(e, FirstErrorMarked)]
    assert marked and all(e.strategy == "model" for e in marked)  # the critic used the model
    assert any(isinstance(e, RevisionMaterialized) for e in recorded)  # the splicer reflected with it
    assert opened == {str(Path(config["model"]).resolve()): 1}


def test_an_embedded_run_closes_its_searched_models_before_it_trains(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trainer runs in the same process: the model the search and critic used is closed before
    training starts (its weights and prefix cache would sit beside the trainer's), not at the end."""
    import train_service.celery_app as celery_app
    from agentr.cli.embedded_run import embedded_settings, run_config

    config = quick_run_config(tmp_path_factory.getbasetemp() / "agentr-quick-home", iterations=1)
    closed: list[str] = []
    open_at_training: list[list[str]] = []
    original_close = HFPolicy.close
    original_train = celery_app.run_train_iteration

    async def close(self: HFPolicy) -> None:
        closed.append(self.model_version.split("@")[0])
        await original_close(self)

    def train(**kwargs: Any) -> Any:
        open_at_training.append(list(closed))  # what was closed when training began
        return original_train(**kwargs)

    monkeypatch.setattr(HFPolicy, "close", close)
    monkeypatch.setattr(celery_app, "run_train_iteration", train)
    settings, home = embedded_settings(tmp_path / "home")
    code, _ = run_config(settings, home, config, show_report=False)
    assert code == 0
    assert open_at_training == [[str(Path(config["model"]).resolve())]]
