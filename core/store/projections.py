"""Owns keeping the read models in step with the event log: live projection and full rebuild.

``apply`` runs inside the append transaction (so a read model is never behind or ahead of the
events it is made of); consecutive events of one type go to their projector together, which lets
NodesExpanded batches become one multi-row INSERT. ``rebuild`` empties every projection table and
replays all events in position order in ONE transaction, so readers see either the old or the new
read models, never a half-built one. Event types without a read model are ignored.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from itertools import groupby
from typing import Protocol

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncConnection

from core.store.projectors import datasets, runs, samples, search
from core.store.projectors._sql import Item, Projector
from core.store.rows import row_to_event
from core.store.tables import PROJECTION_TABLES, events

log = logging.getLogger(__name__)

PROJECTORS: dict[str, Projector] = {
    **runs.PROJECTORS,
    **search.PROJECTORS,
    **samples.PROJECTORS,
    **datasets.PROJECTORS,
}

REPLAY_PAGE = 2000


class ReplayStore(Protocol):
    """What ``rebuild`` needs of the event store (``core.store.sql.SqlEventStore`` is one)."""

    async def last_position(self) -> int: ...

    def write_transaction(self) -> AbstractAsyncContextManager[AsyncConnection]: ...


async def apply(conn: AsyncConnection, items: Sequence[Item]) -> None:
    """Project ``(recorded, decoded event)`` pairs, in order, on ``conn``'s transaction. Events with no
    read model are left out first, so those between two of one type (the capture proxy's
    TraceIngested, ModelCallRecorded, TraceIngested, ...) do not split their group."""
    projected = [item for item in items if item[0].event_type in PROJECTORS]
    for event_type, group in groupby(projected, key=lambda item: item[0].event_type):
        projector = PROJECTORS.get(event_type)
        if projector is not None:
            await projector(conn, list(group))


async def rebuild(store: ReplayStore, progress: Callable[[int, int], None] | None = None) -> int:
    """Empty the projection tables and replay every event; returns the number of events replayed.

    ``progress(done, total)`` is called after each page.
    """
    total = await store.last_position()
    replayed = 0
    async with store.write_transaction() as conn:
        for table in reversed(PROJECTION_TABLES):
            await conn.execute(delete(table))
        after = 0
        while True:
            rows = (
                await conn.execute(
                    select(events)
                    .where(events.c.position > after)
                    .order_by(events.c.position)
                    .limit(REPLAY_PAGE)
                )
            ).all()
            if not rows:
                break
            page = [row_to_event(r) for r in rows]
            await apply(conn, [(r, r.event) for r in page if r.event_type in PROJECTORS])
            replayed += len(page)
            after = page[-1].position
            if progress is not None:
                progress(after, total)
    log.info("rebuilt %d projection tables from %d events", len(PROJECTION_TABLES), replayed)
    return replayed
