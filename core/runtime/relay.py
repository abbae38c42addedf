"""Owns the relay: committed events -> bus messages, by global position, with a checkpoint.

The events table is the outbox. The relay reads events after its checkpoint (the store's checkpoint
table, under its name) in position order, publishes one ``BusMessage`` per event to the topic named
after the event type, and only then advances the checkpoint. If the bus is down, publishing fails,
the checkpoint stays where it was and the relay retries with exponential backoff; events committed
meanwhile are published once the bus answers again. A crash between publishing and checkpointing
republishes a batch: consumers tolerate that (delivery is at-least-once; the tracking table makes
the effect exactly-once).

It wakes up on the store's commit listener when it shares the process with the writers (embedded
mode) and otherwise polls every ``poll_interval_s``. Now and then it trims the topics it publishes
to (the bus only drops entries every group has acked).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Collection, Sequence
from typing import Protocol

from core.bus.ports import Bus, BusMessage
from core.domain.events import RecordedEvent
from core.runtime import metrics

log = logging.getLogger("agentr.relay")


class RelayStore(Protocol):
    """What the relay needs from the event store."""

    async def read_all(
        self, after: int = 0, limit: int = 1000, event_types: Sequence[str] | None = None
    ) -> list[RecordedEvent]: ...

    async def last_position(self) -> int: ...

    async def get_checkpoint(self, name: str) -> int: ...

    async def set_checkpoint(self, name: str, position: int) -> None: ...


class Relay:
    """Publishes committed events to ``bus``; ``run`` until ``stop()``; ``drain`` to catch up once."""

    def __init__(
        self,
        store: RelayStore,
        bus: Bus,
        name: str = "relay",
        *,
        batch_size: int = 500,
        poll_interval_s: float = 1.0,
        initial_backoff_s: float = 0.2,
        max_backoff_s: float = 10.0,
        trim_interval_s: float = 60.0,
        event_types: Collection[str] | None = None,
    ) -> None:
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        self.store = store
        self.bus = bus
        self.name = name
        self.batch_size = batch_size
        self.poll_interval_s = poll_interval_s
        self.initial_backoff_s = initial_backoff_s
        self.max_backoff_s = max_backoff_s
        self.trim_interval_s = trim_interval_s
        # None = publish every event; else only these types (embedded mode: the consumed ones)
        self.event_types = sorted(event_types) if event_types is not None else None
        self.published = 0  # events published by this instance
        self.checkpoint = 0  # the last checkpoint read or written
        self._topics: set[str] = set()
        self._wake = asyncio.Event()
        self._stop = asyncio.Event()
        self._last_trim = time.monotonic()

    # -- one step -------------------------------------------------------------------------------

    async def publish_batch(self) -> int:
        """Publish the next batch after the checkpoint; returns how many events it published."""
        checkpoint = await self.store.get_checkpoint(self.name)
        self.checkpoint = checkpoint
        batch = await self.store.read_all(
            after=checkpoint, limit=self.batch_size, event_types=self.event_types
        )
        if not batch:
            return 0
        by_topic: dict[str, list[BusMessage]] = {}
        for event in batch:
            by_topic.setdefault(event.event_type, []).append(
                BusMessage(position=event.position, event_type=event.event_type, stream_id=event.stream_id)
            )
        for topic, messages in by_topic.items():
            await self.bus.publish(topic, messages)
            self._topics.add(topic)
        await self.store.set_checkpoint(self.name, batch[-1].position)
        self.checkpoint = batch[-1].position
        self.published += len(batch)
        metrics.RELAY_PUBLISHED.labels(self.name).inc(len(batch))
        log.debug(
            "published %d events up to position %d",
            len(batch),
            batch[-1].position,
            extra={"relay": self.name, "position": batch[-1].position},
        )
        return len(batch)

    async def drain(self) -> int:
        """Publish until caught up with the store; returns how many events were published."""
        total = 0
        while True:
            count = await self.publish_batch()
            total += count
            if count < self.batch_size:
                return total

    # -- the loop -------------------------------------------------------------------------------

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def _listener(self) -> Callable[[int], None]:
        loop = asyncio.get_running_loop()
        thread = threading.get_ident()

        def on_commit(_position: int) -> None:
            if threading.get_ident() == thread:
                self._wake.set()
            else:
                loop.call_soon_threadsafe(self._wake.set)

        return on_commit

    async def _sleep(self, seconds: float) -> None:
        """Wait ``seconds`` or until woken (commit or stop)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout=seconds)

    async def run(self) -> None:
        """Relay until ``stop()``; survives bus and database outages (logs, backs off, retries)."""
        add = getattr(self.store, "add_commit_listener", None)
        remove = getattr(self.store, "remove_commit_listener", None)
        listener = self._listener()
        if add is not None:
            add(listener)
        log.info("relay %s started", self.name, extra={"relay": self.name})
        backoff = self.initial_backoff_s
        failing = False
        try:
            while not self._stop.is_set():
                self._wake.clear()
                try:
                    count = await self.publish_batch()
                    if failing:
                        log.info("relay %s: publishing again", self.name, extra={"relay": self.name})
                    failing, backoff = False, self.initial_backoff_s
                    await self._maybe_trim()
                    if count < self.batch_size:
                        await self._report_lag()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    metrics.RELAY_ERRORS.labels(self.name).inc()
                    log.warning(
                        "relay %s: publish failed (%s: %s); retrying in %.1fs",
                        self.name,
                        type(exc).__name__,
                        exc,
                        backoff,
                        extra={"relay": self.name},
                    )
                    failing = True
                    await self._sleep_unless_stopped(backoff)
                    backoff = min(backoff * 2, self.max_backoff_s)
                    continue
                if count < self.batch_size:
                    await self._sleep(self.poll_interval_s)
        finally:
            if remove is not None:
                remove(listener)
            log.info(
                "relay %s stopped after publishing %d events",
                self.name,
                self.published,
                extra={"relay": self.name},
            )

    async def _sleep_unless_stopped(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), timeout=seconds)

    async def _maybe_trim(self) -> None:
        if time.monotonic() - self._last_trim < self.trim_interval_s:
            return
        self._last_trim = time.monotonic()
        for topic in sorted(self._topics):
            dropped = await self.bus.trim(topic)
            if dropped:
                log.debug("trimmed %d acked entries from %s", dropped, topic, extra={"relay": self.name})

    async def _report_lag(self) -> None:
        last = await self.store.last_position()
        metrics.RELAY_LAG.labels(self.name).set(max(0, last - self.checkpoint))
