"""The search service against real stores: its tree projection (nodes: visits, value_sum) matches a
recount from the events (PostgreSQL; tiny HF model on SQLite), failures become SearchFailed, and the
worker consumes SearchRequested from real Redis and writes to real PostgreSQL."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from pathlib import Path

import pytest
from sqlalchemy import select

from core.bus.redis_streams import RedisStreamsBus
from core.domain.events import (
    GoodTrajectoryFound,
    LeafRecorded,
    NewEvent,
    NodesExpanded,
    PairFound,
    RecordedEvent,
    RolloutFinished,
    SearchFailed,
    SearchRequested,
    TreeCompleted,
    TreeStarted,
)
from core.domain.ids import new_id, tree_stream
from core.domain.mcts import SearchConfig
from core.runtime.relay import Relay
from core.runtime.settings import load_settings
from core.runtime.worker import Worker
from core.store.factory import open_store
from core.store.sql import SqlEventStore
from core.store.tables import nodes, pairs, trees
from search_service.service import build_service

CONFIG = SearchConfig(iterations=8, max_depth=8, alpha=1.0, beta=0.5).to_dict()


def request(
    env_uri: str = "textcraft",
    task_id: str = "200",
    model_ref: str = "noisy-expert?mistake=0.5",
    config: dict | None = None,
    seed: int = 2,
) -> NewEvent:
    tree_id = new_id()
    event = SearchRequested(tree_id, None, 0, env_uri, task_id, model_ref, config or CONFIG, seed)
    return NewEvent(tree_stream(tree_id), event)


async def handle_like_the_worker(store: SqlEventStore, recorded: RecordedEvent, service) -> None:  # type: ignore[no-untyped-def]
    result = await service.handlers["SearchRequested"](recorded)
    await store.append(
        list(result.events), dict(result.expected_versions) or None, tracking=("search", recorded.position)
    )


async def assert_projection_matches_events(store: SqlEventStore, tree_id: str) -> list:  # type: ignore[type-arg]
    events = [r.event for r in await store.read_stream(tree_stream(tree_id))]
    parents: dict[str, str | None] = {}
    for event in events:
        if isinstance(event, NodesExpanded):
            parents.update({n.node_id: n.parent_id for n in event.nodes})
    visits: dict[str, int] = defaultdict(int)
    values: dict[str, float] = defaultdict(float)
    for event in events:
        if isinstance(event, RolloutFinished | LeafRecorded):  # each backs up its leaf once
            node: str | None = event.leaf_id
            while node is not None:
                visits[node] += 1
                values[node] += event.reward
                node = parents[node]
    async with store.engine.connect() as conn:
        rows = (await conn.execute(select(nodes).where(nodes.c.tree_id == tree_id))).mappings().all()
    assert {r["node_id"] for r in rows} == set(parents)
    for row in rows:
        assert row["visits"] == visits[row["node_id"]]
        assert row["value_sum"] == pytest.approx(values[row["node_id"]], abs=1e-9)
    return events


async def test_noisy_expert_search_on_postgres_projection_matches_events(pg_url):
    store = await open_store(pg_url, create_tables=True)
    try:
        service = build_service(load_settings(search_concurrency=2), store)
        (recorded,) = await store.append([request()])
        tree_id = recorded.event.tree_id  # type: ignore[attr-defined]
        await handle_like_the_worker(store, recorded, service)
        events = await assert_projection_matches_events(store, tree_id)
        completed = events[-1] if isinstance(events[-1], TreeCompleted) else None
        assert completed is not None and completed.rollouts == 8 and completed.pairs > 0
        started = next(e for e in events if isinstance(e, TreeStarted))
        assert started.model_version.startswith("noisy-expert")
        assert sum(isinstance(e, GoodTrajectoryFound) for e in events) == completed.good_leaves
        async with store.engine.connect() as conn:
            tree_row = (await conn.execute(select(trees).where(trees.c.tree_id == tree_id))).mappings().one()
            pair_rows = (await conn.execute(select(pairs).where(pairs.c.tree_id == tree_id))).all()
        assert tree_row["status"] == "completed" and tree_row["rollouts"] == 8
        assert tree_row["best_reward"] == completed.best_reward
        assert len(pair_rows) == completed.pairs
        # a redelivery after the effect finds the tree finished and adds nothing
        before = await store.last_position()
        result = await service.handlers["SearchRequested"](recorded)
        assert list(result.events) == [] and await store.last_position() == before
        await service.on_close()  # type: ignore[misc]
    finally:
        await store.close()


async def test_unknown_env_task_and_config_become_search_failed(sqlite_url):
    store = await open_store(sqlite_url, create_tables=True)
    try:
        service = build_service(load_settings(), store)
        cases = {
            "environment": request(env_uri="nosuchenv"),
            "unknown task": request(task_id="99999"),
            "search config": request(config={"iterations": 0}),
            "model": request(model_ref="noisy-expert?bogus=1"),
        }
        for needle, new in cases.items():
            (recorded,) = await store.append([new])
            await handle_like_the_worker(store, recorded, service)
            stream = await store.read_stream(new.stream_id)
            failures = [r.event for r in stream if isinstance(r.event, SearchFailed)]
            assert len(failures) == 1 and needle in failures[0].reason
    finally:
        await store.close()


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch

    torch.set_num_threads(1)
    from core.llm.tiny import build_tiny_model, default_corpus

    folder = tmp_path_factory.mktemp("tiny") / "model"
    return build_tiny_model(folder, default_corpus(), hidden=64, layers=2, heads=2, vocab_size=512, seed=0)


async def test_tiny_hf_model_search_projection_matches_events(sqlite_url, tiny_folder):
    store = await open_store(sqlite_url, create_tables=True)
    try:
        service = build_service(load_settings(), store)
        config = SearchConfig(n_candidates=2, iterations=3, max_depth=3, max_tokens=24).to_dict()
        (recorded,) = await store.append([request(model_ref=str(tiny_folder), config=config, seed=1)])
        await handle_like_the_worker(store, recorded, service)
        events = await assert_projection_matches_events(store, recorded.event.tree_id)  # type: ignore[attr-defined]
        started = next(e for e in events if isinstance(e, TreeStarted))
        rollouts = [e for e in events if isinstance(e, RolloutFinished)]
        assert isinstance(events[-1], TreeCompleted)
        # 3 descents, or fewer when the tree was exhausted first (e.g. a root the model cannot act at)
        assert len(rollouts) == events[-1].rollouts and (len(rollouts) == 3 or events[-1].exhausted)
        assert started.model_version.startswith(f"{tiny_folder.resolve()}@")
        assert {e.terminal_reason for e in rollouts} <= {"done", "max_depth", "failure", "no valid action"}
        await service.on_close()  # type: ignore[misc]
    finally:
        await store.close()


async def test_worker_consumes_search_requests_from_redis_and_writes_postgres(
    pg_url, redis_url, redis_prefix
):
    store = await open_store(pg_url, create_tables=True)
    bus = RedisStreamsBus(redis_url, redis_prefix)
    settings = load_settings(search_concurrency=3, block_ms=100)
    service = build_service(settings, store)
    try:
        good = [request(task_id=t) for t in ("130", "200", "150")]
        bad = request(env_uri="textcraft?distractors=banana")
        await store.append([*good, bad])
        relay = Relay(store, bus)
        assert await relay.drain() == 4
        worker = Worker(service, store, bus, settings)
        await worker.run(burst=True)
        assert worker.handled == 4
        async with store.engine.connect() as conn:
            rows = (await conn.execute(select(trees.c.tree_id, trees.c.status, trees.c.reason))).all()
        status = {row.tree_id: (row.status, row.reason) for row in rows}
        for new in good:
            assert status[new.event.tree_id][0] == "completed"  # type: ignore[attr-defined]
            await assert_projection_matches_events(store, new.event.tree_id)  # type: ignore[attr-defined]
        failed_status, reason = status[bad.event.tree_id]  # type: ignore[attr-defined]
        assert failed_status == "failed" and "distractors" in reason
        found = await store.read_all(event_types=["PairFound"])
        assert found and all(isinstance(r.event, PairFound) for r in found)
        for position in range(1, 5):
            assert await store.is_tracked("search", position)
    finally:
        await service.on_close()  # type: ignore[misc]
        await bus.close()
        await store.close()


async def test_a_worker_keeps_at_most_max_open_models_and_trees_in_flight_keep_theirs(pg_url):
    """A long-lived search worker serving a new model ref per iteration (here max_open_models=1):
    the older model is closed once no tree searches with it, a tree whose model is evicted while it
    searches completes with it, and a ref seen again is reopened."""
    from search_service.noisy_expert import NoisyExpertPolicy
    from search_service.service import open_search_policy

    log: list[tuple[str, str]] = []

    class Recorded(NoisyExpertPolicy):
        async def close(self) -> None:
            log.append(("close", self.model_version))

    def opener(ref: str) -> NoisyExpertPolicy:
        base = open_search_policy(ref)
        assert isinstance(base, NoisyExpertPolicy)
        log.append(("open", base.model_version))
        return Recorded(mistake_rate=base.mistake_rate)

    store = await open_store(pg_url, create_tables=True)
    try:
        service = build_service(
            load_settings(search_concurrency=2, max_open_models=1), store, policy_opener=opener
        )
        first, second = "noisy-expert?mistake=0.5", "noisy-expert?mistake=0.4"
        recorded = await store.append([request(model_ref=first), request(model_ref=second)])
        # both trees at once: the second ref evicts the first while its tree still searches
        await asyncio.gather(*(handle_like_the_worker(store, r, service) for r in recorded))
        (third,) = await store.append([request(model_ref=first)])
        await handle_like_the_worker(store, third, service)
        for r in [*recorded, third]:
            events = [e.event for e in await store.read_stream(r.stream_id)]
            assert isinstance(events[-1], TreeCompleted) and events[-1].rollouts == 8
        v1, v2 = (f"noisy-expert(mistake={m},garbage=0.0)" for m in ("0.5", "0.4"))
        assert log == [("open", v1), ("open", v2), ("close", v1), ("close", v2), ("open", v1)]
        await service.on_close()  # type: ignore[misc]
        assert log[-1] == ("close", v1)
    finally:
        await store.close()
