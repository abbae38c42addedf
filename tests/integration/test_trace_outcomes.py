"""Production traces through the real critic and splice workers (PostgreSQL + Redis): no silent
fallback (a failed trace with no identified error is no_error_found and yields no sample unless the
upload chose `direct`), the trace view and the sample's provenance agree on t', and an outcome set
later (TraceOutcomeSet) triggers the critic."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import select

from core.bus.redis_streams import RedisStreamsBus
from core.domain.events import (
    Metadata,
    NewEvent,
    ProjectCreated,
    RevisionMaterialized,
    RevisionRejected,
    TraceCritiqued,
    TraceIngested,
    TraceOutcomeSet,
)
from core.domain.ids import derived_id, new_id, pair_stream, project_stream, trace_stream
from core.formats.importing import parse_traces
from core.llm.ports import PolicyError
from core.runtime.settings import Settings
from core.store.factory import open_store
from core.store.ports import EventStore
from core.store.sql import SqlEventStore
from core.store.tables import traces
from tests.trace_pipeline import settle_workers

TASK = "What is the balance of account 7?"


def _trace(final: str, lookup_result: str = '{"balance": 3}') -> dict[str, Any]:
    call = {"id": "c1", "type": "function", "function": {"name": "balance", "arguments": '{"account": 7}'}}
    return {
        "messages": [
            {"role": "user", "content": TASK},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": lookup_result},
            {"role": "assistant", "content": final},
        ]
    }


class ScriptedCritic:
    """A critic model over the Policy port whose label scores say Bad exactly where the judged step's
    text holds ``marker`` (the real prompt layout goes in; opened refs are recorded)."""

    opened: list[str] = []

    def __init__(self, ref: str) -> None:
        self.model_version = f"scripted:{ref}"
        self.marker = ref.rsplit("#", 1)[-1]

    @classmethod
    def open(cls, ref: str) -> ScriptedCritic:
        cls.opened.append(ref)
        return cls(ref)

    async def sample(self, conversations: Any, **_: Any) -> Any:
        raise PolicyError("this critic only scores labels")

    async def score_labels(self, conversations: Any, labels: Any) -> list[dict[str, float]]:
        out = []
        for conversation in conversations:
            judged = conversation[-3].content if len(conversation) >= 3 else ""  # the judged action
            bad = self.marker in judged
            out.append({"Good": -2.0 if bad else -0.1, "Bad": -0.1 if bad else -2.0, "Uncertain": -3.0})
        return out

    async def close(self) -> None:
        return None


@pytest.fixture
async def stack(pg_url: str, redis_url: str, redis_prefix: str) -> AsyncIterator[tuple[Any, Any]]:
    store = await open_store(pg_url, create_tables=True)
    bus = RedisStreamsBus(redis_url, redis_prefix)
    # the project's served critic below is one the operator allows (the workers check the list)
    settings = Settings(
        block_ms=50, critic_trace_strategy="rules", allowed_model_urls="http://critic:8000/v1"
    )
    settle = settle_workers(store, bus, settings, rounds=5, critic_opener=ScriptedCritic.open)

    try:
        yield store, settle
    finally:
        await bus.close()
        await store.close()


async def _ingest(store: EventStore, project: str, item: dict[str, Any], outcome: str, **critic: str) -> str:
    (parsed,) = parse_traces([item], "openai")
    trace_id = new_id()
    event = TraceIngested(trace_id, project, "balance-7", parsed.trajectory, outcome, "openai", **critic)  # type: ignore[arg-type]
    await store.append([NewEvent(trace_stream(trace_id), event, Metadata(project_id=project))])
    return trace_id


async def _row(store: SqlEventStore, trace_id: str) -> Any:
    async with store.engine.connect() as conn:
        return (await conn.execute(select(traces).where(traces.c.trace_id == trace_id))).one()


async def test_no_identified_error_is_no_error_found_and_no_sample(stack: tuple[Any, Any]) -> None:
    store, settle = stack
    project = new_id()
    failed = await _ingest(store, project, _trace("I cannot tell."), "failure")
    await _ingest(store, project, _trace("The balance is 3."), "success")
    await settle()
    (critiqued,) = [
        r.event for r in await store.read_stream(trace_stream(failed)) if isinstance(r.event, TraceCritiqued)
    ]
    assert critiqued.transition_index is None and critiqued.strategy == "rules"
    pair_events = [r.event for r in await store.read_stream(pair_stream(derived_id("trace-pair", failed)))]
    (rejected,) = [e for e in pair_events if isinstance(e, RevisionRejected)]
    assert rejected.reason.startswith("critic: no_error_found:") and "direct" in rejected.reason
    assert not [e for e in pair_events if isinstance(e, RevisionMaterialized)]
    row = await _row(store, failed)
    assert (row.status, row.transition_index, row.sample_id) == ("no_error_found", None, None)


async def test_direct_chosen_by_the_upload_revises_and_the_trace_view_agrees(stack: tuple[Any, Any]) -> None:
    store, settle = stack
    project = new_id()
    failed = await _ingest(store, project, _trace("I cannot tell."), "failure", critic_strategy="direct")
    await _ingest(store, project, _trace("The balance is 3."), "success")
    await settle()
    pair_events = [r.event for r in await store.read_stream(pair_stream(derived_id("trace-pair", failed)))]
    (revision,) = [e for e in pair_events if isinstance(e, RevisionMaterialized)]
    row = await _row(store, failed)
    assert row.status == "revised" and row.sample_id == revision.sample_id
    assert row.transition_index == revision.sample.provenance["transition_index"] == 1


async def test_a_tool_error_is_found_and_an_outcome_set_later_triggers_the_critic(
    stack: tuple[Any, Any],
) -> None:
    store, settle = stack
    project = new_id()
    waiting = await _ingest(store, project, _trace("Sorry.", '{"error": "account locked"}'), "unknown")
    await settle()
    assert (await _row(store, waiting)).status == "waiting_for_outcome"
    assert not [
        r for r in await store.read_stream(trace_stream(waiting)) if isinstance(r.event, TraceCritiqued)
    ]
    event = TraceOutcomeSet(trace_id=waiting, outcome="failure", reward=0.0)
    await store.append([NewEvent(trace_stream(waiting), event, Metadata(project_id=project))])
    await settle()
    (critiqued,) = [
        r.event for r in await store.read_stream(trace_stream(waiting)) if isinstance(r.event, TraceCritiqued)
    ]
    assert critiqued.transition_index == 0
    assert "account locked" in critiqued.verdicts[0].reason
    row = await _row(store, waiting)
    # critiqued at step 0; no successful trace of its task key to pair with yet, and the row says so
    assert (row.outcome, row.status, row.transition_index) == ("failure", "unpaired", 0)
    assert row.reason.startswith("no successful trace with task key 'balance-7'")


async def test_the_model_critic_named_by_the_project_or_the_upload_judges_traces(
    stack: tuple[Any, Any],
) -> None:
    store, settle = stack
    project = new_id()
    created = ProjectCreated(
        project, "p", critic_strategy="model", critic_model="http://critic:8000/v1#cannot"
    )
    await store.append([NewEvent(project_stream(project), created, Metadata(project_id=project))])
    by_project = await _ingest(store, project, _trace("I cannot tell."), "failure")
    by_upload = await _ingest(
        store, project, _trace("I cannot tell."), "failure", critic_strategy="model", critic_model="m#balance"
    )
    await settle()
    judged = {}
    for trace_id in (by_project, by_upload):
        (c,) = [
            r.event
            for r in await store.read_stream(trace_stream(trace_id))
            if isinstance(r.event, TraceCritiqued)
        ]
        judged[trace_id] = c
    assert (judged[by_project].strategy, judged[by_project].transition_index) == ("model", 1)  # the answer
    assert judged[by_project].model_version == "scripted:http://critic:8000/v1#cannot"
    assert judged[by_project].verdicts[0].method == "scores"
    assert (judged[by_upload].strategy, judged[by_upload].transition_index) == ("model", 0)  # the call
    assert set(ScriptedCritic.opened) >= {"http://critic:8000/v1#cannot", "m#balance"}
