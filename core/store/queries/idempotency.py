"""Owns the ``idempotency_keys`` records: the API's recorded answers to requests sent with an
Idempotency-Key (api/idempotency.py owns the behaviour). ``claim`` inserts a key's record or
nothing (``ON CONFLICT DO NOTHING``, in the PostgreSQL or SQLite form) inside the caller's
transaction and says whether this caller won it; ``record_answer`` fills in the answer of a
claimed key; ``stored`` reads a key's record."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from core.store.queries._db import Db, connection
from core.store.tables import idempotency_keys


@dataclass(frozen=True)
class StoredAnswer:
    """A key's record: the request it was first used for and the answer given."""

    scope: str
    key: str
    method: str
    path: str
    request_hash: str
    status_code: int
    response: Any


async def claim(
    conn: AsyncConnection,
    scope: str,
    key: str,
    method: str,
    path: str,
    request_hash: str,
    status_code: int,
    response: Any,
) -> bool:
    """Insert the key's record in ``conn``'s transaction; False when another request holds it."""
    insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
    statement = (
        insert(idempotency_keys)
        .values(
            scope=scope,
            key=key,
            method=method,
            path=path,
            request_hash=request_hash,
            status_code=status_code,
            response=response,
            created_at=datetime.now(UTC),
        )
        .on_conflict_do_nothing()
    )
    result = await conn.execute(statement)
    return bool(result.rowcount)


async def record_answer(conn: AsyncConnection, scope: str, key: str, status_code: int, response: Any) -> None:
    """Set the answer of a key this transaction claimed."""
    await conn.execute(
        update(idempotency_keys)
        .where(idempotency_keys.c.scope == scope, idempotency_keys.c.key == key)
        .values(status_code=status_code, response=response)
    )


async def stored(db: Db, scope: str, key: str) -> StoredAnswer | None:
    query = select(idempotency_keys).where(idempotency_keys.c.scope == scope, idempotency_keys.c.key == key)
    async with connection(db) as conn:
        row = (await conn.execute(query)).mappings().first()
    if row is None:
        return None
    return StoredAnswer(**{k: row[k] for k in StoredAnswer.__dataclass_fields__})
