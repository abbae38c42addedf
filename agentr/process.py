"""Owns the composition root of ``agentr worker NAME``: settings -> store -> bus -> service -> loop.

NAME is one of ``search``, ``critic``, ``splice``, ``train`` (each service package exposes
``build_service(settings, store) -> Service``, see ``core.runtime.service``), ``relay``, or
``package.module:function`` for any other service factory with the same signature (plugins, tests).
Nothing connects before ``run_process`` runs.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import logging
from collections.abc import Callable
from typing import Any

from core.runtime.service import Service
from core.runtime.settings import Settings
from core.store.ports import EventStore

log = logging.getLogger("agentr.process")

SERVICE_MODULES: dict[str, str] = {
    "search": "search_service.service",
    "critic": "critic_service.service",
    "splice": "splice_service.service",
    "train": "train_service.service",
}
WORKER_NAMES = (*SERVICE_MODULES, "relay")


class WorkerSetupError(Exception):
    """The worker cannot start: unknown name, missing service module, missing configuration."""


def load_service_factory(name: str) -> Callable[..., Any]:
    """The ``build_service`` function behind a worker NAME (or a ``module:function`` path)."""
    if ":" in name:
        module_name, _, attr = name.partition(":")
    elif name in SERVICE_MODULES:
        module_name, attr = SERVICE_MODULES[name], "build_service"
    else:
        raise WorkerSetupError(
            f"unknown worker {name!r}: use one of {', '.join(WORKER_NAMES)} or package.module:function"
        )
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise WorkerSetupError(
                f"worker {name!r} needs module {module_name!r}, which is not installed or not written yet"
            ) from None
        raise
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise WorkerSetupError(f"module {module_name!r} has no callable {attr!r} (worker {name!r})")
    return factory  # type: ignore[no-any-return]


async def build_service(name: str, settings: Settings, store: EventStore, **options: Any) -> Service:
    """The service behind worker ``name``; ``options`` go to its factory (e.g. ``policies``, the
    model cache an embedded run shares between its search, critic and splice services)."""
    factory = load_service_factory(name)
    service = factory(settings, store, **options)
    if inspect.isawaitable(service):
        service = await service
    if not isinstance(service, Service):
        raise WorkerSetupError(f"{name!r}: build_service returned {type(service).__name__}, not a Service")
    return service


async def run_process(
    name: str,
    settings: Settings,
    *,
    burst: bool = False,
    consumer: str | None = None,
) -> int:
    """Run worker ``name`` until SIGTERM/SIGINT (or, with ``burst``, until idle); returns messages
    handled (events published, for the relay)."""
    from core.bus.redis_streams import RedisStreamsBus
    from core.runtime.relay import Relay
    from core.runtime.worker import Worker
    from core.store.factory import open_store

    if name != "relay":
        load_service_factory(name)  # fail fast, before connecting anywhere
    if not settings.redis_url:
        raise WorkerSetupError(
            "agentr worker needs AGENTR_REDIS_URL: the in-process bus only exists inside `agentr run`"
        )
    url = settings.effective_database_url
    store = await open_store(url, create_tables=url.startswith("sqlite"))
    bus = RedisStreamsBus(
        settings.redis_url, settings.redis_prefix, max_block_ms=max(5000, settings.block_ms)
    )
    service: Service | None = None
    try:
        try:
            await bus.ping()
        except Exception as exc:  # keep going: the loops retry until Redis answers
            log.warning("Redis at %s does not answer yet (%s); will keep retrying", settings.redis_url, exc)
        if name == "relay":
            relay = Relay(store, bus)
            if burst:
                return await relay.drain()
            _on_signals(relay.stop)
            await relay.run()
            return relay.published
        service = await build_service(name, settings, store)
        worker = Worker(service, store, bus, settings, consumer=consumer)
        _on_signals(worker.stop)
        await worker.run(burst=burst)
        return worker.handled
    finally:
        if service is not None and service.on_close is not None:
            await service.on_close()
        await bus.close()
        await store.close()


def _on_signals(callback: Callable[[], None]) -> None:
    import signal

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, callback)
