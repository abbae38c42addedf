"""core.domain.review: a pair's stream folded into its review state, and corrections checked (pure)."""

from __future__ import annotations

import pytest

from core.domain import events as ev
from core.domain.review import HUMAN_CORRECTED, CorrectionError, check_correction, fold_pair
from core.domain.trajectory import Message, Step, TrainingSample, Trajectory


def path(actions: list[str], reward: float) -> Trajectory:
    return Trajectory("task", "inst", tuple(Step("", a, f"obs {a}") for a in actions), reward)


PAIR = ev.PairFound("p", "search", "k", path(["a", "b", "c", "d"], 0.0), path(["a", "x", "y"], 1.0), 1)
MARKED = ev.FirstErrorMarked("p", "model", 3, (), fallback=True)


def sample(t: int, reflection: str, **extra: object) -> TrainingSample:
    provenance = {"transition_index": t, "reflection": reflection, **extra}
    return TrainingSample("s", "revision", (Message("user", "task"),), 1.0, provenance)


def correction(cid: str, new: int, reflection: str | None = None) -> ev.FirstErrorCorrected:
    return ev.FirstErrorCorrected("p", cid, "agr_x", "2026-01-01T00:00:00+00:00", 3, new, "r", reflection)


def test_fold_follows_splice_then_corrections() -> None:
    materialized = ev.RevisionMaterialized("s", "p", None, 0, sample(3, "oops"), "r01", 3)
    review = fold_pair([PAIR, MARKED, materialized])
    assert (review.transition_index, review.reflection, review.sample_origin) == (3, "oops", "splice")
    first = correction("c1", 1, "better")
    review = fold_pair([PAIR, MARKED, materialized, first])
    assert review.pending is not None and review.pending.event.correction_id == "c1"
    done = ev.SampleRespliced(
        "s", "p", "c1", None, 0, sample(1, "better", origin=HUMAN_CORRECTED), "human", 1
    )
    second = correction("c2", 2)
    rejected = ev.CorrectionRejected(
        "p", "c2", "unverified: replay reward 0.000 is below the good reward 1.000"
    )
    review = fold_pair([PAIR, MARKED, materialized, first, done, second, rejected])
    assert [(c.event.correction_id, c.status) for c in review.corrections] == [
        ("c1", "respliced"),
        ("c2", "rejected"),
    ]
    assert review.corrections[1].reason.startswith("unverified")
    assert (review.transition_index, review.reflection, review.sample_origin) == (
        1,
        "better",
        HUMAN_CORRECTED,
    )
    assert review.pending is None


def test_first_error_follows_the_latest_correction_whatever_its_outcome() -> None:
    assert fold_pair([PAIR]).first_error is None
    assert fold_pair([PAIR, MARKED]).first_error == MARKED
    materialized = ev.RevisionMaterialized("s", "p", None, 0, sample(3, "oops"), "r01", 3)
    rejected = ev.CorrectionRejected("p", "c2", "unverified")
    review = fold_pair([PAIR, MARKED, materialized, correction("c1", 1), correction("c2", 2), rejected])
    assert review.first_error is not None
    assert (review.first_error.transition_index, review.first_error.fallback) == (2, False)
    assert review.marked == MARKED  # the critic's own verdict stays as it was


def test_check_correction_bounds_and_changes() -> None:
    materialized = ev.RevisionMaterialized("s", "p", None, 0, sample(3, "oops"), "r01", 3)
    review = fold_pair([PAIR, MARKED, materialized])
    assert check_correction(review, 1, None) == (1, None)
    assert check_correction(review, None, "  a   new\nsentence ") == (3, "a new sentence")
    for index, field in ((0, "transition_index"), (4, "transition_index")):
        with pytest.raises(CorrectionError) as caught:
            check_correction(review, index, None)
        assert caught.value.field_name == field and "choose 1..3" in caught.value.problem
    with pytest.raises(CorrectionError, match="nothing changes"):
        check_correction(review, 3, "oops")
    with pytest.raises(CorrectionError, match="is empty"):
        check_correction(review, None, " \n ")
    with pytest.raises(CorrectionError, match="not judged"):
        check_correction(fold_pair([PAIR]), 1, None)
    with pytest.raises(CorrectionError, match="still being re-spliced"):
        check_correction(fold_pair([PAIR, MARKED, materialized, correction("c1", 1)]), 2, None)
    # a pair the splicer rejected (no sample yet) may be corrected at the critic's own t'
    rejected = fold_pair([PAIR, MARKED, ev.RevisionRejected("p", None, 0, "unverified: x")])
    assert check_correction(rejected, None, None) == (3, None)


def test_review_signals_and_reasons() -> None:
    from core.domain.review import ReviewSignals, review_reasons, review_signals, verdict_margin

    verdicts = (
        ev.StepVerdict(1, "good", {"good": -0.1, "bad": -2.0, "uncertain": -3.0}),
        ev.StepVerdict(2, "uncertain", {"good": -1.0, "bad": -1.2, "uncertain": -0.9}),
        ev.StepVerdict(3, "bad", {}),  # a rule or text verdict: no scores, no margin
    )
    signals = review_signals(ev.FirstErrorMarked("p", "model", 3, verdicts, oracle_index=2))
    assert (signals.critic_index, signals.oracle_index, signals.fallback, signals.uncertain) == (
        3,
        2,
        False,
        1,
    )
    assert signals.margin is not None and abs(signals.margin - 0.1) < 1e-9
    assert review_reasons(signals) == ["disagree", "uncertain", "low_margin"]
    assert review_reasons(signals, max_margin=0.05) == ["disagree", "uncertain"]
    assert review_reasons(ReviewSignals(2, 2, False, 0, None)) == []
    assert review_reasons(ReviewSignals(2, None, True, 0, 3.0)) == ["fallback"]
    assert verdict_margin({"good": float("nan"), "bad": -1.0}) is None
    assert verdict_margin({"good": -1.0}) is None
