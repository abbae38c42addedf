"""Owns the routes of reviewing with more than one reviewer: claiming, assigning and releasing a pair,
undoing one's own last verdict, and the project's agreement figures.

``POST /v1/pairs/{pair_id}/claim`` (``review``): the calling key holds the pair (``PairClaimed``);
others see "claimed by" and the review page skips it when moving on. A pair another key holds is a
409 naming the holder; claiming one's own claim again writes nothing (200).

``POST /v1/pairs/{pair_id}/assign`` (``review``; an admin key, or the key holding the pair): the pair
goes to the key ``key_id`` of the project (it must exist, not be revoked and hold ``review``: else a
422 naming ``key_id``); anyone else gets a 403 saying who may.

``POST /v1/pairs/{pair_id}/release`` (``review``; the holder or an admin): the pair is nobody's
(``PairReleased``); an unclaimed pair is a 409.

``POST /v1/pairs/{pair_id}/undo`` (``review``): the calling key's last correction or acceptance of the
pair not undone yet is taken back (``ReviewUndone``: an event, the log stays append-only). Undoing
the correction whose sample is the pair's current one makes the splice worker restore the sample
before it (``splice_service.corrections``). Nothing to undo, or a correction still re-splicing: 409.

``GET /v1/reviewers`` (``review``): the project's live keys that may review (``review`` or ``admin``
scope), as ``key_id`` and the name claims show: whom a pair can be assigned to.

``GET /v1/review/agreement`` (``read``): percent agreement over the pairs with at least two reviews,
and Cohen's kappa when exactly two reviewers reviewed those pairs (``core.domain.reviewers``).

All pair routes work for trace pairs too (their pair id is in the review queue).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Depends, Path
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from api.deps import ApiServices, Principal, require, services
from api.errors import ApiError, field_error
from api.idempotency import Idempotency, idempotency
from api.routes.review import owned_pair, pair_review, reviewer_name
from api.schemas import ERROR_RESPONSES, ID_PATTERN
from api.writes import append, new_event
from core.domain.events import DomainEvent, PairClaimed, PairReleased, ReviewUndone
from core.domain.ids import pair_stream
from core.domain.review import PairReview
from core.domain.reviewers import (
    ReviewConflict,
    Reviewer,
    ReviewForbidden,
    agreement_figures,
    check_assign,
    check_claim,
    check_release,
    check_undo,
    undo_plan,
)
from core.store.queries.review import project_key, project_reviewers, standing_verdicts

router = APIRouter(prefix="/v1", tags=["review"], responses=ERROR_RESPONSES)


class EmptyIn(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AssignIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key_id: str = Field(pattern=ID_PATTERN, description="The API key (its id) that holds the pair next.")


class ClaimOut(BaseModel):
    pair_id: str
    claimed: bool = Field(description="Whether somebody holds the pair now.")
    reviewer_key: str | None = Field(description="The key id of the holder (null: nobody).")
    reviewer: str | None = Field(description="The holder as people read it (null: nobody).")
    since: str | None = Field(description="When the holder got it (ISO 8601; null: nobody).")
    by: str | None = Field(description="Who claimed or assigned it (null: nobody).")


class ReviewerOut(BaseModel):
    key_id: str = Field(description="The key's id (what POST /v1/pairs/{pair_id}/assign takes).")
    name: str = Field(description="The reviewer as claims and verdicts name it: agr_PREFIX (label).")


class UndoOut(BaseModel):
    undo_id: str
    pair_id: str
    target_id: str = Field(description="The correction_id or acceptance_id taken back.")
    target_kind: str = Field(description="correction or acceptance.")
    transition_index: int = Field(description="The t' of the verdict taken back.")
    resplice: str | None = Field(
        description="restore: the splice worker restores the sample before the undone correction; "
        "withdraw: it withdraws the sample (the pair had none before); null: the sample stays."
    )


class AgreementOut(BaseModel):
    reviewed: int = Field(description="Pairs with at least one standing review.")
    compared: int = Field(description="Pairs with at least two reviews.")
    agreeing: int = Field(description="Of those, pairs where every reviewer names the same t'.")
    percent: float | None = Field(description="agreeing / compared in percent (null: none compared).")
    kappa: float | None = Field(
        description="Cohen's kappa when exactly two reviewers reviewed the compared pairs (categories: "
        "t' minus the critic's t'); null otherwise or when undefined."
    )
    kappa_reviewers: list[str] = Field(description="The two reviewers the kappa is between.")


def _refused(exc: ReviewConflict | ReviewForbidden) -> ApiError:
    return ApiError(409 if isinstance(exc, ReviewConflict) else 403, str(exc))


async def _reviewer(svc: ApiServices, principal: Principal) -> Reviewer:
    key_id = principal.key_id or f"agr_{principal.prefix}"
    return Reviewer(key_id, await reviewer_name(svc, principal), principal.allows("admin"))


async def _load(svc: ApiServices, principal: Principal, pair_id: str) -> tuple[PairReview, int, Reviewer]:
    """The caller's pair (404 when it is not of the caller's project) folded, its stream version, and
    the caller as a reviewer."""
    await owned_pair(svc, principal, pair_id)
    review, version = await pair_review(svc, pair_id)
    return review, version, await _reviewer(svc, principal)


def _claim_out(pair_id: str, claim: PairClaimed | None) -> dict[str, Any]:
    return ClaimOut(
        pair_id=pair_id,
        claimed=claim is not None,
        reviewer_key=claim.reviewer_key if claim else None,
        reviewer=claim.reviewer if claim else None,
        since=claim.claimed_at if claim else None,
        by=claim.by if claim else None,
    ).model_dump(mode="json")


async def _write(
    svc: ApiServices,
    principal: Principal,
    idem: Idempotency,
    pair_id: str,
    event: DomainEvent,
    version: int,
    answer: tuple[int, dict[str, Any]],
) -> None:
    stream = pair_stream(pair_id)
    new = new_event(
        stream, event, project_id=principal.project(), event_id=idem.new_id("event"), correlation_id=pair_id
    )
    await append(svc, [new], {stream: version}, idem=idem, answer=answer)


async def _hand(
    svc: ApiServices,
    principal: Principal,
    idem: Idempotency,
    pair_id: str,
    version: int,
    *,
    to: Reviewer,
    by: Reviewer,
) -> dict[str, Any]:
    """Record that ``to`` holds the pair from now, put there by ``by`` (a claim: the same key); 201."""
    claimed = PairClaimed(pair_id, to.key_id, to.name, datetime.now(UTC).isoformat(), by.key_id, by.name)
    out = _claim_out(pair_id, claimed)
    await _write(svc, principal, idem, pair_id, claimed, version, (201, out))
    return out


@router.post(
    "/pairs/{pair_id}/claim",
    status_code=201,
    response_model=ClaimOut,
    responses={
        200: {"model": ClaimOut, "description": "The calling key already holds the pair: nothing written."}
    },
    summary="Claim a pair: others see it is yours and skip it",
)
async def claim_pair(
    body: EmptyIn,
    pair_id: str = Path(pattern=ID_PATTERN),
    principal: Principal = Depends(require("review")),
    idem: Idempotency = Depends(idempotency),
    svc: ApiServices = Depends(services),
) -> Any:
    review, version, who = await _load(svc, principal, pair_id)
    try:
        fresh = check_claim(review, who)
    except (ReviewConflict, ReviewForbidden) as exc:
        raise _refused(exc) from None
    if not fresh:
        return JSONResponse(_claim_out(pair_id, review.claim), status_code=200)
    return await _hand(svc, principal, idem, pair_id, version, to=who, by=who)


@router.post(
    "/pairs/{pair_id}/assign",
    status_code=201,
    response_model=ClaimOut,
    summary="Assign a pair to a reviewer's key (an admin, or the key holding it)",
)
async def assign_pair(
    body: AssignIn,
    pair_id: str = Path(pattern=ID_PATTERN),
    principal: Principal = Depends(require("review")),
    idem: Idempotency = Depends(idempotency),
    svc: ApiServices = Depends(services),
) -> Any:
    review, version, who = await _load(svc, principal, pair_id)
    key = await project_key(svc.store.engine, principal.project(), body.key_id)
    if key is None or key.revoked:
        raise field_error("body.key_id", f"no active key {body.key_id} in this project")
    if "review" not in key.scopes and "admin" not in key.scopes:
        raise field_error("body.key_id", f"key {key.name} lacks the 'review' scope: it cannot review pairs")
    to = Reviewer(key.key_id, key.name)
    try:
        fresh = check_assign(review, who, to)
    except (ReviewConflict, ReviewForbidden) as exc:
        raise _refused(exc) from None
    if not fresh:
        return _claim_out(pair_id, review.claim)
    return await _hand(svc, principal, idem, pair_id, version, to=to, by=who)


@router.post(
    "/pairs/{pair_id}/release",
    response_model=ClaimOut,
    summary="Release a claimed pair (its holder or an admin)",
)
async def release_pair(
    body: EmptyIn,
    pair_id: str = Path(pattern=ID_PATTERN),
    principal: Principal = Depends(require("review")),
    idem: Idempotency = Depends(idempotency),
    svc: ApiServices = Depends(services),
) -> Any:
    review, version, who = await _load(svc, principal, pair_id)
    try:
        claim = check_release(review, who)
    except (ReviewConflict, ReviewForbidden) as exc:
        raise _refused(exc) from None
    now = datetime.now(UTC).isoformat()
    released = PairReleased(pair_id, claim.reviewer_key, claim.reviewer, now, who.key_id, who.name)
    out = _claim_out(pair_id, None)
    await _write(svc, principal, idem, pair_id, released, version, (200, out))
    return out


@router.post(
    "/pairs/{pair_id}/undo",
    status_code=201,
    response_model=UndoOut,
    summary="Undo your own last correction or acceptance of a pair (its sample is restored)",
)
async def undo_review(
    body: EmptyIn,
    pair_id: str = Path(pattern=ID_PATTERN),
    principal: Principal = Depends(require("review")),
    idem: Idempotency = Depends(idempotency),
    svc: ApiServices = Depends(services),
) -> Any:
    review, version, who = await _load(svc, principal, pair_id)
    try:
        action = check_undo(review, who)
    except (ReviewConflict, ReviewForbidden) as exc:
        raise _refused(exc) from None
    undo = ReviewUndone(
        pair_id=pair_id,
        undo_id=idem.new_id("undo"),
        reviewer_key=who.key_id,
        reviewer=who.name,
        undone_at=datetime.now(UTC).isoformat(),
        target_id=action.action_id,
        target_kind=action.kind,
    )
    plan = undo_plan(review, undo)
    out = UndoOut(
        undo_id=undo.undo_id,
        pair_id=pair_id,
        target_id=action.action_id,
        target_kind=action.kind,
        transition_index=action.transition_index,
        resplice=plan[0] if plan is not None else None,
    ).model_dump(mode="json")
    await _write(svc, principal, idem, pair_id, undo, version, (201, out))
    return out


@router.get(
    "/review/agreement",
    response_model=AgreementOut,
    summary="How far reviewers agree: percent agreement over pairs with two reviews or more, kappa",
)
async def review_agreement(
    principal: Principal = Depends(require("read")),
    svc: ApiServices = Depends(services),
) -> Any:
    figures = agreement_figures(await standing_verdicts(svc.store.engine, principal.project()))
    return AgreementOut(
        reviewed=figures.reviewed,
        compared=figures.compared,
        agreeing=figures.agreeing,
        percent=figures.percent,
        kappa=figures.kappa,
        kappa_reviewers=list(figures.kappa_reviewers),
    )


@router.get(
    "/reviewers",
    response_model=list[ReviewerOut],
    summary="The project's keys that may review: whom a pair can be assigned to",
)
async def list_reviewers(
    principal: Principal = Depends(require("review")),
    svc: ApiServices = Depends(services),
) -> Any:
    keys = await project_reviewers(svc.store.engine, principal.project())
    return [ReviewerOut(key_id=k.key_id, name=k.name) for k in keys]
