"""Owns the pairs, samples, traces and dead_letters read models (and their iteration counters).

Pair status: found -> critiqued -> revised | rejected. Trace status: waiting_for_outcome (ingested
without an outcome, until TraceOutcomeSet) -> ingested -> critiqued | no_error_found | unpaired (no usable
successful partner yet, ``reason`` says why; back to critiqued when a pair is found) -> revised (the
row's transition_index is then the sample's) | rejected (its pair was, ``reason`` = the pair's); a
trace's own verdict landing late never takes revised / rejected back (status never goes backwards). A
successful trace's row gets its good sample's id (GoodTraceSampled, core.store.projectors.datasets).
``samples.data`` is the serialised TrainingSample for
kind "revision" and the serialised Trajectory for kind "good" (the dataset builder turns it into a
sample; ``SampleRespliced``, a reviewer's correction re-spliced, replaces the row's data and
position). A revision belongs to a trace when its sample's provenance names the ``trace_id`` or its pair
id equals the trace id. A pair row also carries the review queue's signals: the critic's and the
oracle's t', fallback, uncertain verdicts and the smallest label margin (``review_signals`` of its
FirstErrorMarked), how many corrections reviewers made (FirstErrorCorrected) and how many confirmed the t'
(FirstErrorAccepted), the distance between strategies and the review priority; who holds it
(PairClaimed / PairReleased) and how its reviewers agree, with each reviewer's standing verdict in
``pair_verdicts`` (both refolded from the pair's stream by ``core.domain.review`` /
``core.domain.reviewers`` on every review event, so an undo counts as the verdict taken back). A
``SampleWithdrawn`` (the only sample came from an undone correction) deletes the pair's sample row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import ColumnElement, Table, and_, delete, func, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from core.domain import events as ev
from core.domain.ids import pair_stream
from core.domain.review import PairReview, fold_pair, review_priority, review_signals
from core.domain.reviewers import agreement, verdicts
from core.domain.serde import to_dict
from core.store.projectors._sql import (
    Item,
    Projector,
    bump_iteration,
    insert_ignore,
    project_of,
    update_iteration,
    upsert,
)
from core.store.rows import row_to_event
from core.store.tables import dead_letters, events, iterations, pair_verdicts, pairs, samples, traces


async def _mark_critiqued(
    conn: AsyncConnection,
    table: Table,
    row: ColumnElement[bool],
    event: ev.FirstErrorMarked | ev.TraceCritiqued,
) -> None:
    """A pair or trace row (``row`` selects it in ``table``) gets the critic's first-error verdict."""
    await conn.execute(
        update(table)
        .where(row)
        .values(status="critiqued", transition_index=event.transition_index, strategy=event.strategy)
    )


async def _good_found(conn: AsyncConnection, items: Sequence[Item]) -> None:
    for recorded, event in items:
        assert isinstance(event, ev.GoodTrajectoryFound)
        values = {
            "sample_id": event.sample_id,
            "run_id": event.run_id,
            "project_id": project_of(recorded, run_id=event.run_id),
            "iteration": event.iteration,
            "kind": "good",
            "pair_id": None,
            "tree_id": event.tree_id,
            "position": recorded.position,
            "data": to_dict(event.trajectory),
        }
        await upsert(conn, samples, values, update=[])
        await bump_iteration(conn, event.run_id, event.iteration, "goods")


async def _pair_found(conn: AsyncConnection, items: Sequence[Item]) -> None:
    for recorded, event in items:
        assert isinstance(event, ev.PairFound)
        values = {
            "pair_id": event.pair_id,
            "run_id": event.run_id,
            "project_id": project_of(recorded, run_id=event.run_id),
            "iteration": event.iteration,
            "tree_id": event.tree_id,
            "source": event.source,
            "task_key": event.task_key,
            "status": "found",
            "shared_steps": event.shared_steps,
        }
        await upsert(conn, pairs, values, update=[])
        await bump_iteration(conn, event.run_id, event.iteration, "pairs")
        if event.source == "trace" and event.bad_leaf_id:
            trace_row = traces.c.trace_id == event.bad_leaf_id
            await conn.execute(update(traces).where(trace_row).values(pair_id=event.pair_id, reason=None))
            await conn.execute(
                update(traces).where(trace_row, traces.c.status == "unpaired").values(status="critiqued")
            )


async def _first_error(conn: AsyncConnection, items: Sequence[Item]) -> None:
    for _recorded, event in items:
        assert isinstance(event, ev.FirstErrorMarked)
        await _mark_critiqued(conn, pairs, pairs.c.pair_id == event.pair_id, event)
        signals = review_signals(event)
        await conn.execute(
            update(pairs)
            .where(pairs.c.pair_id == event.pair_id)
            .values(
                critic_index=signals.critic_index,
                oracle_index=signals.oracle_index,
                fallback=signals.fallback,
                uncertain=signals.uncertain,
                margin=signals.margin,
                spread=signals.spread,
                priority=review_priority(signals),
            )
        )


def review_values(
    pair_id: str, project_id: str | None, review: PairReview
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The ``pairs`` columns and the ``pair_verdicts`` rows of a folded pair."""
    standing = verdicts(review)
    agreed = agreement(standing)
    claim = review.claim
    values = {
        "corrections": len(review.live_corrections),
        "accepts": len(review.live_accepts),
        "claimed_key": claim.reviewer_key if claim is not None else None,
        "claimed_by": claim.reviewer if claim is not None else None,
        "reviewers": agreed.reviewers,
        "agree": agreed.agree,
        "agreed_index": agreed.index,
        "disputed": agreed.disputed,
    }
    critic = review.marked.transition_index if review.marked is not None else None
    rows = [
        {
            "pair_id": pair_id,
            "project_id": project_id,
            "reviewer_key": key,
            "reviewer": action.reviewer,
            "kind": action.kind,
            "transition_index": action.transition_index,
            "critic_index": critic,
        }
        for key, action in standing.items()
    ]
    return values, rows


_REVIEW_EVENTS = (
    ev.FirstErrorCorrected,
    ev.FirstErrorAccepted,
    ev.PairClaimed,
    ev.PairReleased,
    ev.ReviewUndone,
)


async def _reviewed(conn: AsyncConnection, items: Sequence[Item]) -> None:
    """A review event (correction, acceptance, claim, release, undo): the pair's review columns and
    its reviewers' verdicts refolded from its stream up to the event."""
    latest: dict[str, int] = {}
    for recorded, event in items:
        assert isinstance(event, _REVIEW_EVENTS)
        latest[event.pair_id] = recorded.position
    for pair_id, position in latest.items():
        result = await conn.execute(
            select(events)
            .where(events.c.stream_id == pair_stream(pair_id), events.c.position <= position)
            .order_by(events.c.position)
        )
        review = fold_pair(row_to_event(row).event for row in result.all())
        project_id = (
            await conn.execute(select(pairs.c.project_id).where(pairs.c.pair_id == pair_id))
        ).scalar()
        values, rows = review_values(pair_id, project_id, review)
        await conn.execute(update(pairs).where(pairs.c.pair_id == pair_id).values(**values))
        await conn.execute(delete(pair_verdicts).where(pair_verdicts.c.pair_id == pair_id))
        if rows:
            await conn.execute(pair_verdicts.insert(), rows)


async def _withdrawn(conn: AsyncConnection, items: Sequence[Item]) -> None:
    """The pair's only sample came from an undone correction: it leaves the read model (and datasets)."""
    for _recorded, event in items:
        assert isinstance(event, ev.SampleWithdrawn)
        run = (
            await conn.execute(
                select(samples.c.run_id, samples.c.iteration).where(samples.c.sample_id == event.sample_id)
            )
        ).first()
        await conn.execute(delete(samples).where(samples.c.sample_id == event.sample_id))
        await conn.execute(
            update(pairs)
            .where(pairs.c.pair_id == event.pair_id)
            .values(status="rejected", reason=event.reason)
        )
        await conn.execute(
            update(traces)
            .where(traces.c.sample_id == event.sample_id)
            .values(status="rejected", sample_id=None, reason=event.reason)
        )
        if run is not None and run.run_id is not None:
            await conn.execute(
                update_iteration(run.run_id, run.iteration).values(
                    revisions=iterations.c.revisions - 1,
                    revision_length_mean=_revision_length_mean(run.run_id, run.iteration),
                )
            )


def _revision_row(
    recorded: ev.RecordedEvent, event: ev.RevisionMaterialized | ev.SampleRespliced
) -> dict[str, Any]:
    """The ``samples`` row of a spliced revision (a first splice or a reviewer's re-splice)."""
    return {
        "sample_id": event.sample_id,
        "run_id": event.run_id,
        "project_id": project_of(recorded, run_id=event.run_id, pair_id=event.pair_id),
        "iteration": event.iteration,
        "kind": "revision",
        "pair_id": event.pair_id,
        "tree_id": None,
        "position": recorded.position,
        "data": to_dict(event.sample),
        "verified": event.verified,
        "template_id": event.template_id,
        "revision_length": event.revision_length,
    }


def _revision_length_mean(run_id: str, iteration: int) -> Any:
    """The mean revision length of an iteration's revision samples, as a scalar subquery."""
    return (
        select(func.avg(samples.c.revision_length))
        .where(samples.c.run_id == run_id, samples.c.iteration == iteration, samples.c.kind == "revision")
        .scalar_subquery()
    )


async def _revision(conn: AsyncConnection, items: Sequence[Item]) -> None:
    for recorded, event in items:
        assert isinstance(event, ev.RevisionMaterialized)
        values = _revision_row(recorded, event)
        await upsert(conn, samples, values, update=[])
        await conn.execute(update(pairs).where(pairs.c.pair_id == event.pair_id).values(status="revised"))
        trace_ids = {event.pair_id}
        if event.sample.provenance.get("trace_id"):
            trace_ids.add(str(event.sample.provenance["trace_id"]))
        revised: dict[str, object] = {"status": "revised", "sample_id": event.sample_id}
        if isinstance(event.sample.provenance.get("transition_index"), int):
            # the trace view shows the t' its sample was spliced at (the two always agree)
            revised["transition_index"] = event.sample.provenance["transition_index"]
        await conn.execute(update(traces).where(traces.c.trace_id.in_(sorted(trace_ids))).values(**revised))
        if event.run_id is not None:
            await conn.execute(
                update_iteration(event.run_id, event.iteration).values(
                    revisions=iterations.c.revisions + 1,
                    revision_length_mean=_revision_length_mean(event.run_id, event.iteration),
                )
            )


async def _respliced(conn: AsyncConnection, items: Sequence[Item]) -> None:
    """A reviewer's correction re-spliced the pair: its sample row is replaced (a pair rejected before
    gets its first sample, counted in the iteration's revisions)."""
    for recorded, event in items:
        assert isinstance(event, ev.SampleRespliced)
        existed = (
            await conn.execute(select(samples.c.sample_id).where(samples.c.sample_id == event.sample_id))
        ).first() is not None
        values = _revision_row(recorded, event)
        await upsert(
            conn, samples, values, update=["position", "data", "verified", "template_id", "revision_length"]
        )
        index = event.sample.provenance.get("transition_index")
        pair_values: dict[str, object] = {"status": "revised", "reason": None}
        if isinstance(index, int):
            pair_values["transition_index"] = index
        await conn.execute(update(pairs).where(pairs.c.pair_id == event.pair_id).values(**pair_values))
        trace_id = event.sample.provenance.get("trace_id")
        if trace_id:
            trace_values: dict[str, object] = {"status": "revised", "sample_id": event.sample_id}
            if isinstance(index, int):
                trace_values["transition_index"] = index
            trace_row = traces.c.trace_id == str(trace_id)
            await conn.execute(update(traces).where(trace_row).values(**trace_values))
        if event.run_id is not None:
            mean = _revision_length_mean(event.run_id, event.iteration)
            counted: dict[object, object] = {iterations.c.revision_length_mean: mean}
            if not existed:
                counted[iterations.c.revisions] = iterations.c.revisions + 1
            await conn.execute(update_iteration(event.run_id, event.iteration).values(counted))


async def _revision_rejected(conn: AsyncConnection, items: Sequence[Item]) -> None:
    for _recorded, event in items:
        assert isinstance(event, ev.RevisionRejected)
        await conn.execute(
            update(pairs)
            .where(pairs.c.pair_id == event.pair_id)
            .values(status="rejected", reason=event.reason)
        )
        trace_row = traces.c.pair_id == event.pair_id
        await conn.execute(update(traces).where(trace_row).values(reason=event.reason))
        await conn.execute(
            update(traces).where(trace_row, traces.c.status == "critiqued").values(status="rejected")
        )


async def _trace_ingested(conn: AsyncConnection, items: Sequence[Item]) -> None:
    """One multi-row INSERT for the batch (a 10,000-trace batch is one statement, not 10,000)."""
    rows: list[dict[str, Any]] = []
    for recorded, event in items:
        assert isinstance(event, ev.TraceIngested)
        rows.append(
            {
                "trace_id": event.trace_id,
                "project_id": event.project_id,
                "task_key": event.task_key,
                "outcome": event.outcome,
                "source_format": event.source_format,
                "external_id": event.external_id,
                "status": "waiting_for_outcome" if event.outcome == "unknown" else "ingested",
                "created_at": recorded.recorded_at,
                "reason": None,
                "metadata": event.trajectory.provenance.get("metadata") or {},
            }
        )
    holders = await _external_id_holders(conn, rows)
    for values in rows:
        holder = holders.get((values["project_id"], values["external_id"]))
        if holder is not None and holder != values["trace_id"]:
            # a copy stored before external ids were unique: it loses the key
            values["reason"] = f"a copy of trace {holder} (same external id {values['external_id']!r})"
            values["external_id"] = None
        elif values["external_id"] is not None:
            holders[(values["project_id"], values["external_id"])] = values["trace_id"]
    await insert_ignore(conn, traces, rows)


_IN_CHUNK = 500  # ids per IN (...) list: under SQLite's bound-parameter limit


async def _external_id_holders(
    conn: AsyncConnection, rows: list[dict[str, Any]]
) -> dict[tuple[str, str], str]:
    """The trace already holding each (project, external id) of ``rows`` (a few queries, not one per row)."""
    wanted: dict[str, set[str]] = {}
    for values in rows:
        if values["external_id"] is not None:
            wanted.setdefault(values["project_id"], set()).add(values["external_id"])
    holders: dict[tuple[str, str], str] = {}
    for project_id, external_ids in wanted.items():
        ordered = sorted(external_ids)
        for start in range(0, len(ordered), _IN_CHUNK):
            result = await conn.execute(
                select(traces.c.external_id, traces.c.trace_id).where(
                    traces.c.project_id == project_id,
                    traces.c.external_id.in_(ordered[start : start + _IN_CHUNK]),
                )
            )
            for external_id, trace_id in result.all():
                holders[(project_id, external_id)] = trace_id
    return holders


_SETTLED = ("revised", "rejected")  # a trace status a late critic verdict never takes back


async def _trace_critiqued(conn: AsyncConnection, items: Sequence[Item]) -> None:
    """The trace's own verdict. It may land after its pair's sample was made (the pair's critique and
    splice run apart from it): a ``revised`` / ``rejected`` trace keeps its status and its sample's
    transition index, so status never goes backwards. No error found: status ``no_error_found`` and a
    reason that says so."""
    for _recorded, event in items:
        assert isinstance(event, ev.TraceCritiqued)
        row = and_(traces.c.trace_id == event.trace_id, traces.c.status.not_in(_SETTLED))
        if event.transition_index is None:  # no error identified: no sample unless `direct` was chosen
            reason = (
                f"no_error_found: the {event.strategy} critic judged no step of this trace bad, so no "
                "revision sample is made (choose critic strategy direct to revise at the last action)"
            )
            await conn.execute(
                update(traces)
                .where(row)
                .values(
                    status="no_error_found", transition_index=None, strategy=event.strategy, reason=reason
                )
            )
        else:
            await _mark_critiqued(conn, traces, row, event)


async def _trace_unpaired(conn: AsyncConnection, items: Sequence[Item]) -> None:
    for _recorded, event in items:
        assert isinstance(event, ev.TraceUnpaired)
        row = traces.c.trace_id == event.trace_id
        # a no_error_found trace keeps saying so; the pairing reason is for the traces that could pair
        await conn.execute(
            update(traces).where(row, traces.c.status != "no_error_found").values(reason=event.reason)
        )
        await conn.execute(
            update(traces)
            .where(row, traces.c.status.in_(("ingested", "critiqued")), traces.c.pair_id.is_(None))
            .values(status="unpaired")
        )


async def _trace_outcome(conn: AsyncConnection, items: Sequence[Item]) -> None:
    for _recorded, event in items:
        assert isinstance(event, ev.TraceOutcomeSet)
        await conn.execute(
            update(traces)
            .where(traces.c.trace_id == event.trace_id)
            .values(outcome=event.outcome, status="ingested")
        )


async def _dead_lettered(conn: AsyncConnection, items: Sequence[Item]) -> None:
    for recorded, event in items:
        assert isinstance(event, ev.MessageDeadLettered)
        values = {
            "event_position": recorded.position,
            "consumer": event.consumer,
            "topic": event.topic,
            "position": event.position,
            "deliveries": event.deliveries,
            "error": event.error,
            "project_id": recorded.metadata.project_id,
            "recorded_at": recorded.recorded_at,
        }
        await upsert(conn, dead_letters, values, update=[])


PROJECTORS: dict[str, Projector] = {
    "GoodTrajectoryFound": _good_found,
    "PairFound": _pair_found,
    "FirstErrorMarked": _first_error,
    "FirstErrorCorrected": _reviewed,
    "FirstErrorAccepted": _reviewed,
    "PairClaimed": _reviewed,
    "PairReleased": _reviewed,
    "ReviewUndone": _reviewed,
    "SampleWithdrawn": _withdrawn,
    "RevisionMaterialized": _revision,
    "RevisionRejected": _revision_rejected,
    "SampleRespliced": _respliced,
    "TraceIngested": _trace_ingested,
    "TraceCritiqued": _trace_critiqued,
    "TraceOutcomeSet": _trace_outcome,
    "TraceUnpaired": _trace_unpaired,
    "MessageDeadLettered": _dead_lettered,
}
