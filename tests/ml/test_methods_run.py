"""An `archer` run and a `dpo` run complete end to end in the embedded mode (SQLite, in-process bus):
search with the warm-started tiny model of `agentr run --quick`, critic, splice, the method's dataset
from the log (pairs / transitions + manifest), training through the same run state machine and
training task, a checkpoint (weights + meta.json, ArCHer's critic beside them) and evaluation."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from core.domain.events import ModelTrained
from core.domain.ids import run_stream
from tests.e2e.services import quick_run_config
from tests.ml.learner_data import ARCHER_RUN_TRAIN, DPO_RUN_TRAIN
from train_service.rl_data import read_transitions

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return quick_run_config(
        tmp_path_factory.getbasetemp() / "agentr-quick-home",
        evaluation={
            "max_steps": 3,
            "max_tokens": 24,
            "recovery_episodes": 0,
            "baseline": False,
            "seen_tasks": False,
        },
        critic={"strategy": "direct"},
    )


def _run(home: Path, config: dict[str, Any]) -> tuple[int, list[Any], str]:
    from agentr.cli.embedded_run import embedded_settings, run_config
    from core.store.factory import open_store

    settings, resolved = embedded_settings(home)
    code, run_id = run_config(settings, resolved, config, show_report=False)

    async def events() -> list[Any]:
        store = await open_store(settings.effective_database_url)
        try:
            return [r.event for r in await store.read_stream(run_stream(run_id))]
        finally:
            await store.close()

    return code, asyncio.run(events()), run_id


async def _rebuilt(home: Path, run_id: str, manifest: dict[str, Any]) -> tuple[Any, ...]:
    from agentr.cli.embedded_run import embedded_settings
    from core.domain.serde import from_dict
    from core.domain.transitions import TransitionManifest, rebuild_transitions
    from core.store.factory import open_store
    from train_service.methods import tree_sources

    settings, _ = embedded_settings(home)
    store = await open_store(settings.effective_database_url)
    try:
        trees = await tree_sources(store, run_id, 0)
    finally:
        await store.close()
    return rebuild_transitions(from_dict(TransitionManifest, manifest), trees=trees)


def test_dpo_run_completes(quick: dict[str, Any], tmp_path: Path) -> None:
    code, events, run_id = _run(tmp_path / "home", dict(quick, train=DPO_RUN_TRAIN))
    trained = [e for e in events if isinstance(e, ModelTrained)]
    assert code == 0, events[-1]
    assert len(trained) == 1 and trained[0].metrics["method"] == "dpo"
    assert trained[0].metrics["dataset"]["pairs"] >= 1 and trained[0].metrics["steps"] == 2
    meta = json.loads((Path(trained[0].checkpoint) / "meta.json").read_text())
    assert meta["config"]["method"] == "dpo" and meta["config"]["beta"] == 0.1
    data = tmp_path / "home" / "runs" / run_id / "datasets"
    manifest = json.loads((data / "iter-0.dpo.manifest.json").read_text())
    assert len(manifest["pair_ids"]) == trained[0].metrics["dataset"]["pairs"]
    assert any(type(e).__name__ == "IterationEvaluated" for e in events)


def test_archer_run_completes(quick: dict[str, Any], tmp_path: Path) -> None:
    code, events, run_id = _run(tmp_path / "home", dict(quick, train=ARCHER_RUN_TRAIN))
    trained = [e for e in events if isinstance(e, ModelTrained)]
    assert code == 0, events[-1]
    metrics = trained[0].metrics
    assert metrics["method"] == "archer" and metrics["critic_updates"] == 2 and metrics["actor_updates"] == 1
    assert metrics["dataset"]["transitions"] > 0 and metrics["dataset"]["done"] > 0
    checkpoint = Path(trained[0].checkpoint)
    assert (checkpoint / "meta.json").is_file() and (checkpoint / "critic" / "critic.safetensors").is_file()
    manifest = json.loads(
        (tmp_path / "home" / "runs" / run_id / "datasets" / "iter-0.transitions.manifest.json").read_text()
    )
    assert manifest["config"]["invalid_action_penalty"] == 0.1
    assert len(manifest["transition_ids"]) == metrics["dataset"]["transitions"]
    # the file is rebuilt exactly from the event log (the trees' streams), as datasets are
    data = tmp_path / "home" / "runs" / run_id / "datasets" / "iter-0.transitions.jsonl"
    assert asyncio.run(_rebuilt(tmp_path / "home", run_id, manifest)) == tuple(read_transitions(data))
    assert any(type(e).__name__ == "IterationEvaluated" for e in events)


def test_online_archer_run_plays_episodes_into_the_log(quick: dict[str, Any], tmp_path: Path) -> None:
    """The paper's ArCHer as a run's learner: the training job plays the run's training tasks in
    its environment, every round's episodes land in the run's event log (EpisodePlayed), the actor
    is updated, and the checkpoint is evaluated like any other."""
    from agentr.cli.embedded_run import embedded_settings
    from core.domain.replay import buffer_id
    from core.store.factory import open_store
    from train_service.archer_online import StoreEpisodeLog

    train = dict(
        ARCHER_RUN_TRAIN,
        mode="online",
        rollout_episodes=2,
        episode_max_steps=3,
        warmup_iters=0,
        max_new_tokens=16,
    )
    code, events, run_id = _run(tmp_path / "home", dict(quick, train=train))
    trained = [e for e in events if isinstance(e, ModelTrained)]
    assert code == 0, events[-1]
    metrics = trained[0].metrics
    assert metrics["mode"] == "online" and metrics["rounds"] == 2 and metrics["episodes"] == 4
    assert metrics["actor_updates"] == 2 and metrics["env_steps"] == sum(metrics["env_steps_by_round"])

    async def played() -> list[Any]:
        settings, _ = embedded_settings(tmp_path / "home")
        store = await open_store(settings.effective_database_url)
        try:
            return await StoreEpisodeLog(store).read(buffer_id(run_id, 0))
        finally:
            await store.close()

    episodes = asyncio.run(played())
    assert [(e.round, e.index) for e in episodes] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert all(e.run_id == run_id and e.learner == "archer" for e in episodes)
    assert sum(len(e.trajectory.steps) for e in episodes) == metrics["env_steps"]
    assert any(type(e).__name__ == "IterationEvaluated" for e in events)
