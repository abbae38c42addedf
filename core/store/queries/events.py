"""Owns reading one project's events in position order (the API's event stream, GET /v1/events).

The page query filters on ``core.store.tables.EVENT_PROJECT``, the expression the
``ix_events_project_position`` index holds, so a poll of a small project reads its own events only,
however many other projects have. ``project_page`` reads the page and then, on the same
connection, whether the reading key still holds (not revoked, not gone): an event committed after
a revocation is never in a page the caller is told it may send.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from sqlalchemy import String, bindparam, func, select

from core.domain.events import RecordedEvent
from core.store.queries._db import Db, connection
from core.store.rows import row_to_event
from core.store.tables import EVENT_PROJECT, api_keys, events


def page_query(
    project_id: str,
    after: int,
    types: Sequence[str] | None,
    exclude: Collection[str] = (),
    limit: int = 200,
) -> Any:
    """The next ``limit`` of ``project_id``'s events after position ``after``: only ``types`` when
    given, never those in ``exclude`` (served by the ``ix_events_project_position`` index).

    The project id is written into the SQL text (it is a UUID from the key's row), so each project has
    its own prepared statement: a cached generic plan then still knows which project it reads, and a
    small project's plan is never the walk of every later event that suits a project holding most."""
    project = bindparam("project_id", project_id, type_=String, literal_execute=True)
    query = select(events).where(project == EVENT_PROJECT, events.c.position > after)
    if exclude:
        query = query.where(events.c.event_type.not_in(sorted(exclude)))
    if types:
        query = query.where(events.c.event_type.in_(list(types)))
    return query.order_by(events.c.position).limit(limit)


async def project_page(
    db: Db,
    project_id: str,
    after: int,
    types: Sequence[str] | None,
    exclude: Collection[str],
    limit: int,
    key_id: str | None,
) -> tuple[list[RecordedEvent], bool]:
    """The next page of the project's events, and whether the key ``key_id`` still holds (read
    after the page)."""
    async with connection(db) as conn:
        rows = (await conn.execute(page_query(project_id, after, types, exclude, limit))).all()
        revoked = await conn.scalar(select(api_keys.c.revoked).where(api_keys.c.key_id == key_id))
    return [row_to_event(row) for row in rows], revoked is False


async def last_project_position(db: Db, project_id: str) -> int:
    """The position of the project's newest event (0 when it has none): where a page that has just
    read its data starts following the stream (served by the ``ix_events_project_position`` index)."""
    project = bindparam("project_id", project_id, type_=String, literal_execute=True)
    async with connection(db) as conn:
        value = await conn.scalar(select(func.max(events.c.position)).where(project == EVENT_PROJECT))
    return int(value or 0)
