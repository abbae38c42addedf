"""Owns the read side's typed queries: what the API, the CLI and the services read from the read
models, one module per topic (projects and keys, runs, traces, pairs, samples, search trees, the
event feed, idempotency records), as typed async functions over the store. The SQL (and any
PostgreSQL / SQLite difference) stays here; callers get plain dicts typed as ``TypedDict`` rows,
dataclasses and ``Page`` values, never a table object.
Workers reach the read models through the store's engine (``engine_of``); ``core.store.pair_repository``
reads one pair's state from its stream. An import-linter contract keeps ``core.store.tables`` out of
the services, the API and the CLI."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine

from core.store.ports import EventStore


def engine_of(store: EventStore) -> AsyncEngine:
    """The engine of the database that holds ``store``'s read models (``SqlEventStore.engine``)."""
    engine = getattr(store, "engine", None)
    if not isinstance(engine, AsyncEngine):
        raise TypeError(
            f"{type(store).__name__} has no SQL engine: the read-model queries need the SQL event "
            "store (core.store.factory.open_store)"
        )
    return engine
