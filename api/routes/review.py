"""Owns the pair review routes: the review queue, one pair with everything the pair diff shows, and human
corrections.

``GET /v1/review/queue`` (``read``): the project's critiqued pairs (from runs and from failed traces)
that need a human, most urgent first (``sort=priority``, the default: ``review_priority`` of the pair's
signals; ``sort=pair_id``: by id), keyset-paginated: the critic's t' differs from the oracle's first
error, the critic fell back (nothing judged bad), a verdict said "uncertain", or a verdict's two best
labels scored closer than ``max_margin``; ``reason`` picks one of these (default: any). Filtered by run,
iteration, task key and source, and by whether a reviewer has corrected or accepted the pair
(``reviewed``). Every page carries the counts of the whole filtered queue: ``total``, ``reviewed``
(pairs with a correction) and ``remaining``. The signals are columns of the ``pairs`` read model,
projected from each pair's FirstErrorMarked by ``core.domain.review.review_signals``; the reads are
``core.store.queries.review``.

``GET /v1/pairs/{pair_id}`` (``read``): the pair's bad and good paths, divergence, the critic's per-step
verdicts with their label scores, the oracle's first error, the t' and reflection of the current sample,
and every correction with its outcome (folded from the pair's stream by ``core.domain.review``).

``POST /v1/pairs/{pair_id}/corrections`` and ``POST /v1/traces/{trace_id}/corrections`` (``review``
scope): a reviewer moves t' and/or rewrites the reflection. The correction is checked against the pair
first (a t' outside the bad path after the divergence, an empty reflection or a correction that changes
nothing is a 422 and writes nothing), then ``FirstErrorCorrected`` (who, when, old and new values) is
appended to the pair's stream at the version that was read (a concurrent correction gets 409). The
splice worker re-splices the sample from it (``splice_service.corrections``).

``POST /v1/pairs/{pair_id}/accept`` and ``POST /v1/traces/{trace_id}/accept`` (``review``): a reviewer
says the critic was right: ``FirstErrorAccepted`` (who, when, the t' confirmed, a note) is appended the
same way (a pair not judged yet, or with a correction still re-splicing, is a 422); the pair counts as
reviewed and its sample stays as it is.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any, cast

from fastapi import APIRouter, Depends, Path, Query
from pydantic import BaseModel, ConfigDict, Field

from api.deps import ApiServices, Principal, require, services
from api.errors import field_error, not_found
from api.idempotency import Idempotency, idempotency
from api.pagination import cursor_param, decode_cursor, encode_cursor, known_query_only, limit_param
from api.schemas import ERROR_RESPONSES, ID_PATTERN
from api.writes import append, new_event
from core.domain.events import FirstErrorAccepted, FirstErrorCorrected
from core.domain.ids import derived_id, pair_stream
from core.domain.review import (
    DEFAULT_MAX_MARGIN,
    MAX_REFLECTION_CHARS,
    CorrectionError,
    PairReview,
    ReviewReason,
    ReviewSignals,
    accept_view,
    check_accept,
    check_correction,
    correction_view,
    fold_pair,
    review_reasons,
)
from core.domain.reviewers import agreement, agreement_text, claim_view, verdicts
from core.domain.serde import to_dict
from core.store.queries.review import (
    QueueFilter,
    QueueReason,
    QueueRow,
    QueueSort,
    key_label,
    pair_row,
    queue_page,
    trace_exists,
    trace_pair,
)

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


class AcceptIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    note: str = Field("", max_length=500, description="Why (kept with the acceptance).")


class AcceptOut(BaseModel):
    acceptance_id: str
    pair_id: str
    reviewer: str
    accepted_at: str
    transition_index: int = Field(description="The t' the reviewer confirmed.")
    trace_id: str | None
    note: str


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
    baselines: dict[str, int] = Field(
        default_factory=dict, description="t' of the baseline critics run beside it (reflect, model)."
    )


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
    accepts: list[dict[str, Any]] = Field(description="Reviewers who accepted the t' as it was.")
    reviewed: bool = Field(description="A reviewer corrected or accepted this pair (not undone).")
    claim: dict[str, Any] | None = Field(
        description="Who holds the pair: reviewer_key, reviewer, since, by (null: nobody)."
    )
    verdicts: list[dict[str, Any]] = Field(
        description="Each reviewer's standing verdict: reviewer_key, reviewer, kind, action_id, "
        "transition_index, at."
    )
    agreement: str = Field(description="The agreement in words, e.g. '2 of 3 agree on step 4'.")
    agreed_index: int | None = Field(description="The t' most reviewers name (null: none, or a tie).")
    disputed: bool = Field(description="Two reviewers or more, tied.")


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
    spread: int | None = Field(
        description="Distance between strategies: the largest t' gap between the critic and the baseline "
        "critics run beside it (null: none ran)."
    )
    priority: float = Field(
        description="How urgently a human should look (core.domain.review.review_priority; -1: not "
        "computed for this pair)."
    )
    corrections: int = Field(description="Corrections reviewers made on this pair.")
    accepts: int = Field(description="Reviewers who accepted the pair's t' as it is.")
    reviewed: bool = Field(description="A reviewer has corrected or accepted this pair.")
    reasons: list[ReviewReason] = Field(description="Why the pair is in the queue.")
    claimed_key: str | None = Field(description="The key id holding the pair (null: nobody).")
    claimed_by: str | None = Field(description="That key as people read it (null: nobody).")
    reviewers: int = Field(description="Reviewers with a standing verdict (not undone).")
    agree: int = Field(description="How many of them name the majority t' (or the most named one).")
    agreed_index: int | None = Field(description="The t' most reviewers name (null: none, or a tie).")
    disputed: bool = Field(description="Two reviewers or more, tied: the splicer waits for a majority.")
    agreement: str = Field(description="The agreement in words, e.g. '2 of 3 agree on step 4'.")


class ReviewQueuePage(BaseModel):
    items: list[ReviewItemOut]
    next_cursor: str | None = None
    total: int = Field(description="Pairs in the queue with these filters (`reviewed` aside).")
    reviewed: int = Field(description="Of those, pairs a reviewer has corrected or accepted.")
    remaining: int = Field(description="Of those, pairs not reviewed yet.")


def _queue_item(row: QueueRow, max_margin: float) -> ReviewItemOut:
    signals = ReviewSignals(
        critic_index=row.critic_index,
        oracle_index=row.oracle_index,
        fallback=row.fallback,
        uncertain=row.uncertain,
        margin=row.margin,
        spread=row.spread,
    )
    return ReviewItemOut(
        pair_id=row.pair_id,
        run_id=row.run_id,
        iteration=row.iteration,
        tree_id=row.tree_id,
        source=row.source,
        task_key=row.task_key,
        status=row.status,
        shared_steps=row.shared_steps,
        transition_index=row.transition_index,
        strategy=row.strategy,
        critic_index=row.critic_index,
        oracle_index=row.oracle_index,
        fallback=row.fallback,
        uncertain=row.uncertain,
        margin=row.margin,
        spread=row.spread,
        priority=row.priority,
        corrections=row.corrections,
        accepts=row.accepts,
        reviewed=row.reviewed,
        reasons=review_reasons(signals, max_margin),
        claimed_key=row.claimed_key,
        claimed_by=row.claimed_by,
        reviewers=row.reviewers,
        agree=row.agree,
        agreed_index=row.agreed_index,
        disputed=row.disputed,
        agreement=agreement_text(row.reviewers, row.agree, row.agreed_index, row.disputed),
    )


_CURSOR_TYPES: dict[str, tuple[type, ...]] = {"priority": (float, str), "pair_id": (str,)}


@router.get(
    "/review/queue",
    response_model=ReviewQueuePage,
    dependencies=[Depends(known_query_only)],
    summary="Pairs that need a human, most urgent first: critic vs oracle, fallbacks, uncertain, low margin",
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
        None,
        description="true: only pairs a reviewer corrected or accepted; false: only those still to review.",
    ),
    mine: bool = Query(
        False, description="true: only pairs the calling key holds (claimed) or has a standing review on."
    ),
    disputed: bool | None = Query(
        None, description="true: only pairs whose reviewers are tied (no majority t'); false: the others."
    ),
    sort: str = Query(
        "priority",
        pattern="^(priority|pair_id)$",
        description="priority (default): the most urgent first (core.domain.review.review_priority: "
        "critic-oracle disagreement, verdict margin, distance between strategies), ties by pair id; "
        "pair_id: by pair id.",
    ),
    limit: int = Depends(limit_param),
    principal: Principal = Depends(require("read")),
    svc: ApiServices = Depends(services),
) -> Any:
    wanted = QueueFilter(
        project_id=principal.project(),
        reason=cast(QueueReason, reason),
        max_margin=max_margin,
        run_id=run_id,
        iteration=iteration,
        task_key=task_key,
        source=source,
        reviewed=reviewed,
        mine=(principal.key_id or f"agr_{principal.prefix}") if mine else None,
        disputed=disputed,
    )
    position = decode_cursor(cursor, _CURSOR_TYPES[sort])
    page = await queue_page(svc.store.engine, wanted, cast(QueueSort, sort), position, limit)
    return ReviewQueuePage(
        items=[_queue_item(row, max_margin) for row in page.rows],
        next_cursor=encode_cursor(page.last) if page.last is not None else None,
        total=page.total,
        reviewed=page.reviewed,
        remaining=page.total - page.reviewed,
    )


async def pair_review(svc: ApiServices, pair_id: str) -> tuple[PairReview, int]:
    stream = pair_stream(pair_id)
    recorded = await svc.store.read_stream(stream)
    return fold_pair(r.event for r in recorded), len(recorded) - 1


@router.get("/pairs/{pair_id}", response_model=PairDetailOut, summary="One pair: paths, critic, corrections")
async def get_pair(
    pair_id: str = Path(pattern=ID_PATTERN),
    principal: Principal = Depends(require("read")),
    svc: ApiServices = Depends(services),
) -> Any:
    row = await pair_row(svc.store.engine, principal.project(), pair_id)
    if row is None:
        raise not_found("pair", pair_id)
    review, _ = await pair_review(svc, pair_id)
    pair, marked = review.pair, review.marked
    if pair is None:
        raise not_found("pair", pair_id)
    standing = verdicts(review)
    agreed = agreement(standing)
    critic = None
    if marked is not None:
        critic = CriticOut(
            strategy=marked.strategy,
            transition_index=marked.transition_index,
            fallback=marked.fallback,
            oracle_index=marked.oracle_index,
            model_version=marked.model_version,
            verdicts=[to_dict(v) for v in marked.verdicts],
            baselines=dict(marked.baselines),
        )
    return PairDetailOut(
        pair_id=pair.pair_id,
        run_id=pair.run_id,
        iteration=pair.iteration,
        tree_id=pair.tree_id,
        source=pair.source,
        task_key=pair.task_key,
        status=row.status,
        reason=row.reason,
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
        sample_id=row.sample_id,
        sample_origin=review.sample_origin,
        corrections=[correction_view(c) for c in review.corrections],
        accepts=[accept_view(a, a.acceptance_id in review.undone) for a in review.accepts],
        reviewed=bool(review.live_actions),
        claim=claim_view(review.claim),
        verdicts=[dataclasses.asdict(a) for a in standing.values()],
        agreement=agreed.summary,
        agreed_index=agreed.index,
        disputed=agreed.disputed,
    )


async def reviewer_name(svc: ApiServices, principal: Principal) -> str:
    label = await key_label(svc.store.engine, principal.key_id) if principal.key_id is not None else ""
    who = f"agr_{principal.prefix}"
    return f"{who} ({label})" if label else who


def _refused(exc: CorrectionError) -> Exception:
    where = f"body.{exc.field_name}" if exc.field_name != "pair_id" else "pair_id"
    return field_error(where, exc.problem)


async def _correct(
    svc: ApiServices,
    principal: Principal,
    idem: Idempotency,
    pair_id: str,
    body: CorrectionIn,
    trace_id: str | None,
) -> dict[str, Any]:
    project_id = principal.project()
    review, version = await pair_review(svc, pair_id)
    try:
        new_index, reflection = check_correction(review, body.transition_index, body.reflection)
    except CorrectionError as exc:
        raise _refused(exc) from None
    correction = FirstErrorCorrected(
        pair_id=pair_id,
        correction_id=idem.new_id("correction"),
        reviewer=await reviewer_name(svc, principal),
        reviewer_key=principal.key_id or f"agr_{principal.prefix}",
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


async def _accept(
    svc: ApiServices,
    principal: Principal,
    idem: Idempotency,
    pair_id: str,
    body: AcceptIn,
    trace_id: str | None,
) -> dict[str, Any]:
    review, version = await pair_review(svc, pair_id)
    try:
        index = check_accept(review)
    except CorrectionError as exc:
        raise _refused(exc) from None
    accepted = FirstErrorAccepted(
        pair_id=pair_id,
        acceptance_id=idem.new_id("acceptance"),
        reviewer=await reviewer_name(svc, principal),
        reviewer_key=principal.key_id or f"agr_{principal.prefix}",
        accepted_at=datetime.now(UTC).isoformat(),
        transition_index=index,
        trace_id=trace_id,
        note=body.note,
    )
    out = AcceptOut(pair_id=pair_id, **accept_view(accepted)).model_dump(mode="json")
    stream = pair_stream(pair_id)
    event = new_event(
        stream,
        accepted,
        project_id=principal.project(),
        event_id=idem.new_id("event"),
        correlation_id=pair_id,
    )
    await append(svc, [event], {stream: version}, idem=idem, answer=(201, out))
    return out


async def owned_pair(svc: ApiServices, principal: Principal, pair_id: str) -> None:
    if await pair_row(svc.store.engine, principal.project(), pair_id) is None:
        raise not_found("pair", pair_id)


async def _pair_of_trace(svc: ApiServices, principal: Principal, trace_id: str) -> str:
    project_id = principal.project()
    if not await trace_exists(svc.store.engine, project_id, trace_id):
        raise not_found("trace", trace_id)
    pair_id = await trace_pair(svc.store.engine, project_id, _trace_pair(trace_id))
    if pair_id is None:
        raise field_error(
            "trace_id",
            f"trace {trace_id} has no pair (it is not a failed trace paired with a successful one)",
        )
    return pair_id


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
    await owned_pair(svc, principal, pair_id)
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
    pair_id = await _pair_of_trace(svc, principal, trace_id)
    return await _correct(svc, principal, idem, pair_id, body, trace_id)


@router.post(
    "/pairs/{pair_id}/accept",
    status_code=201,
    response_model=AcceptOut,
    summary="Accept a pair's first error as it is (the critic was right); the pair counts as reviewed",
)
async def accept_pair(
    body: AcceptIn,
    pair_id: str = Path(pattern=ID_PATTERN),
    principal: Principal = Depends(require("review")),
    idem: Idempotency = Depends(idempotency),
    svc: ApiServices = Depends(services),
) -> Any:
    await owned_pair(svc, principal, pair_id)
    return await _accept(svc, principal, idem, pair_id, body, None)


@router.post(
    "/traces/{trace_id}/accept",
    status_code=201,
    response_model=AcceptOut,
    summary="Accept a failed trace's first error as it is; its pair counts as reviewed",
)
async def accept_trace(
    body: AcceptIn,
    trace_id: str = Path(pattern=ID_PATTERN),
    principal: Principal = Depends(require("review")),
    idem: Idempotency = Depends(idempotency),
    svc: ApiServices = Depends(services),
) -> Any:
    pair_id = await _pair_of_trace(svc, principal, trace_id)
    return await _accept(svc, principal, idem, pair_id, body, trace_id)


def _trace_pair(trace_id: str) -> str:
    """The pair id the critic gives a failed trace's pair (critic_service.service._trace_pair_id)."""
    return derived_id("trace-pair", trace_id)
