"""Owns the review reads: the review queue (filtered, ordered by priority or pair id, keyset pages,
with its counts), a pair's row and sample, the reviewer's key label, a key a pair can be assigned to,
a trace's pair and the reviewers' standing verdicts (the agreement figures).

The queue's rows are ``pairs`` rows the critic judged (``critic_index`` set) whose signals put them
in the queue (``core.domain.review.review_reasons``: the same conditions in SQL). Reviewed means a
reviewer corrected the pair or accepted its t' (``corrections + accepts > 0``). Ordered by
``priority`` (``core.domain.review.review_priority``, highest first; pairs projected before it
existed count as -1) then pair id, or by pair id alone; a page continues after the last row's
``QueuePage.last`` key (the caller encodes it as a cursor). ``mine`` (a key id) keeps the pairs that
key holds (``claimed_key``) or has a standing verdict on (``pair_verdicts``); ``disputed`` the pairs
whose reviewers are tied.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import ColumnElement, and_, case, exists, func, or_, select
from sqlalchemy.ext.asyncio import AsyncEngine

from core.store.queries.projects import project_keys
from core.store.tables import api_keys, pair_verdicts, pairs, samples, traces

QueueReason = Literal["any", "disagree", "fallback", "uncertain", "low_margin"]
QueueSort = Literal["priority", "pair_id"]
NO_PRIORITY = -1.0
"""The rank of a pair whose priority was never projected (it sorts last)."""


@dataclass(frozen=True)
class QueueFilter:
    project_id: str
    reason: QueueReason = "any"
    max_margin: float = 0.5
    run_id: str | None = None
    iteration: int | None = None
    task_key: str | None = None
    source: str | None = None
    reviewed: bool | None = None
    mine: str | None = None  # a key id: only pairs it holds or has reviewed
    disputed: bool | None = None


@dataclass(frozen=True)
class QueueRow:
    pair_id: str
    run_id: str | None
    iteration: int
    tree_id: str | None
    source: str
    task_key: str
    status: str
    shared_steps: int
    transition_index: int | None
    strategy: str | None
    critic_index: int
    oracle_index: int | None
    fallback: bool
    uncertain: int
    margin: float | None
    spread: int | None
    priority: float
    corrections: int
    accepts: int
    claimed_key: str | None = None
    claimed_by: str | None = None
    reviewers: int = 0
    agree: int = 0
    agreed_index: int | None = None
    disputed: bool = False

    @property
    def reviewed(self) -> bool:
        return self.corrections + self.accepts > 0


@dataclass(frozen=True)
class QueuePage:
    rows: list[QueueRow]
    last: list[Any] | None  # the sort key of the page's last row when more rows follow
    total: int  # the queue with the filters, ``reviewed`` aside
    reviewed: int  # of those, pairs corrected or accepted


@dataclass(frozen=True)
class PairRow:
    status: str
    reason: str | None
    sample_id: str | None


def _reason(reason: QueueReason, max_margin: float) -> ColumnElement[bool]:
    conditions: dict[str, ColumnElement[bool]] = {
        "disagree": and_(pairs.c.oracle_index.is_not(None), pairs.c.oracle_index != pairs.c.critic_index),
        "fallback": pairs.c.fallback.is_(True),
        "uncertain": pairs.c.uncertain > 0,
        "low_margin": pairs.c.margin < max_margin,
    }
    return or_(*conditions.values()) if reason == "any" else conditions[reason]


_reviewed = (pairs.c.corrections + pairs.c.accepts) > 0
_rank = func.coalesce(pairs.c.priority, NO_PRIORITY)


async def queue_page(
    engine: AsyncEngine, wanted: QueueFilter, sort: QueueSort, after: list[Any] | None, limit: int
) -> QueuePage:
    """One page of the review queue (``limit`` rows after the key ``after``) and its counts."""
    where: list[ColumnElement[bool]] = [
        pairs.c.project_id == wanted.project_id,
        pairs.c.critic_index.is_not(None),
        _reason(wanted.reason, wanted.max_margin),
    ]
    for column, value in (
        (pairs.c.run_id, wanted.run_id),
        (pairs.c.iteration, wanted.iteration),
        (pairs.c.task_key, wanted.task_key),
        (pairs.c.source, wanted.source),
    ):
        if value is not None:
            where.append(column == value)
    if wanted.mine is not None:
        verdict = exists().where(
            pair_verdicts.c.pair_id == pairs.c.pair_id, pair_verdicts.c.reviewer_key == wanted.mine
        )
        where.append(or_(pairs.c.claimed_key == wanted.mine, verdict))
    if wanted.disputed is not None:
        where.append(pairs.c.disputed.is_(wanted.disputed))
    counted = select(func.count(), func.coalesce(func.sum(case((_reviewed, 1), else_=0)), 0)).where(*where)
    if wanted.reviewed is not None:
        where.append(_reviewed if wanted.reviewed else ~_reviewed)
    query = select(pairs, _rank.label("rank")).where(*where)
    if sort == "priority":
        if after is not None:
            rank, pair_id = after
            where_after = or_(_rank < rank, and_(_rank == rank, pairs.c.pair_id > pair_id))
            query = query.where(where_after)
        query = query.order_by(_rank.desc(), pairs.c.pair_id)
    else:
        if after is not None:
            query = query.where(pairs.c.pair_id > after[0])
        query = query.order_by(pairs.c.pair_id)
    async with engine.connect() as conn:
        total, done = (await conn.execute(counted)).one()
        fetched = (await conn.execute(query.limit(limit + 1))).mappings().all()
    rows = [_row(r) for r in fetched[:limit]]
    last: list[Any] | None = None
    if len(fetched) > limit:
        tail = rows[-1]
        last = [tail.priority, tail.pair_id] if sort == "priority" else [tail.pair_id]
    return QueuePage(rows, last, int(total), int(done))


def _row(r: Any) -> QueueRow:
    return QueueRow(
        pair_id=r["pair_id"],
        run_id=r["run_id"],
        iteration=r["iteration"],
        tree_id=r["tree_id"],
        source=r["source"],
        task_key=r["task_key"],
        status=r["status"],
        shared_steps=r["shared_steps"],
        transition_index=r["transition_index"],
        strategy=r["strategy"],
        critic_index=r["critic_index"],
        oracle_index=r["oracle_index"],
        fallback=bool(r["fallback"]),
        uncertain=r["uncertain"] or 0,
        margin=r["margin"],
        spread=r["spread"],
        priority=float(r["rank"]),
        corrections=r["corrections"],
        accepts=r["accepts"],
        claimed_key=r["claimed_key"],
        claimed_by=r["claimed_by"],
        reviewers=r["reviewers"] or 0,
        agree=r["agree"] or 0,
        agreed_index=r["agreed_index"],
        disputed=bool(r["disputed"]),
    )


async def pair_row(engine: AsyncEngine, project_id: str, pair_id: str) -> PairRow | None:
    """The pair's status, rejection reason and sample in ``project_id`` (None: no such pair there)."""
    async with engine.connect() as conn:
        row = (
            await conn.execute(
                select(pairs.c.status, pairs.c.reason).where(
                    pairs.c.pair_id == pair_id, pairs.c.project_id == project_id
                )
            )
        ).first()
        if row is None:
            return None
        sample_id = (
            await conn.execute(select(samples.c.sample_id).where(samples.c.pair_id == pair_id))
        ).scalar()
    return PairRow(status=row.status, reason=row.reason, sample_id=sample_id)


async def key_label(engine: AsyncEngine, key_id: str) -> str:
    """The label of the API key ``key_id`` ("" when none)."""
    async with engine.connect() as conn:
        label = (await conn.execute(select(api_keys.c.label).where(api_keys.c.key_id == key_id))).scalar()
    return label or ""


async def trace_exists(engine: AsyncEngine, project_id: str, trace_id: str) -> bool:
    async with engine.connect() as conn:
        found = (
            await conn.execute(
                select(traces.c.trace_id).where(
                    traces.c.trace_id == trace_id, traces.c.project_id == project_id
                )
            )
        ).scalar()
    return found is not None


async def trace_pair(engine: AsyncEngine, project_id: str, pair_id: str) -> str | None:
    """``pair_id`` when it is a trace pair of ``project_id`` (None otherwise)."""
    async with engine.connect() as conn:
        return (
            await conn.execute(
                select(pairs.c.pair_id).where(
                    pairs.c.project_id == project_id, pairs.c.source == "trace", pairs.c.pair_id == pair_id
                )
            )
        ).scalar()


@dataclass(frozen=True)
class ReviewKey:
    key_id: str
    prefix: str
    label: str
    scopes: tuple[str, ...]
    revoked: bool

    @property
    def name(self) -> str:
        who = f"agr_{self.prefix}"
        return f"{who} ({self.label})" if self.label else who


async def project_key(engine: AsyncEngine, project_id: str, key_id: str) -> ReviewKey | None:
    """The key ``key_id`` of ``project_id`` (None: no such key in that project)."""
    async with engine.connect() as conn:
        row = (
            await conn.execute(
                select(api_keys).where(api_keys.c.key_id == key_id, api_keys.c.project_id == project_id)
            )
        ).first()
    if row is None:
        return None
    return ReviewKey(row.key_id, row.prefix, row.label or "", tuple(row.scopes or ()), bool(row.revoked))


async def project_reviewers(engine: AsyncEngine, project_id: str) -> list[ReviewKey]:
    """The project's live keys that may review (``review`` or ``admin`` scope), oldest first: whom a
    pair can be assigned to."""
    live = [k for k in await project_keys(engine, project_id) if not k["revoked"]]
    keys = [
        ReviewKey(k["key_id"], k["prefix"], k["label"] or "", tuple(k["scopes"] or ()), False) for k in live
    ]
    return [k for k in keys if "review" in k.scopes or "admin" in k.scopes]


async def standing_verdicts(engine: AsyncEngine, project_id: str) -> list[tuple[int, dict[str, int]]]:
    """Per reviewed pair of the project: (the critic's t', reviewer -> their standing t')."""
    query = (
        select(
            pair_verdicts.c.pair_id,
            pair_verdicts.c.reviewer,
            pair_verdicts.c.transition_index,
            pair_verdicts.c.critic_index,
        )
        .where(pair_verdicts.c.project_id == project_id)
        .order_by(pair_verdicts.c.pair_id)
    )
    out: dict[str, tuple[int, dict[str, int]]] = {}
    async with engine.connect() as conn:
        for pair_id, key, index, critic in (await conn.execute(query)).all():
            out.setdefault(pair_id, (critic if critic is not None else -1, {}))[1][key] = index
    return list(out.values())
