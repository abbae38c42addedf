"""Owns the store's reads behind dataset downloads and builds: rows streamed in batches, as the
database holds them, for the api's encoders (api.datasets, api.trace_datasets, api.model_exports).

A download is ONE statement read through a server-side cursor, ``batch`` rows at a time, the next
batch asked for while the caller encodes the one before (the database works while Python encodes,
so a download pays the slower of the two, not their sum). PostgreSQL: the cursor is asyncpg's, on
the pooled connection's driver, inside a read-only REPEATABLE READ transaction, so a file is one
snapshot of the log however long the client takes to read it; rows come back as asyncpg records
(no SQLAlchemy row per record). Other dialects (SQLite): the same statement through SQLAlchemy's
streamed result, in partitions of ``batch``. JSON columns come as their text (``data::text``):
decoding is the encoder's (orjson, core.formats.export.loads), in the batch loop that uses it.

Reads:

* ``iteration_sample_batches``: an iteration's ``samples`` rows (sample id, kind, data text) in
  (position, sample id) order (the samples (run_id, iteration, position, sample_id) index).
* ``event_batches``: one row per given event position, in the order given (a position given twice
  is read twice; one without an event gives a row of None), as (position, event type, event version,
  data text): a named dataset's manifest entries in manifest order, from the EVENT LOG.
* ``fact_batches``: the project's samples made by events at or below a log position, with their
  event's recording time (what a dataset build plans from).
* small look-ups: ``log_position``, ``next_dataset_version``, ``newest_run_config``,
  ``iteration_row``, ``dataset_row``, and the datasets listing's query (``datasets_listing``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from typing import Any

from sqlalchemy import Text, cast, func, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql import Select

from core.store.tables import datasets, events, iterations, runs, samples

DEFAULT_BATCH = 1000

Row = Sequence[Any]

_PG_ITERATION_SAMPLES = """
SELECT sample_id, kind, data::text
FROM samples
WHERE project_id = $1 AND run_id = $2 AND iteration = $3
ORDER BY position, sample_id
"""

# one row per given position, in the given order (LEFT JOIN: a missing event is a row of NULLs)
_PG_EVENTS_AT = """
SELECT e.position, e.event_type, e.event_version, e.data::text
FROM unnest($1::bigint[]) WITH ORDINALITY AS u(position, ord)
LEFT JOIN events e ON e.position = u.position
ORDER BY u.ord
"""

_PG_FACTS = """
SELECT s.sample_id, s.kind, s.position, s.run_id, s.template_id, s.data::text, e.recorded_at
FROM samples s JOIN events e ON e.position = s.position
WHERE s.project_id = $1 AND s.position <= $2
ORDER BY s.position, s.sample_id
"""


def _is_postgres(engine: AsyncEngine) -> bool:
    return engine.dialect.name == "postgresql"


async def _ahead(
    fetch: Callable[[], Awaitable[Sequence[Row]]], batch: int
) -> AsyncGenerator[Sequence[Row], None]:
    """Batches from ``fetch()`` (each up to ``batch`` rows; a shorter one is the last), the next asked
    for while the caller works on this one. A caller that stops early cancels the fetch in flight."""
    pending: asyncio.Future[Sequence[Row]] | None = asyncio.ensure_future(fetch())
    try:
        while pending is not None:
            rows = await pending
            pending = asyncio.ensure_future(fetch()) if len(rows) >= batch else None
            if rows:
                yield rows
    finally:
        if pending is not None:  # the client went away: do not leave the fetch behind
            pending.cancel()
            with contextlib.suppress(BaseException):
                await pending


async def _pg_batches(
    engine: AsyncEngine, sql: str, args: Sequence[Any], batch: int
) -> AsyncGenerator[Sequence[Row], None]:
    async with engine.connect() as conn:
        raw = await conn.get_raw_connection()
        pg: Any = raw.driver_connection  # asyncpg.Connection
        async with pg.transaction(isolation="repeatable_read", readonly=True):
            cursor = await pg.cursor(sql, *args)
            async with contextlib.aclosing(_ahead(lambda: cursor.fetch(batch), batch)) as batches:
                async for rows in batches:
                    yield rows


async def _sa_batches(
    engine: AsyncEngine, query: Select[Any], batch: int
) -> AsyncGenerator[Sequence[Row], None]:
    async with engine.connect() as conn:
        result = await conn.stream(query.execution_options(yield_per=batch))
        async for rows in result.partitions(batch):
            yield [tuple(row) for row in rows]


async def _batches(
    engine: AsyncEngine, pg_sql: str, args: Sequence[Any], query: Callable[[], Select[Any]], batch: int
) -> AsyncGenerator[Sequence[Row], None]:
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    reader = (
        _pg_batches(engine, pg_sql, args, batch)
        if _is_postgres(engine)
        else _sa_batches(engine, query(), batch)
    )
    async with contextlib.aclosing(reader) as batches:
        async for rows in batches:
            yield rows


def iteration_sample_batches(
    engine: AsyncEngine, project_id: str, run_id: str, iteration: int, batch: int = DEFAULT_BATCH
) -> AsyncGenerator[Sequence[Row], None]:
    """The iteration's ``samples`` rows as (sample_id, kind, data text), in (position, sample_id)
    order, ``batch`` at a time (module docstring)."""

    def query() -> Select[Any]:
        return (
            select(samples.c.sample_id, samples.c.kind, cast(samples.c.data, Text))
            .where(
                samples.c.project_id == project_id,
                samples.c.run_id == run_id,
                samples.c.iteration == iteration,
            )
            .order_by(samples.c.position, samples.c.sample_id)
        )

    return _batches(engine, _PG_ITERATION_SAMPLES, (project_id, run_id, iteration), query, batch)


async def event_batches(
    engine: AsyncEngine, positions: Sequence[int], batch: int = DEFAULT_BATCH
) -> AsyncGenerator[Sequence[Row], None]:
    """One (position, event_type, event_version, data text) row per entry of ``positions``, in that
    order (a position without an event: a row of None), ``batch`` at a time (module docstring)."""
    if not positions:
        return
    if _is_postgres(engine):
        async with contextlib.aclosing(_pg_batches(engine, _PG_EVENTS_AT, (list(positions),), batch)) as rows:
            async for page in rows:
                yield page
        return
    # other dialects: the distinct positions in sorted chunks, laid out in the order asked for
    for start in range(0, len(positions), batch):
        wanted = positions[start : start + batch]
        query = select(
            events.c.position, events.c.event_type, events.c.event_version, cast(events.c.data, Text)
        ).where(events.c.position.in_(sorted(set(wanted))))
        async with engine.connect() as conn:
            found = {row[0]: tuple(row) for row in (await conn.execute(query)).all()}
        yield [found.get(p, (None, None, None, None)) for p in wanted]


def fact_batches(
    engine: AsyncEngine, project_id: str, up_to: int, batch: int = DEFAULT_BATCH
) -> AsyncGenerator[Sequence[Row], None]:
    """The project's samples made by events at or below ``up_to`` as (sample_id, kind, position,
    run_id, template_id, data text, recorded_at), in (position, sample_id) order."""

    def query() -> Select[Any]:
        return (
            select(
                samples.c.sample_id,
                samples.c.kind,
                samples.c.position,
                samples.c.run_id,
                samples.c.template_id,
                cast(samples.c.data, Text),
                events.c.recorded_at,
            )
            .join(events, events.c.position == samples.c.position)
            .where(samples.c.project_id == project_id, samples.c.position <= up_to)
            .order_by(samples.c.position, samples.c.sample_id)
        )

    return _batches(engine, _PG_FACTS, (project_id, up_to), query, batch)


async def log_position(engine: AsyncEngine) -> int:
    """The log's last position (0 when empty)."""
    async with engine.connect() as conn:
        return int(await conn.scalar(select(func.coalesce(func.max(events.c.position), 0))) or 0)


async def next_dataset_version(engine: AsyncEngine, project_id: str, name: str) -> int:
    """One more than the highest version of dataset ``name`` in the project (1 for a new name)."""
    async with engine.connect() as conn:
        highest = await conn.scalar(
            select(func.max(datasets.c.version)).where(
                datasets.c.project_id == project_id, datasets.c.name == name
            )
        )
    return int(highest or 0) + 1


async def newest_run_config(engine: AsyncEngine, project_id: str) -> dict[str, Any] | None:
    """The stored config of the project's newest run, or None."""
    async with engine.connect() as conn:
        data = (
            await conn.execute(
                select(runs.c.config)
                .where(runs.c.project_id == project_id)
                .order_by(runs.c.created_at.desc(), runs.c.run_id)
                .limit(1)
            )
        ).scalar()
    return data  # type: ignore[no-any-return]


async def iteration_row(engine: AsyncEngine, run_id: str, iteration: int) -> Any | None:
    """The ``iterations`` row (a mapping) of the run's ``iteration``, or None."""
    async with engine.connect() as conn:
        query = select(iterations).where(iterations.c.run_id == run_id, iterations.c.iteration == iteration)
        return (await conn.execute(query)).mappings().first()


async def dataset_row(conn: AsyncConnection, project_id: str, dataset_id: str) -> Any | None:
    """The ``datasets`` row (a mapping) of ``dataset_id`` in the project, or None (on ``conn``: the
    route reads it inside the append's transaction too)."""
    query = select(datasets).where(datasets.c.dataset_id == dataset_id, datasets.c.project_id == project_id)
    return (await conn.execute(query)).mappings().first()


def datasets_listing(project_id: str, name: str | None) -> tuple[Select[Any], list[Any]]:
    """The query of the project's ``datasets`` rows (of ``name`` when given) and its keyset column
    (the DatasetCreated position), for a keyset page newest first."""
    query = select(datasets).where(datasets.c.project_id == project_id)
    if name is not None:
        query = query.where(datasets.c.name == name)
    return query, [datasets.c.position]


__all__ = [
    "DEFAULT_BATCH",
    "dataset_row",
    "datasets_listing",
    "event_batches",
    "fact_batches",
    "iteration_row",
    "iteration_sample_batches",
    "log_position",
    "newest_run_config",
    "next_dataset_version",
]
