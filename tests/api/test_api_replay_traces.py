"""ONE failed production trace becomes data by itself (issue #47): a tau2 retail trace uploaded over
the real API (PostgreSQL) naming its environment and task, with no successful trace of its task
anywhere, is judged by the replay critic in the real critic worker (Redis Streams): its decisive
step is found by replaying it with tau2's gold actions as the continuation policy, every probe is a
``ReplayProbed`` event, and the expert's verified alternative at that state makes a preference pair
for the DPO export (chosen: the expert's call, rejected: the trace's action) and labels for the
stepwise one. Bad environment names are refused by the API."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from core.bus.redis_streams import RedisStreamsBus
from core.domain.events import (
    FirstErrorMarked,
    PairFound,
    ReplayProbed,
    RevisionMaterialized,
    RevisionRejected,
    TraceIngested,
    TraceUnpaired,
)
from core.domain.good_samples import trajectory_to_sample
from core.domain.ids import derived_id, pair_stream, trace_stream
from core.domain.trajectory import Step, Trajectory
from core.formats.pair_records import dpo_records, prm_records
from core.formats.records import openai_record
from core.runtime.settings import Settings
from core.store.pair_reads import pair_source
from tests.api.conftest import ApiHarness
from tests.trace_pipeline import settle_workers

pytest.importorskip("tau2")


@pytest.fixture
async def settle(api: ApiHarness, redis_url: str, redis_prefix: str) -> AsyncIterator[Any]:
    bus = RedisStreamsBus(redis_url, redis_prefix)
    settings = Settings(block_ms=50, critic_trace_strategy="rules")  # type: ignore[call-arg]
    go = settle_workers(api.store, bus, settings)

    try:
        yield go
    finally:
        await bus.close()


async def _failed_tau2_trace() -> tuple[str, list[str], dict[str, Any]]:
    """A retail task's gold calls with the closing message sent too early (after two calls), played
    in the tau2 environment and written as an OpenAI chat trace."""
    from core.envs.tau2 import Tau2Env, tool_step

    env = Tau2Env("retail")
    task = next(t for t in env.task_ids("all") if len(env.gold_actions(t)) >= 5)
    gold = env.gold_actions(task)
    opening = await env.reset(task)
    steps: list[Step] = []
    for action in [*gold[:2], gold[-1]]:
        result = await env.step(action)
        steps.append(tool_step("I go on.", result, action))
    assert steps[-1].done and steps[-1].reward == 0.0
    trajectory = Trajectory(opening, env.instruction, tuple(steps), reward=0.0, tools=env.tools)
    record = openai_record(trajectory_to_sample(trajectory, "t"))
    messages = [{k: v for k, v in m.items() if k != "weight"} for m in record["messages"]]
    trace = {
        "messages": messages,
        "tools": record.get("tools"),
        "outcome": "failure",
        "task_key": f"retail-{task}",
        "environment": {"uri": "tau2:retail", "task_id": task},
    }
    return task, gold, trace


async def test_one_failed_tau2_trace_naming_its_environment_becomes_a_preference_pair(
    api: ApiHarness, settle: Any
) -> None:
    task, gold, trace = await _failed_tau2_trace()
    project = await api.project("retail-support")
    key = api.auth(await api.key(project, "read", "ingest"))
    accepted = await api.client.post("/v1/traces", json={"format": "openai", "traces": [trace]}, headers=key)
    assert accepted.status_code == 202, accepted.text
    (trace_id,) = accepted.json()["trace_ids"]
    await settle()

    trace_events = [r.event for r in await api.store.read_stream(trace_stream(trace_id))]
    (ingested,) = [e for e in trace_events if isinstance(e, TraceIngested)]
    assert ingested.env_uri == "tau2:retail" and ingested.env_task_id == task
    assert not [e for e in trace_events if isinstance(e, TraceUnpaired)]  # no partner needed
    pair_id = derived_id("trace-pair", trace_id)
    events = [r.event for r in await api.store.read_stream(pair_stream(pair_id))]
    probes = [e for e in events if isinstance(e, ReplayProbed)]
    (pair,) = [e for e in events if isinstance(e, PairFound)]
    (marked,) = [e for e in events if isinstance(e, FirstErrorMarked)]
    # the closing message at step 2 is where success was lost: the gold calls still succeed after
    # step 1, nothing succeeds after the early goodbye
    assert (marked.strategy, marked.transition_index, pair.shared_steps) == ("replay", 2, 2)
    assert pair.source == "trace" and pair.bad_leaf_id == trace_id and pair.good_leaf_id is None
    assert pair.good.reward == 1.0 and pair.good.steps[:2] == pair.bad.steps[:2]
    assert {p.policy for p in probes} == {"tau2-gold"}
    at = {p.prefix_steps: p for p in probes}
    assert at[2].successes == 1 and at[3].successes == 0 and at[3].spent == 0  # the episode was over
    (spliced,) = [e for e in events if isinstance(e, RevisionRejected | RevisionMaterialized)]
    # the early goodbye cannot be recovered from: no verified revision, and the splice says why
    assert isinstance(spliced, RevisionRejected), spliced
    assert spliced.reason.startswith("unverified: the episode ended at step 2"), spliced.reason
    assert at[2].continuations[0] == tuple(pair.good.steps[i].action for i in range(2, len(pair.good.steps)))

    source = await pair_source(api.store, pair_id)
    assert source is not None
    (dpo,) = list(dpo_records([source]))
    chosen, rejected = dpo["preferred_output"][0], dpo["non_preferred_output"][0]
    expected = gold[2].split("(", 1)[0]
    assert chosen["tool_calls"][0]["function"]["name"] == expected  # the expert's next gold call
    assert "###STOP###" in rejected["content"] and not rejected.get("tool_calls")  # the early goodbye
    assert dpo["input"]["tools"] and [m["role"] for m in dpo["input"]["messages"]][:2] == ["system", "user"]
    (prm,) = list(prm_records([source]))
    assert prm["labels"] == [True, True, False]
    assert prm["values"][1:] == [1.0, 0.0]  # the expert's V after steps 1 and 2 (0 or 1)


async def test_a_trace_may_name_only_a_local_environment(api: ApiHarness) -> None:
    project = await api.project("envs")
    key = api.auth(await api.key(project, "ingest"))
    base = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
    for environment, where in (
        ({"uri": "agentgym+http://169.254.169.254/textcraft", "task_id": "1"}, "uri"),
        ({"uri": "python:os:system", "task_id": "1"}, "uri"),
        ({"uri": "tau2:retail"}, "task_id"),
        ({"uri": "tau2:retail", "task_id": ""}, "task_id"),
    ):
        body = {"format": "openai", "traces": [{**base, "environment": environment}]}
        response = await api.client.post("/v1/traces", json=body, headers=key)
        assert response.status_code == 422, (environment, response.text)
        assert "environment" in response.text and where in response.text
