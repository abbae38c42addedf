"""The replay critic's pure search (core/domain/decisive_step.py): a binary search over prefix
lengths for the first prefix after which continuations stop succeeding, with named verdicts."""

from __future__ import annotations

import math
import random

import pytest

from core.domain.decisive_step import (
    DecisiveStepSearch,
    Probe,
    ReplaySearchError,
    find_decisive_step,
    unverifiable_verdict,
)


def step_function(decisive: int, m: int = 1, before: float = 1.0, after: float = 0.0):  # type: ignore[no-untyped-def]
    """V(k) = ``before`` for k <= decisive, ``after`` beyond: an expert's 0/1 values."""
    asked: list[int] = []

    def probe(k: int) -> Probe:
        asked.append(k)
        share = before if k <= decisive else after
        return Probe(k, round(share * m), m, m)

    return probe, asked


@pytest.mark.parametrize("length", [1, 2, 3, 7, 16, 33])
def test_every_decisive_step_is_found_in_logarithmic_probes(length: int) -> None:
    for decisive in range(length):
        probe, asked = step_function(decisive)
        verdict = find_decisive_step(probe, length, budget=64)
        assert (verdict.status, verdict.decisive_step) == ("decisive", decisive), (length, decisive)
        assert verdict.bracket == (decisive, decisive + 1) and verdict.confirmed
        assert asked[:2] == [0, length]  # V(start) first, then the whole path
        assert len(asked) <= math.ceil(math.log2(length)) + 2
        assert verdict.continuations == len(asked) == len(verdict.probes)
        assert verdict.value(decisive) == 1.0 and verdict.value(decisive + 1) == 0.0


def test_a_search_pair_starts_at_the_divergence() -> None:
    probe, asked = step_function(5)
    verdict = find_decisive_step(probe, 9, start=4)
    assert verdict.decisive_step == 5 and asked[0] == 4 and min(asked) == 4


def test_a_policy_that_cannot_solve_the_task_verifies_nothing() -> None:
    probe, asked = step_function(3, m=4, before=0.0)
    verdict = find_decisive_step(probe, 8, m=4, budget=40)
    assert verdict.status == "unverifiable" and verdict.decisive_step is None
    assert "0 of 4 continuations" in verdict.reason and asked == [0]
    named = unverifiable_verdict("tau2:retail cannot reset to task 'x'")
    assert named.status == "unverifiable" and named.reason.startswith("unverifiable: tau2:retail")


def test_a_path_cut_off_while_it_could_still_succeed_has_no_decisive_step() -> None:
    probe, _ = step_function(10)  # success never lost within 6 steps
    verdict = find_decisive_step(probe, 6)
    assert verdict.status == "no_decisive_step" and verdict.decisive_step is None
    assert "prefix 6" in verdict.reason


def test_the_budget_is_in_continuations_and_an_open_bracket_is_not_a_guess() -> None:
    probe, asked = step_function(11, m=2)
    verdict = find_decisive_step(probe, 32, m=2, budget=6)  # start, end, one bisection
    assert verdict.status == "budget_exhausted" and verdict.decisive_step is None
    assert verdict.continuations == 6 and len(asked) == 3
    assert verdict.bracket == (0, 16) and "[0, 16]" in verdict.reason
    # a probe whose replay already ended the episode costs no continuation
    free = find_decisive_step(lambda k: Probe(k, int(k <= 2), 1, 0 if k == 8 else 1), 8, budget=4)
    assert free.status == "decisive" and free.decisive_step == 2
    assert (free.continuations, len(free.probes)) == (4, 5)


def test_noisy_estimates_are_confirmed_and_a_wrong_boundary_is_searched_again() -> None:
    """V is 0.75 through prefix 4 and 0 after; the first look at prefix 4 is unlucky (0 of 4), so the
    search closes on [3, 4]; the confirmation re-probes 3 and 4, prefix 4's pooled count (4 of 8) is
    above the threshold again, and the search goes on to the true boundary [4, 5]."""
    draws = {4: [0, 4]}  # prefix 4's two looks: 0 of 4, then 4 of 4

    def probe(k: int) -> Probe:
        if k in draws and draws[k]:
            return Probe(k, draws[k].pop(0), 4, 4)
        return Probe(k, 3 if k <= 4 else 0, 4, 4)

    verdict = find_decisive_step(probe, 8, m=4, budget=64, confirm=True)
    assert (verdict.status, verdict.decisive_step, verdict.confirmed) == ("decisive", 4, True)
    assert verdict.value(4) == 7 / 12  # pooled over its three looks: 0 + 4 + 3 of 12
    seen = [p.prefix for p in verdict.probes]
    assert seen.count(4) >= 2 and seen.count(5) >= 2  # the final boundary was looked at twice


def test_a_sampled_policy_finds_the_step_on_average() -> None:
    rng = random.Random(0)
    right = 0
    for _trial in range(50):
        decisive = rng.randrange(12)

        def probe(k: int, decisive: int = decisive) -> Probe:
            p = 0.7 if k <= decisive else 0.05
            return Probe(k, sum(rng.random() < p for _ in range(8)), 8, 8)

        verdict = find_decisive_step(probe, 12, m=8, budget=96, confirm=True)
        right += verdict.decisive_step == decisive
    assert right >= 45


def test_bad_settings_and_answers_are_named() -> None:
    with pytest.raises(ReplaySearchError, match="at least one step"):
        DecisiveStepSearch(0)
    with pytest.raises(ReplaySearchError, match="start must be"):
        DecisiveStepSearch(3, start=3)
    with pytest.raises(ReplaySearchError, match="cannot pay one probe"):
        DecisiveStepSearch(3, m=4, budget=3)
    with pytest.raises(ReplaySearchError, match="theta"):
        DecisiveStepSearch(3, theta=0.0)
    with pytest.raises(ReplaySearchError, match="successes"):
        Probe(1, 3, 2, 2)
    search = DecisiveStepSearch(5)
    with pytest.raises(ReplaySearchError, match="no probe was asked"):
        search.record(Probe(0, 1, 1, 1))
    assert search.next_prefix() == 0
    with pytest.raises(ReplaySearchError, match="asked for prefix 0"):
        search.record(Probe(2, 1, 1, 1))
    with pytest.raises(ReplaySearchError, match="not over"):
        search.verdict()
