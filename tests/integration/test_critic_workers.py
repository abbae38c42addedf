"""The critic and splice workers on real PostgreSQL + Redis Streams with the real TextCraft env:
search pair -> FirstErrorMarked -> verified RevisionMaterialized -> IterationDatasetReady; production
traces -> TraceCritiqued + PairFound -> revision; a pair that does not share its stated prefix is
rejected with a reason; replay verification rejects a path that does not reach the good reward."""

from __future__ import annotations

from typing import Any

import pytest

from core.bus.redis_streams import RedisStreamsBus
from core.bus.relay import Relay
from core.domain.config import RunConfig
from core.domain.events import (
    FirstErrorMarked,
    IterationDatasetReady,
    IterationStarted,
    Metadata,
    NewEvent,
    PairFound,
    RevisionMaterialized,
    RevisionRejected,
    RunRequested,
    TraceCritiqued,
    TraceIngested,
    TreeCompleted,
)
from core.domain.ids import derived_id, new_id, pair_stream, run_stream, trace_stream, tree_stream
from core.domain.trajectory import Step, Trajectory
from core.envs.textcraft import TextCraftEnv
from core.envs.textcraft.solver import solve
from core.runtime.settings import Settings
from core.runtime.worker import Worker
from core.store.factory import open_store
from critic_service.service import build_service as build_critic
from critic_service.splice_service import build_service as build_splice
from critic_service.splice_service import replay

ENV_URI = "textcraft?distractors=2"


async def _run(env: TextCraftEnv, task_id: str, actions: list[str]) -> Trajectory:
    task = await env.reset(task_id)
    steps = []
    for action in actions:
        result = await env.step(action)
        steps.append(
            Step(f"I do {action}", action, result.observation, result.reward, result.done, result.valid)
        )
    return Trajectory(task=task, instruction=env.instruction, steps=tuple(steps), reward=steps[-1].reward)


async def _textcraft_pair() -> tuple[str, Trajectory, Trajectory, int]:
    env = TextCraftEnv(distractors=2)
    task_id = next(t for t in env.task_ids("test") if len(solve(env.goal_of(t))) >= 3)
    gold = solve(env.goal_of(task_id))
    good = await _run(env, task_id, gold)
    assert good.reward == 1.0
    shared = 1
    wrong = ["craft 1 golden apple using 8 gold ingot, 1 apple", "inventory", "inventory", "inventory"]
    bad = await _run(env, task_id, gold[:shared] + wrong)
    return task_id, bad, good, shared


@pytest.fixture
async def stack(pg_url: str, redis_url: str, redis_prefix: str):  # type: ignore[no-untyped-def]
    store = await open_store(pg_url, create_tables=True)
    bus = RedisStreamsBus(redis_url, redis_prefix)
    settings = Settings(block_ms=50, critic_trace_strategy="rules")
    critic = Worker(build_critic(settings, store), store, bus, settings)
    splice = Worker(build_splice(settings, store), store, bus, settings)
    relay = Relay(store, bus)

    async def settle() -> None:
        for _ in range(6):
            await relay.drain()
            await critic.run(burst=True)
            await relay.drain()
            await splice.run(burst=True)

    yield store, settle
    await bus.close()
    await store.close()


def _events(recorded: list[Any], cls: type) -> list[Any]:
    return [r.event for r in recorded if isinstance(r.event, cls)]


async def test_search_pair_becomes_verified_revision_and_dataset(stack) -> None:  # type: ignore[no-untyped-def]
    store, settle = stack
    task_id, bad, good, shared = await _textcraft_pair()
    run_id, tree_id, project = new_id(), new_id(), new_id()
    config = RunConfig(
        env=ENV_URI, critic={"strategy": "rules"}, splice={"verify": True, "keep_unverified": False}
    )
    meta = Metadata(project_id=project)
    pair_id = derived_id("pair", tree_id, 0)
    await store.append(
        [
            NewEvent(run_stream(run_id), RunRequested(run_id, project, config.to_data()), meta),
            NewEvent(run_stream(run_id), IterationStarted(run_id, 0, "tiny", 1.0, (tree_id,)), meta),
            NewEvent(
                pair_stream(pair_id),
                PairFound(
                    pair_id=pair_id,
                    source="search",
                    task_key=task_id,
                    bad=bad,
                    good=good,
                    shared_steps=shared,
                    run_id=run_id,
                    iteration=0,
                    tree_id=tree_id,
                    env_uri=ENV_URI,
                    task_id=task_id,
                ),
                meta,
            ),  # fmt: skip
            NewEvent(tree_stream(tree_id), TreeCompleted(tree_id, run_id, 0, 9, 8, 1.0, 1, 1, 1), meta),
        ]
    )
    await settle()
    pair_events = await store.read_stream(pair_stream(pair_id))
    (marked,) = _events(pair_events, FirstErrorMarked)
    # the rules critic finds the invalid craft right after the divergence
    assert marked.strategy == "rules" and marked.transition_index == shared
    assert marked.verdicts[0].label == "bad" and "could not" in marked.verdicts[0].reason.lower()
    (revision,) = _events(pair_events, RevisionMaterialized)
    assert revision.verified is True and revision.revision_length == 1 and revision.run_id == run_id
    sample = revision.sample
    assert [m.weight for m in sample.messages if m.role == "assistant"] == [0, 0] + [1] * (
        len(good.steps) - shared
    )
    assert sample.provenance["template_id"] == revision.template_id
    # observations are the environment's own, replayed in this order
    assert sample.messages[-1].content == good.steps[-1].observation
    run_events = await store.read_stream(run_stream(run_id))
    (ready,) = _events(run_events, IterationDatasetReady)
    assert (ready.revision_samples, ready.good_samples, ready.dataset_id) == (
        1, 0, derived_id("dataset", run_id, 0),
    )  # fmt: skip
    from sqlalchemy import select

    from core.store.tables import pairs, samples

    async with store.engine.connect() as conn:
        status = (await conn.execute(select(pairs.c.status).where(pairs.c.pair_id == pair_id))).scalar_one()
        verified = (
            await conn.execute(select(samples.c.verified).where(samples.c.pair_id == pair_id))
        ).scalar_one()
    assert (status, verified) == ("revised", True)


async def test_traces_are_critiqued_paired_and_spliced(stack) -> None:  # type: ignore[no-untyped-def]
    store, settle = stack
    task_id, bad, good, shared = await _textcraft_pair()
    project = new_id()
    failed_id, ok_id = new_id(), new_id()
    meta = Metadata(project_id=project)
    await store.append(
        [
            NewEvent(
                trace_stream(failed_id),
                TraceIngested(failed_id, project, "k1", bad, "failure", "openai"),
                meta,
            ),
            NewEvent(
                trace_stream(ok_id), TraceIngested(ok_id, project, "k1", good, "success", "openai"), meta
            ),
        ]
    )
    await settle()
    (critiqued,) = _events(await store.read_stream(trace_stream(failed_id)), TraceCritiqued)
    assert critiqued.strategy == "rules" and critiqued.transition_index == shared
    pair_id = derived_id("trace-pair", failed_id)
    pair_events = await store.read_stream(pair_stream(pair_id))
    (pair,) = _events(pair_events, PairFound)
    assert pair.source == "trace" and pair.shared_steps == shared and pair.bad_leaf_id == failed_id
    (revision,) = _events(pair_events, RevisionMaterialized)
    assert revision.verified is None and revision.sample.provenance["trace_id"] == failed_id
    from sqlalchemy import select

    from core.store.tables import traces

    async with store.engine.connect() as conn:
        row = (await conn.execute(select(traces).where(traces.c.trace_id == failed_id))).one()
    assert (row.status, row.sample_id) == ("revised", revision.sample_id)


async def test_pair_without_the_stated_prefix_is_rejected(stack) -> None:  # type: ignore[no-untyped-def]
    store, settle = stack
    _, bad, good, _ = await _textcraft_pair()
    pair_id = new_id()
    wrong = PairFound(pair_id=pair_id, source="trace", task_key="k", bad=bad, good=good, shared_steps=2)
    await store.append([NewEvent(pair_stream(pair_id), wrong)])
    await settle()
    events = await store.read_stream(pair_stream(pair_id))
    (rejected,) = _events(events, RevisionRejected)
    assert "do not share the stated prefix" in rejected.reason and not _events(events, FirstErrorMarked)


async def test_replay_rejects_a_path_that_misses_the_good_reward() -> None:
    from core.domain.splice import splice_path

    task_id, bad, good, shared = await _textcraft_pair()
    env = TextCraftEnv(distractors=2)
    full = splice_path(bad, good, shared, shared)
    ok = await replay(env, task_id, full, good.reward)
    assert ok.verified and [s.observation for s in ok.path.steps][-1].startswith("Crafted")
    truncated = Trajectory(good.task, good.instruction, good.steps[:-1], reward=1.0)  # logged reward is wrong
    short = splice_path(bad, truncated, shared, shared)
    miss = await replay(env, task_id, short, truncated.reward)
    assert not miss.verified and "below the good reward" in miss.reason
