"""Owns the reads of the ``traces`` read model: a project's trace (by its id, or by the producer's
id: its external id), which external ids are already stored, a trace with its revision sample, and
the project's traces page by page (filtered, newest first).

For the workers: a trace's partners (same
project and task key, the other outcome), oldest first."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypedDict, cast

from sqlalchemy import RowMapping, select

from core.store.ports import EventStore
from core.store.queries import engine_of
from core.store.queries._db import Db, connection, matching, owned
from core.store.queries.paging import Page, PageRequest, keyset
from core.store.queries.samples import SampleRow, as_sample
from core.store.tables import samples, traces

PAGE_KEY: tuple[type, ...] = (datetime, str)
"""The types of a traces page's position: (created_at, trace_id), newest first."""


class TraceRow(TypedDict):
    trace_id: str
    project_id: str
    task_key: str
    outcome: str
    source_format: str
    external_id: str | None
    status: str
    transition_index: int | None
    strategy: str | None
    sample_id: str | None
    created_at: datetime
    pair_id: str | None
    reason: str | None
    metadata: dict[str, Any] | None


@dataclass(frozen=True)
class TraceFilter:
    """Which of a project's traces: each field, when set, must match; ``metadata`` keys must hold
    their values (compared as text); ``since`` is inclusive, ``until`` exclusive."""

    task_key: str | None = None
    outcome: str | None = None
    status: str | None = None
    source_format: str | None = None
    external_id: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)


def _trace(row: RowMapping) -> TraceRow:
    return cast(TraceRow, dict(row))


async def trace(db: Db, project_id: str, trace_id: str) -> TraceRow | None:
    """The trace, None when missing or in another project."""
    row = await owned(db, traces, "trace_id", trace_id, project_id)
    return _trace(row) if row is not None else None


async def external_traces(db: Db, project_id: str, external_ids: list[str]) -> dict[str, str]:
    """Producer id -> trace id for those of ``external_ids`` stored in the project (one query)."""
    if not external_ids:
        return {}
    query = select(traces.c.external_id, traces.c.trace_id).where(
        traces.c.project_id == project_id, traces.c.external_id.in_(sorted(set(external_ids)))
    )
    async with connection(db) as conn:
        return {row.external_id: row.trace_id for row in (await conn.execute(query)).all()}


async def trace_by_reference(db: Db, project_id: str, reference: str) -> TraceRow | None:
    """The trace ``reference`` names: an agentr trace id, else the producer's id (external id; for
    OTLP traces the 32-hex trace id); None when neither names a trace of the project."""
    async with connection(db) as conn:
        row = await trace(conn, project_id, reference)
        if row is not None:
            return row
        by_external = (await external_traces(conn, project_id, [reference])).get(reference)
        return await trace(conn, project_id, by_external) if by_external is not None else None


async def trace_with_sample(
    db: Db, project_id: str, trace_id: str
) -> tuple[TraceRow, SampleRow | None] | None:
    """The trace and its revision sample (None before it has one); None when there is no trace."""
    async with connection(db) as conn:
        row = await trace(conn, project_id, trace_id)
        if row is None:
            return None
        sample = None
        if row["sample_id"] is not None:
            found = (
                (await conn.execute(select(samples).where(samples.c.sample_id == row["sample_id"])))
                .mappings()
                .first()
            )
            sample = as_sample(found) if found is not None else None
    return row, sample


async def traces_page(db: Db, project_id: str, where: TraceFilter, request: PageRequest) -> Page[TraceRow]:
    """One page of the project's traces that match ``where``, newest first."""
    query = select(traces).where(traces.c.project_id == project_id)
    for key, wanted in where.metadata.items():
        query = query.where(traces.c.metadata[key].as_string() == wanted)
    query = matching(query, traces, where, ("task_key", "outcome", "status", "source_format", "external_id"))
    if where.since is not None:
        query = query.where(traces.c.created_at >= where.since)
    if where.until is not None:
        query = query.where(traces.c.created_at < where.until)
    return await keyset(db, query, [traces.c.created_at, traces.c.trace_id], request, _trace, descending=True)


async def task_trace_ids(
    store: EventStore, project_id: str, task_key: str, outcome: str, *, exclude: str | None = None
) -> list[str]:
    """The ids of the project's traces of ``task_key`` with ``outcome`` (but ``exclude``), in the
    order they were ingested."""
    query = select(traces.c.trace_id).where(
        traces.c.project_id == project_id, traces.c.task_key == task_key, traces.c.outcome == outcome
    )
    if exclude is not None:
        query = query.where(traces.c.trace_id != exclude)
    async with engine_of(store).connect() as conn:
        rows = await conn.execute(query.order_by(traces.c.created_at, traces.c.trace_id))
        return list(rows.scalars().all())
