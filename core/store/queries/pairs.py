"""Owns the reads of the ``pairs`` read model: the project's pairs page by page (filtered), a
run's pairs page by page, and which pairs a run's iteration found.

For the workers: which pair ids a run (or one of its iterations)
found, and how many of an iteration's the splicer rejected."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict, cast

from sqlalchemy import RowMapping, func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from core.store.ports import EventStore
from core.store.queries import engine_of
from core.store.queries._db import Db, matching, of_run
from core.store.queries.paging import Page, PageRequest, keyset
from core.store.tables import pairs

PROJECT_PAGE_KEY: tuple[type, ...] = (str,)
"""The type of a project pairs page's position: (pair_id,)."""
RUN_PAGE_KEY: tuple[type, ...] = (int, str)
"""The types of a run pairs page's position: (iteration, pair_id)."""


class PairRow(TypedDict):
    pair_id: str
    run_id: str | None
    project_id: str | None
    iteration: int
    tree_id: str | None
    source: str
    task_key: str
    status: str
    shared_steps: int
    transition_index: int | None
    strategy: str | None
    reason: str | None
    critic_index: int | None
    oracle_index: int | None
    fallback: bool | None
    uncertain: int | None
    margin: float | None
    corrections: int


@dataclass(frozen=True)
class PairFilter:
    """Which of a project's pairs: each field, when set, must match."""

    source: str | None = None
    task_key: str | None = None
    status: str | None = None
    strategy: str | None = None
    run_id: str | None = None


def _pair(row: RowMapping) -> PairRow:
    return cast(PairRow, dict(row))


async def project_pairs(db: Db, project_id: str, where: PairFilter, request: PageRequest) -> Page[PairRow]:
    """One page of the project's pairs (by pair id) that match ``where``."""
    query = select(pairs).where(pairs.c.project_id == project_id)
    query = matching(query, pairs, where, ("source", "task_key", "status", "strategy", "run_id"))
    return await keyset(db, query, [pairs.c.pair_id], request, _pair)


async def run_pairs(
    db: Db, project_id: str, run_id: str, iteration: int | None, request: PageRequest
) -> Page[PairRow]:
    """One page of a run's pairs (one iteration's when given), by iteration and pair id."""
    query = of_run(pairs, project_id, run_id, iteration)
    return await keyset(db, query, [pairs.c.iteration, pairs.c.pair_id], request, _pair)


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
