"""Owns the rules of reviewing a pair with more than one reviewer (pure): who holds the pair
(claims and assignments), each reviewer's standing verdict, how far reviewers agree, which verdict
the splicer follows, what an undo takes back, and the review page's overall agreement figures.

A reviewer's verdict on a pair is their latest correction or acceptance not taken back: the t' they
say is the first error (an acceptance says the t' the sample had then). The splicer follows the
majority: a correction is re-spliced only when its t' is the one most reviewers of the pair now name
(a lone reviewer is a majority); a correction that leaves reviewers tied is "disputed", one the others
outnumber is "outvoted": neither is spliced (``CorrectionRejected`` with that reason), the sample stays
as it was, and the queue lists a tied pair as disputed until a majority forms. Acceptances never
re-splice (they confirm the sample as it is).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from core.domain.events import PairClaimed, ReviewUndone
from core.domain.review import NOT_THE_MAJORITY, PairReview, ReviewAction, SampleState


class ReviewConflict(Exception):
    """A claim, assignment, release or undo that cannot be done now; the message says why (API: 409)."""


class ReviewForbidden(Exception):
    """The caller may not do this to the pair (API: 403); the message says who may."""


@dataclass(frozen=True)
class Reviewer:
    """A review key: its id and how people read it ("agr_<prefix> (<label>)")."""

    key_id: str
    name: str
    admin: bool = False


def check_claim(review: PairReview, who: Reviewer) -> bool:
    """Whether ``who`` may claim the pair: True (write the claim), False (they already hold it: nothing
    to write); ``ReviewConflict`` when another reviewer holds it."""
    if review.pair is None:
        raise ReviewConflict("the pair has no PairFound in its stream yet")
    claim = review.claim
    if claim is None:
        return True
    if claim.reviewer_key == who.key_id:
        return False
    raise ReviewConflict(
        f"pair {review.pair.pair_id} is claimed by {claim.reviewer} since {claim.claimed_at}; "
        "ask them (or an admin) to release or assign it"
    )


def check_assign(review: PairReview, who: Reviewer, to: Reviewer) -> bool:
    """Whether ``who`` may hand the pair to ``to``: an admin may always, the holder may; False when
    ``to`` already holds it (nothing to write)."""
    if review.pair is None:
        raise ReviewConflict("the pair has no PairFound in its stream yet")
    claim = review.claim
    if not who.admin and (claim is None or claim.reviewer_key != who.key_id):
        holder = f"its holder ({claim.reviewer})" if claim is not None else "its holder (nobody holds it)"
        raise ReviewForbidden(f"only an admin key or {holder} may assign this pair")
    return claim is None or claim.reviewer_key != to.key_id


def check_release(review: PairReview, who: Reviewer) -> PairClaimed:
    """The claim ``who`` may end (the holder or an admin); ``ReviewConflict`` when nobody holds it."""
    claim = review.claim
    if review.pair is None or claim is None:
        raise ReviewConflict("the pair is not claimed: nothing to release")
    if not who.admin and claim.reviewer_key != who.key_id:
        raise ReviewForbidden(f"only an admin key or its holder ({claim.reviewer}) may release this pair")
    return claim


def check_undo(review: PairReview, who: Reviewer) -> ReviewAction:
    """``who``'s last verdict on the pair not taken back yet (the one an undo takes back);
    ``ReviewConflict`` when there is none, or when it is a correction still being re-spliced."""
    mine = [a for a in review.live_actions if a.reviewer_key == who.key_id]
    if not mine:
        raise ReviewConflict(
            "nothing to undo: you have no correction or acceptance on this pair that is not undone already"
        )
    last = mine[-1]
    pending = review.pending
    if pending is not None and pending.event.correction_id == last.action_id:
        raise ReviewConflict(
            f"correction {last.action_id} is still being re-spliced; undo it once it is done"
        )
    return last


def undo_plan(review: PairReview, undo: ReviewUndone) -> tuple[str, SampleState] | None:
    """What the splicer does for an undo: ("restore", the sample before the undone correction's) or
    ("withdraw", the undone correction's sample, when the pair had none before); None when the undone
    verdict's sample is not the pair's current one (an acceptance, a rejected correction, or one a later
    correction replaced: nothing to re-splice)."""
    stack = review.samples
    if not stack or stack[-1].cause_id != undo.target_id or undo.target_kind != "correction":
        return None
    return ("restore", stack[-2]) if len(stack) > 1 else ("withdraw", stack[-1])


def verdicts(review: PairReview) -> dict[str, ReviewAction]:
    """Each reviewer's standing verdict: their latest correction or acceptance not taken back."""
    out: dict[str, ReviewAction] = {}
    for action in review.live_actions:
        out.pop(action.reviewer_key, None)
        out[action.reviewer_key] = action  # re-inserted: the dict stays in order of latest verdicts
    return out


@dataclass(frozen=True)
class Agreement:
    """How a pair's reviewers agree: ``votes`` (t' -> the reviewers naming it), the step most of them
    name (``index``; None: no verdict, or a tie) and how many name it (``agree``)."""

    reviewers: int
    votes: dict[int, tuple[str, ...]]
    index: int | None
    agree: int

    @property
    def disputed(self) -> bool:
        return self.reviewers >= 2 and self.index is None

    @property
    def summary(self) -> str:
        return agreement_text(self.reviewers, self.agree, self.index, self.disputed)

    @property
    def split(self) -> str:
        """The votes in words: "1 on step 2 vs 1 on step 3"."""
        return " vs ".join(f"{len(v)} on step {t}" for t, v in sorted(self.votes.items()))


def agreement_text(reviewers: int, agree: int, index: int | None, disputed: bool) -> str:
    """An agreement in words, as the queue and the pair view show it."""
    if not reviewers:
        return "no reviews"
    if disputed or index is None:
        return f"disputed: {reviewers} reviewers, no majority"
    if reviewers == 1:
        return f"1 review: step {index}"
    return f"{agree} of {reviewers} agree on step {index}"


def claim_view(claim: PairClaimed | None) -> dict[str, str] | None:
    """Who holds a pair, as the API shows it (None: nobody)."""
    if claim is None:
        return None
    return {
        "reviewer_key": claim.reviewer_key,
        "reviewer": claim.reviewer,
        "since": claim.claimed_at,
        "by": claim.by,
    }


def agreement(standing: Mapping[str, ReviewAction]) -> Agreement:
    """The agreement of the reviewers' standing verdicts (``verdicts``)."""
    votes: dict[int, list[str]] = {}
    for action in standing.values():
        votes.setdefault(action.transition_index, []).append(action.reviewer)
    counts = sorted((len(v) for v in votes.values()), reverse=True)
    top = counts[0] if counts else 0
    index = None
    if counts and (len(counts) == 1 or counts[1] < top):
        index = next(t for t, v in votes.items() if len(v) == top)
    return Agreement(len(standing), {t: tuple(v) for t, v in votes.items()}, index, top)


def splice_refusal(review: PairReview, correction_id: str) -> str | None:
    """Why the splicer must not re-splice the pair from this correction (None: it follows it): the
    correction's t' must be the one most of the pair's reviewers now name (see the module docstring)."""
    action = next((a for a in review.live_actions if a.action_id == correction_id), None)
    if action is None:
        return "undone: the reviewer took this correction back before it was re-spliced"
    standing = agreement(verdicts(review))
    if standing.index == action.transition_index:
        return None
    disputed, outvoted = NOT_THE_MAJORITY
    if standing.index is None:
        return (
            f"{disputed} reviewers are split ({standing.split}); the sample stays as it was until a "
            "majority agrees"
        )
    return (
        f"{outvoted} {standing.agree} of {standing.reviewers} reviewers say t'={standing.index}; "
        "the sample stays as it was"
    )


@dataclass(frozen=True)
class AgreementFigures:
    """Agreement over the pairs with at least two reviews: ``compared`` such pairs, ``agreeing`` of them
    where every reviewer names the same t', ``percent``; Cohen's kappa when exactly two reviewers
    reviewed those pairs (``kappa_reviewers``; categories: each verdict's t' minus the critic's t')."""

    reviewed: int
    compared: int
    agreeing: int
    percent: float | None
    kappa: float | None
    kappa_reviewers: tuple[str, ...]


def agreement_figures(pairs: Iterable[tuple[int, Mapping[str, int]]]) -> AgreementFigures:
    """Figures over ``pairs``: for each reviewed pair, (the critic's t', reviewer -> their t')."""
    reviewed = compared = agreeing = 0
    overlapping: list[tuple[int, Mapping[str, int]]] = []
    for critic, by_reviewer in pairs:
        if not by_reviewer:
            continue
        reviewed += 1
        if len(by_reviewer) < 2:
            continue
        compared += 1
        agreeing += len(set(by_reviewer.values())) == 1
        overlapping.append((critic, by_reviewer))
    keys = sorted({k for _, by in overlapping for k in by})
    kappa = None
    if len(keys) == 2:
        first, second = keys
        kappa = cohen_kappa([(by[first] - c, by[second] - c) for c, by in overlapping])
    percent = round(100.0 * agreeing / compared, 1) if compared else None
    return AgreementFigures(
        reviewed, compared, agreeing, percent, kappa, tuple(keys) if len(keys) == 2 else ()
    )


def cohen_kappa(ratings: list[tuple[int, int]]) -> float | None:
    """Cohen's kappa of two raters' nominal ratings (None: no ratings, or chance agreement is 1)."""
    if not ratings:
        return None
    n = len(ratings)
    observed = sum(1 for a, b in ratings if a == b) / n
    first, second = Counter(a for a, _ in ratings), Counter(b for _, b in ratings)
    chance = sum(first[c] * second[c] for c in first) / (n * n)
    if math.isclose(chance, 1.0):
        return None
    return round((observed - chance) / (1.0 - chance), 4)
