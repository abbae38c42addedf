"""Owns the Bus port: the doorbell that tells consumers an event was committed.

Messages carry only the event's global position (plus its type and stream for routing and logs);
consumers re-read the event from the store. Delivery is at-least-once per consumer group; the
worker runtime turns that into exactly-once effect with the store's tracking table.
Both adapters (Redis Streams, in-process) pass tests/contract/test_bus.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class BusMessage:
    position: int
    event_type: str
    stream_id: str


@dataclass(frozen=True)
class Delivery:
    message_id: str  # adapter-specific id used to ack
    topic: str
    message: BusMessage
    deliveries: int  # how many times this message has been delivered to the group (1 = first)


@dataclass(frozen=True)
class DeadLetter:
    """A message moved to a topic's dead-letter stream, with why and after how many deliveries."""

    message: BusMessage
    group: str
    original_id: str
    deliveries: int
    error: str


@dataclass(frozen=True)
class ConsumerInfo:
    """One consumer of a group, as the bus lists it (XINFO CONSUMERS)."""

    name: str
    pending: int  # messages delivered to it and not acked yet
    idle_ms: int  # since it was last handed messages (Redis >= 7.2: since it last tried to read)


class BusError(Exception):
    """A bus operation failed because of bad input (unknown topic name, block time too long, ...)."""


class Bus(Protocol):
    async def publish(self, topic: str, messages: Sequence[BusMessage]) -> None: ...

    async def ensure_group(self, topic: str, group: str) -> None:
        """Create the consumer group if missing; a new group starts at the beginning of the topic."""
        ...

    async def consume(
        self, topics: Sequence[str], group: str, consumer: str, count: int = 16, block_ms: int = 1000
    ) -> list[Delivery]:
        """New messages for this consumer (blocks up to ``block_ms`` when there are none)."""
        ...

    async def reclaim(
        self, topic: str, group: str, consumer: str, min_idle_ms: int, count: int = 16
    ) -> list[Delivery]:
        """Take over messages of this group pending on any consumer longer than ``min_idle_ms``."""
        ...

    async def ack(self, topic: str, group: str, message_ids: Sequence[str]) -> None: ...

    async def touch(self, topic: str, group: str, consumer: str, message_ids: Sequence[str]) -> None:
        """Heartbeat: reset the idle time of messages this consumer is still working on, without
        counting a delivery, so a long handler's messages are not reclaimed from under it."""
        ...

    async def dead_letter(self, delivery: Delivery, group: str, error: str) -> None:
        """Move a message to the topic's dead-letter stream and ack it in the group."""
        ...

    async def trim(self, topic: str) -> int:
        """Drop entries every group has acked (never an unacked one); returns how many were dropped.

        A topic without any group is left as it is (a group created later starts at its beginning).
        """
        ...

    async def dead_letters(self, topic: str, limit: int = 100) -> list[DeadLetter]:
        """The oldest ``limit`` entries of the topic's dead-letter stream."""
        ...

    async def consumers(self, topic: str, group: str) -> list[ConsumerInfo]:
        """The consumers the group lists on this topic, sorted by name."""
        ...

    async def prune_consumers(
        self, topic: str, group: str, min_idle_ms: int, *, keep: Sequence[str] = ()
    ) -> list[str]:
        """Forget the group's consumers idle longer than ``min_idle_ms`` that hold NO pending
        message (XGROUP DELCONSUMER), except those named in ``keep``; returns their names, sorted.

        Dead processes leave their consumer behind; this keeps the list to live ones. A consumer
        with pending messages is never removed (that would lose them): once ``reclaim`` has moved
        its messages to a live consumer, a later prune removes it. Check and delete are atomic.
        Pruning a live but idle consumer is harmless: it holds nothing, and it is listed again as
        soon as it is handed a message.
        """
        ...

    async def pending_count(self, topic: str, group: str) -> int:
        """Messages delivered to the group and not acked yet."""
        ...

    async def topic_length(self, topic: str) -> int:
        """Entries currently kept in the topic (after trimming)."""
        ...

    async def ping(self) -> bool:
        """Health check: True when the bus answers."""
        ...

    async def close(self) -> None: ...
