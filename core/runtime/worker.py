"""Owns the worker loop: bus deliveries -> a service's handlers -> store -> ack.

For each delivery (at-least-once, from the service's consumer group):
1. if the store's tracking table has ``(service.name, position)``, the effect already happened
   (e.g. the process died after committing but before acking): ack and move on;
2. load the event by position (the message is only a doorbell), run the handler;
3. append the handler's events TOGETHER with the tracking row in one transaction
   (``AlreadyProcessed`` from a concurrent redelivery: ack);
4. ack.
A handler that raises leaves the message pending; it is reclaimed (XAUTOCLAIM) once idle for
``settings.reclaim_idle_ms`` and retried. While a handler runs, a heartbeat touches its message
(XCLAIM JUSTID) every third of that time, so a long handler is never reclaimed from under it.
A message delivered ``settings.max_deliveries`` times that still fails (or that a crashing
consumer keeps taking down) is dead-lettered: a
``MessageDeadLettered`` event is appended (with the tracking row, so it is recorded once) and the
message is moved to the topic's dead-letter stream.

Every process consumes under a fresh consumer name, so dead processes (SIGKILL, scale-down,
redeploys) would stay listed in the group forever. Along with reclaiming, the worker prunes, at
most every ``prune_idle_ms / 2`` (capped at a minute), the group's consumers idle longer than
``prune_idle_ms`` (default 10 x ``reclaim_idle_ms``) that hold no pending message; one that still
holds messages is pruned once they have been reclaimed. It never prunes its own consumer.

Up to ``service.concurrency`` messages run at once as asyncio tasks. ``stop()`` (wired to SIGTERM
and SIGINT by ``install_signal_handlers``) stops taking work, lets in-flight messages finish (or,
for a service with ``cancel_on_stop``, cancels them: their messages stay pending for a later
delivery), and returns. ``run(burst=True)`` returns once nothing is available (tests, embedded runs).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import time
import uuid
from collections.abc import Sequence
from typing import Any, Protocol

from core.bus.ports import Bus, Delivery
from core.domain.events import MessageDeadLettered, Metadata, NewEvent, RecordedEvent
from core.domain.ids import derived_id, system_stream
from core.runtime import metrics
from core.runtime.service import Service
from core.runtime.settings import Settings, load_settings
from core.store.ports import AlreadyProcessed

log = logging.getLogger("agentr.worker")

DEAD_LETTER_STREAM = system_stream("dead-letters")


class WorkerStore(Protocol):
    """What the worker needs from the event store."""

    async def append(
        self,
        events: Sequence[NewEvent],
        expected_versions: dict[str, int] | None = None,
        tracking: tuple[str, int] | None = None,
    ) -> list[RecordedEvent]: ...

    async def get(self, position: int) -> RecordedEvent | None: ...

    async def is_tracked(self, consumer: str, position: int) -> bool: ...

    async def last_position(self) -> int: ...


def consumer_name(service_name: str) -> str:
    """A consumer id unique to this process: service, host, pid and a random suffix."""
    host = socket.gethostname().split(".")[0] or "host"
    safe_host = "".join(c if c.isalnum() or c in "-_." else "-" for c in host)
    return f"{service_name}-{safe_host}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class Worker:
    """Runs one service's handlers against the bus and the store."""

    def __init__(
        self,
        service: Service,
        store: WorkerStore,
        bus: Bus,
        settings: Settings | None = None,
        *,
        consumer: str | None = None,
        error_backoff_s: float = 0.5,
        max_error_backoff_s: float = 10.0,
        prune_idle_ms: int | None = None,
    ) -> None:
        if not service.handlers:
            raise ValueError(f"service {service.name!r} has no handlers")
        if service.concurrency < 1:
            raise ValueError(f"service {service.name!r}: concurrency must be >= 1, got {service.concurrency}")
        self.service = service
        self.store = store
        self.bus = bus
        self.settings = settings or load_settings()
        self.consumer = consumer or consumer_name(service.name)
        self.topics = sorted(service.handlers)
        self.error_backoff_s = error_backoff_s
        self.max_error_backoff_s = max_error_backoff_s
        if prune_idle_ms is None:  # well above any gap between a live consumer's reads and claims
            prune_idle_ms = max(10 * self.settings.reclaim_idle_ms, 10 * self.settings.block_ms)
        if prune_idle_ms < 0:
            raise ValueError(f"prune_idle_ms must be >= 0, got {prune_idle_ms}")
        self.prune_idle_ms = prune_idle_ms
        self.pruned = 0  # dead consumers this worker removed from its group
        self.handled = 0  # messages whose effect this worker committed
        self.last_handled_position = 0
        self._stop = asyncio.Event()
        self._inflight: dict[asyncio.Task[None], Delivery] = {}
        self._last_reclaim = 0.0
        self._last_prune: float | None = None
        self._last_lag = 0.0

    @property
    def group(self) -> str:
        return self.service.name

    # -- control --------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop taking new messages; ``run`` returns once in-flight ones are done."""
        if not self._stop.is_set():
            log.info("worker %s: stopping, draining %d in flight", self.consumer, len(self._inflight))
        self._stop.set()

    def install_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop)

    # -- the loop -------------------------------------------------------------------------------

    async def run(self, burst: bool = False) -> None:
        """Consume until ``stop()`` (or, with ``burst``, until nothing is available)."""
        for topic in self.topics:
            await self.bus.ensure_group(topic, self.group)
        log.info(
            "worker %s consuming %s (concurrency %d%s)",
            self.consumer,
            ", ".join(self.topics),
            self.service.concurrency,
            ", burst" if burst else "",
            extra={"service": self.service.name},
        )
        backoff = self.error_backoff_s
        heartbeat = asyncio.create_task(self._heartbeat())
        try:
            while not self._stop.is_set():
                free = self.service.concurrency - len(self._inflight)
                if free <= 0:
                    await self._wait_for_a_slot()
                    continue
                try:
                    taken = await self._fetch(free, burst)
                    backoff = self.error_backoff_s
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # bus or store unreachable: keep trying
                    log.warning(
                        "worker %s: fetching failed (%s: %s); retrying in %.1fs",
                        self.consumer,
                        type(exc).__name__,
                        exc,
                        backoff,
                        extra={"service": self.service.name},
                    )
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._stop.wait(), timeout=backoff)
                    backoff = min(backoff * 2, self.max_error_backoff_s)
                    continue
                for delivery in taken:
                    task = asyncio.create_task(self._process(delivery))
                    self._inflight[task] = delivery
                await self._update_lag()
                if burst and not taken:
                    if not self._inflight:
                        break
                    await self._wait_for_a_slot()
        finally:
            await self._drain()
            heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await heartbeat
            log.info(
                "worker %s stopped after handling %d messages",
                self.consumer,
                self.handled,
                extra={"service": self.service.name},
            )

    async def _fetch(self, free: int, burst: bool) -> list[Delivery]:
        """Reclaimed idle messages first, then new ones; at most ``free``."""
        taken: list[Delivery] = []
        now = time.monotonic()
        reclaim_every = min(1.0, self.settings.reclaim_idle_ms / 2000)
        if burst or now - self._last_reclaim >= reclaim_every:
            self._last_reclaim = now
            for topic in self.topics:
                if len(taken) >= free:
                    break
                reclaimed = await self.bus.reclaim(
                    topic, self.group, self.consumer, self.settings.reclaim_idle_ms, count=free - len(taken)
                )
                mine = {d.message_id for d in self._inflight.values()}
                for delivery in reclaimed:
                    if delivery.message_id in mine:  # our own message, still running
                        continue
                    metrics.RETRIED.labels(self.service.name).inc()
                    log.info(
                        "reclaimed message at position %d (delivery %d)",
                        delivery.message.position,
                        delivery.deliveries,
                        extra={"service": self.service.name, "position": delivery.message.position},
                    )
                    taken.append(delivery)
            await self._prune_consumers(now)
        if len(taken) < free:
            if burst or taken:
                block_ms = 0
            elif self._inflight:  # wake up soon to refill the slots that free up meanwhile
                block_ms = min(self.settings.block_ms, 100)
            else:
                block_ms = self.settings.block_ms
            taken += await self.bus.consume(
                self.topics, self.group, self.consumer, count=free - len(taken), block_ms=block_ms
            )
        return taken

    async def _prune_consumers(self, now: float) -> None:
        """Forget dead consumers of the group (idle, nothing pending); rate-limited, never fatal."""
        every = min(60.0, self.prune_idle_ms / 2000)
        if self._last_prune is not None and now - self._last_prune < every:
            return
        self._last_prune = now
        for topic in self.topics:
            try:
                pruned = await self.bus.prune_consumers(
                    topic, self.group, self.prune_idle_ms, keep=[self.consumer]
                )
            except Exception as exc:  # pruning is housekeeping: consuming goes on without it
                log.warning(
                    "worker %s: pruning consumers of %s failed (%s: %s)",
                    self.consumer,
                    topic,
                    type(exc).__name__,
                    exc,
                    extra={"service": self.service.name, "topic": topic},
                )
                continue
            if pruned:
                self.pruned += len(pruned)
                log.info(
                    "pruned %d consumer(s) of group %s on %s idle over %d ms with nothing pending: %s",
                    len(pruned),
                    self.group,
                    topic,
                    self.prune_idle_ms,
                    ", ".join(pruned),
                    extra={"service": self.service.name, "topic": topic},
                )

    async def _heartbeat(self) -> None:
        """Keep in-flight messages from looking idle, so other consumers do not reclaim them."""
        interval = max(self.settings.reclaim_idle_ms / 3000, 0.01)
        while True:
            await asyncio.sleep(interval)
            by_topic: dict[str, list[str]] = {}
            for delivery in list(self._inflight.values()):
                by_topic.setdefault(delivery.topic, []).append(delivery.message_id)
            for topic, message_ids in by_topic.items():
                try:
                    await self.bus.touch(topic, self.group, self.consumer, message_ids)
                except Exception as exc:  # the bus is down: the fetch loop logs and retries
                    log.debug("heartbeat failed: %s", exc, extra={"service": self.service.name})

    async def _wait_for_a_slot(self) -> None:
        """Until a message finishes (or, for ``cancel_on_stop``, ``stop()`` is called)."""
        if not self._inflight:
            return
        waits: list[asyncio.Future[Any]] = list(self._inflight)
        stopping = None
        if self.service.cancel_on_stop:
            stopping = asyncio.ensure_future(self._stop.wait())
            waits.append(stopping)
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if stopping is not None:
                stopping.cancel()

    async def _drain(self) -> None:
        if self._inflight and self.service.cancel_on_stop and self._stop.is_set():
            log.info(
                "worker %s: cancelling %d in-flight message(s); they stay pending",
                self.consumer,
                len(self._inflight),
                extra={"service": self.service.name},
            )
            for task in self._inflight:
                task.cancel()
        if self._inflight:
            await asyncio.gather(*self._inflight, return_exceptions=True)

    async def _update_lag(self) -> None:
        now = time.monotonic()
        if now - self._last_lag < 1.0:
            return
        self._last_lag = now
        with contextlib.suppress(Exception):
            last = await self.store.last_position()
            metrics.LAG.labels(self.service.name).set(max(0, last - self.last_handled_position))

    # -- one message ----------------------------------------------------------------------------

    async def _process(self, delivery: Delivery) -> None:
        try:
            await self._handle(delivery)
        except asyncio.CancelledError:
            raise
        except Exception:  # never let a task die silently; the message stays pending
            log.exception(
                "unexpected error around position %d",
                delivery.message.position,
                extra={"service": self.service.name, "position": delivery.message.position},
            )
        finally:
            self._inflight.pop(asyncio.current_task(), None)  # type: ignore[arg-type]

    async def _handle(self, delivery: Delivery) -> None:
        name = self.service.name
        position = delivery.message.position
        fields = {"service": name, "position": position, "topic": delivery.topic}
        if await self.store.is_tracked(name, position):
            metrics.SKIPPED.labels(name).inc()
            log.debug("position %d already handled; acking", position, extra=fields)
            await self.bus.ack(delivery.topic, self.group, [delivery.message_id])
            return
        if delivery.deliveries > self.settings.max_deliveries:
            # delivered that often without an ack: the message keeps killing its consumers
            await self._dead_letter(delivery, "consumer died or stalled on every delivery")
            return
        event = await self.store.get(position)
        if event is None:
            await self._dead_letter(delivery, f"no event at position {position} in the store")
            return
        handler = self.service.handlers.get(event.event_type)
        if handler is None:
            await self._dead_letter(delivery, f"{name} has no handler for {event.event_type}")
            return
        try:
            result = await handler(event)
            await self.store.append(
                list(result.events), dict(result.expected_versions) or None, tracking=(name, position)
            )
        except AlreadyProcessed:
            metrics.SKIPPED.labels(name).inc()
        except Exception as exc:
            metrics.FAILED.labels(name).inc()
            error = f"{type(exc).__name__}: {exc}"
            if delivery.deliveries >= self.settings.max_deliveries:
                log.error(
                    "handler failed on delivery %d of %d: %s",
                    delivery.deliveries,
                    self.settings.max_deliveries,
                    error,
                    extra=fields,
                    exc_info=True,
                )
                await self._dead_letter(delivery, error)
            else:
                log.warning(
                    "handler failed on delivery %d (%s); left pending for a retry",
                    delivery.deliveries,
                    error,
                    extra=fields,
                    exc_info=True,
                )
            return
        else:
            metrics.HANDLED.labels(name).inc()
            self.handled += 1
            log.debug("handled %s", event.event_type, extra=fields)
        self.last_handled_position = max(self.last_handled_position, position)
        await self.bus.ack(delivery.topic, self.group, [delivery.message_id])

    async def _dead_letter(self, delivery: Delivery, error: str) -> None:
        name = self.service.name
        position = delivery.message.position
        record = NewEvent(
            stream_id=DEAD_LETTER_STREAM,
            event=MessageDeadLettered(
                consumer=name,
                topic=delivery.topic,
                position=position,
                deliveries=delivery.deliveries,
                error=error[:4000],
            ),
            metadata=Metadata(producer=name),
            event_id=derived_id("dead-letter", name, position),
        )
        with contextlib.suppress(AlreadyProcessed):
            await self.store.append([record], tracking=(name, position))
        await self.bus.dead_letter(delivery, self.group, error)
        metrics.DEAD_LETTERED.labels(name).inc()
        log.error(
            "dead-lettered position %d after %d deliveries: %s",
            position,
            delivery.deliveries,
            error,
            extra={"service": name, "position": position, "topic": delivery.topic},
        )
