"""Owns the queries on the ``traces`` read model that the workers need: a trace's partners (same
project and task key, the other outcome), oldest first."""

from __future__ import annotations

from sqlalchemy import select

from core.store.ports import EventStore
from core.store.queries import engine_of
from core.store.tables import traces


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
