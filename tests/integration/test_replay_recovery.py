"""ONE failed trace becomes a REVISION sample by itself when its error was recoverable (issue #47,
item 3): the replay critic continues the trace with a SAMPLED policy (``critic_trace_replay_policy:
model``; here the noisy expert, a real ``Policy`` that reads the conversation and makes seeded
mistakes), finds the decisive step t*, and since a continuation from AFTER a_{t*} succeeded, the
pair's good path is a_0..a_{t*} + that continuation: the splice worker makes the revision (the failed
prefix through t*, a reflection, the recovery) and its replay verifies it. With the expert (no
recovery possible) the same kind of trace gives a preference pair instead
(tests/api/test_api_replay_traces.py). Real PostgreSQL and Redis Streams workers.

A real tiny transformers model as the continuation policy solves no TextCraft task, so there the
replay names why and makes nothing (tests/ml/test_replay_tiny_policy.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from core.bus.redis_streams import RedisStreamsBus
from core.domain.events import (
    FirstErrorMarked,
    Metadata,
    NewEvent,
    PairFound,
    ReplayProbed,
    RevisionMaterialized,
    RevisionRejected,
    TraceIngested,
)
from core.domain.ids import derived_id, new_id, pair_stream, trace_stream
from core.domain.splice import SpliceError, splice_path
from core.domain.trajectory import Trajectory
from core.formats.pair_records import PairSource, dpo_records, prm_records
from core.llm.ports import Policy
from core.runtime.settings import Settings
from core.store.factory import open_store
from search_service.noisy_expert import NoisyExpertPolicy
from tests.integration.test_replay_critic import _play, _textcraft_task
from tests.trace_pipeline import settle_workers

SLACK = 2  # steps beyond the expert plan's length the task allows


@pytest.fixture
async def workers(pg_url: str, redis_url: str, redis_prefix: str) -> AsyncIterator[Any]:
    store = await open_store(pg_url, create_tables=True)
    bus = RedisStreamsBus(redis_url, redis_prefix)
    opened: list[str] = []

    def opener(ref: str) -> Policy:
        opened.append(ref)
        if ref != "noisy-expert":
            raise AssertionError(f"unexpected model {ref}")
        return NoisyExpertPolicy(mistake_rate=0.5)

    settings = Settings(  # type: ignore[call-arg]
        block_ms=50,
        critic_trace_strategy="rules",
        critic_model="noisy-expert",
        critic_trace_replay_policy="model",
        critic_trace_replay_m=8,
        critic_trace_replay_budget=128,
    )
    settle = settle_workers(store, bus, settings, critic_opener=opener)

    try:
        yield store, settle, opened
    finally:
        await bus.close()
        await store.close()


async def test_a_recoverable_error_in_one_failed_trace_becomes_a_verified_revision(workers: Any) -> None:
    store, settle, opened = workers
    task, gold = _textcraft_task()
    uri = f"textcraft?max_steps={len(gold) + SLACK}"
    # three wasted look-ups under a limit with two to spare: the path runs out of steps
    bad = await _play(uri, task, [gold[0], *["inventory"] * (SLACK + 1), *gold[1:]])
    assert bad.reward == 0.0
    trace_id, project = new_id(), new_id()
    ingested = TraceIngested(
        trace_id, project, "daylight", bad, "failure", "openai", env_uri=uri, env_task_id=task
    )
    await store.append([NewEvent(trace_stream(trace_id), ingested, Metadata(project_id=project))])
    await settle()

    pair_id = derived_id("trace-pair", trace_id)
    events = [r.event for r in await store.read_stream(pair_stream(pair_id))]
    probes = [e for e in events if isinstance(e, ReplayProbed)]
    (pair,) = [e for e in events if isinstance(e, PairFound)]
    (marked,) = [e for e in events if isinstance(e, FirstErrorMarked)]
    assert opened and set(opened) == {"noisy-expert"}
    assert probes and {p.policy for p in probes} == {NoisyExpertPolicy(mistake_rate=0.5).model_version}
    assert all(p.m == 8 for p in probes if p.spent)
    t = marked.transition_index
    assert marked.strategy == "replay" and pair.shared_steps == t and pair.good_leaf_id is None
    at = {p.prefix_steps: p for p in probes}
    # the decisive step: V(t + 1) fell below half of V(0), yet some continuation after a_t succeeded
    assert at[t + 1].successes > 0 and at[t + 1].successes < 0.5 * at[0].successes
    assert pair.good.provenance["continues"] == "after" and pair.good.reward == 1.0
    # the good path IS the failed prefix through a_t and a continuation the probe ran
    assert pair.good.steps[: t + 1] == pair.bad.steps[: t + 1]
    recovery = tuple(s.action for s in pair.good.steps[t + 1 :])
    succeeded = [c for c, r in zip(at[t + 1].continuations, at[t + 1].rewards, strict=True) if r >= 1.0]
    assert recovery in succeeded

    (revision,) = [e for e in events if isinstance(e, RevisionMaterialized | RevisionRejected)]
    assert isinstance(revision, RevisionMaterialized), revision
    assert revision.verified is True and revision.revision_length == 1
    sample = revision.sample
    assert sample.provenance["critic_strategy"] == "replay" and sample.provenance["trace_id"] == trace_id
    assistant = [m for m in sample.messages if m.role == "assistant"]
    # failed prefix through a_t (weight 0), then the reflection opening the recovery (weight 1)
    assert [m.weight for m in assistant] == [0] * (t + 1) + [1] * len(recovery)
    assert [m.why for m in assistant][t : t + 2] == ["bad_step", "reflection"]
    assert assistant[t + 1].content.startswith("Thought: " + sample.provenance["reflection"].strip())
    assert [m.content.rsplit("Action: ", 1)[1] for m in assistant] == [
        *(s.action for s in bad.steps[: t + 1]),
        *recovery,
    ]
    # no preference at the state before a_t (both paths took it): the DPO export skips the pair;
    # the stepwise export labels the steps through t
    source = PairSource(pair, marked, 0)
    assert list(dpo_records([source])) == []
    (prm,) = list(prm_records([source]))
    assert prm["labels"] == [True] * t + [False]


async def test_the_splice_continues_a_recovery_after_t_prime() -> None:
    task, gold = _textcraft_task()
    uri = f"textcraft?max_steps={len(gold) + 1}"
    bad = await _play(uri, task, [gold[0], "inventory", "inventory", *gold[1:]])
    recovered = await _play(uri, task, [gold[0], "inventory", *gold[1:]])
    assert recovered.reward == 1.0
    path = splice_path(bad, recovered, 1, 1)  # took a_1 too, then succeeded: continues after it
    assert [s.action for s in path.steps] == [gold[0], "inventory", *gold[1:]]
    assert [s.action for s in path.bad] == ["inventory"]
    alternative = await _play(uri, task, gold)  # leaves the bad path at 1: continues from there
    assert [s.action for s in splice_path(bad, alternative, 1, 1).good] == gold[1:]
    ended = Trajectory(bad.task, bad.instruction, bad.steps[:2], reward=1.0)
    with pytest.raises(SpliceError, match="nothing after them"):
        splice_path(bad, ended, 1, 1)
