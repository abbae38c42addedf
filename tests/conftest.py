"""Shared test fixtures: throwaway PostgreSQL databases and Redis key prefixes on the real servers.

Each test (or module) that asks for ``pg_url`` gets a fresh, empty database on the PostgreSQL at
``AGENTR_TEST_PG`` (default 127.0.0.1:5432, trust auth) that is dropped afterwards; ``redis_url``
plus ``redis_prefix`` give an isolated key namespace on the real Redis, deleted afterwards.
``store_url`` runs a test on both adapters (a SQLite file, then a fresh PostgreSQL database) and
``store`` opens the event store there with its tables created.
Several test runs (and developers) can share the servers without seeing each other's data.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from core.store.sql import SqlEventStore

PG_ADMIN_DSN = os.environ.get("AGENTR_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("AGENTR_TEST_REDIS", "redis://127.0.0.1:6379/0")


def _admin_sync(sql: str) -> None:
    import asyncio

    import asyncpg

    async def go() -> None:
        conn = await asyncpg.connect(PG_ADMIN_DSN)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(go())


def make_pg_database() -> tuple[str, str]:
    """Create an empty database; returns (name, SQLAlchemy asyncpg URL)."""
    name = "agentr_t_" + uuid.uuid4().hex[:12]
    _admin_sync(f'CREATE DATABASE "{name}"')
    base = PG_ADMIN_DSN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+asyncpg://")
    return name, f"{base}/{name}"


def drop_pg_database(name: str) -> None:
    _admin_sync(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def pg_url() -> Iterator[str]:
    name, url = make_pg_database()
    try:
        yield url
    finally:
        drop_pg_database(name)


@pytest.fixture
def sqlite_url(tmp_path) -> str:  # type: ignore[no-untyped-def]
    return f"sqlite+aiosqlite:///{tmp_path / 'agentr.db'}"


@pytest.fixture
def redis_url() -> str:
    return REDIS_URL


@pytest.fixture
async def redis_prefix() -> AsyncIterator[str]:
    import redis.asyncio as aioredis

    prefix = "agentr-test-" + uuid.uuid4().hex[:10]
    yield prefix
    client = aioredis.from_url(REDIS_URL)
    try:
        keys = [k async for k in client.scan_iter(match=f"{prefix}*", count=500)]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest) -> str:
    # a sync fixture: pg_url creates its database with asyncio.run, outside the test's loop
    return str(request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url"))


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[SqlEventStore]:
    from core.store.factory import open_store

    opened = await open_store(store_url, create_tables=True)
    try:
        yield opened
    finally:
        await opened.close()
