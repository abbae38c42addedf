"""Owns the queries on the ``pairs`` read model: which pair ids a run (or one of its iterations)
found, and how many of an iteration's the splicer rejected."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from core.store.ports import EventStore
from core.store.queries import engine_of
from core.store.tables import pairs


async def pair_ids(
    store: EventStore, run_id: str, iteration: int | None = None, project_id: str | None = None
) -> list[str]:
    """The run's pair ids (of ``iteration`` only, when given; of ``project_id``'s run, when given),
    sorted."""
    query = select(pairs.c.pair_id).where(pairs.c.run_id == run_id)
    if iteration is not None:
        query = query.where(pairs.c.iteration == iteration)
    if project_id is not None:
        query = query.where(pairs.c.project_id == project_id)
    async with engine_of(store).connect() as conn:
        return list((await conn.execute(query.order_by(pairs.c.pair_id))).scalars().all())


async def read_rejected_count(conn: AsyncConnection, run_id: str, iteration: int) -> int:
    """How many of the iteration's pairs the splicer rejected (``status == "rejected"``), on an open
    connection."""
    query = select(func.count()).where(
        pairs.c.run_id == run_id, pairs.c.iteration == iteration, pairs.c.status == "rejected"
    )
    return int((await conn.execute(query)).scalar_one())
