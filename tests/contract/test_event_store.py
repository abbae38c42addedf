"""Contract of the EventStore port, run against every adapter: SQLite (file) and PostgreSQL (fresh db)."""

from __future__ import annotations

import asyncio
import inspect
import random
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

from core.domain.events import (
    DomainEvent,
    Metadata,
    NewEvent,
    NodeRecord,
    NodesExpanded,
    ProjectCreated,
    RunCancelled,
    register,
    upcaster,
)
from core.domain.ids import new_id
from core.store.factory import make_engine
from core.store.ports import AlreadyProcessed, ConcurrencyConflict, EventStore
from core.store.sql import SqlEventStore
from core.store.tables import events as events_table


@register
@dataclass(frozen=True)
class ContractTestRenamed(DomainEvent):
    """Test-only event at version 2: v1 called the field ``title``; v2 calls it ``name``."""

    event_version = 2
    thing_id: str
    name: str
    size: int = 0


@upcaster("ContractTestRenamed", 1)
def _rename_title(data: dict[str, Any]) -> dict[str, Any]:
    data["name"] = data.pop("title")
    return data


def project(name: str = "p") -> ProjectCreated:
    return ProjectCreated(project_id=new_id(), name=name)


def nodes_event(tree_id: str, count: int = 4) -> NodesExpanded:
    parent = new_id()
    return NodesExpanded(
        tree_id=tree_id,
        nodes=tuple(
            NodeRecord(
                node_id=new_id(),
                parent_id=parent,
                depth=1,
                action=f"get {i} stick",
                thought="t",
                observation="o",
            )
            for i in range(count)
        ),
    )


async def test_satisfies_the_port(store: SqlEventStore) -> None:
    # checked by mypy; at runtime: every method the port declares exists with the same parameters,
    # and is a coroutine exactly where the port's is
    declared = [n for n, member in vars(EventStore).items() if inspect.isfunction(member) and n[0] != "_"]
    assert {"append", "read_stream", "read_all", "last_position", "is_tracked", "close"} <= set(declared)
    for name in declared:
        port_method, ours = getattr(EventStore, name), getattr(store, name)
        assert callable(ours), name
        expected = [p for p in inspect.signature(port_method).parameters if p != "self"]
        assert list(inspect.signature(ours).parameters) == expected, name
        assert inspect.iscoroutinefunction(ours) == inspect.iscoroutinefunction(port_method), name


async def test_append_and_read_back(store: SqlEventStore) -> None:
    assert await store.last_position() == 0
    assert await store.stream_version("s-a") == -1
    meta = Metadata(correlation_id="c1", causation_id="x", producer="test", project_id="proj")
    recorded = await store.append(
        [
            NewEvent("s-a", project("one"), meta),
            NewEvent("s-a", project("two")),
            NewEvent("s-b", project("three")),
        ]
    )
    assert [r.stream_version for r in recorded] == [0, 1, 0]
    assert [r.position for r in recorded] == sorted(r.position for r in recorded)
    assert recorded[0].recorded_at.tzinfo is not None

    stream = await store.read_stream("s-a")
    assert [r.event_id for r in stream] == [recorded[0].event_id, recorded[1].event_id]
    assert stream[0].metadata == meta
    assert stream[0].event == recorded[0].event
    assert isinstance(stream[1].event, ProjectCreated) and stream[1].event.name == "two"
    assert [r.stream_version for r in await store.read_stream("s-a", from_version=1)] == [1]
    assert await store.stream_version("s-a") == 1
    assert await store.last_position() == recorded[-1].position

    got = await store.get(recorded[2].position)
    assert got is not None and got.event_id == recorded[2].event_id and got.stream_id == "s-b"
    assert await store.get(recorded[2].position + 1000) is None


async def test_read_all_limits_and_type_filters(store: SqlEventStore) -> None:
    first = await store.append([NewEvent(f"s-{i}", project(str(i))) for i in range(5)])
    await store.append([NewEvent("s-x", RunCancelled(run_id="r1")), NewEvent("s-y", nodes_event("t1"))])
    everything = await store.read_all()
    assert len(everything) == 7
    assert [e.position for e in everything] == sorted({e.position for e in everything})

    page = await store.read_all(after=first[1].position, limit=2)
    assert [e.position for e in page] == [first[2].position, first[3].position]

    only = await store.read_all(event_types=["RunCancelled", "NodesExpanded"])
    assert [e.event_type for e in only] == ["RunCancelled", "NodesExpanded"]
    assert await store.read_all(after=everything[-1].position) == []
    with pytest.raises(ValueError, match="limit"):
        await store.read_all(limit=0)


async def test_expected_versions(store: SqlEventStore) -> None:
    await store.append([NewEvent("s-a", project())], expected_versions={"s-a": -1})
    await store.append([NewEvent("s-a", project())], expected_versions={"s-a": 0})
    with pytest.raises(ConcurrencyConflict) as err:
        await store.append([NewEvent("s-a", project())], expected_versions={"s-a": 0})
    assert (err.value.stream_id, err.value.expected, err.value.actual) == ("s-a", 0, 1)
    assert "s-a" in str(err.value)
    with pytest.raises(ConcurrencyConflict):
        await store.append([NewEvent("s-new", project())], expected_versions={"s-new": 3})
    # a conflict on one stream leaves the whole batch unwritten
    with pytest.raises(ConcurrencyConflict):
        await store.append(
            [NewEvent("s-b", project()), NewEvent("s-a", project())], expected_versions={"s-a": 5}
        )
    assert await store.stream_version("s-b") == -1
    assert await store.stream_version("s-a") == 1


async def test_concurrent_appends_at_same_version_exactly_one_wins(store: SqlEventStore) -> None:
    for round_ in range(5):
        stream = f"race-{round_}"
        await store.append([NewEvent(stream, project())])

        async def contender(name: str, stream: str = stream) -> str:
            await store.append([NewEvent(stream, project(name))], expected_versions={stream: 0})
            return name

        results = await asyncio.gather(contender("a"), contender("b"), return_exceptions=True)
        winners = [r for r in results if isinstance(r, str)]
        losers = [r for r in results if isinstance(r, ConcurrencyConflict)]
        assert len(winners) == 1 and len(losers) == 1, results
        stored = await store.read_stream(stream)
        assert len(stored) == 2
        assert isinstance(stored[1].event, ProjectCreated) and stored[1].event.name == winners[0]


async def test_duplicate_event_id_is_skipped(store: SqlEventStore) -> None:
    event = NewEvent("s-a", project())
    first = await store.append([event], expected_versions={"s-a": -1})
    assert len(first) == 1
    # a retry of the same batch, even with its (now stale) expected version, is a no-op
    assert await store.append([event], expected_versions={"s-a": -1}) == []
    again = NewEvent("s-a", project())
    recorded = await store.append([event, again, again])  # stored id and an in-batch repeat are skipped
    assert [r.event_id for r in recorded] == [again.event_id]
    assert [r.event_id for r in await store.read_stream("s-a")] == [event.event_id, again.event_id]


async def test_tracking_gives_exactly_once(store: SqlEventStore) -> None:
    assert not await store.is_tracked("critic", 7)
    await store.append([NewEvent("s-a", project())], tracking=("critic", 7))
    assert await store.is_tracked("critic", 7)
    with pytest.raises(AlreadyProcessed) as err:
        await store.append([NewEvent("s-a", project())], tracking=("critic", 7))
    assert (err.value.consumer, err.value.position) == ("critic", 7)
    assert len(await store.read_stream("s-a")) == 1  # the redelivery wrote nothing
    await store.append([NewEvent("s-a", project())], tracking=("splice", 7))  # other consumer
    await store.track("relay", 3)
    with pytest.raises(AlreadyProcessed):
        await store.track("relay", 3)
    assert await store.is_tracked("relay", 3)


async def test_checkpoints_and_commit_listener(store: SqlEventStore) -> None:
    assert await store.get_checkpoint("relay") == 0
    await store.set_checkpoint("relay", 5)
    await store.set_checkpoint("relay", 9)
    assert await store.get_checkpoint("relay") == 9
    seen: list[int] = []
    store.add_commit_listener(seen.append)
    recorded = await store.append([NewEvent("s-a", project()), NewEvent("s-b", project())])
    assert seen == [recorded[-1].position]
    with pytest.raises(ConcurrencyConflict):
        await store.append([NewEvent("s-a", project())], expected_versions={"s-a": -1})
    assert seen == [recorded[-1].position]  # no commit, no call


async def test_batch_append_of_hundreds(store: SqlEventStore) -> None:
    tree_stream = "tree-big"
    batch = [NewEvent(tree_stream, nodes_event("big", 4)) for _ in range(600)]
    recorded = await store.append(batch, expected_versions={tree_stream: -1})
    assert [r.stream_version for r in recorded] == list(range(600))
    positions = [r.position for r in recorded]
    assert positions == sorted(positions) and len(set(positions)) == 600
    assert [r.event_id for r in recorded] == [n.event_id for n in batch]
    assert await store.stream_version(tree_stream) == 599
    read = await store.read_stream(tree_stream)
    assert [r.position for r in read] == positions


async def test_upcasting_an_old_version(store: SqlEventStore) -> None:
    old = {
        "event_id": new_id(),
        "stream_id": "thing-1",
        "stream_version": 0,
        "event_type": "ContractTestRenamed",
        "event_version": 1,
        "data": {"thing_id": "t1", "title": "old name"},
        "metadata": {},
        "recorded_at": datetime.now(UTC),
    }
    async with store.engine.begin() as conn:  # a row written by the code of the old version
        await conn.execute(events_table.insert(), [old])
    await store.append([NewEvent("thing-1", ContractTestRenamed(thing_id="t1", name="new", size=2))])
    stored = await store.read_stream("thing-1")
    assert [r.event_version for r in stored] == [1, 2]
    assert stored[0].event == ContractTestRenamed(thing_id="t1", name="old name")
    assert stored[1].event == ContractTestRenamed(thing_id="t1", name="new", size=2)


async def test_bad_input_is_refused(store: SqlEventStore) -> None:
    with pytest.raises(TypeError, match="NewEvent"):
        await store.append([project()])  # type: ignore[list-item]
    assert await store.last_position() == 0


async def test_positions_become_visible_in_commit_order(store: SqlEventStore) -> None:
    """Many concurrent appenders; a reader that has seen P never later finds a new event below P."""
    writers, batches = 6, 12
    done = asyncio.Event()
    violations: list[tuple[int, int]] = []

    async def writer(w: int) -> None:
        rng = random.Random(w)
        for b in range(batches):
            size = rng.randint(1, 20)
            await store.append([NewEvent(f"w{w}-{b % 3}", project()) for _ in range(size)])
            await asyncio.sleep(0)

    async def reader() -> int:
        seen: set[int] = set()
        highest = 0
        while True:
            finished = done.is_set()
            positions = [e.position for e in await store.read_all(after=0, limit=100_000)]
            fresh = set(positions) - seen
            violations.extend((p, highest) for p in fresh if p < highest)
            seen |= fresh
            highest = max(seen, default=0)
            if finished:
                return len(seen)

    read_task = asyncio.create_task(reader())
    await asyncio.gather(*(writer(w) for w in range(writers)))
    done.set()
    total = await read_task
    assert violations == []
    assert total == len(await store.read_all(limit=100_000))


async def test_unsupported_urls_are_named() -> None:
    with pytest.raises(ValueError, match="mysql"):
        make_engine("mysql+aiomysql://x/y")
    with pytest.raises(ValueError, match="not a database URL"):
        make_engine("::::")
