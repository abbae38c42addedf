"""Owns opening an event store from a database URL: engine set-up per dialect, optional schema.

PostgreSQL URLs (``postgresql+asyncpg://``) get a pooled asyncpg engine; their schema comes from the
Alembic migrations (``agentr db upgrade``). SQLite URLs (``sqlite+aiosqlite:///path``) get WAL
mode, a busy timeout, and ``BEGIN IMMEDIATE`` for write transactions (so two writers queue on the
busy timeout instead of failing when a read lock cannot be upgraded); ``create_tables=True``
creates the schema directly, which is what the embedded single-process mode does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from core.store.sql import SqlEventStore
from core.store.tables import metadata

SQLITE_BUSY_TIMEOUT_MS = 30_000


def _sqlite_engine(url: URL) -> AsyncEngine:
    if url.database and url.database != ":memory:":
        Path(url.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    engine = create_async_engine(
        url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000}, hide_parameters=True
    )

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy's "begin" event (below) issue BEGIN instead of the driver.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Any) -> None:
        write = conn.get_execution_options().get("agentr_write", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    return engine


def make_engine(url: str) -> AsyncEngine:
    """An async engine for ``url``; raises ValueError naming the problem for unsupported URLs."""
    try:
        parsed = make_url(url)
    except Exception as exc:
        raise ValueError(f"not a database URL: {url!r} ({exc})") from None
    if parsed.drivername == "sqlite+aiosqlite":
        return _sqlite_engine(parsed)
    if parsed.drivername == "postgresql+asyncpg":
        # hide_parameters: an error's text never quotes the statement's values (user content).
        return create_async_engine(
            parsed, pool_size=10, max_overflow=10, pool_pre_ping=True, hide_parameters=True
        )
    raise ValueError(
        f"unsupported database URL scheme {parsed.drivername!r}: "
        "use postgresql+asyncpg://... or sqlite+aiosqlite:///..."
    )


async def create_schema(engine: AsyncEngine) -> None:
    """Create every table that does not exist yet (embedded mode and tests)."""
    async with engine.begin() as conn:
        await conn.run_sync(metadata.create_all)


async def open_store(url: str, *, create_tables: bool = False) -> SqlEventStore:
    """Open the event store at ``url``; ``create_tables`` creates missing tables directly."""
    engine = make_engine(url)
    if create_tables:
        await create_schema(engine)
    return SqlEventStore(engine)
