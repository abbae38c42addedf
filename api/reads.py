"""Owns the API's answer to a project-scoped read that found nothing: 404 naming the kind and id.

The queries (core.store.queries) read a row only inside the caller's project, so a row of another
project answers exactly like a missing one and ids never leak across projects. ``owned_row`` is
the same read for routes that still pass their own table; ``external_traces`` maps producer ids
to trace ids (core.store.queries.traces) for the OTLP receiver.
"""

from __future__ import annotations

from typing import TypeVar

from sqlalchemy import RowMapping, Table
from sqlalchemy.ext.asyncio import AsyncConnection

from api.errors import not_found
from core.store.queries import traces as trace_reads
from core.store.queries._db import Db, owned

T = TypeVar("T")


def found(row: T | None, what: str, value: object) -> T:
    """``row``; 404 naming ``what`` and ``value`` when the read found nothing."""
    if row is None:
        raise not_found(what, value)
    return row


async def owned_row(
    conn: AsyncConnection, table: Table, key: str, value: str, project_id: str, what: str
) -> RowMapping:
    """The row of ``table`` whose column ``key`` is ``value`` in ``project_id``; 404 otherwise."""
    return found(await owned(conn, table, key, value, project_id), what, value)


async def external_traces(db: Db, project_id: str, external_ids: list[str]) -> dict[str, str]:
    """Producer id -> trace id for those of ``external_ids`` stored in the project (one query)."""
    return await trace_reads.external_traces(db, project_id, external_ids)
