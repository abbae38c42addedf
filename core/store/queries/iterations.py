"""Owns the queries on the ``iterations`` read model: one iteration's progress counters, read together
with its rejected pairs and its samples (what the iteration's dataset signal is decided from)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select

from core.store.ports import EventStore
from core.store.queries import engine_of
from core.store.queries.pairs import read_rejected_count
from core.store.queries.samples import StoredSample, read_iteration_samples
from core.store.tables import iterations


@dataclass(frozen=True)
class IterationProgress:
    """How far an iteration got: trees expected / completed / failed, pairs found, revision samples
    materialized, and the reward threshold ``alpha`` a good trajectory must reach."""

    alpha: float
    trees_expected: int
    trees_done: int
    trees_failed: int
    pairs: int
    revisions: int
    rejected: int  # pairs the splicer rejected (``pairs`` model)


async def iteration_progress(
    store: EventStore, run_id: str, iteration: int
) -> tuple[IterationProgress, list[StoredSample]] | None:
    """The iteration's counters and its samples, read on one connection (one snapshot on SQLite);
    None before its ``IterationStarted`` is projected."""
    query = select(
        iterations.c.alpha,
        iterations.c.trees_expected,
        iterations.c.trees_done,
        iterations.c.trees_failed,
        iterations.c.pairs,
        iterations.c.revisions,
    ).where(iterations.c.run_id == run_id, iterations.c.iteration == iteration)
    async with engine_of(store).connect() as conn:
        row = (await conn.execute(query)).first()
        if row is None:
            return None
        rejected = await read_rejected_count(conn, run_id, iteration)
        sample_rows = await read_iteration_samples(conn, run_id, iteration)
    return IterationProgress(*row, rejected=rejected), sample_rows
