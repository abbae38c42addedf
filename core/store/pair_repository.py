"""Owns loading pairs out of the event store: one pair's stream folded by
``core.domain.review.fold_pair`` (optionally only up to a log position), and the run-wide reads
built on it (a run's judged pairs, an iteration's pair sources).

This is the one place that reads a pair stream and picks out its ``PairFound`` /
``FirstErrorMarked``; the splicer, the trainers' dataset builders, the critic metrics and the
exports ask it instead of looping over the stream themselves.
"""

from __future__ import annotations

from collections.abc import Sequence

from core.domain.events import FirstErrorMarked, PairFound, RecordedEvent, ReplayProbed
from core.domain.ids import pair_stream
from core.domain.review import PairReview, fold_pair
from core.formats.pair_records import PairSource
from core.store.ports import EventStore
from core.store.queries.pairs import pair_ids


class PairRepository:
    """Pairs as their streams say, from ``store``."""

    def __init__(self, store: EventStore) -> None:
        self.store = store

    async def _recorded(self, pair_id: str, up_to: int | None) -> list[RecordedEvent]:
        recorded = await self.store.read_stream(pair_stream(pair_id))
        return recorded if up_to is None else [r for r in recorded if r.position <= up_to]

    async def load(self, pair_id: str, up_to: int | None = None) -> PairReview:
        """The pair's review state (``up_to``: only the events at or below that log position);
        an empty ``PairReview`` (``pair`` None) when the stream does not exist."""
        return fold_pair(r.event for r in await self._recorded(pair_id, up_to))

    async def source(self, pair_id: str, up_to: int | None = None) -> PairSource | None:
        """The pair as the exports read it: its ``PairFound`` with its log position and the first
        error after the reviewers' corrections and the replay critic's probes (None when there is no
        ``PairFound``)."""
        recorded = await self._recorded(pair_id, up_to)
        review = fold_pair(r.event for r in recorded)
        if review.pair is None:
            return None
        position = next(r.position for r in recorded if isinstance(r.event, PairFound))
        # the replay critic's evidence, in the order the probes ran: the PRM export's step values
        probes = tuple(
            (r.event.prefix_steps, r.event.successes, r.event.m)
            for r in recorded
            if isinstance(r.event, ReplayProbed)
        )
        return PairSource(review.pair, review.first_error, position, probes)

    async def sources(self, pair_ids: Sequence[str], up_to: int | None = None) -> list[PairSource]:
        """``source`` of each pair that has one, in log order of their ``PairFound``."""
        out = [s for s in [await self.source(p, up_to) for p in pair_ids] if s is not None]
        return sorted(out, key=lambda s: (s.position, s.pair.pair_id))

    async def judged(self, run_id: str) -> list[tuple[PairFound, FirstErrorMarked]]:
        """The run's critiqued pairs in pair-id order: each ``PairFound`` with the critic's own
        ``FirstErrorMarked`` (before any correction); pairs not critiqued yet are left out."""
        out: list[tuple[PairFound, FirstErrorMarked]] = []
        for pair_id in await pair_ids(self.store, run_id):
            review = await self.load(pair_id)
            if review.pair is not None and review.marked is not None:
                out.append((review.pair, review.marked))
        return out
