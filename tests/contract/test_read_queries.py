"""The read-model queries of core.store.queries, run against every adapter: SQLite (file) and
PostgreSQL (fresh db): project scoping, keyset pages, the event feed's key check and the
idempotency records' insert-or-nothing claim."""

from __future__ import annotations

import pytest

from core.domain.events import (
    ApiKeyIssued,
    ApiKeyRevoked,
    DomainEvent,
    Metadata,
    NewEvent,
    ProjectCreated,
    RunCancelled,
    RunRequested,
)
from core.domain.ids import new_id, project_stream, run_stream
from core.store.queries import events as event_reads
from core.store.queries import idempotency as records
from core.store.queries import pairs as pair_reads
from core.store.queries import projects as project_reads
from core.store.queries import runs as run_reads
from core.store.queries.paging import PageKeyError, PageRequest
from core.store.sql import SqlEventStore


async def _append(store: SqlEventStore, stream: str, project_id: str, event: DomainEvent) -> None:
    await store.append([NewEvent(stream, event, Metadata(project_id=project_id))])


async def _project(store: SqlEventStore, name: str) -> str:
    project_id = new_id()
    await _append(
        store, project_stream(project_id), project_id, ProjectCreated(project_id=project_id, name=name)
    )
    return project_id


async def _key(store: SqlEventStore, project_id: str, prefix: str) -> str:
    key_id = new_id()
    issued = ApiKeyIssued(
        project_id=project_id, key_id=key_id, prefix=prefix, salt="s", key_hash="h", scopes=("read",)
    )
    await _append(store, project_stream(project_id), project_id, issued)
    return key_id


async def test_projects_and_keys_are_read_inside_their_project(store: SqlEventStore) -> None:
    first = await _project(store, "first")
    second = await _project(store, "second")
    key_id = await _key(store, first, "agr_one")

    found = await project_reads.project(store, first)
    assert found is not None and found["name"] == "first"
    assert await project_reads.project(store, "missing") is None
    assert [p["name"] for p in await project_reads.list_projects(store)] == ["first", "second"]
    assert [p["project_id"] for p in await project_reads.list_projects(store, only=second)] == [second]

    key = await project_reads.key(store, key_id)
    assert key is not None and key["scopes"] == ["read"] and key["revoked"] is False
    assert await project_reads.key(store, key_id, project_id=second) is None  # another project's key
    assert [k["key_id"] for k in await project_reads.project_keys(store, first)] == [key_id]
    assert await project_reads.project_keys(store, second) == []
    assert [k["key_id"] for k in await project_reads.keys_with_prefix(store, "agr_one")] == [key_id]


async def test_the_event_feed_leaves_out_excluded_types_and_sees_a_revocation(store: SqlEventStore) -> None:
    project_id = await _project(store, "p")
    other = await _project(store, "other")
    key_id = await _key(store, project_id, "agr_feed")

    page, holds = await event_reads.project_page(store, project_id, 0, None, (), 200, key_id)
    assert [e.event_type for e in page] == ["ProjectCreated", "ApiKeyIssued"] and holds
    page, holds = await event_reads.project_page(store, project_id, 0, None, {"ApiKeyIssued"}, 200, key_id)
    assert [e.event_type for e in page] == ["ProjectCreated"]
    page, _ = await event_reads.project_page(store, project_id, page[0].position, None, (), 200, key_id)
    assert [e.event_type for e in page] == ["ApiKeyIssued"]  # after a position; never `other`'s events
    assert all(e.metadata.project_id == project_id for e in page)
    assert other not in {e.metadata.project_id for e in page}

    await _append(
        store, project_stream(project_id), project_id, ApiKeyRevoked(project_id=project_id, key_id=key_id)
    )
    _, holds = await event_reads.project_page(store, project_id, 0, ["ApiKeyRevoked"], (), 200, key_id)
    assert holds is False
    _, holds = await event_reads.project_page(store, project_id, 0, None, (), 200, "no-such-key")
    assert holds is False


async def test_runs_come_newest_first_in_keyset_pages(store: SqlEventStore) -> None:
    project_id = await _project(store, "p")
    other = await _project(store, "other")
    run_ids = []
    for _ in range(3):
        run_id = new_id()
        run_ids.append(run_id)
        await _append(
            store,
            run_stream(run_id),
            project_id,
            RunRequested(run_id=run_id, project_id=project_id, config={}),
        )
    foreign = new_id()
    await _append(
        store, run_stream(foreign), other, RunRequested(run_id=foreign, project_id=other, config={})
    )
    await _append(store, run_stream(run_ids[0]), project_id, RunCancelled(run_id=run_ids[0], reason="test"))

    first = await run_reads.runs_page(store, project_id, None, PageRequest(None, 2))
    assert [r["run_id"] for r in first.items] == [run_ids[2], run_ids[1]]
    assert first.last_key == (first.items[-1]["created_at"], run_ids[1])
    rest = await run_reads.runs_page(store, project_id, None, PageRequest(first.last_key, 2))
    assert [r["run_id"] for r in rest.items] == [run_ids[0]] and rest.last_key is None
    cancelled = await run_reads.runs_page(store, project_id, "cancelled", PageRequest(None, 10))
    assert [r["run_id"] for r in cancelled.items] == [run_ids[0]]
    assert await run_reads.run(store, other, run_ids[0]) is None  # another project's run
    run = await run_reads.run(store, project_id, run_ids[0])
    assert run is not None and run["reason"] == "test" and run["status"] == "cancelled"


async def test_a_page_position_its_column_cannot_hold_is_refused(store: SqlEventStore) -> None:
    with pytest.raises(PageKeyError, match="iteration"):
        await pair_reads.run_pairs(store, "p", "r", None, PageRequest((2**40, "x"), 10))
    with pytest.raises(PageKeyError, match="2 values"):
        await pair_reads.run_pairs(store, "p", "r", None, PageRequest((1,), 10))
    page = await pair_reads.run_pairs(store, "p", "r", None, PageRequest((2**31 - 1, "x"), 10))
    assert page.items == [] and page.last_key is None


async def test_an_idempotency_key_is_claimed_once(store: SqlEventStore) -> None:
    async with store.write_transaction() as conn:
        assert await records.claim(conn, "p", "k", "POST", "/v1/runs", "hash", 0, None)
        await records.record_answer(conn, "p", "k", 202, {"run_id": "r"})
    async with store.write_transaction() as conn:
        assert not await records.claim(conn, "p", "k", "POST", "/v1/other", "other", 200, {})
    stored = await records.stored(store, "p", "k")
    assert stored == records.StoredAnswer("p", "k", "POST", "/v1/runs", "hash", 202, {"run_id": "r"})
    assert await records.stored(store, "other-scope", "k") is None
