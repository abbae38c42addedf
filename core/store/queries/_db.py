"""Owns how a query gets its connection: from a store or its engine (a fresh read connection)
or from a caller's open transaction (an ``AsyncConnection``, e.g. the one ``EventStore.append``
hands its ``before_commit`` hook), so the same query serves both."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Protocol

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
