"""Owns the health probe of a worker container: can it do its work right now?

``check_health`` answers what is wrong (an empty list: healthy) by doing what a worker needs: a
query on the event store (``AGENTR_DATABASE_URL``), a PING to Redis (``AGENTR_REDIS_URL``, the
bus), and, given a port, a GET of the worker process's own ``/metrics`` (the process is up). Each
check is bounded by ``timeout_s``, which counts only the check itself: the modules the checks use
(the store's database driver included) are imported before any clock starts; on a loaded machine
those imports take seconds, and one made inside a check would block the event loop past every
check's deadline. ``agentr health`` runs it as the compose healthcheck of the relay and the workers
(the Celery trainer has its own heartbeat: ``train_service.train_jobs``).
"""

from __future__ import annotations

import asyncio

from core.runtime.settings import Settings


async def _database(url: str) -> None:
    from core.store.factory import open_store

    store = await open_store(url)
    try:
        await store.last_position()
    finally:
        await store.close()


async def _redis(url: str) -> None:
    from redis.asyncio import Redis

    client = Redis.from_url(url, socket_connect_timeout=5, socket_timeout=5)
    try:
        await client.ping()
    finally:
        await client.aclose()


async def _metrics(port: int) -> None:
    import httpx

    async with httpx.AsyncClient(timeout=5.0) as client:
        response = await client.get(f"http://127.0.0.1:{port}/metrics")
        response.raise_for_status()


def _import_clients(database_url: str, with_redis: bool, with_metrics: bool) -> None:
    """Import what the checks use, before their timeouts start (see the module docstring)."""
    import importlib

    import core.store.factory  # noqa: F401

    if database_url.startswith("postgresql+asyncpg"):
        importlib.import_module("asyncpg")
    elif database_url.startswith("sqlite+aiosqlite"):
        importlib.import_module("aiosqlite")
    if with_redis:
        importlib.import_module("redis.asyncio")
    if with_metrics:
        importlib.import_module("httpx")


async def check_health(
    settings: Settings, metrics_port: int | None = None, timeout_s: float = 5.0
) -> list[str]:
    """What keeps this worker from its work (see the module docstring); [] when nothing does."""
    _import_clients(settings.effective_database_url, bool(settings.redis_url), metrics_port is not None)
    checks = {"database": _database(settings.effective_database_url)}
    if settings.redis_url:
        checks["redis"] = _redis(settings.redis_url)
    if metrics_port is not None:
        checks[f"metrics port {metrics_port}"] = _metrics(metrics_port)
    names = list(checks)
    outcomes = await asyncio.gather(
        *(asyncio.wait_for(check, timeout_s) for check in checks.values()), return_exceptions=True
    )
    problems = []
    for name, outcome in zip(names, outcomes, strict=True):
        if isinstance(outcome, TimeoutError):
            problems.append(f"{name}: no answer within {timeout_s:g}s")
        elif isinstance(outcome, BaseException):
            problems.append(f"{name}: {type(outcome).__name__}: {outcome}")
    return problems
