"""Owns the events of the pair streams (``pair-{pair_id}``): the critic's first error, the splicer's
revision (or why not), reviewers' corrections with their re-splice and their acceptances, claims
(a reviewer holds the pair, or an admin assigns it) and undos (a reviewer takes back their own last
correction or acceptance; the splicer restores the sample that was current before it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from core.domain.events.base import DomainEvent, register, upcaster
from core.domain.events.values import CriticStrategyName, StepVerdict
from core.domain.trajectory import TrainingSample


@register
@dataclass(frozen=True)
class FirstErrorMarked(DomainEvent):
    event_version: ClassVar[int] = 2

    pair_id: str
    strategy: CriticStrategyName
    transition_index: int  # index into bad.steps of the first wrong action (t')
    verdicts: tuple[StepVerdict, ...]
    model_version: str = ""
    tokens_processed: int = 0
    fallback: bool = False  # no step judged bad: t' fell back to the last action (Direct-Revision)
    oracle_index: int | None = None  # the environment oracle's first error (None: no oracle / none)
    baselines: dict[str, int] = field(default_factory=dict)  # t' of baseline critics (reflect, model)


@upcaster("FirstErrorMarked", 1)
def _first_error_marked_v1(data: dict[str, Any]) -> dict[str, Any]:
    """v1 -> v2: ``fallback`` derived from the verdicts (direct, or no "bad" verdict), no oracle."""
    verdicts = data.get("verdicts") or []
    judged_bad = any(isinstance(v, dict) and v.get("label") == "bad" for v in verdicts)
    data["fallback"] = data.get("strategy") == "direct" or not judged_bad
    data["oracle_index"] = None
    return data


@register
@dataclass(frozen=True)
class ReplayProbed(DomainEvent):
    """One probe of the replay critic (``core.domain.decisive_step``): the bad path's first
    ``prefix_steps`` actions replayed from the task's reset, then ``m`` continuations by ``policy``;
    the evidence behind a ``replay`` verdict, in the order the search asked for it."""

    pair_id: str
    prefix_steps: int
    policy: str  # textcraft-solver | tau2-gold (the environment's expert) or a model reference
    m: int
    successes: int
    spent: int  # continuations actually run (0 where the replayed prefix already ended the episode)
    continuations: tuple[tuple[str, ...], ...] = ()  # each continuation's actions after the prefix
    rewards: tuple[float, ...] = ()  # each continuation's final reward


@register
@dataclass(frozen=True)
class RevisionMaterialized(DomainEvent):
    sample_id: str
    pair_id: str
    run_id: str | None
    iteration: int
    sample: TrainingSample
    template_id: str
    revision_length: int  # bad actions kept after the divergence (through t')
    verified: bool | None = None  # None: no environment to replay in


@register
@dataclass(frozen=True)
class RevisionRejected(DomainEvent):
    pair_id: str
    run_id: str | None
    iteration: int
    reason: str


@register
@dataclass(frozen=True)
class FirstErrorCorrected(DomainEvent):
    """A reviewer moved a pair's first-error step (t') and/or rewrote its reflection (human review).

    ``old_*`` are what the sample was spliced with before; ``new_reflection`` None keeps the
    reflection chosen the usual way (a template for the new wrong action). The splicer re-splices
    the pair from it (``SampleRespliced``, provenance origin "human-corrected") or says why not
    (``CorrectionRejected``).
    """

    pair_id: str
    correction_id: str
    reviewer: str  # the review key: "<prefix>" or "<prefix> (<label>)"
    corrected_at: str  # ISO 8601, the API's clock when the reviewer sent it
    old_transition_index: int | None
    new_transition_index: int
    old_reflection: str
    new_reflection: str | None = None
    trace_id: str | None = None  # set when the correction was made on a production trace
    note: str = ""
    reviewer_key: str = ""  # the review key's id ("" before reviewers were told apart: ``reviewer``)


@register
@dataclass(frozen=True)
class SampleRespliced(DomainEvent):
    """A pair's revision sample re-spliced from a human correction; it replaces the earlier sample."""

    sample_id: str
    pair_id: str
    correction_id: str
    run_id: str | None
    iteration: int
    sample: TrainingSample  # provenance: origin "human-corrected", correction_id, corrected_by
    template_id: str
    revision_length: int
    verified: bool | None = None


@register
@dataclass(frozen=True)
class CorrectionRejected(DomainEvent):
    """A human correction could not be spliced (e.g. the replay no longer reaches the good reward)."""

    pair_id: str
    correction_id: str
    reason: str


@register
@dataclass(frozen=True)
class FirstErrorAccepted(DomainEvent):
    """A reviewer confirmed a pair's current first-error step t' (the critic was right): the pair
    counts as reviewed and its sample stays as spliced (nothing is re-spliced)."""

    pair_id: str
    acceptance_id: str
    reviewer: str  # the review key: "<prefix>" or "<prefix> (<label>)"
    accepted_at: str  # ISO 8601, the API's clock when the reviewer sent it
    transition_index: int  # the t' confirmed (the current sample's, else the critic's)
    trace_id: str | None = None  # set when accepted on a production trace
    note: str = ""
    reviewer_key: str = ""  # the review key's id ("" before reviewers were told apart: ``reviewer``)


@register
@dataclass(frozen=True)
class PairClaimed(DomainEvent):
    """A reviewer holds the pair: others see "claimed by" and skip it when moving to the next pair.
    ``by_key`` is who did it: the reviewer themself (a claim), an admin or the previous holder (an
    assignment)."""

    pair_id: str
    reviewer_key: str  # the key id of the reviewer who holds it now
    reviewer: str  # that key as people read it: "<prefix> (<label>)"
    claimed_at: str  # ISO 8601, the API's clock
    by_key: str
    by: str


@register
@dataclass(frozen=True)
class PairReleased(DomainEvent):
    """The pair is nobody's any more (released by its holder or an admin)."""

    pair_id: str
    reviewer_key: str  # who held it
    reviewer: str
    released_at: str
    by_key: str
    by: str


@register
@dataclass(frozen=True)
class ReviewUndone(DomainEvent):
    """A reviewer took back their own last correction or acceptance of the pair (the event log is
    append-only: the undone event stays, this one says it no longer counts). Undoing a correction
    whose sample is the pair's current one makes the splice worker restore the sample that was
    current before it (``SampleRespliced`` with ``correction_id`` = ``undo_id``) or, when there was
    none, withdraw it (``SampleWithdrawn``)."""

    pair_id: str
    undo_id: str
    reviewer_key: str
    reviewer: str
    undone_at: str
    target_id: str  # the correction_id or acceptance_id taken back
    target_kind: str  # "correction" | "acceptance"


@register
@dataclass(frozen=True)
class SampleWithdrawn(DomainEvent):
    """The pair's revision sample no longer stands (its only sample came from an undone correction):
    it leaves the ``samples`` read model, so new datasets no longer hold it."""

    pair_id: str
    sample_id: str
    cause_id: str  # the undo_id
    reason: str
