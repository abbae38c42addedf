"""Owns single-process mode: the relay and several services in ONE process on an InProcessBus.

``agentr run`` (and tests) call ``run_embedded(store, services, until)``: the relay publishes the
store's events to an in-process bus, one ``Worker`` per service consumes them, exactly as separate
processes would over Redis. The in-process bus is empty at every start, so the embedded relay
(checkpoint ``relay-embedded``) republishes from position 0 the events some service handles; the
workers skip what their tracking rows say is done, so nothing pending before a crash is lost.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from core.bus.inprocess import InProcessBus
from core.runtime.relay import Relay, RelayStore
from core.runtime.service import Service
from core.runtime.settings import Settings, load_settings
from core.runtime.worker import Worker, WorkerStore

log = logging.getLogger("agentr.embedded")

EMBEDDED_RELAY = "relay-embedded"


class EmbeddedStore(RelayStore, WorkerStore, Protocol):
    """The store as the embedded runner uses it: what the relay and the workers need."""


async def run_embedded(
    store: EmbeddedStore,
    services: Sequence[Service],
    until: Callable[[], Awaitable[bool]],
    *,
    settings: Settings | None = None,
    check_interval_s: float = 0.05,
) -> None:
    """Run relay + ``services`` until ``await until()`` is true, then stop and drain everything.

    An exception escaping the relay or a worker stops the others and is raised here.
    """
    names = [s.name for s in services]
    if len(set(names)) != len(names):
        raise ValueError(f"service names must be unique, got {names}")
    settings = settings or load_settings()
    bus = InProcessBus()
    consumed = {event_type for service in services for event_type in service.handlers}
    relay = Relay(store, bus, EMBEDDED_RELAY, poll_interval_s=0.5, trim_interval_s=5.0, event_types=consumed)
    workers = [Worker(service, store, bus, settings) for service in services]
    await store.set_checkpoint(EMBEDDED_RELAY, 0)
    for worker in workers:  # groups exist before the relay publishes anything
        for topic in worker.topics:
            await bus.ensure_group(topic, worker.group)
    tasks = [asyncio.create_task(relay.run(), name="relay")]
    tasks += [asyncio.create_task(w.run(), name=f"worker-{w.service.name}") for w in workers]
    log.info("embedded mode: relay + %s", ", ".join(names) or "no services")
    try:
        while not await until():
            for task in tasks:
                if task.done():
                    task.result()  # re-raise a crash
                    raise RuntimeError(f"{task.get_name()} stopped unexpectedly")
            await asyncio.sleep(check_interval_s)
    finally:
        relay.stop()
        for worker in workers:
            worker.stop()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        await bus.close()
        for task, result in zip(tasks, results, strict=True):
            if isinstance(result, Exception):
                log.error("%s ended with %s: %s", task.get_name(), type(result).__name__, result)
