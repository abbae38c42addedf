"""Owns the EventStore port: what every store adapter (PostgreSQL, SQLite) must provide.

Semantics shared by all adapters (checked by tests/contract/test_event_store.py):
- ``append`` writes a batch atomically, together with the projections and an optional tracking
  row, in ONE transaction. ``expected_versions`` maps stream id -> the stream's current last version
  the caller expects (-1 = the stream must not exist yet; absent = no check). A mismatch raises
  ``ConcurrencyConflict``. An event whose id is already stored is skipped (idempotent retry).
- ``tracking=(consumer, position)``: if that row already exists the whole append is skipped and
  ``AlreadyProcessed`` is raised, so a redelivered message has its effect exactly once.
- Global positions become visible in commit order: once a reader has seen position P, no event
  with a position below P appears later.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

from core.domain.events import NewEvent, RecordedEvent


class StoreError(Exception):
    """Base class of event store errors."""


class ConcurrencyConflict(StoreError):
    """The stream's version was not the one the caller expected."""

    def __init__(self, stream_id: str, expected: int, actual: int) -> None:
        super().__init__(
            f"concurrency conflict on stream {stream_id!r}: expected version {expected}, found {actual}"
        )
        self.stream_id = stream_id
        self.expected = expected
        self.actual = actual


class AlreadyProcessed(StoreError):
    """The consumer already recorded this position: the message's effect has happened."""

    def __init__(self, consumer: str, position: int) -> None:
        super().__init__(f"consumer {consumer!r} already processed position {position}")
        self.consumer = consumer
        self.position = position


class EventStore(Protocol):
    async def append(
        self,
        events: Sequence[NewEvent],
        expected_versions: Mapping[str, int] | None = None,
        tracking: tuple[str, int] | None = None,
        before_commit: Callable[[Any, list[RecordedEvent]], Awaitable[None]] | None = None,
    ) -> list[RecordedEvent]:
        """Append atomically; returns the recorded envelopes of the newly stored events.

        ``before_commit(connection, recorded)`` runs inside the same transaction, last; if it raises,
        nothing is kept (the API claims its Idempotency-Key there)."""
        ...

    async def read_stream(self, stream_id: str, from_version: int = 0) -> list[RecordedEvent]: ...

    async def read_all(
        self, after: int = 0, limit: int = 1000, event_types: Sequence[str] | None = None
    ) -> list[RecordedEvent]:
        """Events with position > ``after`` in position order, at most ``limit``."""
        ...

    async def last_position(self) -> int:
        """The highest committed position (0 when empty)."""
        ...

    async def stream_version(self, stream_id: str) -> int:
        """The stream's last version (-1 when it does not exist)."""
        ...

    async def is_tracked(self, consumer: str, position: int) -> bool: ...

    async def get(self, position: int) -> RecordedEvent | None:
        """The event at ``position`` (None when there is none)."""
        ...

    async def track(self, consumer: str, position: int) -> None:
        """Record ``(consumer, position)`` on its own; raises ``AlreadyProcessed`` if it exists."""
        ...

    async def get_checkpoint(self, name: str) -> int:
        """A named position (e.g. the relay's progress); 0 when never set."""
        ...

    async def set_checkpoint(self, name: str, position: int) -> None: ...

    def add_commit_listener(self, callback: Callable[[int], None]) -> None:
        """``callback(last_position)`` after every append that stored new events (keep it short)."""
        ...

    async def close(self) -> None: ...
