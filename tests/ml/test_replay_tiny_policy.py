"""The replay critic with a real tiny transformers model as the continuation policy (issue #47),
locally and served by `agentr model serve`: the failed trace is replayed in TextCraft, the model's
sampled continuations from each probed prefix are played by the batched episode loop, and since
this model solves the task from the start in none of them, the verdict says so by name and names no
step - never a guess - and the critic worker makes no pair of the trace (its ``TraceUnpaired``
carries the reason). Where a sampled policy's continuation after the decisive step does succeed,
the pair becomes a revision sample (tests/integration/test_replay_recovery.py, with the noisy
expert as the sampled policy)."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.domain.events import Metadata, NewEvent, PairFound, ReplayProbed, TraceIngested, TraceUnpaired
from core.domain.ids import derived_id, new_id, pair_stream, trace_stream
from core.llm.hf import HFPolicy
from core.llm.policy_cache import PolicyCache
from core.runtime.settings import Settings
from core.store.factory import open_store
from critic_service.critic import CriticConfig, critique
from critic_service.service import CriticHandlers
from tests.integration.test_replay_critic import _play, _textcraft_task
from tests.support import TinySpec

NAME = "tiny-replay-policy"


@pytest.fixture(scope="module")
def tiny_spec() -> TinySpec:
    return TinySpec(name=NAME, seed=5, hidden=32, layers=2, vocab_size=512)


async def test_the_tiny_models_continuations_verify_nothing_and_say_so(local: HFPolicy) -> None:
    task, gold = _textcraft_task()
    uri = f"textcraft?max_steps={len(gold) + 1}"
    bad = await _play(uri, task, [gold[0], "inventory", "inventory", *gold[1:]])
    config = CriticConfig.from_data(
        {"strategy": "replay", "replay_policy": "model", "replay_m": 2, "replay_budget": 8}
    )
    result = await critique(config, bad, 0, local, env_uri=uri, task_id=task)
    assert result.unverified is not None and "succeeds after prefix 0 in 0 of 2" in result.unverified
    assert result.verdicts == () and result.transition_index == len(bad.steps) - 1 and result.fallback
    (start,) = [p for p in result.probes if p.prefix == 0]
    assert start.m == 2 and start.spent == 2 and start.successes == 0
    # the model's own sampled turns were played (two continuations, each with at least one action)
    assert len(start.detail.continuations) == 2
    assert all(c.actions and c.reward < 1.0 for c in start.detail.continuations)


async def test_the_critic_worker_names_why_a_tiny_policy_made_no_pair(
    local: HFPolicy, tiny_folder: Path, pg_url: str
) -> None:
    task, gold = _textcraft_task()
    uri = f"textcraft?max_steps={len(gold) + 1}"
    bad = await _play(uri, task, [gold[0], "inventory", "inventory", *gold[1:]])
    store = await open_store(pg_url, create_tables=True)
    try:
        settings = Settings(  # type: ignore[call-arg]
            critic_model=str(tiny_folder),
            critic_trace_replay_policy="model",
            critic_trace_replay_m=2,
            critic_trace_replay_budget=8,
        )
        opened: list[str] = []

        def opener(ref: str) -> HFPolicy:
            opened.append(ref)
            return local

        handlers = CriticHandlers(settings, store, PolicyCache(opener))
        trace_id, project = new_id(), new_id()
        event = TraceIngested(trace_id, project, "k", bad, "failure", "openai", env_uri=uri, env_task_id=task)
        await store.append([NewEvent(trace_stream(trace_id), event, Metadata(project_id=project))])
        (recorded,) = await store.read_stream(trace_stream(trace_id))
        result = await handlers.on_trace_ingested(recorded)
        assert opened == [str(tiny_folder)]
        made = [e.event for e in result.events]
        assert not [e for e in made if isinstance(e, PairFound | ReplayProbed)]
        (unpaired,) = [e for e in made if isinstance(e, TraceUnpaired)]
        assert "the replay critic in" in unpaired.reason and "in 0 of 2" in unpaired.reason
        assert await store.stream_version(pair_stream(derived_id("trace-pair", trace_id))) < 0
    finally:
        await store.close()


async def test_a_served_models_continuations_go_through_its_chat_endpoint(server: str) -> None:
    """The same replay with the model SERVED (`agentr model serve`, OpenAI-compatible): the
    continuations are sampled over HTTP, and the verdict is the same named refusal."""
    from core.llm.registry import open_policy

    policy = open_policy(f"{server}#{NAME}")
    task, gold = _textcraft_task()
    uri = f"textcraft?max_steps={len(gold) + 1}"
    bad = await _play(uri, task, [gold[0], "inventory", "inventory", *gold[1:]])
    config = CriticConfig.from_data(
        {"strategy": "replay", "replay_policy": "model", "replay_m": 2, "replay_budget": 8}
    )
    try:
        result = await critique(config, bad, 0, policy, env_uri=uri, task_id=task)
    finally:
        await policy.close()
    assert result.unverified is not None and "in 0 of 2" in result.unverified
    (start,) = [p for p in result.probes if p.prefix == 0]
    assert start.detail.policy == policy.model_version and len(start.detail.continuations) == 2
    assert all(c.actions for c in start.detail.continuations)
