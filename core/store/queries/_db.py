"""Owns how a query gets its connection: from a store or its engine (a fresh read connection)
or from a caller's open transaction (an ``AsyncConnection``, e.g. the one ``EventStore.append``
hands its ``before_commit`` hook), so the same query serves both; and the two project-scoped
selections every topic shares (``owned``: one row by id; ``of_run``: a run's rows; ``matching``:
a filter's set fields)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Protocol

from sqlalchemy import RowMapping, Select, Table, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine


class ReadModels(Protocol):
    """What the queries need of a store: its engine (``core.store.sql.SqlEventStore`` has one)."""

    @property
    def engine(self) -> AsyncEngine: ...


Db = ReadModels | AsyncEngine | AsyncConnection
"""A store (or its engine), or a connection already open (read inside its transaction)."""


@asynccontextmanager
async def connection(db: Db) -> AsyncIterator[AsyncConnection]:
    if isinstance(db, AsyncConnection):
        yield db
        return
    engine = db if isinstance(db, AsyncEngine) else db.engine
    async with engine.connect() as conn:
        yield conn


async def owned(db: Db, table: Table, key: str, value: Any, project_id: str) -> RowMapping | None:
    """The row of ``table`` whose column ``key`` is ``value``, only inside ``project_id``: a row of
    another project reads exactly like a missing one."""
    query = select(table).where(table.c[key] == value, table.c.project_id == project_id)
    async with connection(db) as conn:
        return (await conn.execute(query)).mappings().first()


def matching(query: Select[Any], table: Table, where: object, names: Sequence[str]) -> Select[Any]:
    """``query`` narrowed to the rows whose column ``name`` equals the field ``name`` of ``where``
    (a filter dataclass), for each of ``names`` that is set (not None)."""
    for name in names:
        value = getattr(where, name)
        if value is not None:
            query = query.where(table.c[name] == value)
    return query


def of_run(table: Table, project_id: str, run_id: str, iteration: int | None) -> Select[Any]:
    """The rows of ``table`` that belong to a run of ``project_id`` (one iteration when given)."""
    query = select(table).where(table.c.run_id == run_id, table.c.project_id == project_id)
    if iteration is not None:
        query = query.where(table.c.iteration == iteration)
    return query
