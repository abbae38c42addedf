"""Owns the review state of one pair: what its stream says happened, folded into one value (pure).

A pair's stream holds ``PairFound``, the critic's ``FirstErrorMarked`` (or a ``RevisionRejected``),
the splicer's ``RevisionMaterialized`` and, after human review, ``FirstErrorAccepted`` (the reviewer
confirms the current t') or ``FirstErrorCorrected`` followed by ``SampleRespliced`` or
``CorrectionRejected``; reviewers claim it (``PairClaimed`` / ``PairReleased``) and may take back their
own last correction or acceptance (``ReviewUndone``, then the splicer's ``SampleRespliced`` restoring
the earlier sample or ``SampleWithdrawn``). ``fold_pair`` reads those events in stream order
and answers what the UI and the correction route need: the pair, the critic's verdicts, the t' and
reflection the current sample was spliced with, every correction with its outcome, and the first
error the exports label (the critic's, moved to the latest correction's step, no longer a
fallback). ``check_correction`` says whether a reviewer's correction can be applied, before
anything is written (``check_accept``: an acceptance). ``review_signals`` says from the critic's
verdict why a pair may need a human (the review queue's filters) and ``review_priority`` how
urgently (the queue's order).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from core.domain.events import (
    CorrectionRejected,
    DomainEvent,
    FirstErrorAccepted,
    FirstErrorCorrected,
    FirstErrorMarked,
    PairClaimed,
    PairFound,
    PairReleased,
    ReviewUndone,
    RevisionMaterialized,
    RevisionRejected,
    SampleRespliced,
    SampleWithdrawn,
)
from core.domain.trajectory import TrainingSample

HUMAN_CORRECTED = "human-corrected"
"""``provenance["origin"]`` of a sample re-spliced from a reviewer's correction."""
MAX_REFLECTION_CHARS = 2000


class CorrectionError(ValueError):
    """A correction that cannot be applied; the message names the field and the allowed values."""

    def __init__(self, field_name: str, problem: str) -> None:
        super().__init__(f"{field_name}: {problem}")
        self.field_name = field_name
        self.problem = problem


@dataclass
class CorrectionRecord:
    """One reviewer correction and what became of it (``status``: pending, respliced, rejected;
    ``undone``: its reviewer took it back)."""

    event: FirstErrorCorrected
    status: str = "pending"
    reason: str = ""
    undone: bool = False


@dataclass(frozen=True)
class ReviewAction:
    """One reviewer's verdict on the pair: a correction (t' moved) or an acceptance (t' confirmed)."""

    kind: Literal["correction", "acceptance"]
    action_id: str  # correction_id or acceptance_id
    reviewer_key: str  # the key id (older events: the reviewer's name)
    reviewer: str
    transition_index: int  # the t' this reviewer says is the first error
    at: str


@dataclass(frozen=True)
class SampleState:
    """A sample the pair had: ``cause_id`` is the correction that re-spliced it ("" for the splicer's)."""

    cause_id: str
    sample_id: str
    sample: TrainingSample
    template_id: str
    revision_length: int
    verified: bool | None
    origin: str


def reviewer_key_of(event: FirstErrorCorrected | FirstErrorAccepted) -> str:
    """Who made a correction or acceptance (its key id; events before key ids were kept: the name)."""
    return event.reviewer_key or event.reviewer


@dataclass
class PairReview:
    pair: PairFound | None = None
    marked: FirstErrorMarked | None = None
    first_error: FirstErrorMarked | None = None  # ``marked`` moved by the latest correction
    sample: TrainingSample | None = None
    sample_origin: str = ""  # "splice" or HUMAN_CORRECTED
    transition_index: int | None = None  # the t' of the current sample (else the critic's)
    reflection: str = ""  # the reflection of the current sample ("" when unknown)
    rejected_reason: str = ""
    corrections: list[CorrectionRecord] = field(default_factory=list)
    accepts: list[FirstErrorAccepted] = field(default_factory=list)
    claim: PairClaimed | None = None  # who holds the pair now (None: nobody)
    actions: list[ReviewAction] = field(default_factory=list)  # every verdict, in stream order
    undone: dict[str, ReviewUndone] = field(default_factory=dict)  # undone action id -> the undo
    undos: dict[str, ReviewUndone] = field(default_factory=dict)  # undo id -> the undo
    samples: list[SampleState] = field(default_factory=list)  # the current sample last, earlier below

    @property
    def pending(self) -> CorrectionRecord | None:
        return next((c for c in self.corrections if c.status == "pending"), None)

    @property
    def live_actions(self) -> list[ReviewAction]:
        """The verdicts not taken back, in stream order."""
        return [a for a in self.actions if a.action_id not in self.undone]

    @property
    def live_accepts(self) -> list[FirstErrorAccepted]:
        return [a for a in self.accepts if a.acceptance_id not in self.undone]

    @property
    def live_corrections(self) -> list[CorrectionRecord]:
        return [c for c in self.corrections if not c.undone]


def _reflection_of(sample: TrainingSample) -> str:
    value = sample.provenance.get("reflection")
    return value if isinstance(value, str) else ""


def _state(event: RevisionMaterialized | SampleRespliced, cause_id: str, origin: str) -> SampleState:
    return SampleState(
        cause_id,
        event.sample_id,
        event.sample,
        event.template_id,
        event.revision_length,
        event.verified,
        origin,
    )


def _show_sample(review: PairReview, state: SampleState | None) -> None:
    """The pair's current sample becomes ``state`` (None: the pair has none)."""
    if state is None:
        review.sample, review.sample_origin, review.reflection = None, "", ""
        if review.marked is not None:
            review.transition_index = review.marked.transition_index
        return
    review.sample = state.sample
    review.sample_origin = state.origin
    index = state.sample.provenance.get("transition_index")
    if isinstance(index, int):
        review.transition_index = index
    review.reflection = _reflection_of(state.sample)


def _undo(review: PairReview, event: ReviewUndone, by_id: dict[str, CorrectionRecord]) -> None:
    review.undone[event.target_id] = event
    review.undos[event.undo_id] = event
    if event.target_id in by_id:
        by_id[event.target_id].undone = True
    on_top = bool(review.samples) and review.samples[-1].cause_id == event.target_id
    if not on_top:  # a sample the undone correction made but that no longer stands: forget it
        review.samples = [s for s in review.samples if s.cause_id != event.target_id]


NOT_THE_MAJORITY = ("disputed:", "outvoted:")
"""The reason prefixes of a correction the splicer did not follow because most reviewers did not name
its t' (``core.domain.reviewers.splice_refusal``)."""


def _moved_first_error(review: PairReview) -> FirstErrorMarked | None:
    """The critic's first error moved to the latest correction not taken back (whatever its outcome,
    except one the reviewers' majority did not follow: the exports label what the sample says)."""
    live = [
        c
        for c in review.live_corrections
        if not (c.status == "rejected" and c.reason.startswith(NOT_THE_MAJORITY))
    ]
    if review.marked is None or not live:
        return review.marked
    latest = live[-1].event
    return dataclasses.replace(review.marked, transition_index=latest.new_transition_index, fallback=False)


def fold_pair(events: Iterable[DomainEvent]) -> PairReview:
    """The pair's review state from its stream's events, in order."""
    review = PairReview()
    by_id: dict[str, CorrectionRecord] = {}
    for event in events:
        if isinstance(event, PairFound):
            review.pair = event
        elif isinstance(event, FirstErrorMarked):
            review.marked = review.first_error = event
            if review.sample is None:
                review.transition_index = event.transition_index
        elif isinstance(event, RevisionMaterialized):
            review.samples = [_state(event, "", "splice")]
            _show_sample(review, review.samples[-1])
        elif isinstance(event, RevisionRejected):
            review.rejected_reason = event.reason
        elif isinstance(event, FirstErrorCorrected):
            record = CorrectionRecord(event)
            review.corrections.append(record)
            by_id[event.correction_id] = record
            review.actions.append(
                ReviewAction(
                    "correction",
                    event.correction_id,
                    reviewer_key_of(event),
                    event.reviewer,
                    event.new_transition_index,
                    event.corrected_at,
                )
            )
        elif isinstance(event, SampleRespliced):
            review.rejected_reason = ""
            if event.correction_id in review.undos:  # an undo restored the sample before it
                if len(review.samples) > 1:
                    review.samples.pop()
                else:
                    review.samples = [_state(event, "", "splice")]
                _show_sample(review, review.samples[-1])
            else:
                review.samples.append(_state(event, event.correction_id, HUMAN_CORRECTED))
                _show_sample(review, review.samples[-1])
            if event.correction_id in by_id:
                by_id[event.correction_id].status = "respliced"
        elif isinstance(event, SampleWithdrawn):
            review.samples = []
            _show_sample(review, None)
        elif isinstance(event, FirstErrorAccepted):
            review.accepts.append(event)
            review.actions.append(
                ReviewAction(
                    "acceptance",
                    event.acceptance_id,
                    reviewer_key_of(event),
                    event.reviewer,
                    event.transition_index,
                    event.accepted_at,
                )
            )
        elif isinstance(event, CorrectionRejected) and event.correction_id in by_id:
            by_id[event.correction_id].status = "rejected"
            by_id[event.correction_id].reason = event.reason
        elif isinstance(event, PairClaimed):
            review.claim = event
        elif isinstance(event, PairReleased):
            review.claim = None
        elif isinstance(event, ReviewUndone):
            _undo(review, event, by_id)
    review.first_error = _moved_first_error(review)
    return review


def check_correction(
    review: PairReview, transition_index: int | None, reflection: str | None
) -> tuple[int, str | None]:
    """The (t', reflection) a correction will splice with; ``CorrectionError`` when it cannot apply.

    ``transition_index`` None keeps the current t'; ``reflection`` None keeps the usual choice
    (a template for the wrong action). At least one of them must change something.
    """
    pair = review.pair
    if pair is None:
        raise CorrectionError("pair_id", "no PairFound in this pair's stream")
    if review.marked is None:
        raise CorrectionError("pair_id", "the critic has not judged this pair yet; correct it once it has")
    if review.pending is not None:
        raise CorrectionError(
            "pair_id", f"correction {review.pending.event.correction_id} is still being re-spliced; retry"
        )
    current = (
        review.transition_index if review.transition_index is not None else review.marked.transition_index
    )
    new_index = current if transition_index is None else transition_index
    first, last = pair.shared_steps, len(pair.bad.steps) - 1
    if not first <= new_index <= last:
        raise CorrectionError(
            "transition_index",
            f"{new_index} is not a step of the bad path after the divergence: choose {first}..{last}",
        )
    text: str | None = None
    if reflection is not None:
        text = " ".join(reflection.split())
        if not text:
            raise CorrectionError(
                "reflection", "is empty; send a sentence, or leave it out to keep the template"
            )
        if len(text) > MAX_REFLECTION_CHARS:
            raise CorrectionError("reflection", f"is longer than {MAX_REFLECTION_CHARS} characters")
    if new_index == current and (text is None or text == review.reflection) and review.sample is not None:
        raise CorrectionError(
            "transition_index", f"t' is already {current} with this reflection: nothing changes"
        )
    return new_index, text


def check_accept(review: PairReview) -> int:
    """The t' a reviewer confirms by accepting the pair as it is; ``CorrectionError`` when it cannot.

    The pair must be judged by the critic and have no correction still being re-spliced (the t'
    accepted would not be the one the sample ends up with)."""
    if review.pair is None:
        raise CorrectionError("pair_id", "no PairFound in this pair's stream")
    if review.marked is None:
        raise CorrectionError("pair_id", "the critic has not judged this pair yet; accept it once it has")
    if review.pending is not None:
        raise CorrectionError(
            "pair_id", f"correction {review.pending.event.correction_id} is still being re-spliced; retry"
        )
    return review.transition_index if review.transition_index is not None else review.marked.transition_index


def accept_view(event: FirstErrorAccepted, undone: bool = False) -> dict[str, Any]:
    """An acceptance as the API shows it (``undone``: its reviewer took it back)."""
    return {
        "undone": undone,
        "acceptance_id": event.acceptance_id,
        "reviewer": event.reviewer,
        "accepted_at": event.accepted_at,
        "transition_index": event.transition_index,
        "trace_id": event.trace_id,
        "note": event.note,
    }


def correction_view(record: CorrectionRecord) -> dict[str, Any]:
    """A correction as the API shows it."""
    event = record.event
    return {
        "correction_id": event.correction_id,
        "reviewer": event.reviewer,
        "corrected_at": event.corrected_at,
        "old_transition_index": event.old_transition_index,
        "new_transition_index": event.new_transition_index,
        "old_reflection": event.old_reflection,
        "new_reflection": event.new_reflection,
        "trace_id": event.trace_id,
        "note": event.note,
        "status": record.status,
        "reason": record.reason,
        "undone": record.undone,
    }


ReviewReason = Literal["disagree", "fallback", "uncertain", "low_margin"]
REVIEW_REASONS: tuple[ReviewReason, ...] = ("disagree", "fallback", "uncertain", "low_margin")
DEFAULT_MAX_MARGIN = 0.5
"""A verdict whose two best labels' scores (mean log-probability per label token) are closer than
this is a low-margin verdict, unless the review queue is asked for another threshold."""


@dataclass(frozen=True)
class ReviewSignals:
    """Why a critiqued pair may need a human, from its ``FirstErrorMarked``.

    ``critic_index``: the critic's t'; ``oracle_index``: the environment oracle's first error (None:
    no oracle, or none found); ``fallback``: nothing was judged bad, t' fell back to the last action;
    ``uncertain``: how many verdicts say "uncertain"; ``margin``: the smallest gap between a verdict's
    best and second-best label score over the verdicts that have label scores (None: none has);
    ``spread``: the distance between strategies, the largest |t' - t'| between the critic and the
    baseline critics it ran beside (``FirstErrorMarked.baselines``; None: no baseline ran).
    """

    critic_index: int
    oracle_index: int | None
    fallback: bool
    uncertain: int
    margin: float | None
    spread: int | None = None


def verdict_margin(scores: dict[str, float]) -> float | None:
    """Best minus second-best label score (None with fewer than two finite scores)."""
    values = sorted(
        (v for v in scores.values() if isinstance(v, int | float) and math.isfinite(v)), reverse=True
    )
    return values[0] - values[1] if len(values) >= 2 else None


def review_signals(marked: FirstErrorMarked) -> ReviewSignals:
    margins = [m for m in (verdict_margin(v.scores) for v in marked.verdicts) if m is not None]
    gaps = [abs(t - marked.transition_index) for t in marked.baselines.values() if isinstance(t, int)]
    return ReviewSignals(
        critic_index=marked.transition_index,
        oracle_index=marked.oracle_index,
        fallback=marked.fallback,
        uncertain=sum(1 for v in marked.verdicts if v.label == "uncertain"),
        margin=min(margins) if margins else None,
        spread=max(gaps) if gaps else None,
    )


PRIORITY_STEPS_CAP = 5
"""Step distances (critic vs oracle, critic vs baseline critics) count up to this many steps."""


def review_priority(signals: ReviewSignals) -> float:
    """How urgently a human should look at the pair: higher first (the review queue's default order).

    The sum of three signals, each in [0, 1]: critic-oracle disagreement (0.5 for disagreeing, plus
    up to 0.5 as the two t' lie further apart, capped at ``PRIORITY_STEPS_CAP`` steps), the verdict
    margin (``1 / (1 + margin)``: 1 for a tie between the two best labels, 0 with no label scores)
    and the distance between strategies (``spread / PRIORITY_STEPS_CAP``, capped at 1); plus 0.25
    each for a fallback (nothing judged bad) and for an "uncertain" verdict.
    """
    score = 0.0
    if signals.oracle_index is not None and signals.oracle_index != signals.critic_index:
        steps = min(abs(signals.oracle_index - signals.critic_index), PRIORITY_STEPS_CAP)
        score += 0.5 + 0.5 * steps / PRIORITY_STEPS_CAP
    if signals.margin is not None:
        score += 1.0 / (1.0 + max(signals.margin, 0.0))
    if signals.spread:
        score += min(signals.spread, PRIORITY_STEPS_CAP) / PRIORITY_STEPS_CAP
    if signals.fallback:
        score += 0.25
    if signals.uncertain:
        score += 0.25
    return round(score, 6)


def review_reasons(signals: ReviewSignals, max_margin: float = DEFAULT_MAX_MARGIN) -> list[ReviewReason]:
    """The reasons, in ``REVIEW_REASONS`` order, this pair is in the review queue (empty: it is not)."""
    reasons: list[ReviewReason] = []
    if signals.oracle_index is not None and signals.oracle_index != signals.critic_index:
        reasons.append("disagree")
    if signals.fallback:
        reasons.append("fallback")
    if signals.uncertain:
        reasons.append("uncertain")
    if signals.margin is not None and signals.margin < max_margin:
        reasons.append("low_margin")
    return reasons
