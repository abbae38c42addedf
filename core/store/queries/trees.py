"""Owns the queries on the ``trees`` read model: which search trees of a run's iteration completed."""

from __future__ import annotations

from sqlalchemy import select

from core.store.ports import EventStore
from core.store.queries import engine_of
from core.store.tables import trees


async def completed_tree_ids(
    store: EventStore, run_id: str, iteration: int, project_id: str | None = None
) -> list[str]:
    """The ids of the iteration's completed trees (of ``project_id``'s run, when given), sorted."""
    query = select(trees.c.tree_id).where(
        trees.c.run_id == run_id, trees.c.iteration == iteration, trees.c.status == "completed"
    )
    if project_id is not None:
        query = query.where(trees.c.project_id == project_id)
    async with engine_of(store).connect() as conn:
        return list((await conn.execute(query.order_by(trees.c.tree_id))).scalars().all())
