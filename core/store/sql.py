"""Owns ``SqlEventStore``: the EventStore port on SQLAlchemy 2 async, for PostgreSQL and SQLite.

One class serves both databases; the only dialect differences are isolated in
``_serialize_writers`` (how concurrent appends are ordered) and in ``core.store.factory`` (engine
set-up: SQLite WAL, busy timeout, ``BEGIN IMMEDIATE`` for writers).

Append, in one transaction:
1. serialize writers (PostgreSQL: a transaction-scoped advisory lock; SQLite: the write lock taken
   by ``BEGIN IMMEDIATE``). Positions come from an identity column, i.e. they are allocated at
   INSERT time but become visible at COMMIT time. Without serialization two transactions could
   commit out of order and a reader that already saw position P would later find P-1 appear. With
   the lock held from before the INSERT until the COMMIT, allocation order equals commit order.
2. insert the tracking row, if any (a duplicate raises ``AlreadyProcessed``);
3. drop events whose id is already stored (idempotent retry);
4. check expected stream versions (``ConcurrencyConflict``) and number the new events;
5. insert all events with one multi-row ``INSERT ... RETURNING position``;
6. update the projections (``core.store.projections``) on the same connection;
7. commit, then tell the commit listeners the new last position.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from core.domain.events import DomainEvent, Metadata, NewEvent, RecordedEvent
from core.domain.serde import to_dict
from core.store import bulk, projections
from core.store.ports import AlreadyProcessed, ConcurrencyConflict, EventStore
from core.store.rows import row_to_event
from core.store.tables import checkpoints, tracking
from core.store.tables import events as events_table

__all__ = ["APPEND_LOCK_KEY", "CommitListener", "SqlEventStore", "row_to_event"]

log = logging.getLogger(__name__)

#: Key of the PostgreSQL advisory lock that orders appends (any constant shared by all writers).
APPEND_LOCK_KEY = 0x6167656E7472  # "agentr"

CommitListener = Callable[[int], None]


def _metadata_dict(metadata: Metadata) -> dict[str, Any]:
    return {k: v for k, v in to_dict(metadata).items() if v is not None}


class SqlEventStore:
    """The event store on an ``AsyncEngine`` (``postgresql+asyncpg`` or ``sqlite+aiosqlite``).

    Build it with ``core.store.factory.open_store``; the engine is exposed (``store.engine``) for
    read-model queries. Only ``append``/``track``/``set_checkpoint`` write.
    """

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._dialect = engine.dialect.name
        if self._dialect not in ("postgresql", "sqlite"):
            raise ValueError(f"unsupported database {self._dialect!r}: use PostgreSQL or SQLite")
        # SQLite: connections from this engine start with BEGIN IMMEDIATE (see factory).
        self._write_engine = engine.execution_options(agentr_write=True)
        self._listeners: list[CommitListener] = []

    # -- plumbing ---------------------------------------------------------------------------------

    @property
    def engine(self) -> AsyncEngine:
        return self._engine

    @property
    def dialect(self) -> str:
        return self._dialect

    def add_commit_listener(self, callback: CommitListener) -> None:
        """``callback(last_position)`` runs after every append that stored new events.

        Called synchronously in the appending task: keep it short (e.g. set an asyncio.Event).
        """
        self._listeners.append(callback)

    def remove_commit_listener(self, callback: CommitListener) -> None:
        self._listeners.remove(callback)

    def _notify(self, position: int) -> None:
        for callback in list(self._listeners):
            try:
                callback(position)
            except Exception:  # a listener must never undo a committed append
                log.exception("commit listener %r failed", callback)

    @asynccontextmanager
    async def write_transaction(self) -> AsyncIterator[AsyncConnection]:
        """A write transaction with writers serialized (see the module docstring)."""
        async with self._write_engine.begin() as conn:
            await self._serialize_writers(conn)
            yield conn

    async def _serialize_writers(self, conn: AsyncConnection) -> None:
        if self._dialect == "postgresql":
            await conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({APPEND_LOCK_KEY})")
        # SQLite: BEGIN IMMEDIATE already holds the database's single write lock.

    async def close(self) -> None:
        await self._engine.dispose()

    # -- writing ----------------------------------------------------------------------------------

    async def append(
        self,
        events: Sequence[NewEvent],
        expected_versions: Mapping[str, int] | None = None,
        tracking: tuple[str, int] | None = None,
        before_commit: Callable[[Any, list[RecordedEvent]], Awaitable[None]] | None = None,
    ) -> list[RecordedEvent]:
        """Append atomically with projections and tracking; returns the newly stored envelopes.

        If every event of the batch is already stored (a retry), nothing is checked or written
        (except the tracking row) and ``[]`` is returned. ``before_commit(conn, recorded)`` runs
        last inside the same transaction (the API claims its Idempotency-Key row there): if it
        raises, nothing of the append is kept.
        """
        for new in events:
            if not isinstance(new, NewEvent) or not isinstance(new.event, DomainEvent):
                raise TypeError(f"append expects NewEvent(DomainEvent) items, got {new!r}")
            if not new.event.event_type:
                raise TypeError(f"{type(new.event).__name__} is not a registered event type")
        async with self.write_transaction() as conn:
            if tracking is not None:
                await self._insert_tracking(conn, *tracking)
            recorded = await self._append_in(conn, events, expected_versions or {})
            if before_commit is not None:
                await before_commit(conn, recorded)
        if recorded:
            log.debug(
                "appended %d event(s) at positions %d..%d (%d skipped as already stored)",
                len(recorded),
                recorded[0].position,
                recorded[-1].position,
                len(events) - len(recorded),
            )
            self._notify(recorded[-1].position)
        elif events:
            log.debug("append of %d event(s) skipped: all already stored", len(events))
        return recorded

    async def _insert_tracking(self, conn: AsyncConnection, consumer: str, position: int) -> None:
        try:
            await conn.execute(tracking.insert().values(consumer=consumer, position=position))
        except IntegrityError:
            raise AlreadyProcessed(consumer, position) from None

    async def _append_in(
        self, conn: AsyncConnection, batch: Sequence[NewEvent], expected: Mapping[str, int]
    ) -> list[RecordedEvent]:
        # Drop ids already stored, and repeats within the batch.
        seen: set[str] = set()
        unique: list[NewEvent] = []
        for new in batch:
            if new.event_id not in seen:
                seen.add(new.event_id)
                unique.append(new)
        if not unique:
            return []
        stored = await bulk.stored_event_ids(conn, [n.event_id for n in unique])
        fresh = [n for n in unique if n.event_id not in stored]
        if not fresh:
            return []

        stream_ids = sorted({n.stream_id for n in fresh} | set(expected))
        versions = await bulk.stream_versions(conn, stream_ids)
        for stream_id, want in expected.items():
            if versions[stream_id] != want:
                log.debug("conflict on %s: expected %d, found %d", stream_id, want, versions[stream_id])
                raise ConcurrencyConflict(stream_id, want, versions[stream_id])

        now = datetime.now(UTC)
        rows: list[dict[str, Any]] = []
        for new in fresh:
            versions[new.stream_id] += 1
            rows.append(
                {
                    "event_id": new.event_id,
                    "stream_id": new.stream_id,
                    "stream_version": versions[new.stream_id],
                    "event_type": new.event.event_type,
                    "event_version": new.event.event_version,
                    "data": new.event.to_data(),
                    "metadata": _metadata_dict(new.metadata),
                    "recorded_at": now,
                }
            )
        try:
            positions = await bulk.insert_events(conn, rows)
        except IntegrityError as exc:  # only reachable if a writer bypassed the lock
            raise ConcurrencyConflict(fresh[0].stream_id, -2, -2) from exc
        recorded = [
            RecordedEvent(
                event_id=row["event_id"],
                stream_id=row["stream_id"],
                stream_version=row["stream_version"],
                event_type=row["event_type"],
                event_version=row["event_version"],
                data=row["data"],
                metadata=new.metadata,
                recorded_at=now,
                position=position,
            )
            for row, new, position in zip(rows, fresh, positions, strict=True)
        ]
        await projections.apply(conn, [(r, n.event) for r, n in zip(recorded, fresh, strict=True)])
        return recorded

    async def track(self, consumer: str, position: int) -> None:
        """Record ``(consumer, position)`` alone; raises ``AlreadyProcessed`` if it exists."""
        async with self._write_engine.begin() as conn:
            await self._insert_tracking(conn, consumer, position)

    async def set_checkpoint(self, name: str, position: int) -> None:
        """Store a named position (e.g. how far the relay has published)."""
        async with self._write_engine.begin() as conn:
            updated = await conn.execute(
                checkpoints.update().where(checkpoints.c.name == name).values(position=position)
            )
            if updated.rowcount == 0:
                await conn.execute(checkpoints.insert().values(name=name, position=position))

    # -- reading ----------------------------------------------------------------------------------

    async def get_checkpoint(self, name: str) -> int:
        """The named position, 0 when never set."""
        async with self._engine.connect() as conn:
            value = await conn.scalar(select(checkpoints.c.position).where(checkpoints.c.name == name))
        return int(value) if value is not None else 0

    async def read_stream(self, stream_id: str, from_version: int = 0) -> list[RecordedEvent]:
        query = (
            select(events_table)
            .where(events_table.c.stream_id == stream_id, events_table.c.stream_version >= from_version)
            .order_by(events_table.c.stream_version)
        )
        async with self._engine.connect() as conn:
            return [row_to_event(r) for r in await conn.execute(query)]

    async def read_all(
        self, after: int = 0, limit: int = 1000, event_types: Sequence[str] | None = None
    ) -> list[RecordedEvent]:
        if limit <= 0:
            raise ValueError(f"limit must be positive, got {limit}")
        query = select(events_table).where(events_table.c.position > after)
        if event_types is not None:
            query = query.where(events_table.c.event_type.in_(list(event_types)))
        query = query.order_by(events_table.c.position).limit(limit)
        async with self._engine.connect() as conn:
            return [row_to_event(r) for r in await conn.execute(query)]

    async def get(self, position: int) -> RecordedEvent | None:
        async with self._engine.connect() as conn:
            row = (
                await conn.execute(select(events_table).where(events_table.c.position == position))
            ).first()
        return row_to_event(row) if row is not None else None

    async def last_position(self) -> int:
        async with self._engine.connect() as conn:
            value = await conn.scalar(select(func.max(events_table.c.position)))
        return int(value) if value is not None else 0

    async def stream_version(self, stream_id: str) -> int:
        async with self._engine.connect() as conn:
            value = await conn.scalar(
                select(func.max(events_table.c.stream_version)).where(events_table.c.stream_id == stream_id)
            )
        return int(value) if value is not None else -1

    async def is_tracked(self, consumer: str, position: int) -> bool:
        async with self._engine.connect() as conn:
            value = await conn.scalar(
                select(tracking.c.position).where(
                    tracking.c.consumer == consumer, tracking.c.position == position
                )
            )
        return value is not None


def _implements_the_port(store: SqlEventStore) -> EventStore:
    """Never called: makes mypy check that SqlEventStore satisfies the EventStore protocol."""
    return store
