"""core.domain.reviewers: claims, each reviewer's standing verdict, agreement, the majority the splicer
follows, undo and the agreement figures (pure)."""

from __future__ import annotations

import pytest

from core.domain import events as ev
from core.domain.review import HUMAN_CORRECTED, fold_pair
from core.domain.reviewers import (
    ReviewConflict,
    Reviewer,
    ReviewForbidden,
    agreement,
    agreement_figures,
    check_assign,
    check_claim,
    check_release,
    check_undo,
    cohen_kappa,
    splice_refusal,
    undo_plan,
    verdicts,
)
from tests.unit.test_review_domain import MARKED, PAIR, sample

ANN = Reviewer("k-ann", "agr_ann (Ann)")
BOB = Reviewer("k-bob", "agr_bob (Bob)")
CY = Reviewer("k-cy", "agr_cy (Cy)")
ADMIN = Reviewer("k-admin", "agr_adm", admin=True)
AT = "2026-01-01T00:00:00+00:00"
SPLICED = ev.RevisionMaterialized("s", "p", None, 0, sample(3, "oops"), "r01", 3)


def corrected(cid: str, who: Reviewer, new: int, old: int = 3) -> ev.FirstErrorCorrected:
    return ev.FirstErrorCorrected("p", cid, who.name, AT, old, new, "r", None, reviewer_key=who.key_id)


def accepted(aid: str, who: Reviewer, t: int) -> ev.FirstErrorAccepted:
    return ev.FirstErrorAccepted("p", aid, who.name, AT, t, reviewer_key=who.key_id)


def respliced(cid: str, t: int) -> ev.SampleRespliced:
    return ev.SampleRespliced("s", "p", cid, None, 0, sample(t, f"r{t}", origin=HUMAN_CORRECTED), "human", t)


def claimed(who: Reviewer, by: Reviewer | None = None) -> ev.PairClaimed:
    by = by or who
    return ev.PairClaimed("p", who.key_id, who.name, AT, by.key_id, by.name)


def undone(uid: str, who: Reviewer, target: str, kind: str = "correction") -> ev.ReviewUndone:
    return ev.ReviewUndone("p", uid, who.key_id, who.name, AT, target, kind)


def test_a_claim_holds_the_pair_until_released_or_assigned() -> None:
    review = fold_pair([PAIR, MARKED])
    assert check_claim(review, ANN) is True
    held = fold_pair([PAIR, MARKED, claimed(ANN)])
    assert check_claim(held, ANN) is False  # already hers: nothing to write
    with pytest.raises(ReviewConflict, match=r"claimed by agr_ann \(Ann\)"):
        check_claim(held, BOB)
    with pytest.raises(ReviewForbidden, match="only an admin key or its holder"):
        check_assign(held, BOB, BOB)
    with pytest.raises(ReviewForbidden, match="nobody holds it"):
        check_assign(review, BOB, ANN)
    assert check_assign(held, ANN, BOB) is True and check_assign(held, ADMIN, BOB) is True
    assert check_assign(held, ADMIN, ANN) is False
    with pytest.raises(ReviewForbidden):
        check_release(held, BOB)
    assert check_release(held, ADMIN).reviewer_key == ANN.key_id
    released = ev.PairReleased("p", ANN.key_id, ANN.name, AT, ANN.key_id, ANN.name)
    assert fold_pair([PAIR, MARKED, claimed(ANN), released]).claim is None
    with pytest.raises(ReviewConflict, match="not claimed"):
        check_release(review, ANN)
    assigned = fold_pair([PAIR, MARKED, claimed(ANN), claimed(BOB, by=ANN)])
    assert assigned.claim is not None and assigned.claim.reviewer_key == BOB.key_id


def test_each_reviewer_keeps_a_verdict_and_agreement_counts_them() -> None:
    stream = [PAIR, MARKED, SPLICED, corrected("c1", ANN, 2), respliced("c1", 2), accepted("a1", BOB, 2)]
    review = fold_pair(stream)
    standing = verdicts(review)
    assert {k: a.transition_index for k, a in standing.items()} == {ANN.key_id: 2, BOB.key_id: 2}
    agreed = agreement(standing)
    assert (agreed.index, agreed.agree, agreed.reviewers, agreed.disputed) == (2, 2, 2, False)
    assert agreed.summary == "2 of 2 agree on step 2"
    # Cy corrects to 1: two reviewers still name step 2, so Cy is outvoted
    three = fold_pair([*stream, corrected("c2", CY, 1, old=2)])
    assert agreement(verdicts(three)).summary == "2 of 3 agree on step 2"
    assert splice_refusal(three, "c2") is not None and "outvoted: 2 of 3" in str(splice_refusal(three, "c2"))
    # a reviewer's later verdict replaces their earlier one
    changed = fold_pair([*stream, accepted("a2", ANN, 3)])
    assert {k: a.transition_index for k, a in verdicts(changed).items()} == {BOB.key_id: 2, ANN.key_id: 3}
    assert agreement(verdicts(changed)).disputed


def test_the_splicer_follows_the_majority_and_waits_when_tied() -> None:
    lone = fold_pair([PAIR, MARKED, SPLICED, corrected("c1", ANN, 2)])
    assert splice_refusal(lone, "c1") is None  # a lone reviewer is the majority
    tied = fold_pair(
        [PAIR, MARKED, SPLICED, corrected("c1", ANN, 2), respliced("c1", 2), corrected("c2", BOB, 1, old=2)]
    )
    reason = splice_refusal(tied, "c2")
    assert reason is not None and reason.startswith("disputed:") and "1 on step 1 vs 1 on step 2" in reason
    assert agreement(verdicts(tied)).summary == "disputed: 2 reviewers, no majority"
    # Cy sides with Bob: 2 of 3 on step 1, so Cy's correction is re-spliced
    stream = [
        PAIR,
        MARKED,
        SPLICED,
        corrected("c1", ANN, 2),
        respliced("c1", 2),
        corrected("c2", BOB, 1, old=2),
    ]
    joined = fold_pair(
        [*stream, ev.CorrectionRejected("p", "c2", str(reason)), corrected("c3", CY, 1, old=2)]
    )
    assert splice_refusal(joined, "c3") is None
    # the exports' first error follows the sample: a correction the majority did not follow moves nothing
    held = fold_pair([*stream, ev.CorrectionRejected("p", "c2", str(reason))])
    assert held.first_error is not None and held.first_error.transition_index == 2
    assert agreement(verdicts(joined)).summary == "2 of 3 agree on step 1"


def test_undo_takes_back_my_last_verdict_and_restores_the_earlier_sample() -> None:
    base = [PAIR, MARKED, SPLICED, corrected("c1", ANN, 2), respliced("c1", 2)]
    review = fold_pair(base)
    assert review.transition_index == 2 and review.sample_origin == HUMAN_CORRECTED
    with pytest.raises(ReviewConflict, match="nothing to undo"):
        check_undo(review, BOB)
    target = check_undo(review, ANN)
    assert (target.action_id, target.kind) == ("c1", "correction")
    undo = undone("u1", ANN, "c1")
    after_undo = fold_pair([*base, undo])
    plan = undo_plan(after_undo, undo)
    assert plan is not None and plan[0] == "restore" and plan[1].cause_id == "" and plan[1].origin == "splice"
    restored = ev.SampleRespliced("s", "p", "u1", None, 0, plan[1].sample, plan[1].template_id, 3)
    back = fold_pair([*base, undo, restored])
    assert (back.transition_index, back.reflection, back.sample_origin) == (3, "oops", "splice")
    assert back.first_error == MARKED  # the exports' label is the critic's again
    assert verdicts(back) == {} and not back.live_actions and back.corrections[0].undone
    with pytest.raises(ReviewConflict, match="nothing to undo"):
        check_undo(back, ANN)
    # a pending correction cannot be undone yet; an acceptance needs no re-splice
    with pytest.raises(ReviewConflict, match="still being re-spliced"):
        check_undo(fold_pair([PAIR, MARKED, SPLICED, corrected("c9", ANN, 1)]), ANN)
    acc = fold_pair([PAIR, MARKED, SPLICED, accepted("a1", BOB, 3)])
    assert undo_plan(acc, undone("u2", BOB, "a1", "acceptance")) is None


def test_undo_of_the_only_sample_withdraws_it_and_a_replaced_sample_is_forgotten() -> None:
    rejected = ev.RevisionRejected("p", None, 0, "unverified")
    base = [PAIR, MARKED, rejected, corrected("c1", ANN, 2), respliced("c1", 2)]
    undo = undone("u1", ANN, "c1")
    plan = undo_plan(fold_pair([*base, undo]), undo)
    assert plan is not None and plan[0] == "withdraw" and plan[1].cause_id == "c1"
    gone = fold_pair([*base, undo, ev.SampleWithdrawn("p", "s", "u1", "undone")])
    assert gone.sample is None and gone.transition_index == 3
    # Ann's sample was replaced by Bob's: undoing hers re-splices nothing, and undoing Bob's later
    # restores the splicer's sample, never Ann's
    both = [PAIR, MARKED, SPLICED, corrected("c1", ANN, 2), respliced("c1", 2)]
    both += [corrected("c2", BOB, 1, old=2), respliced("c2", 1)]
    ann_undo = undone("u1", ANN, "c1")
    assert undo_plan(fold_pair([*both, ann_undo]), ann_undo) is None
    bob_undo = undone("u2", BOB, "c2")
    plan = undo_plan(fold_pair([*both, ann_undo, bob_undo]), bob_undo)
    assert plan is not None and plan == ("restore", fold_pair([PAIR, MARKED, SPLICED]).samples[0])


def test_agreement_figures_and_kappa() -> None:
    assert cohen_kappa([]) is None
    assert cohen_kappa([(0, 0), (1, 1), (0, 0), (1, 1)]) == 1.0
    assert cohen_kappa([(0, 0), (0, 0)]) is None  # chance agreement 1: undefined
    # observed 3/4; chance (2*3 + 2*1)/16 = 0.5 -> kappa 0.5
    assert cohen_kappa([(0, 0), (0, 0), (1, 1), (1, 0)]) == 0.5
    figures = agreement_figures(
        [
            (3, {"ann": 3, "bob": 3}),
            (2, {"ann": 1, "bob": 2}),
            (4, {"ann": 4}),  # one review: not compared
            (1, {}),
        ]
    )
    assert (figures.reviewed, figures.compared, figures.agreeing, figures.percent) == (3, 2, 1, 50.0)
    assert figures.kappa_reviewers == ("ann", "bob") and figures.kappa is not None
    three = agreement_figures([(3, {"ann": 3, "bob": 3}), (2, {"bob": 2, "cy": 2})])
    assert three.percent == 100.0 and three.kappa is None and three.kappa_reviewers == ()
