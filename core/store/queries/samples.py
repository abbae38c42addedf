"""Owns the reads of the ``samples`` read model: one sample of a project, a run's samples page by
page, and the revision facts (length, verified) of a run's iteration.

For the workers: an iteration's revision and good samples as
stored, and the mean revision length per iteration."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple, TypedDict, cast

from sqlalchemy import RowMapping, func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from core.store.ports import EventStore
from core.store.queries import engine_of
from core.store.queries._db import Db, connection, of_run, owned
from core.store.queries.paging import Page, PageRequest, keyset
from core.store.tables import samples

RUN_PAGE_KEY: tuple[type, ...] = (int, str)
"""The types of a run samples page's position: (position, sample_id)."""


class SampleRow(TypedDict):
    """A sample's row: ``data`` holds the training sample (api.datasets.row_to_sample reads it)."""

    sample_id: str
    run_id: str | None
    project_id: str | None
    iteration: int
    kind: str
    pair_id: str | None
    tree_id: str | None
    position: int
    data: dict[str, Any]
    verified: bool | None
    template_id: str | None
    revision_length: int | None


class RevisionFacts(NamedTuple):
    revision_length: int | None
    verified: bool | None


def as_sample(row: RowMapping) -> SampleRow:
    return cast(SampleRow, dict(row))


async def sample(db: Db, project_id: str, sample_id: str) -> SampleRow | None:
    """The sample, None when missing or in another project."""
    row = await owned(db, samples, "sample_id", sample_id, project_id)
    return as_sample(row) if row is not None else None


async def run_samples(
    db: Db, project_id: str, run_id: str, iteration: int | None, kind: str | None, request: PageRequest
) -> Page[SampleRow]:
    """One page of a run's samples (one iteration's, one kind's when given), in log order."""
    query = of_run(samples, project_id, run_id, iteration)
    if kind is not None:
        query = query.where(samples.c.kind == kind)
    return await keyset(db, query, [samples.c.position, samples.c.sample_id], request, as_sample)


async def revision_facts(db: Db, project_id: str, run_id: str, iteration: int) -> list[RevisionFacts]:
    """Length and verified flag of each revision sample of the run's iteration."""
    query = select(samples.c.revision_length, samples.c.verified).where(
        samples.c.run_id == run_id,
        samples.c.iteration == iteration,
        samples.c.kind == "revision",
        samples.c.project_id == project_id,
    )
    async with connection(db) as conn:
        return [RevisionFacts(length, verified) for length, verified in (await conn.execute(query)).all()]


@dataclass(frozen=True)
class StoredSample:
    """One row of the samples model: ``kind`` is "revision" (``data``: a TrainingSample) or "good"
    (``data``: a Trajectory); ``position`` is the store position of the event that made it."""

    sample_id: str
    kind: str
    data: dict[str, Any]
    position: int
    template_id: str | None


async def read_iteration_samples(conn: AsyncConnection, run_id: str, iteration: int) -> list[StoredSample]:
    """``iteration_samples`` on an open connection (to read it beside other models in one go)."""
    query = (
        select(samples.c.sample_id, samples.c.kind, samples.c.data, samples.c.position, samples.c.template_id)
        .where(samples.c.run_id == run_id, samples.c.iteration == iteration)
        .order_by(samples.c.position, samples.c.sample_id)
    )
    rows = (await conn.execute(query)).all()
    return [StoredSample(r.sample_id, r.kind, r.data, r.position, r.template_id) for r in rows]


async def iteration_samples(store: EventStore, run_id: str, iteration: int) -> list[StoredSample]:
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
