"""The run driver (train service) on PostgreSQL: a data-only run goes through both iterations.

search (noisy TextCraft expert as the actor) -> critic (direct strategy) -> splice -> dataset ->
next iteration -> RunCompleted, in one process on the real PostgreSQL with the in-process bus; then
a redelivered RunRequested changes nothing. Bad configuration fails the run with a clear reason.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from agentr.process import build_service
from core.domain.config import RunConfig
from core.domain.events import NewEvent, RunFailed, RunRequested
from core.domain.ids import run_stream
from core.domain.runs import fold
from core.runtime.embedded import run_embedded
from core.runtime.settings import load_settings
from core.store.factory import open_store
from train_service.service import build_service as build_train

pytestmark = pytest.mark.slow


async def _run(pg_url: str, tmp_path, config: RunConfig, run_id: str) -> list:  # type: ignore[no-untyped-def]
    settings = load_settings(home=tmp_path, database_url=pg_url, redis_url=None, reclaim_idle_ms=2000)
    store = await open_store(pg_url, create_tables=True)
    try:
        await store.append([NewEvent(run_stream(run_id), RunRequested(run_id, "p", config.to_data()))])
        services = [
            await build_service("search", settings, store),
            await build_service("critic", settings, store),
            await build_service("splice", settings, store),
            build_train(settings, store),
        ]

        async def until() -> bool:
            history = await store.read_stream(run_stream(run_id))
            return fold(run_id, [r.event for r in history]).terminal

        await run_embedded(store, services, until, settings=settings)
        return await store.read_all(0, limit=100_000)
    finally:
        await store.close()


async def test_data_only_run_on_postgres(pg_url: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    config = RunConfig(
        env="textcraft?distractors=0&split=demo",
        model="noisy-expert?mistake=0.4&seed=3",
        max_tasks=2,
        iterations=2,
        alpha_schedule=(1.0,),
        search={"n_candidates": 3, "iterations": 4, "max_depth": 6},
        critic={"strategy": "direct"},
        data_only=True,
        seed=1,
    )
    events = await _run(pg_url, tmp_path, config, "run-pg-1")
    run_types = Counter(r.event_type for r in events if r.stream_id == run_stream("run-pg-1"))
    assert run_types["IterationStarted"] == 2
    assert run_types["IterationDatasetReady"] == 2
    assert run_types["RunCompleted"] == 1
    assert run_types["ModelTrained"] == 0  # data-only: no training
    searches = [r.event for r in events if r.event_type == "SearchRequested"]
    assert len(searches) == 4 and len({s.tree_id for s in searches}) == 4  # type: ignore[attr-defined]
    assert {s.search_config["alpha"] for s in searches} == {1.0}  # type: ignore[attr-defined]


async def test_unknown_task_split_fails_the_run_with_the_reason(pg_url: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    config = RunConfig(env="textcraft", model="noisy-expert", split="no-such-split", iterations=1)
    events = await _run(pg_url, tmp_path, config, "run-pg-2")
    failed = [r.event for r in events if r.event_type == "RunFailed"]
    assert len(failed) == 1 and isinstance(failed[0], RunFailed)
    assert "no-such-split" in failed[0].reason


async def test_a_run_step_that_keeps_failing_fails_the_run_instead_of_hanging(
    pg_url: str, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """The evaluation raises on every delivery: the worker dead-letters ModelTrained, and the train
    service, seeing its own run step dead-lettered, fails the run with the error (before this, the
    run waited forever). Training is replaced (the noisy expert has no weights); the rest is real."""
    from core.domain.events import ModelTrained
    from train_service.runs import RunEffects

    async def trained(self, state, effect):  # type: ignore[no-untyped-def]
        return ModelTrained(state.run_id, effect.iteration, effect.dataset_id, str(tmp_path / "ck-0"))

    async def broken(self, state, effect):  # type: ignore[no-untyped-def]
        raise RuntimeError("the evaluation exploded")

    monkeypatch.setattr(RunEffects, "train", trained)
    monkeypatch.setattr(RunEffects, "evaluate", broken)
    monkeypatch.setenv("AGENTR_MAX_DELIVERIES", "2")
    config = RunConfig(
        env="textcraft",
        model="noisy-expert",
        tasks=("goal:oak_planks",),
        iterations=1,
        search={"iterations": 2},
    )
    events = await asyncio.wait_for(_run(pg_url, tmp_path, config, "run-pg-dead"), timeout=120)
    dead = [r.event for r in events if r.event_type == "MessageDeadLettered"]
    assert [d.topic for d in dead] == ["ModelTrained"] and dead[0].consumer == "train"
    failed = [r.event for r in events if r.event_type == "RunFailed"]
    assert len(failed) == 1 and isinstance(failed[0], RunFailed)
    assert failed[0].reason == (
        "iteration 0: ModelTrained could not be handled after 2 deliveries: "
        "RuntimeError: the evaluation exploded"
    )
    assert not [r for r in events if r.event_type in ("IterationEvaluated", "RunCompleted")]
