"""Owns the read side's typed queries: one module per read model (``pairs``, ``trees``, ``samples``,
``iterations``, ``traces``), each a set of async functions that take the ``EventStore`` and return
plain values or frozen dataclasses, with the SQL behind them.

Services, the API and the CLI ask these (and ``core.store.pair_repository`` for one pair's state)
instead of importing ``core.store.tables``: an import-linter contract in pyproject.toml keeps it so.
The projections live in the same database as the event log, so a query reaches them through the
store's engine (``engine_of``).
"""

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
