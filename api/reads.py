"""Owns the project-scoped read of one read-model row: by its id, only inside the caller's project.

A row of another project answers exactly like a missing one (404 naming the kind and id), so ids
never leak across projects.
"""

from __future__ import annotations

from sqlalchemy import RowMapping, Table, select
from sqlalchemy.ext.asyncio import AsyncConnection

from api.errors import not_found


async def owned_row(
    conn: AsyncConnection, table: Table, key: str, value: str, project_id: str, what: str
) -> RowMapping:
    """The row of ``table`` whose column ``key`` is ``value`` in ``project_id``; 404 otherwise."""
    query = select(table).where(table.c[key] == value, table.c.project_id == project_id)
    row = (await conn.execute(query)).mappings().first()
    if row is None:
        raise not_found(what, value)
    return row


async def external_trace(conn: AsyncConnection, project_id: str, external_id: str) -> str | None:
    """The trace stored under the producer's id ``external_id`` in the project, if any."""
    return (await external_traces(conn, project_id, [external_id])).get(external_id)


async def external_traces(conn: AsyncConnection, project_id: str, external_ids: list[str]) -> dict[str, str]:
    """Producer id -> trace id for those of ``external_ids`` stored in the project (one query)."""
    from core.store.tables import traces

    if not external_ids:
        return {}
    query = select(traces.c.external_id, traces.c.trace_id).where(
        traces.c.project_id == project_id, traces.c.external_id.in_(sorted(set(external_ids)))
    )
    return {row.external_id: row.trace_id for row in (await conn.execute(query)).all()}
