"""The worker runtime on the real PostgreSQL and Redis, with workers as separate OS processes.

This module is also the test-only service those processes run:
``agentr worker tests.integration.test_worker:build_service``. Its handler turns each
``WorkItemQueued`` into one ``WorkItemDone`` with a RANDOM event id, so only the runtime's tracking
row can stop a redelivered message from producing a second one.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from core.bus.inprocess import InProcessBus
from core.bus.ports import BusMessage
from core.bus.redis_streams import RedisStreamsBus
from core.domain.events import DomainEvent, MessageDeadLettered, NewEvent, RecordedEvent, caused_by, register
from core.runtime.embedded import run_embedded
from core.runtime.relay import Relay
from core.runtime.service import HandlerResult, Service
from core.runtime.settings import Settings
from core.runtime.worker import DEAD_LETTER_STREAM, Worker
from core.store.factory import open_store
from core.store.sql import SqlEventStore

REPO = Path(__file__).resolve().parents[2]
SERVICE = "tests.integration.test_worker:build_service"
GROUP = "test-workers"


@register
@dataclass(frozen=True)
class WorkItemQueued(DomainEvent):
    item: int
    fail: bool = False


@register
@dataclass(frozen=True)
class WorkItemDone(DomainEvent):
    item: int
    worker_pid: int


@register
@dataclass(frozen=True)
class WorkItemArchived(DomainEvent):
    item: int


async def handle_queued(event: RecordedEvent) -> HandlerResult:
    queued = event.event
    assert isinstance(queued, WorkItemQueued)
    await asyncio.sleep(float(os.environ.get("AGENTR_TEST_HANDLER_DELAY_S", "0")))
    if queued.fail:
        raise ValueError(f"item {queued.item} is broken")
    done = WorkItemDone(item=queued.item, worker_pid=os.getpid())
    return HandlerResult([NewEvent(f"done-{queued.item}", done, caused_by(event, GROUP))])


def build_service(settings: Settings, store: object) -> Service:
    """The test service's composition root (what ``agentr worker`` calls)."""
    return Service(name=GROUP, handlers={"WorkItemQueued": handle_queued}, concurrency=4)


# -- helpers --------------------------------------------------------------------------------------


@pytest.fixture
async def store(pg_url: str) -> AsyncIterator[SqlEventStore]:
    opened = await open_store(pg_url, create_tables=True)
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
async def bus(redis_url: str, redis_prefix: str) -> AsyncIterator[RedisStreamsBus]:
    opened = RedisStreamsBus(redis_url, redis_prefix)
    try:
        yield opened
    finally:
        await opened.close()


async def queue_items(
    store: SqlEventStore, bus: RedisStreamsBus | InProcessBus, items: range, **kw: bool
) -> None:
    await store.append([NewEvent(f"item-{i}", WorkItemQueued(item=i, **kw)) for i in items])
    await bus.ensure_group("WorkItemQueued", GROUP)  # as the worker would, so nothing is missed
    await Relay(store, bus).drain()


async def done_items(store: SqlEventStore) -> Counter[int]:
    events = await store.read_all(after=0, limit=100_000, event_types=["WorkItemDone"])
    return Counter(e.event.item for e in events)  # type: ignore[attr-defined]


async def eventually(check: Callable[[], Awaitable[bool]], what: str, timeout_s: float = 60.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not await check():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def start_worker(
    pg_url: str, redis_url: str, prefix: str, log_path: Path, *args: str, **env: str
) -> subprocess.Popen[bytes]:
    environment = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "AGENTR_DATABASE_URL": pg_url,
        "AGENTR_REDIS_URL": redis_url,
        "AGENTR_REDIS_PREFIX": prefix,
        "AGENTR_BLOCK_MS": "200",
        "AGENTR_LOG_JSON": "1",
        **env,
    }
    agentr = Path(sys.executable).parent / "agentr"
    with log_path.open("ab") as log:
        return subprocess.Popen(
            [str(agentr), "worker", SERVICE, *args], env=environment, cwd=REPO, stdout=log, stderr=log
        )


def metric(name: str) -> float:
    return REGISTRY.get_sample_value(name, {"service": GROUP}) or 0.0


# -- tests ----------------------------------------------------------------------------------------


async def test_sigkilled_worker_is_reclaimed_and_every_effect_happens_once(
    store: SqlEventStore, bus: RedisStreamsBus, pg_url: str, redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    total = 40
    await queue_items(store, bus, range(total))
    log = tmp_path / "victim.log"
    victim = start_worker(
        pg_url,
        redis_url,
        redis_prefix,
        log,
        AGENTR_TEST_HANDLER_DELAY_S="0.05",
        AGENTR_RECLAIM_IDLE_MS="600000",
    )
    try:

        async def some_done() -> bool:
            return sum((await done_items(store)).values()) >= 8

        await eventually(some_done, "the first worker to handle a few items")
        victim.send_signal(signal.SIGKILL)
        assert victim.wait(timeout=10) == -signal.SIGKILL
    finally:
        if victim.poll() is None:
            victim.kill()
    handled_by_victim = sum((await done_items(store)).values())
    assert handled_by_victim < total, log.read_text()[-3000:]
    stranded = await bus.pending_count("WorkItemQueued", GROUP)
    assert stranded > 0  # the victim died holding messages it had not acked

    retried_before = metric("agentr_worker_retried_total")
    rescuer = Worker(
        build_service(Settings(), store),
        store,
        bus,
        Settings(reclaim_idle_ms=300, block_ms=100),
        consumer="rescuer",
    )
    running = asyncio.create_task(rescuer.run())
    try:

        async def all_settled() -> bool:
            done = await done_items(store)
            return len(done) == total and await bus.pending_count("WorkItemQueued", GROUP) == 0

        await eventually(all_settled, "the second consumer to finish the stranded work")
    finally:
        rescuer.stop()
        await asyncio.wait_for(running, timeout=10)
    done = await done_items(store)
    assert done == Counter(range(total))  # every item exactly once: none lost, none doubled
    assert metric("agentr_worker_retried_total") - retried_before >= stranded
    pids = {e.event.worker_pid for e in await store.read_all(0, 1000, ["WorkItemDone"])}  # type: ignore[attr-defined]
    assert pids == {victim.pid, os.getpid()}
    for item in range(total):
        assert await store.is_tracked(GROUP, (await store.read_stream(f"item-{item}"))[0].position)


async def test_sigterm_stops_taking_work_and_drains(
    store: SqlEventStore, bus: RedisStreamsBus, pg_url: str, redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    await queue_items(store, bus, range(4))
    log = tmp_path / "worker.log"
    worker = start_worker(pg_url, redis_url, redis_prefix, log, AGENTR_TEST_HANDLER_DELAY_S="1.5")
    try:

        async def all_taken() -> bool:
            return await bus.pending_count("WorkItemQueued", GROUP) == 4

        await eventually(all_taken, "the worker to take the four items")
        assert await done_items(store) == Counter()  # all four are in flight
        await queue_items(store, bus, range(4, 8))  # published after the worker was told to stop:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0, log.read_text()[-3000:]
    finally:
        if worker.poll() is None:
            worker.kill()
    done = await done_items(store)
    assert set(done) <= set(range(8)) and all(n == 1 for n in done.values())
    assert set(range(4)) <= set(done)  # the in-flight ones were finished, not abandoned
    assert "stopping, draining" in log.read_text()
    # whatever it did not take is still there for the next worker, untouched
    left = await bus.consume(["WorkItemQueued"], GROUP, "next", count=100, block_ms=100)
    not_done = [(await store.read_stream(f"item-{i}"))[0].position for i in range(8) if i not in done]
    assert sorted(d.message.position for d in left) == not_done
    assert await bus.pending_count("WorkItemQueued", GROUP) == len(left)


async def test_burst_mode_drains_and_exits(
    store: SqlEventStore, bus: RedisStreamsBus, pg_url: str, redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    await queue_items(store, bus, range(10))
    log = tmp_path / "burst.log"
    first = start_worker(pg_url, redis_url, redis_prefix, log, "--burst")
    assert first.wait(timeout=60) == 0, log.read_text()[-3000:]
    assert "10 messages handled" in log.read_text()
    assert await done_items(store) == Counter(range(10))
    # the tracking table makes a replay of the same messages a no-op
    await bus.publish(
        "WorkItemQueued",
        [
            BusMessage(e.position, e.event_type, e.stream_id)
            for e in await store.read_all(0, 100, ["WorkItemQueued"])
        ],
    )
    second = start_worker(pg_url, redis_url, redis_prefix, log, "--burst")
    assert second.wait(timeout=60) == 0, log.read_text()[-3000:]
    assert "0 messages handled" in log.read_text()
    assert await done_items(store) == Counter(range(10))
    assert await bus.pending_count("WorkItemQueued", GROUP) == 0


async def test_dead_letter_after_max_deliveries_records_an_event(
    store: SqlEventStore, bus: RedisStreamsBus
) -> None:
    await queue_items(store, bus, range(3))
    await queue_items(store, bus, range(3, 4), fail=True)
    failed_before = metric("agentr_worker_failed_total")
    settings = Settings(max_deliveries=3, reclaim_idle_ms=50, block_ms=50)
    worker = Worker(build_service(settings, store), store, bus, settings, consumer="w1")
    running = asyncio.create_task(worker.run())
    try:

        async def dead_lettered() -> bool:
            return bool(await bus.dead_letters("WorkItemQueued"))

        await eventually(dead_lettered, "the broken item to be dead-lettered")
    finally:
        worker.stop()
        await asyncio.wait_for(running, timeout=10)
    assert await done_items(store) == Counter(range(3))
    assert metric("agentr_worker_failed_total") - failed_before == 3
    broken_position = (await store.read_stream("item-3"))[0].position
    (recorded,) = await store.read_stream(DEAD_LETTER_STREAM)
    letter = recorded.event
    assert isinstance(letter, MessageDeadLettered)
    assert (letter.consumer, letter.topic, letter.position, letter.deliveries) == (
        GROUP,
        "WorkItemQueued",
        broken_position,
        3,
    )
    assert letter.error == "ValueError: item 3 is broken"
    (moved,) = await bus.dead_letters("WorkItemQueued")
    assert moved.message.position == broken_position and moved.deliveries == 3
    assert await bus.pending_count("WorkItemQueued", GROUP) == 0
    assert await store.is_tracked(GROUP, broken_position)


async def test_a_message_that_keeps_killing_consumers_is_dead_lettered_unrun(sqlite_url: str) -> None:
    store = await open_store(sqlite_url, create_tables=True)
    bus = InProcessBus()
    try:
        await queue_items(store, bus, range(1))
        settings = Settings(max_deliveries=2, reclaim_idle_ms=0)
        # three consumers took it and died without acking
        await bus.consume(["WorkItemQueued"], GROUP, "dead-1", count=1, block_ms=0)
        await bus.reclaim("WorkItemQueued", GROUP, "dead-2", min_idle_ms=0)
        worker = Worker(build_service(settings, store), store, bus, settings, consumer="w")
        await worker.run(burst=True)  # reclaims it as delivery 3 > max 2
        assert await done_items(store) == Counter()
        (recorded,) = await store.read_stream(DEAD_LETTER_STREAM)
        assert recorded.event.deliveries == 3  # type: ignore[attr-defined]
        assert "died" in recorded.event.error  # type: ignore[attr-defined]
    finally:
        await store.close()


async def archive(event: RecordedEvent) -> HandlerResult:
    done = event.event
    assert isinstance(done, WorkItemDone)
    return HandlerResult([NewEvent(f"archive-{done.item}", WorkItemArchived(item=done.item))])


async def test_embedded_mode_runs_a_pipeline_in_one_process(sqlite_url: str) -> None:
    store = await open_store(sqlite_url, create_tables=True)
    try:
        await store.append([NewEvent(f"item-{i}", WorkItemQueued(item=i)) for i in range(12)])
        services = [
            build_service(Settings(), store),
            Service(name="archiver", handlers={"WorkItemDone": archive}),
        ]

        async def archived_all() -> bool:
            return len(await store.read_all(0, 100, ["WorkItemArchived"])) >= 12

        await asyncio.wait_for(run_embedded(store, services, archived_all), timeout=60)
        archived = Counter(e.event.item for e in await store.read_all(0, 100, ["WorkItemArchived"]))  # type: ignore[attr-defined]
        assert archived == Counter(range(12))
        assert await done_items(store) == Counter(range(12))  # type: ignore[arg-type]

        # a restart republishes from the start; the tracking rows make it a no-op
        await store.append([NewEvent("item-12", WorkItemQueued(item=12))])

        async def archived_new() -> bool:
            return len(await store.read_all(0, 100, ["WorkItemArchived"])) >= 13

        await asyncio.wait_for(run_embedded(store, services, archived_new), timeout=60)
        await asyncio.sleep(0.2)
        assert Counter(e.event.item for e in await store.read_all(0, 100, ["WorkItemArchived"])) == Counter(  # type: ignore[attr-defined]
            range(13)
        )
    finally:
        await store.close()


async def test_cancel_on_stop_leaves_waiting_messages_pending(
    store: SqlEventStore, bus: RedisStreamsBus
) -> None:
    """A service that waits on work done elsewhere (the train worker on its Celery jobs) stops at
    once on SIGTERM: its in-flight handlers are cancelled, their messages stay pending for the next
    worker, and nothing was appended; without ``cancel_on_stop`` the same stop waits for them."""
    started = asyncio.Event()

    async def waits_forever(event: RecordedEvent) -> HandlerResult:
        started.set()
        await asyncio.Event().wait()
        raise AssertionError("never reached")

    await queue_items(store, bus, range(2))
    service = Service(
        name=GROUP, handlers={"WorkItemQueued": waits_forever}, concurrency=2, cancel_on_stop=True
    )
    worker = Worker(service, store, bus, Settings(block_ms=100, reclaim_idle_ms=60_000))
    running = asyncio.create_task(worker.run())
    await asyncio.wait_for(started.wait(), timeout=30)
    await eventually(lambda: _inflight(worker, 2), "both messages in flight")
    worker.stop()
    await asyncio.wait_for(running, timeout=10)
    assert await bus.pending_count("WorkItemQueued", GROUP) == 2
    assert await done_items(store) == Counter()

    patient = Worker(
        Service(name=GROUP, handlers={"WorkItemQueued": waits_forever}, concurrency=2),
        store,
        bus,
        Settings(block_ms=100, reclaim_idle_ms=100),
    )
    running = asyncio.create_task(patient.run())
    await eventually(lambda: _inflight(patient, 2), "the reclaimed messages in flight")
    patient.stop()
    done, _ = await asyncio.wait([running], timeout=1.0)
    assert not done, "a worker without cancel_on_stop drains its in-flight handlers"
    running.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await running


async def _inflight(worker: Worker, count: int) -> bool:
    return len(worker._inflight) == count
