"""The relay against the real PostgreSQL and a real Redis server of its own (started, stopped and
restarted on one port inside the test; the machine's shared Redis is never touched)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from prometheus_client import REGISTRY

from core.bus.inprocess import InProcessBus
from core.bus.redis_streams import RedisStreamsBus
from core.domain.events import DomainEvent, NewEvent, register
from core.runtime.relay import Relay
from core.store.factory import open_store
from core.store.sql import SqlEventStore
from tests.support import free_port

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")


@register
@dataclass(frozen=True)
class RelayProbeSent(DomainEvent):
    number: int


@register
@dataclass(frozen=True)
class RelayProbeEchoed(DomainEvent):
    number: int


class RedisServer:
    """A private redis-server process on a fixed port that can be stopped and started again."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.process: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    async def start(self) -> None:
        self.process = await asyncio.create_subprocess_exec(
            "redis-server",
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        client = aioredis.from_url(self.url)
        try:
            for _ in range(200):
                with contextlib.suppress(OSError, aioredis.ConnectionError):
                    if await client.ping():
                        return
                await asyncio.sleep(0.05)
            raise RuntimeError(f"redis-server on port {self.port} did not start")
        finally:
            await client.aclose()

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.kill()
            await asyncio.wait_for(self.process.wait(), timeout=10)
        self.process = None


@pytest.fixture
async def redis_server() -> AsyncIterator[RedisServer]:
    server = RedisServer(free_port())
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def store(pg_url: str) -> AsyncIterator[SqlEventStore]:
    opened = await open_store(pg_url, create_tables=True)
    try:
        yield opened
    finally:
        await opened.close()


async def eventually(check: Callable[[], Awaitable[bool]], what: str, timeout_s: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not await check():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def probes(numbers: range, kind: type[DomainEvent] = RelayProbeSent) -> list[NewEvent]:
    return [NewEvent(stream_id=f"probe-{n % 4}", event=kind(number=n)) for n in numbers]  # type: ignore[call-arg]


async def test_events_committed_while_redis_is_down_are_delivered_after_restart(
    store: SqlEventStore, redis_server: RedisServer, redis_prefix: str
) -> None:
    await redis_server.start()
    bus = RedisStreamsBus(redis_server.url, redis_prefix)
    relay = Relay(store, bus, "relay-test", poll_interval_s=0.05, initial_backoff_s=0.05, max_backoff_s=0.3)
    running = asyncio.create_task(relay.run())
    try:
        before = await store.append(probes(range(0, 10)))

        async def published_first() -> bool:
            return await bus.topic_length("RelayProbeSent") == 10

        await eventually(published_first, "the first 10 events on Redis")

        def errors() -> float:
            return REGISTRY.get_sample_value("agentr_relay_errors_total", {"relay": "relay-test"}) or 0.0

        errors_before = errors()
        await redis_server.stop()
        during = await store.append(probes(range(10, 30)) + probes(range(30, 35), RelayProbeEchoed))

        async def relay_noticed() -> bool:
            return errors() > errors_before

        await eventually(relay_noticed, "the relay to notice Redis is down")
        assert (
            await store.get_checkpoint("relay-test") == before[-1].position
        )  # nothing lost, nothing skipped

        await redis_server.start()  # an empty Redis (no persistence) on the same port

        async def caught_up() -> bool:
            return await store.get_checkpoint("relay-test") == during[-1].position

        await eventually(caught_up, "the relay to publish what was committed during the outage")
        for topic in ("RelayProbeSent", "RelayProbeEchoed"):
            await bus.ensure_group(topic, "checker")
        got = await bus.consume(
            ["RelayProbeSent", "RelayProbeEchoed"], "checker", "c", count=100, block_ms=100
        )
        assert sorted(d.message.position for d in got) == [e.position for e in during]
        by_position = {e.position: e for e in during}
        for delivery in got:
            assert delivery.message.event_type == by_position[delivery.message.position].event_type
            assert delivery.message.stream_id == by_position[delivery.message.position].stream_id
    finally:
        relay.stop()
        await asyncio.wait_for(running, timeout=15)
        await bus.close()


async def test_relay_wakes_on_commit_and_filters_types(store: SqlEventStore) -> None:
    bus = InProcessBus()
    relay = Relay(store, bus, "relay-filter", poll_interval_s=60.0, event_types=["RelayProbeEchoed"])
    await bus.ensure_group("RelayProbeEchoed", "g")
    running = asyncio.create_task(relay.run())
    try:
        await asyncio.sleep(0.05)  # the relay is now waiting (a minute-long poll)
        appended = await store.append(probes(range(0, 3)) + probes(range(3, 6), RelayProbeEchoed))
        got = await bus.consume(["RelayProbeEchoed"], "g", "c", count=10, block_ms=5000)
        assert [d.message.position for d in got] == [e.position for e in appended[3:]]
        assert await bus.topic_length("RelayProbeSent") == 0  # filtered out
    finally:
        relay.stop()
        await asyncio.wait_for(running, timeout=10)


async def test_drain_publishes_in_batches_and_resumes_from_checkpoint(store: SqlEventStore) -> None:
    bus = InProcessBus()
    await bus.ensure_group("RelayProbeSent", "g")
    appended = await store.append(probes(range(0, 25)))
    assert await Relay(store, bus, "relay-drain", batch_size=10).drain() == 25
    more = await store.append(probes(range(25, 30)))
    assert await Relay(store, bus, "relay-drain", batch_size=10).drain() == 5  # a new instance resumes
    got = await bus.consume(["RelayProbeSent"], "g", "c", count=100, block_ms=10)
    assert [d.message.position for d in got] == [e.position for e in appended + more]


async def test_agentr_worker_relay_burst_publishes_committed_events(
    store: SqlEventStore, pg_url: str, redis_url: str, redis_prefix: str
) -> None:
    appended = await store.append(probes(range(0, 7)))
    env = {
        **os.environ,
        "AGENTR_DATABASE_URL": pg_url,
        "AGENTR_REDIS_URL": redis_url,
        "AGENTR_REDIS_PREFIX": redis_prefix,
    }
    agentr = Path(sys.executable).parent / "agentr"
    process = await asyncio.create_subprocess_exec(
        str(agentr),
        "worker",
        "relay",
        "--burst",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode == 0, output.decode()
    assert "7 events published" in output.decode()
    assert await store.get_checkpoint("relay") == appended[-1].position
    bus = RedisStreamsBus(redis_url, redis_prefix)
    try:
        assert await bus.topic_length("RelayProbeSent") == 7
    finally:
        await bus.close()
