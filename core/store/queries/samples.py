"""Owns the queries on the ``samples`` read model: an iteration's revision and good samples as
stored, and the mean revision length per iteration."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from core.store.ports import EventStore
from core.store.queries import engine_of
from core.store.tables import samples


@dataclass(frozen=True)
class SampleRow:
    """One row of the samples model: ``kind`` is "revision" (``data``: a TrainingSample) or "good"
    (``data``: a Trajectory); ``position`` is the store position of the event that made it."""

    sample_id: str
    kind: str
    data: dict[str, Any]
    position: int
    template_id: str | None


async def read_iteration_samples(conn: AsyncConnection, run_id: str, iteration: int) -> list[SampleRow]:
    """``iteration_samples`` on an open connection (to read it beside other models in one go)."""
    query = (
        select(samples.c.sample_id, samples.c.kind, samples.c.data, samples.c.position, samples.c.template_id)
        .where(samples.c.run_id == run_id, samples.c.iteration == iteration)
        .order_by(samples.c.position, samples.c.sample_id)
    )
    rows = (await conn.execute(query)).all()
    return [SampleRow(r.sample_id, r.kind, r.data, r.position, r.template_id) for r in rows]


async def iteration_samples(store: EventStore, run_id: str, iteration: int) -> list[SampleRow]:
    """The iteration's samples in store-position order (then by id)."""
    async with engine_of(store).connect() as conn:
        return await read_iteration_samples(conn, run_id, iteration)


async def revision_lengths(store: EventStore, run_id: str) -> dict[int, float]:
    """Mean ``RevisionMaterialized.revision_length`` per iteration of the run."""
    query = (
        select(samples.c.iteration, func.avg(samples.c.revision_length))
        .where(samples.c.run_id == run_id, samples.c.kind == "revision")
        .group_by(samples.c.iteration)
    )
    async with engine_of(store).connect() as conn:
        rows = (await conn.execute(query)).all()
    return {int(it): float(avg) for it, avg in rows if avg is not None}
