"""Owns the reads of the ``samples`` read model: one sample of a project, a run's samples page by
page, and the revision facts (length, verified) of a run's iteration."""

from __future__ import annotations

from typing import Any, NamedTuple, TypedDict, cast

from sqlalchemy import RowMapping, select

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
