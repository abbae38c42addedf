"""core.domain.stats: the bootstrap interval of a mean, the paired sign-flip tests (task level and
exact seed level), Wilson intervals and the minimal detectable effect; hand-checkable values."""

from __future__ import annotations

import math

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
    # every paired difference is positive, so the bootstrap interval excludes 0, but the exact
    # p over 5 units is 2/32 = 0.0625: NOT significant. The decision is the p-value's, never the
    # interval's (issue #51: DPO's [0.050, 0.275] beside p = 0.06 read as two answers)
    assert test.interval_excludes_zero and not test.significant
    six = paired_test({k: 1.0 for k in "abcdef"}, {k: 0.0 for k in "abcdef"}, resamples=200)
    assert six.p_value == pytest.approx(2 / 64) and six.significant
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


def test_exact_seed_level_sign_flip_counts_all_two_to_the_n_assignments() -> None:
    from core.domain.stats import exact_sign_flip_p_value

    # the small cases agree with the enumerating task-level test
    assert exact_sign_flip_p_value([1.0, 1.0, 1.0]) == 0.25  # 3 seeds: p is never below 2/8
    assert exact_sign_flip_p_value([3.0, 1.0, -1.0]) == pytest.approx(6 / 8)
    # ten seeds all one way: only the all-plus and all-minus of 1024 assignments are as extreme
    assert exact_sign_flip_p_value([0.05] * 10) == pytest.approx(2 / 1024)
    # 10 seeds, nine +0.1 and one -0.1: sum 0.8; as extreme: at most one seed flipped to minus
    # (11 assignments) on either side -> 22 / 1024
    assert exact_sign_flip_p_value([0.1] * 9 + [-0.1]) == pytest.approx(22 / 1024)
    # exactness beyond the task-level test's enumeration limit (16): 20 seeds, no Monte Carlo
    assert exact_sign_flip_p_value([1.0] * 20) == pytest.approx(2 / 2**20)
    assert exact_sign_flip_p_value([0.0, 0.0]) == 1.0 and exact_sign_flip_p_value([]) is None
    with pytest.raises(ValueError, match="at most"):
        exact_sign_flip_p_value([1.0] * 41)
    with pytest.raises(ValueError, match="finite"):
        exact_sign_flip_p_value([float("nan")])


def test_seed_test_pairs_by_seed_with_mean_sd_and_exact_p() -> None:
    from core.domain.stats import seed_test

    ours = {0: 0.55, 1: 0.65, 2: 0.45, 9: 1.0}
    base = {0: 0.55, 1: 0.55, 2: 0.50}
    test = seed_test(ours, base)
    assert test.seeds == (0, 1, 2) and test.n == 3  # seed 9 has no partner
    assert test.differences == pytest.approx((0.0, 0.10, -0.05))
    assert test.mean == pytest.approx(0.05 / 3)
    # sample SD of (0, 0.1, -0.05): mean 1/60; squares 1/3600 + (5/60)^2 + (4/60)^2 = 42/3600; / 2
    assert test.sd == pytest.approx((21 / 3600) ** 0.5)
    # |sum| = 0.05; the 8 signed sums of (0, .1, .05): +-0.15 (x2 each), +-0.05 (x2 each) -> all 8
    assert test.p_value == 1.0 and not test.significant()
    data = test.to_data()
    assert data["seeds"] == 3 and data["p_value"] == 1.0
    assert seed_test({}, {}).p_value is None and seed_test({}, {}).sd is None


def test_wilson_interval_by_hand() -> None:
    from core.domain.stats import wilson_interval

    # 0 of 10: centre = (0 + z^2/20) / (1 + z^2/10), half the same: [0, 2 * 0.13876]
    zero = wilson_interval(0, 10)
    assert zero.mean == 0.0 and zero.low == 0.0 and zero.high == pytest.approx(0.2775, abs=1e-4)
    # 18 of 55 (docs/critic.md's iteration-1 row, computed by hand there): [0.22, 0.46]
    row = wilson_interval(18, 55)
    assert row.mean == pytest.approx(18 / 55)
    assert row.low is not None and row.high is not None
    assert (round(row.low, 2), round(row.high, 2)) == (0.22, 0.46)
    # 5 of 10: symmetric about 0.5, [0.2366, 0.7634]
    half = wilson_interval(5, 10)
    assert half.low == pytest.approx(0.2366, abs=1e-4) and half.high == pytest.approx(0.7634, abs=1e-4)
    assert wilson_interval(10, 10).high == 1.0 and wilson_interval(0, 0).mean is None
    with pytest.raises(ValueError, match="successes <= n"):
        wilson_interval(3, 2)


def test_minimal_detectable_effect_by_hand() -> None:
    from core.domain.stats import minimal_detectable_effect

    # (z_0.975 + z_0.8) = 1.95996 + 0.84162 = 2.80158
    assert minimal_detectable_effect(1.0, 10) == pytest.approx(2.80158 / 10**0.5, abs=1e-5)
    assert minimal_detectable_effect(0.08, 10) == pytest.approx(2.80158 * 0.08 / 10**0.5, abs=1e-5)
    # Holm's first step over 4 tests: alpha 0.0125 -> z_0.99375 = 2.49771; + 0.84162 = 3.33933
    assert minimal_detectable_effect(0.08, 10, alpha=0.0125) == pytest.approx(
        3.33933 * 0.08 / 10**0.5, abs=1e-5
    )
    # 3 seeds: the exact sign-flip p is never below 0.25, so no effect is detectable at 0.05
    assert minimal_detectable_effect(0.08, 3) == math.inf
    assert minimal_detectable_effect(0.0, 10) == 0.0
    with pytest.raises(ValueError, match="sd must be >= 0"):
        minimal_detectable_effect(-1.0, 10)


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


def test_sign_flip_interval_inverts_the_exact_seed_test() -> None:
    from core.domain.stats import exact_sign_flip_p_value, sign_flip_interval

    mixed = [0.05, -0.02, 0.03, 0.01, -0.04, 0.06, 0.02, -0.01, 0.04, 0.00]
    interval = sign_flip_interval(mixed)
    assert interval.n == 10 and interval.mean == pytest.approx(0.014)
    assert interval.low is not None and interval.high is not None
    assert interval.low < interval.mean < interval.high
    # the bounds are where the test turns: not rejected just inside, rejected just outside
    for bound, outward in ((interval.low, -1e-6), (interval.high, 1e-6)):
        inside = exact_sign_flip_p_value([d - bound for d in mixed])
        outside = exact_sign_flip_p_value([d - (bound + outward) for d in mixed])
        assert inside is not None and outside is not None and inside > 0.05 >= outside
    # 0 inside exactly when the test does not reject 0
    assert (interval.low < 0 < interval.high) == ((exact_sign_flip_p_value(mixed) or 1.0) > 0.05)
    one_sided = [0.02, 0.05, 0.01, 0.03, 0.04, 0.02, 0.06, 0.01, 0.03, 0.02]
    strict = sign_flip_interval(one_sided)
    assert strict.low is not None and strict.low > 0  # p = 2/1024: 0 is rejected
    # shifting every difference shifts the interval
    moved = sign_flip_interval([d + 0.5 for d in mixed])
    assert moved.low == pytest.approx(interval.low + 0.5, abs=1e-9)
    assert moved.high == pytest.approx(interval.high + 0.5, abs=1e-9)
    # with 5 seeds the exact test cannot reach 0.05 (2/32): the interval is unbounded, not invented
    few = sign_flip_interval(one_sided[:5])
    assert few.mean is not None and few.low is None and few.high is None
    assert sign_flip_interval([]).mean is None
