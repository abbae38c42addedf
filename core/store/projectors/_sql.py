"""Owns the small SQL helpers projectors share: dialect-neutral upsert, project-id lookup and
iteration-row updates (status changes and counters)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from sqlalchemy import ColumnElement, Table, Update, func, literal, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from core.domain.events import DomainEvent, RecordedEvent
from core.store.tables import iterations, pairs, runs

Item = tuple[RecordedEvent, DomainEvent]
Projector = Callable[[AsyncConnection, Sequence[Item]], Awaitable[None]]


def _dialect_insert(conn: AsyncConnection, table: Table) -> Any:
    if conn.dialect.name == "postgresql":
        return postgresql.insert(table)
    return sqlite.insert(table)


async def upsert(conn: AsyncConnection, table: Table, values: dict[str, Any], update: Sequence[str]) -> None:
    """Insert ``values``; on a primary-key clash update the ``update`` columns instead."""
    keys = [c.name for c in table.primary_key.columns]
    stmt = _dialect_insert(conn, table).values(values)
    if update:
        stmt = stmt.on_conflict_do_update(
            index_elements=keys, set_={name: stmt.excluded[name] for name in update}
        )
    else:
        stmt = stmt.on_conflict_do_nothing(index_elements=keys)
    await conn.execute(stmt)


async def insert_ignore(conn: AsyncConnection, table: Table, rows: list[dict[str, Any]]) -> None:
    """Insert many rows in one statement, skipping rows whose primary key exists."""
    if not rows:
        return
    keys = [c.name for c in table.primary_key.columns]
    await conn.execute(_dialect_insert(conn, table).on_conflict_do_nothing(index_elements=keys), rows)


def project_of(
    recorded: RecordedEvent, *, run_id: str | None = None, pair_id: str | None = None
) -> ColumnElement[Any]:
    """The row's project id: event metadata first, else the run's, else the pair's."""
    candidates: list[ColumnElement[Any]] = []
    if recorded.metadata.project_id:
        candidates.append(literal(recorded.metadata.project_id))
    if run_id:
        candidates.append(select(runs.c.project_id).where(runs.c.run_id == run_id).scalar_subquery())
    if pair_id:
        candidates.append(select(pairs.c.project_id).where(pairs.c.pair_id == pair_id).scalar_subquery())
    if not candidates:
        return literal(None)
    if len(candidates) == 1:
        return candidates[0]
    return func.coalesce(*candidates)


def update_iteration(run_id: str, iteration: int) -> Update:
    """An UPDATE of one iteration row; the caller adds ``.values(...)``."""
    return update(iterations).where(iterations.c.run_id == run_id, iterations.c.iteration == iteration)


async def bump_iteration(conn: AsyncConnection, run_id: str | None, iteration: int, column: str) -> None:
    """Add one to an iteration counter column; an event outside any run (no ``run_id``) counts nowhere."""
    if run_id is None:
        return
    col = iterations.c[column]
    await conn.execute(update_iteration(run_id, iteration).values({col: col + 1}))
