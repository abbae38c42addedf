"""core.domain.stats: the bootstrap interval of a mean and the paired sign-flip test."""

from __future__ import annotations

import pytest

from core.domain.stats import bootstrap_mean, holm_adjust, paired_test, sign_flip_p_value


def test_bootstrap_mean_interval_is_seeded_and_brackets_the_mean() -> None:
    values = [0.0, 0.0, 0.5, 1.0, 1.0, 0.5, 0.0, 1.0]
    first = bootstrap_mean(values, resamples=2000, seed=3)
    assert first == bootstrap_mean(values, resamples=2000, seed=3)  # the same numbers every time
    assert first.mean == pytest.approx(0.5) and first.n == 8
    assert first.low is not None and first.high is not None
    assert 0.0 <= first.low < 0.5 < first.high <= 1.0
    # a wider level gives a wider interval; more data of the same spread a narrower one
    wide = bootstrap_mean(values, level=0.99, resamples=2000, seed=3)
    assert (
        wide.low is not None and wide.high is not None and wide.low <= first.low and wide.high >= first.high
    )
    narrow = bootstrap_mean(values * 8, resamples=2000, seed=3)
    assert narrow.low is not None and narrow.high is not None
    assert narrow.high - narrow.low < first.high - first.low
    # degenerate inputs: no units, one unit, all equal
    assert bootstrap_mean([]).mean is None and bootstrap_mean([]).n == 0
    assert bootstrap_mean([0.25]).to_data() == {"mean": 0.25, "low": 0.25, "high": 0.25, "n": 1}
    assert bootstrap_mean([1.0, 1.0, 1.0]).low == 1.0
    with pytest.raises(ValueError, match="level"):
        bootstrap_mean(values, level=1.0)
    with pytest.raises(ValueError, match="NaN"):
        bootstrap_mean([float("nan")])


def test_sign_flip_p_value_exact_by_enumeration() -> None:
    # all n differences positive: only the all-plus and all-minus patterns are as extreme
    assert sign_flip_p_value([1.0, 1.0, 1.0]) == (0.25, True)
    assert sign_flip_p_value([1.0] * 5) == (2 / 32, True)
    assert sign_flip_p_value([0.0, 0.0]) == (1.0, True)  # no difference at all
    # 3, 1, -1 -> |3| among the 8 patterns: +3+1-1, +3+1+1(5), +3-1-1(1), +3-1+1(3) and their mirrors
    p, exact = sign_flip_p_value([3.0, 1.0, -1.0])
    assert exact and p == pytest.approx(6 / 8)
    assert sign_flip_p_value([]) == (None, True)


def test_sign_flip_monte_carlo_beyond_the_exact_limit() -> None:
    p, exact = sign_flip_p_value([1.0] * 20, resamples=999, seed=1)
    assert not exact and p == pytest.approx(1 / 1000)  # none of 999 random patterns is as extreme (+1)
    mixed, _ = sign_flip_p_value([1.0, -1.0] * 10, resamples=999, seed=1)
    assert mixed == 1.0


def test_paired_test_pairs_units_by_key() -> None:
    ours = {("t1", 0): 1.0, ("t1", 1): 1.0, ("t2", 0): 0.5, ("t2", 1): 1.0, ("t3", 0): 1.0, ("t9", 0): 0.0}
    base = {("t1", 0): 0.0, ("t1", 1): 0.5, ("t2", 0): 0.0, ("t2", 1): 0.5, ("t3", 0): 0.5}
    test = paired_test(ours, base, resamples=2000)
    assert test.difference.n == 5  # ("t9", 0) has no partner
    assert test.difference.mean == pytest.approx((1 + 0.5 + 0.5 + 0.5 + 0.5) / 5)
    assert test.exact and test.p_value == pytest.approx(2 / 32)
    assert test.significant  # every paired difference is positive: the interval excludes 0
    null = paired_test({"a": 1.0, "b": 0.0}, {"a": 0.0, "b": 1.0}, resamples=2000)
    assert null.difference.mean == 0.0 and null.p_value == 1.0 and not null.significant
    data = null.to_data()
    assert data["p_value"] == 1.0 and data["significant"] is False


def test_mcnemar_exact_is_the_binomial_tail_of_the_discordant_items() -> None:
    from core.domain.stats import mcnemar_exact

    assert mcnemar_exact(0, 0) == 1.0  # nothing discordant: no evidence either way
    assert mcnemar_exact(1, 0) == 1.0  # one item: 2 * 1/2
    assert mcnemar_exact(5, 0) == pytest.approx(2 / 32)  # 2 * (1/2)^5
    assert mcnemar_exact(0, 5) == mcnemar_exact(5, 0)  # two-sided, symmetric
    assert mcnemar_exact(5, 11) == pytest.approx(
        2 * (1 + 16 + 120 + 560 + 1820 + 4368) / 2**16
    )  # C(16, 0..5)
    assert mcnemar_exact(3, 3) == 1.0  # capped at 1
    with pytest.raises(ValueError, match=">= 0"):
        mcnemar_exact(-1, 2)


def test_holm_adjust_step_down_in_the_given_order() -> None:
    # m = 4: sorted 0.01, 0.02, 0.03, 0.5 -> 0.04, 0.06, 0.06 (kept non-decreasing), 0.5
    adjusted = holm_adjust([0.03, 0.5, 0.01, 0.02])
    assert adjusted == pytest.approx([0.06, 0.5, 0.04, 0.06])
    # None is no test: it stays None and does not enlarge the family (m = 2 here)
    assert holm_adjust([None, 0.02, 0.04]) == pytest.approx([None, 0.04, 0.04])
    # capped at 1; one test is its own family
    assert holm_adjust([0.6, 0.7]) == [1.0, 1.0]
    assert holm_adjust([0.03]) == [0.03]
    assert holm_adjust([]) == []
    # never below the raw p-value, and a family of independent nulls rarely survives
    raw = [0.049, 0.2, 0.9, 0.5, 0.3]
    assert all(a is not None and a >= p for a, p in zip(holm_adjust(raw), raw, strict=True))
    with pytest.raises(ValueError, match="lie in"):
        holm_adjust([0.1, 1.5])
    with pytest.raises(ValueError, match="lie in"):
        holm_adjust([float("nan")])


def test_wilson_interval_stays_inside_zero_and_one() -> None:
    from core.domain.stats import wilson_interval

    interval = wilson_interval(86, 93)  # docs/critic.md: first-after-divergence at iteration 0
    assert (round(interval.low or 0, 2), round(interval.high or 0, 2)) == (0.85, 0.96)
    assert interval.mean == pytest.approx(86 / 93) and interval.n == 93
    none, all_ = wilson_interval(0, 10), wilson_interval(10, 10)
    assert none.low == 0.0 and 0.2 < (none.high or 0) < 0.3
    assert all_.high == 1.0 and 0.7 < (all_.low or 0) < 0.8
    assert wilson_interval(0, 0).mean is None
    with pytest.raises(ValueError, match="successes <= n"):
        wilson_interval(3, 2)
