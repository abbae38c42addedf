"""core/store's read side on a real database (SQLite and PostgreSQL): the typed read-model queries
and ``PairRepository`` answer from the projections and the pair streams the events made."""

from __future__ import annotations

import pytest

from core.domain import events as ev
from core.domain.events import Metadata, NewEvent
from core.domain.ids import new_id, pair_stream, trace_stream
from core.domain.trajectory import Step, Trajectory
from core.store.pair_repository import PairRepository
from core.store.queries import engine_of
from core.store.queries.pairs import pair_ids
from core.store.queries.samples import iteration_samples, revision_lengths
from core.store.queries.traces import task_trace_ids
from core.store.sql import SqlEventStore


def path(actions: list[str], reward: float) -> Trajectory:
    return Trajectory("task", "inst", tuple(Step("", a, f"obs {a}") for a in actions), reward)


def found(pair_id: str, run_id: str, iteration: int) -> ev.PairFound:
    bad, good = path(["a", "b", "c", "d"], 0.0), path(["a", "x"], 1.0)
    return ev.PairFound(pair_id, "search", "k", bad, good, 1, run_id=run_id, iteration=iteration)


async def test_pairs_of_a_run_and_their_reviews(store: SqlEventStore) -> None:
    run_id, meta = new_id(), Metadata(producer="test")
    p0, p1, other = new_id(), new_id(), new_id()
    marked = ev.FirstErrorMarked(p0, "model", 3, (), fallback=True)
    await store.append(
        [
            NewEvent(pair_stream(p0), found(p0, run_id, 0), meta),
            NewEvent(pair_stream(p1), found(p1, run_id, 1), meta),
            NewEvent(pair_stream(other), found(other, new_id(), 0), meta),
            NewEvent(pair_stream(p0), marked, meta),
        ]
    )
    before_correction = await store.last_position()
    correction = ev.FirstErrorCorrected(p0, "c1", "agr_x", "2026-01-01T00:00:00+00:00", 3, 2, "r", None)
    await store.append([NewEvent(pair_stream(p0), correction, meta)])

    assert await pair_ids(store, run_id) == sorted([p0, p1])
    assert await pair_ids(store, run_id, 1) == [p1]
    assert await pair_ids(store, run_id, 0, project_id="no-such-project") == []

    repository = PairRepository(store)
    review = await repository.load(p0)
    assert review.pair is not None and review.pair.pair_id == p0 and review.marked == marked
    assert (await repository.load("missing")).pair is None
    source = await repository.source(p0)
    assert source is not None and source.marked is not None
    assert (source.marked.transition_index, source.marked.fallback) == (2, False)  # the correction's
    earlier = await repository.source(p0, up_to=before_correction)
    assert earlier is not None and earlier.marked == marked and earlier.position == source.position
    assert await repository.source("missing") is None
    assert [s.pair.pair_id for s in await repository.sources([p1, p0, "missing"])] == [p0, p1]  # log order
    assert await repository.judged(run_id) == [(review.pair, marked)]  # p1 is not critiqued yet


async def test_samples_and_traces_queries(store: SqlEventStore) -> None:
    run_id, project = new_id(), new_id()
    assert await iteration_samples(store, run_id, 0) == [] and await revision_lengths(store, run_id) == {}
    meta = Metadata(producer="test", project_id=project)
    ids = [new_id() for _ in range(3)]
    outcomes = ["failure", "success", "success"]
    for trace_id, outcome in zip(ids, outcomes, strict=True):  # one append each: ingestion order
        trace = ev.TraceIngested(trace_id, project, "k", path(["a"], 0.0), outcome, "openai")  # type: ignore[arg-type]
        await store.append([NewEvent(trace_stream(trace_id), trace, meta)])
    assert await task_trace_ids(store, project, "k", "success") == ids[1:]
    assert await task_trace_ids(store, project, "k", "failure", exclude=ids[0]) == []
    assert await task_trace_ids(store, project, "other", "success") == []


def test_queries_need_the_sql_store() -> None:
    class NoEngine:
        pass

    with pytest.raises(TypeError, match="NoEngine has no SQL engine"):
        engine_of(NoEngine())  # type: ignore[arg-type]
