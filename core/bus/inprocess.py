"""Owns the in-process adapter of the Bus port: Redis Streams semantics on plain asyncio.

Used in embedded mode, where every service runs in ONE process. It keeps what the Redis adapter
keeps, with the same rules: topics with entries in publish order, consumer groups that start at the
beginning of a topic, a pending list per group (owner, delivery time, delivery count), reclaim of
entries idle at least ``min_idle_ms``, dead-letter lists, trimming that only drops entries every
group has acked, and the consumers of each group with their last-seen time for pruning, kept as
Redis 7.0 keeps it: a consumer appears, and its idle time restarts, only when a read, reclaim or
touch actually hands it something (Redis 7.2+ also counts reads that found nothing).
Everything lives in memory and is lost with the process; the store stays the mailbox, so the
relay republishes from its checkpoint after a restart.
"""

from __future__ import annotations

import asyncio
import bisect
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from core.bus.ports import BusError, BusMessage, ConsumerInfo, DeadLetter, Delivery
from core.bus.redis_streams import check_name


@dataclass
class _Pending:
    consumer: str
    delivered_at: float
    deliveries: int


@dataclass
class _Group:
    last_delivered: int = 0  # sequence number of the newest entry handed to the group
    pending: dict[int, _Pending] = field(default_factory=dict)
    seen: dict[str, float] = field(default_factory=dict)  # consumer -> when it last read or claimed

    def pending_of(self) -> dict[str, int]:
        counts: dict[str, int] = dict.fromkeys(self.seen, 0)
        for entry in self.pending.values():
            counts[entry.consumer] = counts.get(entry.consumer, 0) + 1
        return counts


@dataclass
class _Topic:
    entries: list[tuple[int, BusMessage]] = field(default_factory=list)  # (sequence, message)
    next_seq: int = 1
    groups: dict[str, _Group] = field(default_factory=dict)
    dead: list[DeadLetter] = field(default_factory=list)

    def index_after(self, seq: int) -> int:
        return bisect.bisect_right(self.entries, seq, key=lambda entry: entry[0])

    def find(self, seq: int) -> BusMessage | None:
        i = bisect.bisect_left(self.entries, seq, key=lambda entry: entry[0])
        if i < len(self.entries) and self.entries[i][0] == seq:
            return self.entries[i][1]
        return None


class InProcessBus:
    """The Bus port in memory, for single-process mode. ``clock`` returns seconds (monotonic)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._topics: dict[str, _Topic] = {}
        self._published = asyncio.Event()
        self._closed = False

    def _topic(self, topic: str) -> _Topic:
        check_name("topic", topic)
        found = self._topics.get(topic)
        if found is None:
            found = self._topics[topic] = _Topic()
        return found

    def _group(self, topic: str, group: str) -> _Group:
        found = self._topic(topic).groups.get(group)
        if found is None:
            raise BusError(f"group {group!r} does not exist on topic {topic!r}; call ensure_group first")
        return found

    def _check_open(self) -> None:
        if self._closed:
            raise BusError("the in-process bus is closed")

    async def publish(self, topic: str, messages: Sequence[BusMessage]) -> None:
        self._check_open()
        if not messages:
            return
        stream = self._topic(topic)
        for message in messages:
            stream.entries.append((stream.next_seq, message))
            stream.next_seq += 1
        self._published.set()
        self._published = asyncio.Event()

    async def ensure_group(self, topic: str, group: str) -> None:
        self._check_open()
        check_name("group", group)
        self._topic(topic).groups.setdefault(group, _Group())

    def _take_new(self, topics: Sequence[str], group: str, consumer: str, count: int) -> list[Delivery]:
        now = self._clock()
        deliveries: list[Delivery] = []
        for topic in topics:
            stream = self._topic(topic)
            state = self._group(topic, group)
            start = stream.index_after(state.last_delivered)
            for seq, message in stream.entries[start : start + count]:
                state.seen[consumer] = now
                state.pending[seq] = _Pending(consumer, now, 1)
                state.last_delivered = seq
                deliveries.append(Delivery(str(seq), topic, message, 1))
        return deliveries

    async def consume(
        self, topics: Sequence[str], group: str, consumer: str, count: int = 16, block_ms: int = 1000
    ) -> list[Delivery]:
        self._check_open()
        if not topics:
            raise BusError("consume needs at least one topic")
        check_name("consumer", consumer)
        deadline = self._clock() + max(0, block_ms) / 1000
        while True:
            signal = self._published
            deliveries = self._take_new(topics, group, consumer, max(1, count))
            remaining = deadline - self._clock()
            if deliveries or remaining <= 0 or self._closed:
                return deliveries
            try:
                await asyncio.wait_for(signal.wait(), timeout=remaining)
            except TimeoutError:
                return self._take_new(topics, group, consumer, max(1, count))

    async def reclaim(
        self, topic: str, group: str, consumer: str, min_idle_ms: int, count: int = 16
    ) -> list[Delivery]:
        self._check_open()
        check_name("consumer", consumer)
        stream = self._topic(topic)
        state = self._group(topic, group)
        now = self._clock()
        claimed: list[Delivery] = []
        for seq in sorted(state.pending):
            if len(claimed) >= max(1, count):
                break
            entry = state.pending[seq]
            if (now - entry.delivered_at) * 1000 < min_idle_ms:
                continue
            message = stream.find(seq)
            if message is None:  # dropped from the topic: forget it, as XAUTOCLAIM does
                del state.pending[seq]
                continue
            entry.consumer, entry.delivered_at, entry.deliveries = consumer, now, entry.deliveries + 1
            claimed.append(Delivery(str(seq), topic, message, entry.deliveries))
        if claimed:
            state.seen[consumer] = now
        return claimed

    async def ack(self, topic: str, group: str, message_ids: Sequence[str]) -> None:
        self._check_open()
        state = self._group(topic, group)
        for message_id in message_ids:
            state.pending.pop(int(message_id), None)

    async def touch(self, topic: str, group: str, consumer: str, message_ids: Sequence[str]) -> None:
        self._check_open()
        state = self._group(topic, group)
        now = self._clock()
        for message_id in message_ids:
            entry = state.pending.get(int(message_id))
            if entry is not None:
                entry.consumer, entry.delivered_at = consumer, now
                state.seen[consumer] = now

    async def dead_letter(self, delivery: Delivery, group: str, error: str) -> None:
        self._check_open()
        self._topic(delivery.topic).dead.append(
            DeadLetter(delivery.message, group, delivery.message_id, delivery.deliveries, error)
        )
        await self.ack(delivery.topic, group, [delivery.message_id])

    async def trim(self, topic: str) -> int:
        stream = self._topic(topic)
        if not stream.groups:
            return 0
        needed = min(
            min(state.pending) if state.pending else state.last_delivered for state in stream.groups.values()
        )
        cut = bisect.bisect_left(stream.entries, needed, key=lambda entry: entry[0])
        del stream.entries[:cut]
        return cut

    async def dead_letters(self, topic: str, limit: int = 100) -> list[DeadLetter]:
        return list(self._topic(topic).dead[:limit])

    async def consumers(self, topic: str, group: str) -> list[ConsumerInfo]:
        self._check_open()
        state = self._group(topic, group)
        now = self._clock()
        pending = state.pending_of()
        return [
            ConsumerInfo(name, pending[name], int((now - seen) * 1000))
            for name, seen in sorted(state.seen.items())
        ]

    async def prune_consumers(
        self, topic: str, group: str, min_idle_ms: int, *, keep: Sequence[str] = ()
    ) -> list[str]:
        self._check_open()
        if min_idle_ms < 0:
            raise BusError(f"min_idle_ms must be >= 0, got {min_idle_ms}")
        keep_names = {check_name("consumer", name) for name in keep}
        state = self._group(topic, group)
        now = self._clock()
        pending = state.pending_of()
        pruned = sorted(
            name
            for name, seen in state.seen.items()
            if name not in keep_names and pending[name] == 0 and (now - seen) * 1000 > min_idle_ms
        )
        for name in pruned:
            del state.seen[name]
        return pruned

    async def pending_count(self, topic: str, group: str) -> int:
        found = self._topic(topic).groups.get(group)
        return len(found.pending) if found else 0

    async def topic_length(self, topic: str) -> int:
        return len(self._topic(topic).entries)

    async def ping(self) -> bool:
        return not self._closed

    async def close(self) -> None:
        self._closed = True
        self._published.set()
