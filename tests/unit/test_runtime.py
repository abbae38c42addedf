"""Unit tests of the worker runtime: logging format, service loading, set-up errors, consumer pruning."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import pytest

from agentr.process import WorkerSetupError, load_service_factory, run_process
from core.bus.inprocess import InProcessBus
from core.bus.ports import Bus
from core.bus.redis_streams import RedisStreamsBus
from core.domain.events import DomainEvent, NewEvent, register
from core.runtime.logging import configure_logging
from core.runtime.relay import Relay
from core.runtime.service import HandlerResult, Service
from core.runtime.settings import Settings, load_settings
from core.runtime.worker import Worker, consumer_name
from core.store.factory import open_store


@pytest.fixture(autouse=True)
def keep_root_logger() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_json_logs_carry_extras_and_exceptions() -> None:
    stream = io.StringIO()
    configure_logging("INFO", json_lines=True, stream=stream)
    logger = logging.getLogger("agentr.test")
    try:
        logger.info("handled %s", "PairFound", extra={"service": "critic", "position": 42})
        try:
            raise ValueError("broken")
        except ValueError:
            logger.exception("failed", extra={"position": 43})
        logger.debug("hidden below INFO")
    finally:
        logging.getLogger().handlers.clear()
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert first["message"] == "handled PairFound"
    assert (first["service"], first["position"], first["level"]) == ("critic", 42, "INFO")
    assert second["position"] == 43 and "ValueError: broken" in second["exception"]


def test_text_logs_append_extras() -> None:
    stream = io.StringIO()
    configure_logging("DEBUG", json_lines=False, stream=stream)
    try:
        logging.getLogger("agentr.test").warning("retrying", extra={"position": 7})
    finally:
        logging.getLogger().handlers.clear()
    assert "retrying position=7" in stream.getvalue()


def test_unknown_log_level_is_named() -> None:
    with pytest.raises(ValueError, match="unknown log level 'LOUD'"):
        configure_logging("LOUD")


def test_service_factory_errors_name_the_problem() -> None:
    with pytest.raises(WorkerSetupError, match="unknown worker 'bogus'.*relay"):
        load_service_factory("bogus")
    with pytest.raises(WorkerSetupError, match="needs module 'tests.no_such_module'"):
        load_service_factory("tests.no_such_module:build_service")
    with pytest.raises(WorkerSetupError, match="has no callable 'nope'"):
        load_service_factory("core.runtime.settings:nope")
    assert callable(load_service_factory("core.runtime.settings:load_settings"))


async def test_worker_without_redis_url_refuses_before_connecting() -> None:
    settings = load_settings(redis_url=None, database_url="postgresql+asyncpg://nobody@127.0.0.1:1/none")
    with pytest.raises(WorkerSetupError, match="AGENTR_REDIS_URL"):
        await run_process("relay", settings)


async def noop(_event: object) -> HandlerResult:
    return HandlerResult()


def test_worker_rejects_unusable_services() -> None:
    with pytest.raises(ValueError, match="has no handlers"):
        Worker(Service(name="empty", handlers={}), store=None, bus=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="concurrency must be >= 1"):
        Worker(Service(name="zero", handlers={"X": noop}, concurrency=0), store=None, bus=None)  # type: ignore[arg-type]


def test_consumer_names_are_unique_and_valid() -> None:
    first, second = consumer_name("critic"), consumer_name("critic")
    assert first != second and first.startswith("critic-")
    assert all(c.isalnum() or c in "-_." for c in first)


@register
@dataclass(frozen=True)
class PruneProbe(DomainEvent):
    n: int


@pytest.fixture(params=["redis", "inprocess"])
async def any_bus(request: pytest.FixtureRequest, redis_url: str, redis_prefix: str) -> AsyncIterator[Bus]:
    adapter: Bus = RedisStreamsBus(redis_url, redis_prefix) if request.param == "redis" else InProcessBus()
    try:
        yield adapter
    finally:
        await adapter.close()


async def test_worker_prunes_dead_consumers_but_never_itself(
    any_bus: Bus, sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    bus, topic, group = any_bus, "PruneProbe", "pruner"
    store = await open_store(sqlite_url, create_tables=True)
    try:
        await store.append([NewEvent(f"probe-{n}", PruneProbe(n=n)) for n in range(3)])
        await bus.ensure_group(topic, group)
        await Relay(store, bus).drain()
        (clean,) = await bus.consume([topic], group, "dead-clean", count=1, block_ms=50)
        await bus.ack(topic, group, [clean.message_id])  # died with nothing pending
        (held,) = await bus.consume([topic], group, "dead-holding", count=1, block_ms=50)  # died holding one
        (own,) = await bus.consume([topic], group, "w", count=1, block_ms=50)  # this worker's name, earlier
        await bus.ack(topic, group, [own.message_id])
        await asyncio.sleep(0.1)

        service = Service(name=group, handlers={topic: noop})
        settings = Settings(reclaim_idle_ms=20, block_ms=10)
        assert Worker(service, store, bus, settings).prune_idle_ms == 200  # 10 x reclaim_idle_ms
        caplog.set_level(logging.INFO, logger="agentr.worker")
        worker = Worker(service, store, bus, settings, consumer="w", prune_idle_ms=50)
        await worker.run(burst=True)
        # the held message was reclaimed and handled first, so dead-holding went too
        assert worker.handled == 1 and await store.is_tracked(group, held.message.position)
        assert worker.pruned == 2
        assert {(c.name, c.pending) for c in await bus.consumers(topic, group)} == {("w", 0)}
        assert any(
            "pruned 2 consumer(s)" in r.getMessage() and "dead-clean, dead-holding" in r.getMessage()
            for r in caplog.records
        )

        # idle with nothing pending, as dead ones are: a worker still never prunes its own consumer
        await asyncio.sleep(0.1)
        again = Worker(service, store, bus, settings, consumer="w", prune_idle_ms=50)
        await again.run(burst=True)
        assert again.pruned == 0 and again.handled == 0
        assert [c.name for c in await bus.consumers(topic, group)] == ["w"]
        assert await bus.pending_count(topic, group) == 0
    finally:
        await store.close()


def test_worker_rejects_a_negative_prune_idle_time() -> None:
    with pytest.raises(ValueError, match="prune_idle_ms must be >= 0"):
        Worker(Service(name="s", handlers={"X": noop}), store=None, bus=None, prune_idle_ms=-1)  # type: ignore[arg-type]
