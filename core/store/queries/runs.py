"""Owns the reads of the ``runs`` and ``iterations`` read models: a project's run, its runs page by
page, a run's iterations (all, the latest, one), the models a project's runs name, and the per
iteration counts a run's report is made of (samples, pairs, rejected pairs, trees)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypedDict, cast

from sqlalchemy import Integer, RowMapping, func, select

from core.store.queries._db import Db, connection, owned
from core.store.queries.paging import Page, PageRequest, keyset
from core.store.tables import iterations, pairs, runs, samples

RUNS_PAGE_KEY: tuple[type, ...] = (datetime, str)
"""The types of a runs page's position: (created_at, run_id), newest first."""


class RunRow(TypedDict):
    run_id: str
    project_id: str
    status: str
    config: dict[str, Any]
    current_iteration: int
    final_model_ref: str | None
    reason: str | None
    summary: dict[str, Any] | None
    created_at: datetime
    updated_at: datetime


class IterationRow(TypedDict):
    run_id: str
    iteration: int
    project_id: str | None
    status: str
    model_ref: str
    alpha: float
    trees_expected: int
    trees_done: int
    trees_failed: int
    pairs: int
    revisions: int
    goods: int
    dataset_id: str | None
    checkpoint: str | None
    metrics: dict[str, Any]
    revision_length_mean: float | None
    reason: str | None
    updated_at: datetime


def _run(row: RowMapping) -> RunRow:
    return cast(RunRow, dict(row))


def _iteration(row: RowMapping) -> IterationRow:
    return cast(IterationRow, dict(row))


async def run(db: Db, project_id: str, run_id: str) -> RunRow | None:
    """The run, None when missing or in another project."""
    row = await owned(db, runs, "run_id", run_id, project_id)
    return _run(row) if row is not None else None


async def runs_page(db: Db, project_id: str, status: str | None, request: PageRequest) -> Page[RunRow]:
    """One page of the project's runs (only ``status`` when given), newest first."""
    query = select(runs).where(runs.c.project_id == project_id)
    if status is not None:
        query = query.where(runs.c.status == status)
    return await keyset(db, query, [runs.c.created_at, runs.c.run_id], request, _run, descending=True)


async def run_iterations(db: Db, run_id: str) -> list[IterationRow]:
    """The run's iterations in order."""
    query = select(iterations).where(iterations.c.run_id == run_id).order_by(iterations.c.iteration)
    async with connection(db) as conn:
        return [_iteration(row) for row in (await conn.execute(query)).mappings().all()]


async def latest_iteration(db: Db, run_id: str) -> IterationRow | None:
    """The run's latest iteration (None before its first one starts)."""
    query = select(iterations).where(iterations.c.run_id == run_id).order_by(iterations.c.iteration.desc())
    async with connection(db) as conn:
        row = (await conn.execute(query)).mappings().first()
    return _iteration(row) if row is not None else None


async def iteration(db: Db, run_id: str, number: int) -> IterationRow | None:
    query = select(iterations).where(iterations.c.run_id == run_id, iterations.c.iteration == number)
    async with connection(db) as conn:
        row = (await conn.execute(query)).mappings().first()
    return _iteration(row) if row is not None else None


@dataclass(frozen=True)
class ProjectModels:
    """What the project's runs name: each run's config (newest run first) and each iteration's
    model and checkpoint as ``(run_id, model_ref, checkpoint)``."""

    configs: list[tuple[str, dict[str, Any]]]
    iteration_models: list[tuple[str, str, str | None]]


async def project_models(db: Db, project_id: str) -> ProjectModels:
    async with connection(db) as conn:
        run_rows = (
            await conn.execute(
                select(runs.c.run_id, runs.c.config)
                .where(runs.c.project_id == project_id)
                .order_by(runs.c.created_at.desc(), runs.c.run_id)
            )
        ).all()
        it_rows = (
            await conn.execute(
                select(iterations.c.run_id, iterations.c.model_ref, iterations.c.checkpoint).where(
                    iterations.c.run_id.in_(sorted({row[0] for row in run_rows}))
                )
            )
        ).all()
    return ProjectModels(
        [(run_id, config) for run_id, config in run_rows],
        [(run_id, model_ref, checkpoint) for run_id, model_ref, checkpoint in it_rows],
    )


@dataclass(frozen=True)
class SampleCount:
    """An iteration's samples of one kind: how many, how many verified, their mean revision length."""

    iteration: int
    kind: str
    count: int
    verified: int
    revision_length_mean: float | None


@dataclass(frozen=True)
class RunDatasetCounts:
    """Per iteration: samples by kind, pairs found, rejected pairs' reasons and trees searched."""

    samples: list[SampleCount]
    pairs: dict[int, int]
    rejected: list[tuple[int, str | None]]
    trees: dict[int, int]


async def dataset_counts(db: Db, run_id: str) -> RunDatasetCounts:
    async with connection(db) as conn:
        rows = (
            await conn.execute(
                select(
                    samples.c.iteration,
                    samples.c.kind,
                    func.count(),
                    func.sum(func.coalesce(samples.c.verified, False).cast(Integer())),
                    func.avg(samples.c.revision_length),
                )
                .where(samples.c.run_id == run_id)
                .group_by(samples.c.iteration, samples.c.kind)
            )
        ).all()
        pair_rows = (
            await conn.execute(
                select(pairs.c.iteration, func.count())
                .where(pairs.c.run_id == run_id)
                .group_by(pairs.c.iteration)
            )
        ).all()
        rejected_rows = (
            await conn.execute(
                select(pairs.c.iteration, pairs.c.reason).where(
                    pairs.c.run_id == run_id, pairs.c.status == "rejected"
                )
            )
        ).all()
        tree_rows = (
            await conn.execute(
                select(iterations.c.iteration, iterations.c.trees_done).where(iterations.c.run_id == run_id)
            )
        ).all()
    return RunDatasetCounts(
        samples=[
            SampleCount(
                int(it), kind, int(count), int(verified or 0), None if length is None else float(length)
            )
            for it, kind, count, verified, length in rows
        ],
        pairs={int(it): int(count) for it, count in pair_rows},
        rejected=[(int(it), reason) for it, reason in rejected_rows],
        trees={int(it): int(done) for it, done in tree_rows},
    )
