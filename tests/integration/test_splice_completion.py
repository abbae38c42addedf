"""The splice worker's iteration-completion wakeup under two replicas, on real PostgreSQL + Redis.

Two splice replicas handle the last two events of an iteration at the same time: replica A the last
``FirstErrorMarked`` (it will append ``RevisionMaterialized``), replica B the last ``TreeCompleted``.
Each handler reads the projections before the other's events commit, so neither sees a complete
iteration. The interleaving is reproduced step by step (no sleeps, no threads): A's handler result is
computed without appending it, B's event is committed and handled, then A's events are committed. What
the runtime delivers afterwards must still produce ``IterationDatasetReady`` exactly once, with the
same contents whichever post-commit check emits it.
"""

from __future__ import annotations

from core.bus.redis_streams import RedisStreamsBus
from core.domain.config import RunConfig
from core.domain.events import (
    FirstErrorMarked,
    IterationDatasetReady,
    IterationStarted,
    Metadata,
    NewEvent,
    PairFound,
    RecordedEvent,
    RevisionMaterialized,
    RunRequested,
    StepVerdict,
    TreeCompleted,
)
from core.domain.ids import derived_id, new_id, pair_stream, run_stream, tree_stream
from core.runtime.relay import Relay
from core.runtime.service import HandlerResult, Service
from core.runtime.settings import Settings
from core.runtime.worker import Worker
from core.store.factory import open_store
from core.store.ports import EventStore
from splice_service.service import build_service as build_splice
from tests.integration.textcraft_pairs import ENV_URI, INVALID_CRAFT, textcraft_pair


async def _pair(run_id: str, tree_id: str) -> PairFound:
    """A real TextCraft pair: the gold recipe vs. one shared step then an invalid craft."""
    task_id, bad, good, shared = await textcraft_pair([INVALID_CRAFT, "inventory"])
    assert not bad.steps[1].valid
    pair_id = derived_id("pair", tree_id, 0)
    return PairFound(
        pair_id=pair_id, source="search", task_key=task_id, bad=bad, good=good, shared_steps=shared,
        run_id=run_id, iteration=0, tree_id=tree_id, env_uri=ENV_URI, task_id=task_id,
    )  # fmt: skip


async def _handle(service: Service, recorded: RecordedEvent) -> HandlerResult:
    """What a replica's runtime calls for one delivery (an event type without a handler yields nothing:
    the runtime dead-letters it)."""
    handler = service.handlers.get(recorded.event_type)
    return await handler(recorded) if handler is not None else HandlerResult()


async def _commit(
    store: EventStore, service: Service, recorded: RecordedEvent, result: HandlerResult
) -> None:
    """The runtime's commit of a handler result: its events with the tracking row, in one transaction."""
    await store.append(list(result.events), tracking=(service.name, recorded.position))


async def test_last_two_events_on_two_replicas_still_make_the_dataset_once(
    pg_url: str, redis_url: str, redis_prefix: str
) -> None:
    store = await open_store(pg_url, create_tables=True)
    bus = RedisStreamsBus(redis_url, redis_prefix)
    settings = Settings(block_ms=50)
    replica_a, replica_b = build_splice(settings, store), build_splice(settings, store)
    try:
        run_id, project, tree_1, tree_2 = new_id(), new_id(), new_id(), new_id()
        meta = Metadata(project_id=project)
        config = RunConfig(env=ENV_URI, critic={"strategy": "rules"}, splice={"verify": True})
        pair = await _pair(run_id, tree_1)
        await store.append(
            [
                NewEvent(run_stream(run_id), RunRequested(run_id, project, config.to_data()), meta),
                NewEvent(
                    run_stream(run_id), IterationStarted(run_id, 0, "tiny", 1.0, (tree_1, tree_2)), meta
                ),
                NewEvent(pair_stream(pair.pair_id), pair, meta),
            ]
        )
        (first_tree,) = await store.append(
            [NewEvent(tree_stream(tree_1), TreeCompleted(tree_1, run_id, 0, 9, 8, 1.0, 1, 1, 1), meta)]
        )
        result = await _handle(replica_b, first_tree)
        assert not result.events  # tree 2 is still searching
        await _commit(store, replica_b, first_tree, result)
        verdicts = (
            StepVerdict(0, "good", method="rule"),
            StepVerdict(1, "bad", method="rule", reason="invalid"),
        )
        (marked,) = await store.append(
            [NewEvent(pair_stream(pair.pair_id), FirstErrorMarked(pair.pair_id, "rules", 1, verdicts), meta)]
        )

        # A handles the last FirstErrorMarked; its events are not committed yet.
        result_a = await _handle(replica_a, marked)
        assert [type(n.event) for n in result_a.events] == [RevisionMaterialized]
        # B: the last TreeCompleted commits and is handled while A's revision is still uncommitted.
        (last_tree,) = await store.append(
            [NewEvent(tree_stream(tree_2), TreeCompleted(tree_2, run_id, 0, 5, 4, 0.0, 0, 1, 0), meta)]
        )
        result_b = await _handle(replica_b, last_tree)
        assert not result_b.events  # the pair is not revised yet: not ready
        await _commit(store, replica_b, last_tree, result_b)
        # A commits.
        await _commit(store, replica_a, marked, result_a)
        assert not _ready(await store.read_stream(run_stream(run_id)))

        # The runtime now delivers whatever is still unhandled (here: A's RevisionMaterialized).
        worker = Worker(replica_a, store, bus, settings)
        await Relay(store, bus).drain()
        await worker.run(burst=True)
        (ready,) = _ready(await store.read_stream(run_stream(run_id)))
        assert ready.event.dataset_id == derived_id("dataset", run_id, 0)
        assert (ready.event.revision_samples, ready.event.good_samples) == (1, 0)
        (revision,) = await store.read_all(event_types=["RevisionMaterialized"])
        assert ready.event.built_from["last_position"] == revision.position
        assert ready.event.built_from["trees_done"] == 2

        # Another post-commit check (e.g. a redelivery on replica B) emits the same event id with
        # the same contents; the store keeps the first one only.
        again = await _handle(replica_b, last_tree)
        (repeat,) = again.events
        assert repeat.event_id == ready.event_id and repeat.event.to_data() == ready.event.to_data()
        assert await store.append(list(again.events)) == []
        assert len(_ready(await store.read_stream(run_stream(run_id)))) == 1
    finally:
        await bus.close()
        await store.close()


def _ready(recorded: list[RecordedEvent]) -> list[RecordedEvent]:
    return [r for r in recorded if isinstance(r.event, IterationDatasetReady)]
