"""Contract suite of the Bus port: every test runs against both adapters (Redis Streams on the real
Redis, in a throwaway key prefix, and the in-process bus)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from core.bus.inprocess import InProcessBus
from core.bus.ports import Bus, BusError, BusMessage
from core.bus.redis_streams import RedisStreamsBus


@pytest.fixture(params=["redis", "inprocess"])
async def bus(request: pytest.FixtureRequest, redis_url: str, redis_prefix: str) -> AsyncIterator[Bus]:
    adapter: Bus = RedisStreamsBus(redis_url, redis_prefix) if request.param == "redis" else InProcessBus()
    try:
        yield adapter
    finally:
        await adapter.close()


def messages(topic: str, positions: range) -> list[BusMessage]:
    return [BusMessage(position=p, event_type=topic, stream_id=f"s-{p % 3}") for p in positions]


async def test_publish_consume_ack(bus: Bus) -> None:
    await bus.ensure_group("Alpha", "g")
    await bus.ensure_group("Alpha", "g")  # idempotent
    await bus.publish("Alpha", messages("Alpha", range(1, 4)))
    got = await bus.consume(["Alpha"], "g", "c1", count=10, block_ms=100)
    assert [d.message for d in got] == messages("Alpha", range(1, 4))
    assert all(d.topic == "Alpha" and d.deliveries == 1 for d in got)
    assert await bus.pending_count("Alpha", "g") == 3
    await bus.ack("Alpha", "g", [d.message_id for d in got])
    assert await bus.pending_count("Alpha", "g") == 0
    assert await bus.consume(["Alpha"], "g", "c1", count=10, block_ms=20) == []


async def test_group_created_late_starts_at_the_beginning(bus: Bus) -> None:
    await bus.publish("Alpha", messages("Alpha", range(1, 6)))
    await bus.ensure_group("Alpha", "late")
    got = await bus.consume(["Alpha"], "late", "c1", count=10, block_ms=20)
    assert [d.message.position for d in got] == [1, 2, 3, 4, 5]


async def test_consume_over_several_topics(bus: Bus) -> None:
    for topic in ("Alpha", "Beta"):
        await bus.ensure_group(topic, "g")
    await bus.publish("Alpha", messages("Alpha", range(1, 3)))
    await bus.publish("Beta", messages("Beta", range(10, 13)))
    got = await bus.consume(["Alpha", "Beta"], "g", "c1", count=10, block_ms=50)
    assert sorted((d.topic, d.message.position) for d in got) == [
        ("Alpha", 1),
        ("Alpha", 2),
        ("Beta", 10),
        ("Beta", 11),
        ("Beta", 12),
    ]
    assert all(d.message.event_type == d.topic for d in got)


async def test_two_consumers_in_one_group_share_the_work(bus: Bus) -> None:
    await bus.ensure_group("Alpha", "g")
    await bus.publish("Alpha", messages("Alpha", range(1, 11)))
    first = await bus.consume(["Alpha"], "g", "c1", count=4, block_ms=50)
    second = await bus.consume(["Alpha"], "g", "c2", count=100, block_ms=50)
    assert len(first) == 4 and len(second) == 6
    positions = [d.message.position for d in first + second]
    assert sorted(positions) == list(range(1, 11))  # each message to exactly one consumer


async def test_two_groups_each_get_everything(bus: Bus) -> None:
    await bus.ensure_group("Alpha", "g1")
    await bus.ensure_group("Alpha", "g2")
    await bus.publish("Alpha", messages("Alpha", range(1, 8)))
    for group in ("g1", "g2"):
        got = await bus.consume(["Alpha"], group, "c", count=100, block_ms=50)
        assert [d.message.position for d in got] == list(range(1, 8))
        await bus.ack("Alpha", group, [d.message_id for d in got])
    assert await bus.pending_count("Alpha", "g1") == 0


async def test_consume_waits_for_a_publish(bus: Bus) -> None:
    await bus.ensure_group("Alpha", "g")
    waiting = asyncio.create_task(bus.consume(["Alpha"], "g", "c1", count=5, block_ms=3000))
    await asyncio.sleep(0.05)
    await bus.publish("Alpha", messages("Alpha", range(7, 8)))
    got = await waiting
    assert [d.message.position for d in got] == [7]


async def test_reclaim_after_idle_counts_deliveries(bus: Bus) -> None:
    await bus.ensure_group("Alpha", "g")
    await bus.publish("Alpha", messages("Alpha", range(1, 4)))
    taken = await bus.consume(["Alpha"], "g", "dead-consumer", count=10, block_ms=50)
    assert len(taken) == 3
    # not idle long enough yet: nothing moves
    assert await bus.reclaim("Alpha", "g", "c2", min_idle_ms=60_000) == []
    await asyncio.sleep(0.06)
    reclaimed = await bus.reclaim("Alpha", "g", "c2", min_idle_ms=30, count=2)
    assert [d.message.position for d in reclaimed] == [1, 2]
    assert [d.deliveries for d in reclaimed] == [2, 2]
    await asyncio.sleep(0.06)
    again = await bus.reclaim("Alpha", "g", "c3", min_idle_ms=30, count=10)
    assert sorted((d.message.position, d.deliveries) for d in again) == [(1, 3), (2, 3), (3, 2)]
    await bus.ack("Alpha", "g", [d.message_id for d in again])
    assert await bus.pending_count("Alpha", "g") == 0
    await asyncio.sleep(0.04)
    assert await bus.reclaim("Alpha", "g", "c3", min_idle_ms=10) == []


# Idle thresholds of the tests that need a consumer or message to stay *under* a threshold across a
# few round trips (touch -> reclaim, work -> prune): generous, so that a stalled event loop on a
# loaded CI machine cannot push a fresh entry over it. Waits that must pass a threshold sleep longer.
FRESH_MS = 250
PAST_FRESH_S = 0.3


async def test_touch_keeps_a_message_from_being_reclaimed(bus: Bus) -> None:
    await bus.ensure_group("Alpha", "g")
    await bus.publish("Alpha", messages("Alpha", range(1, 3)))
    taken = await bus.consume(["Alpha"], "g", "busy", count=10, block_ms=50)
    assert len(taken) == 2
    for _ in range(3):
        await asyncio.sleep(PAST_FRESH_S)
        await bus.touch("Alpha", "g", "busy", [taken[0].message_id])
        reclaimed = await bus.reclaim("Alpha", "g", "thief", min_idle_ms=FRESH_MS)
        # the untouched one was idle long enough and moves; the touched one stays with busy
        assert [d.message_id for d in reclaimed] == [taken[1].message_id]
    await bus.ack("Alpha", "g", [d.message_id for d in taken])
    await asyncio.sleep(PAST_FRESH_S)
    assert await bus.reclaim("Alpha", "g", "thief", min_idle_ms=FRESH_MS) == []
    # touching never counts as a delivery
    await bus.publish("Alpha", messages("Alpha", range(3, 4)))
    (fresh,) = await bus.consume(["Alpha"], "g", "busy", count=10, block_ms=50)
    await bus.touch("Alpha", "g", "busy", [fresh.message_id])
    await asyncio.sleep(PAST_FRESH_S)
    (again,) = await bus.reclaim("Alpha", "g", "thief", min_idle_ms=FRESH_MS)
    assert again.message_id == fresh.message_id
    assert again.deliveries == 2


async def test_dead_letter_moves_and_acks(bus: Bus) -> None:
    await bus.ensure_group("Alpha", "g")
    await bus.publish("Alpha", messages("Alpha", range(1, 3)))
    got = await bus.consume(["Alpha"], "g", "c1", count=10, block_ms=50)
    await asyncio.sleep(0.03)
    (retry,) = await bus.reclaim("Alpha", "g", "c1", min_idle_ms=10, count=1)
    await bus.dead_letter(retry, "g", "ValueError: broken payload")
    assert await bus.pending_count("Alpha", "g") == 1  # only the other message is still pending
    (letter,) = await bus.dead_letters("Alpha")
    assert letter.message == got[0].message
    assert letter.group == "g"
    assert letter.original_id == got[0].message_id
    assert letter.deliveries == 2
    assert letter.error == "ValueError: broken payload"
    await asyncio.sleep(0.03)
    left = await bus.reclaim("Alpha", "g", "c2", min_idle_ms=10)
    assert [d.message.position for d in left] == [2]


async def test_trim_never_drops_unacked_entries(bus: Bus) -> None:
    await bus.ensure_group("Alpha", "fast")
    await bus.ensure_group("Alpha", "slow")
    await bus.publish("Alpha", messages("Alpha", range(1, 11)))
    fast = await bus.consume(["Alpha"], "fast", "c", count=100, block_ms=50)
    await bus.ack("Alpha", "fast", [d.message_id for d in fast])
    slow = await bus.consume(["Alpha"], "slow", "c", count=6, block_ms=50)
    # slow acks 1..3 and 5, keeps 4 and 6 pending, has not read 7..10
    await bus.ack("Alpha", "slow", [d.message_id for d in slow if d.message.position in (1, 2, 3, 5)])
    dropped = await bus.trim("Alpha")
    assert dropped == 3  # 1..3: acked by both groups
    assert await bus.topic_length("Alpha") == 7
    await asyncio.sleep(0.03)
    reclaimed = await bus.reclaim("Alpha", "slow", "c2", min_idle_ms=10)
    assert [d.message.position for d in reclaimed] == [4, 6]
    rest = await bus.consume(["Alpha"], "slow", "c2", count=100, block_ms=50)
    assert [d.message.position for d in rest] == [7, 8, 9, 10]
    await bus.ack("Alpha", "slow", [d.message_id for d in reclaimed + rest])
    assert await bus.trim("Alpha") >= 6  # everything but (at most) the last delivered entry
    assert await bus.topic_length("Alpha") <= 1


async def test_trim_keeps_topics_nobody_reads_yet(bus: Bus) -> None:
    await bus.publish("Alpha", messages("Alpha", range(1, 5)))
    assert await bus.trim("Alpha") == 0
    assert await bus.topic_length("Alpha") == 4
    await bus.ensure_group("Alpha", "g")  # still sees everything
    assert await bus.trim("Alpha") == 0


async def listed(bus: Bus, topic: str, group: str) -> dict[str, int]:
    """consumer name -> pending count, as the group lists them."""
    return {info.name: info.pending for info in await bus.consumers(topic, group)}


async def work_on_one(bus: Bus, consumer: str) -> None:
    """A live consumer's turn: take one new message of group g on Alpha and ack it."""
    await bus.publish("Alpha", messages("Alpha", range(100, 101)))
    (delivery,) = await bus.consume(["Alpha"], "g", consumer, count=1, block_ms=50)
    await bus.ack("Alpha", "g", [delivery.message_id])


async def test_prune_forgets_idle_consumers_without_pending_only(bus: Bus) -> None:
    await bus.ensure_group("Alpha", "g")
    await bus.publish("Alpha", messages("Alpha", range(1, 4)))
    (done,) = await bus.consume(["Alpha"], "g", "gone", count=1, block_ms=50)
    await bus.ack("Alpha", "g", [done.message_id])  # exited cleanly: nothing pending
    (stuck,) = await bus.consume(["Alpha"], "g", "crashed", count=1, block_ms=50)  # died holding one
    (work,) = await bus.consume(["Alpha"], "g", "active", count=1, block_ms=50)
    await bus.ack("Alpha", "g", [work.message_id])
    assert await listed(bus, "Alpha", "g") == {"gone": 0, "crashed": 1, "active": 0}
    assert await bus.prune_consumers("Alpha", "g", min_idle_ms=60_000) == []  # nobody idle that long
    await asyncio.sleep(PAST_FRESH_S)
    await work_on_one(bus, "active")  # a live worker keeps taking messages

    assert await bus.prune_consumers("Alpha", "g", min_idle_ms=FRESH_MS) == ["gone"]
    assert await listed(bus, "Alpha", "g") == {"active": 0, "crashed": 1}
    assert await bus.pending_count("Alpha", "g") == 1  # crashed's message is still pending
    assert (await bus.consumers("Alpha", "g"))[1].idle_ms > FRESH_MS  # crashed, sorted after active

    # the message is reclaimed by a live consumer: crashed holds nothing any more and goes
    (taken,) = await bus.reclaim("Alpha", "g", "rescuer", min_idle_ms=FRESH_MS)
    assert taken.message_id == stuck.message_id
    assert await listed(bus, "Alpha", "g") == {"active": 0, "crashed": 0, "rescuer": 1}
    await asyncio.sleep(PAST_FRESH_S)
    await work_on_one(bus, "active")
    assert await bus.prune_consumers("Alpha", "g", min_idle_ms=FRESH_MS) == ["crashed"]  # rescuer is idle too
    assert set(await listed(bus, "Alpha", "g")) == {"active", "rescuer"}  # rescuer still holds one

    # once acked, an idle rescuer is forgotten too; ``keep`` protects a name regardless
    await bus.ack("Alpha", "g", [taken.message_id])
    await asyncio.sleep(PAST_FRESH_S)
    await work_on_one(bus, "active")
    assert await bus.prune_consumers("Alpha", "g", min_idle_ms=FRESH_MS, keep=["rescuer"]) == []
    assert await bus.prune_consumers("Alpha", "g", min_idle_ms=FRESH_MS) == ["rescuer"]
    assert await listed(bus, "Alpha", "g") == {"active": 0}
    assert await bus.pending_count("Alpha", "g") == 0


async def test_pruned_consumer_comes_back_when_it_reads_again(bus: Bus) -> None:
    await bus.ensure_group("Alpha", "g")
    await work_on_one(bus, "c1")
    await asyncio.sleep(0.03)
    assert await bus.prune_consumers("Alpha", "g", min_idle_ms=10) == ["c1"]
    assert await bus.consumers("Alpha", "g") == []
    await bus.publish("Alpha", messages("Alpha", range(1, 2)))
    (got,) = await bus.consume(["Alpha"], "g", "c1", count=1, block_ms=50)
    assert got.message.position == 1
    assert await listed(bus, "Alpha", "g") == {"c1": 1}


async def test_prune_bad_input_is_a_clear_error(bus: Bus) -> None:
    with pytest.raises(BusError, match="ensure_group"):
        await bus.prune_consumers("Never", "nogroup", min_idle_ms=10)
    with pytest.raises(BusError, match="ensure_group"):
        await bus.consumers("Never", "nogroup")
    await bus.ensure_group("Alpha", "g")
    with pytest.raises(BusError, match="ensure_group"):
        await bus.prune_consumers("Alpha", "other", min_idle_ms=10)
    with pytest.raises(BusError, match="min_idle_ms"):
        await bus.prune_consumers("Alpha", "g", min_idle_ms=-1)
    with pytest.raises(BusError, match="invalid consumer name"):
        await bus.prune_consumers("Alpha", "g", min_idle_ms=10, keep=["bad name"])


async def test_bad_input_is_a_clear_error(bus: Bus) -> None:
    with pytest.raises(BusError, match="invalid topic name"):
        await bus.publish("bad topic", messages("x", range(1, 2)))
    with pytest.raises(BusError, match="ensure_group"):
        await bus.consume(["Never"], "nogroup", "c1", count=1, block_ms=10)
    with pytest.raises(BusError, match="at least one topic"):
        await bus.consume([], "g", "c1")


async def test_ping(bus: Bus) -> None:
    assert await bus.ping() is True


async def test_redis_block_time_must_stay_below_socket_timeout(redis_url: str, redis_prefix: str) -> None:
    bus = RedisStreamsBus(redis_url, redis_prefix, max_block_ms=1000)
    try:
        assert bus.socket_timeout > 1.0
        await bus.ensure_group("Alpha", "g")
        with pytest.raises(BusError, match="max_block_ms"):
            await bus.consume(["Alpha"], "g", "c1", block_ms=2000)
    finally:
        await bus.close()
