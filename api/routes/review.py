"""Owns the pair review routes: the review queue, one pair with everything the pair diff shows, and
human corrections.

``GET /v1/review/queue`` (``read``): the project's critiqued pairs (from runs and from failed traces)
that need a human, keyset-paginated: the critic's t' differs from the oracle's first error, the critic
fell back (nothing judged bad), a verdict said "uncertain", or a verdict's two best labels scored
closer than ``max_margin``; ``reason`` picks one of these (default: any). Filtered by run, iteration,
task key and source, and by whether a reviewer has corrected the pair (``reviewed``). Every page
carries the counts of the whole filtered queue: ``total``, ``reviewed`` (pairs with a correction)
and ``remaining``. The signals are columns of the ``pairs`` read model, projected from each pair's
FirstErrorMarked by ``core.domain.review.review_signals``.

``GET /v1/pairs/{pair_id}`` (``read``): the pair's bad and good paths, divergence, the critic's
per-step verdicts with their label scores, the oracle's first error, the t' and reflection of the
current sample, and every correction with its outcome (folded from the pair's stream by
``core.domain.review``).

``POST /v1/pairs/{pair_id}/corrections`` and ``POST /v1/traces/{trace_id}/corrections`` (``review``
scope): a reviewer moves t' and/or rewrites the reflection. The correction is checked against the
pair first (a t' outside the bad path after the divergence, an empty reflection or a correction
that changes nothing is a 422 and writes nothing), then ``FirstErrorCorrected`` (who, when, old and
new values) is appended to the pair's stream at the version that was read (a concurrent correction
gets 409). The splice worker re-splices the sample from it (``critic_service.corrections``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Depends, Path, Query
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import ColumnElement, and_, case, func, or_, select

from api.deps import ApiServices, Principal, require, services
from api.errors import field_error, not_found
from api.idempotency import Idempotency, idempotency
from api.pagination import cursor_param, keyset_page, known_query_only, limit_param
from api.reads import owned_row
from api.schemas import ERROR_RESPONSES, ID_PATTERN
from api.writes import append, new_event
from core.domain.events import FirstErrorCorrected
from core.domain.ids import pair_stream
from core.domain.review import (
    DEFAULT_MAX_MARGIN,
    MAX_REFLECTION_CHARS,
    CorrectionError,
    PairReview,
    ReviewReason,
    ReviewSignals,
    check_correction,
    correction_view,
    fold_pair,
    review_reasons,
)
from core.domain.serde import to_dict
from core.store.tables import api_keys, pairs, samples

router = APIRouter(prefix="/v1", tags=["review"], responses=ERROR_RESPONSES)


class CorrectionIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    transition_index: int | None = Field(
        None, ge=0, le=100_000, description="The new first-error step t' (index into the bad path's steps)."
    )
    reflection: str | None = Field(
        None, min_length=1, max_length=MAX_REFLECTION_CHARS, description="A new reflection sentence."
    )
    note: str = Field("", max_length=500, description="Why (kept with the correction).")


class CorrectionAccepted(BaseModel):
    correction_id: str
    pair_id: str
    status: str = Field(description="pending: the splice worker re-splices the sample from it.")
    old_transition_index: int | None
    new_transition_index: int
    new_reflection: str | None


class CriticOut(BaseModel):
    strategy: str
    transition_index: int
    fallback: bool
    oracle_index: int | None
    model_version: str
    verdicts: list[dict[str, Any]]


class PairDetailOut(BaseModel):
    pair_id: str
    run_id: str | None
    iteration: int
    tree_id: str | None
    source: str
    task_key: str
    status: str
    reason: str | None
    shared_steps: int = Field(description="Steps both paths share: the divergence node's depth.")
    divergence_node_id: str | None
    bad_leaf_id: str | None
    good_leaf_id: str | None
    env_uri: str | None
    task_id: str | None
    bad: dict[str, Any]
    good: dict[str, Any]
    critic: CriticOut | None
    transition_index: int | None = Field(description="t' of the current sample (else the critic's).")
    reflection: str = Field(description="The reflection of the current sample ('' when none/unknown).")
    sample_id: str | None
    sample_origin: str = Field(description="splice, human-corrected, or '' without a sample.")
    corrections: list[dict[str, Any]]


class ReviewItemOut(BaseModel):
    pair_id: str
    run_id: str | None
    iteration: int
    tree_id: str | None
    source: str = Field(description="search (a run's tree) or trace (a failed production trace).")
    task_key: str
    status: str = Field(description="critiqued, revised or rejected.")
    shared_steps: int
    transition_index: int | None = Field(
        description="t' of the pair's sample now (a correction's, else the critic's)."
    )
    strategy: str | None
    critic_index: int = Field(description="The critic's t'.")
    oracle_index: int | None = Field(
        description="The environment oracle's first error (null: no oracle, or none)."
    )
    fallback: bool = Field(description="No step was judged bad: t' fell back to the last action.")
    uncertain: int = Field(description='Verdicts labelled "uncertain".')
    margin: float | None = Field(
        description="The smallest gap between a verdict's best and second-best label score (mean "
        "log-probability per label token); null when no verdict has label scores."
    )
    corrections: int = Field(description="Corrections reviewers made on this pair.")
    reviewed: bool = Field(description="A reviewer has corrected this pair (corrections > 0).")
    reasons: list[ReviewReason] = Field(description="Why the pair is in the queue.")


class ReviewQueuePage(BaseModel):
    items: list[ReviewItemOut]
    next_cursor: str | None = None
    total: int = Field(description="Pairs in the queue with these filters (`reviewed` aside).")
    reviewed: int = Field(description="Of those, pairs a reviewer has corrected.")
    remaining: int = Field(description="Of those, pairs not corrected yet.")


def _reason_filter(reason: str, max_margin: float) -> ColumnElement[bool]:
    conditions: dict[str, ColumnElement[bool]] = {
        "disagree": and_(pairs.c.oracle_index.is_not(None), pairs.c.oracle_index != pairs.c.critic_index),
        "fallback": pairs.c.fallback.is_(True),
        "uncertain": pairs.c.uncertain > 0,
        "low_margin": pairs.c.margin < max_margin,
    }
    return or_(*conditions.values()) if reason == "any" else conditions[reason]


def _queue_item(row: Any, max_margin: float) -> ReviewItemOut:
    signals = ReviewSignals(
        critic_index=row["critic_index"],
        oracle_index=row["oracle_index"],
        fallback=bool(row["fallback"]),
        uncertain=row["uncertain"] or 0,
        margin=row["margin"],
    )
    return ReviewItemOut(
        **{k: row[k] for k in ("pair_id", "run_id", "iteration", "tree_id", "source", "task_key", "status")},
        **{k: row[k] for k in ("shared_steps", "transition_index", "strategy", "corrections")},
        critic_index=signals.critic_index,
        oracle_index=signals.oracle_index,
        fallback=signals.fallback,
        uncertain=signals.uncertain,
        margin=signals.margin,
        reviewed=row["corrections"] > 0,
        reasons=review_reasons(signals, max_margin),
    )


@router.get(
    "/review/queue",
    response_model=ReviewQueuePage,
    dependencies=[Depends(known_query_only)],
    summary="Pairs that need a human: critic vs oracle, fallbacks, uncertain or low-margin verdicts",
)
async def review_queue(
    cursor: str | None = Depends(cursor_param),
    reason: str = Query(
        "any",
        pattern="^(any|disagree|fallback|uncertain|low_margin)$",
        description="disagree: critic t' != oracle first error; fallback: nothing judged bad; uncertain: a "
        "verdict said uncertain; low_margin: a verdict's two best label scores closer than max_margin; "
        "any (default): one of these.",
    ),
    max_margin: float = Query(
        DEFAULT_MAX_MARGIN, ge=0, le=1000, description="The low-margin threshold (log-probability)."
    ),
    run_id: str | None = Query(None, pattern=ID_PATTERN, description="Only pairs of this run."),
    iteration: int | None = Query(None, ge=0, le=10_000, description="Only this iteration."),
    task_key: str | None = Query(None, min_length=1, max_length=200, description="Only this task key."),
    source: str | None = Query(None, pattern="^(trace|search)$", description="trace or search pairs."),
    reviewed: bool | None = Query(
        None, description="true: only pairs a reviewer corrected; false: only those still to review."
    ),
    limit: int = Depends(limit_param),
    principal: Principal = Depends(require("read")),
    svc: ApiServices = Depends(services),
) -> Any:
    where: list[ColumnElement[bool]] = [
        pairs.c.project_id == principal.project(),
        pairs.c.critic_index.is_not(None),
        _reason_filter(reason, max_margin),
    ]
    for column, value in (
        (pairs.c.run_id, run_id),
        (pairs.c.iteration, iteration),
        (pairs.c.task_key, task_key),
        (pairs.c.source, source),
    ):
        if value is not None:
            where.append(column == value)
    counted = select(
        func.count(), func.coalesce(func.sum(case((pairs.c.corrections > 0, 1), else_=0)), 0)
    ).where(*where)
    async with svc.store.engine.connect() as conn:
        total, done = (await conn.execute(counted)).one()
    if reviewed is not None:
        where.append(pairs.c.corrections > 0 if reviewed else pairs.c.corrections == 0)
    page, next_cursor = await keyset_page(
        svc.store.engine, select(pairs).where(*where), [pairs.c.pair_id], (str,), cursor, limit
    )
    return ReviewQueuePage(
        items=[_queue_item(row, max_margin) for row in page],
        next_cursor=next_cursor,
        total=int(total),
        reviewed=int(done),
        remaining=int(total) - int(done),
    )


async def _review(svc: ApiServices, pair_id: str) -> tuple[PairReview, int]:
    stream = pair_stream(pair_id)
    recorded = await svc.store.read_stream(stream)
    return fold_pair(r.event for r in recorded), len(recorded) - 1


@router.get("/pairs/{pair_id}", response_model=PairDetailOut, summary="One pair: paths, critic, corrections")
async def get_pair(
    pair_id: str = Path(pattern=ID_PATTERN),
    principal: Principal = Depends(require("read")),
    svc: ApiServices = Depends(services),
) -> Any:
    async with svc.store.engine.connect() as conn:
        row = await owned_row(conn, pairs, "pair_id", pair_id, principal.project(), "pair")
        sample_id = (
            await conn.execute(select(samples.c.sample_id).where(samples.c.pair_id == pair_id))
        ).scalar()
    review, _ = await _review(svc, pair_id)
    pair, marked = review.pair, review.marked
    if pair is None:
        raise not_found("pair", pair_id)
    critic = None
    if marked is not None:
        critic = CriticOut(
            strategy=marked.strategy,
            transition_index=marked.transition_index,
            fallback=marked.fallback,
            oracle_index=marked.oracle_index,
            model_version=marked.model_version,
            verdicts=[to_dict(v) for v in marked.verdicts],
        )
    return PairDetailOut(
        pair_id=pair.pair_id,
        run_id=pair.run_id,
        iteration=pair.iteration,
        tree_id=pair.tree_id,
        source=pair.source,
        task_key=pair.task_key,
        status=row["status"],
        reason=row["reason"],
        shared_steps=pair.shared_steps,
        divergence_node_id=pair.divergence_node_id,
        bad_leaf_id=pair.bad_leaf_id,
        good_leaf_id=pair.good_leaf_id,
        env_uri=pair.env_uri,
        task_id=pair.task_id,
        bad=to_dict(pair.bad),
        good=to_dict(pair.good),
        critic=critic,
        transition_index=review.transition_index,
        reflection=review.reflection,
        sample_id=sample_id,
        sample_origin=review.sample_origin,
        corrections=[correction_view(c) for c in review.corrections],
    )


async def _reviewer(svc: ApiServices, principal: Principal) -> str:
    label = ""
    if principal.key_id is not None:
        async with svc.store.engine.connect() as conn:
            label = (
                await conn.execute(select(api_keys.c.label).where(api_keys.c.key_id == principal.key_id))
            ).scalar() or ""
    who = f"agr_{principal.prefix}"
    return f"{who} ({label})" if label else who


async def _correct(
    svc: ApiServices,
    principal: Principal,
    idem: Idempotency,
    pair_id: str,
    body: CorrectionIn,
    trace_id: str | None,
) -> dict[str, Any]:
    project_id = principal.project()
    review, version = await _review(svc, pair_id)
    try:
        new_index, reflection = check_correction(review, body.transition_index, body.reflection)
    except CorrectionError as exc:
        where = f"body.{exc.field_name}" if exc.field_name != "pair_id" else "pair_id"
        raise field_error(where, exc.problem) from None
    correction = FirstErrorCorrected(
        pair_id=pair_id,
        correction_id=idem.new_id("correction"),
        reviewer=await _reviewer(svc, principal),
        corrected_at=datetime.now(UTC).isoformat(),
        old_transition_index=review.transition_index,
        new_transition_index=new_index,
        old_reflection=review.reflection,
        new_reflection=reflection,
        trace_id=trace_id,
        note=body.note,
    )
    out = CorrectionAccepted(
        correction_id=correction.correction_id,
        pair_id=pair_id,
        status="pending",
        old_transition_index=correction.old_transition_index,
        new_transition_index=new_index,
        new_reflection=reflection,
    ).model_dump(mode="json")
    stream = pair_stream(pair_id)
    event = new_event(
        stream, correction, project_id=project_id, event_id=idem.new_id("event"), correlation_id=pair_id
    )
    await append(svc, [event], {stream: version}, idem=idem, answer=(202, out))
    return out


@router.post(
    "/pairs/{pair_id}/corrections",
    status_code=202,
    response_model=CorrectionAccepted,
    summary="Correct a pair's first error (t') or reflection; the sample is re-spliced",
)
async def correct_pair(
    body: CorrectionIn,
    pair_id: str = Path(pattern=ID_PATTERN),
    principal: Principal = Depends(require("review")),
    idem: Idempotency = Depends(idempotency),
    svc: ApiServices = Depends(services),
) -> Any:
    async with svc.store.engine.connect() as conn:
        await owned_row(conn, pairs, "pair_id", pair_id, principal.project(), "pair")
    return await _correct(svc, principal, idem, pair_id, body, None)


@router.post(
    "/traces/{trace_id}/corrections",
    status_code=202,
    response_model=CorrectionAccepted,
    summary="Correct a failed trace's first error (t') or reflection; its sample is re-spliced",
)
async def correct_trace(
    body: CorrectionIn,
    trace_id: str = Path(pattern=ID_PATTERN),
    principal: Principal = Depends(require("review")),
    idem: Idempotency = Depends(idempotency),
    svc: ApiServices = Depends(services),
) -> Any:
    from core.store.tables import traces

    project_id = principal.project()
    async with svc.store.engine.connect() as conn:
        await owned_row(conn, traces, "trace_id", trace_id, project_id, "trace")
        pair_id = (
            await conn.execute(
                select(pairs.c.pair_id).where(
                    pairs.c.project_id == project_id,
                    pairs.c.source == "trace",
                    pairs.c.pair_id == _trace_pair(trace_id),
                )
            )
        ).scalar()
    if pair_id is None:
        raise field_error(
            "trace_id",
            f"trace {trace_id} has no pair (it is not a failed trace paired with a successful one)",
        )
    return await _correct(svc, principal, idem, pair_id, body, trace_id)


def _trace_pair(trace_id: str) -> str:
    """The pair id the critic gives a failed trace's pair (critic_service.service._trace_pair_id)."""
    from core.domain.ids import derived_id

    return derived_id("trace-pair", trace_id)
