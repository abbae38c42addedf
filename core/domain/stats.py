"""Owns the statistics of method comparisons: bootstrap and Wilson intervals, paired tests at the
task and at the seed level, Holm's correction and the minimal detectable effect (pure, stdlib only).

The unit of a task-level comparison is one (task, seed): a model's rate on that task's episodes of
that run seed. ``bootstrap_mean`` gives the mean over units with a percentile bootstrap interval (resampling
units with replacement, ``resamples`` times, seeded: the same numbers on every machine).
``paired_test`` compares two methods on the units both have (same task, same seed): the mean
difference ``a - b`` with its percentile bootstrap interval, and a two-sided sign-flip permutation
p-value (under the null the sign of each unit's difference is a coin flip; exact enumeration of all
2^n sign patterns when n <= ``EXACT_MAX_UNITS``, else ``resamples`` random patterns with the +1
correction, so p is never 0). ``PairedTest.significant`` is decided by the p-value (p <= 1 - level),
never by the interval, so the two cannot be read as disagreeing; a caller that reads several tests
together decides on the Holm-adjusted p (below). A difference that is not significant is no
difference: callers must report it as none.

**Seed-level tests** (``seed_test``). The tasks of one seed share that seed's trained model, so
(task, seed) units are not independent: training randomness lives in the seed. ``seed_test``
pairs two methods by seed (each seed's mean over its tasks, e.g. ``bench/paper_table.seed_means``),
and its p-value is the EXACT two-sided sign-flip p over all 2^n sign assignments of the n per-seed
mean differences (``exact_sign_flip_p_value``: the distribution of the signed sums is counted, not
sampled). With n seeds the smallest attainable p is 2 / 2^n (0.25 with 3 seeds, 0.002 with 10).

**Seed-level intervals** (``sign_flip_interval``): the 95% interval of a mean per-seed difference
that agrees with the seed-level test: the shifts d for which the exact sign-flip test of the
differences minus d does NOT reject at 1 - level (the test inverted), found by bisection on each
side of the mean. It is unbounded (None) when the test cannot reject at all (2 / 2^n > 1 - level:
fewer than 6 seeds at 95%), and it excludes 0 exactly when the test's p <= 1 - level.

**Wilson intervals** (``wilson_interval``): the score interval of a binomial proportion k / n,
(p + z^2/2n +- z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n) with z the normal quantile of the level;
unlike the bootstrap it is not degenerate at 0 or n successes (0/10 gives [0, 0.278]).

**Minimal detectable effect** (``minimal_detectable_effect``): the smallest true mean difference a
paired test over n seeds detects with probability ``power`` at two-sided level ``alpha``, from the
standard deviation ``sd`` of the per-seed differences (observed, or a stated planning value):
MDE = (z_{1 - alpha/2} + z_{power}) * sd / sqrt(n) (the normal approximation; 2.80 * sd / sqrt(n) at
alpha 0.05 and 80% power). It is infinite when the exact sign-flip test cannot reach ``alpha`` at all
(2 / 2^n > alpha). Under Holm over m tests the first test is judged at alpha / m: pass that level
for the worst case.

``mcnemar_exact`` compares two classifiers on the SAME items by the items only one of them gets
right (the discordant ones): under the null each such item is a coin flip, so the two-sided p is
the exact binomial tail (McNemar's exact test); items both get right or wrong say nothing.

``holm_adjust`` corrects a family of p-values for being read together (Holm's step-down method, which
controls the family-wise error rate without assuming the tests are independent): a table that
compares one method with five others on four metrics runs twenty tests, and one of them below 0.05
is what chance alone gives about two times in three.

``wilson_interval`` is the 95% (z = 1.96) Wilson score interval of a share ``k / n`` of independent
items: unlike the normal approximation it stays inside [0, 1] and is not empty at 0 or 1.
"""

from __future__ import annotations

import itertools
import math
import random
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import TypeVar

EXACT_MAX_UNITS = 16
EXACT_SEED_MAX = 40  # the exact seed-level test counts signed sums; beyond this, refuse (not sample)
DEFAULT_RESAMPLES = 10_000
_Seed = TypeVar("_Seed", bound=Hashable)  # a unit key: a seed, or (task, seed)
_SUM_DIGITS = 9  # signed sums are counted at this many decimals (per-seed rates are on a coarse grid)


@dataclass(frozen=True)
class Interval:
    """A mean with its bootstrap interval over ``n`` units (all None when there are none)."""

    mean: float | None
    low: float | None
    high: float | None
    n: int
    level: float = 0.95

    def to_data(self) -> dict[str, float | int | None]:
        return {"mean": _round(self.mean), "low": _round(self.low), "high": _round(self.high), "n": self.n}


@dataclass(frozen=True)
class PairedTest:
    """``a - b`` over the paired units: mean difference, its interval and the sign-flip p-value."""

    difference: Interval
    p_value: float | None
    exact: bool  # every sign pattern enumerated (else a seeded Monte Carlo sample of them)

    @property
    def significant(self) -> bool:
        """The p-value is at most 1 - the interval's level (0.05 for a 95% interval); never decided
        by the interval (a test read in a family: decide on its Holm-adjusted p instead)."""
        return self.p_value is not None and self.p_value <= 1.0 - self.difference.level + 1e-12

    @property
    def interval_excludes_zero(self) -> bool:
        """The bootstrap interval excludes 0: a description of the data, not the test's decision."""
        d = self.difference
        return d.low is not None and d.high is not None and (d.low > 0 or d.high < 0)

    def to_data(self) -> dict[str, object]:
        return {
            "difference": self.difference.to_data(),
            "p_value": _round(self.p_value),
            "exact": self.exact,
            "significant": self.significant,
        }


@dataclass(frozen=True)
class SeedTest:
    """``a - b`` paired by seed: each seed's difference of means, their mean and sample SD, and the
    exact two-sided sign-flip p over all 2^n sign assignments (None without seeds)."""

    seeds: tuple[Hashable, ...]
    differences: tuple[float, ...]
    p_value: float | None

    @property
    def n(self) -> int:
        return len(self.differences)

    @property
    def mean(self) -> float | None:
        return sum(self.differences) / self.n if self.differences else None

    @property
    def sd(self) -> float | None:
        """The sample standard deviation (n - 1) of the per-seed differences (None below 2 seeds)."""
        if self.n < 2:
            return None
        mean = sum(self.differences) / self.n
        return math.sqrt(sum((d - mean) ** 2 for d in self.differences) / (self.n - 1))

    def significant(self, alpha: float = 0.05) -> bool:
        return self.p_value is not None and self.p_value <= alpha + 1e-12

    def to_data(self) -> dict[str, object]:
        return {
            "seeds": self.n,
            "mean_difference": _round(self.mean),
            "sd": _round(self.sd),
            "differences": [_round(d) for d in self.differences],
            "p_value": _round(self.p_value),
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _check(level: float, resamples: int) -> None:
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")


def _quantile(ordered: Sequence[float], q: float) -> float:
    """The ``q`` quantile of sorted values, linearly interpolated."""
    position = q * (len(ordered) - 1)
    below = math.floor(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (position - below)


def bootstrap_mean(
    values: Sequence[float], *, level: float = 0.95, resamples: int = DEFAULT_RESAMPLES, seed: int = 0
) -> Interval:
    """The mean of ``values`` and its percentile bootstrap interval (see the module docstring)."""
    _check(level, resamples)
    data = [float(v) for v in values]
    if any(math.isnan(v) for v in data):
        raise ValueError("bootstrap_mean: a value is NaN")
    n = len(data)
    if n == 0:
        return Interval(None, None, None, 0, level)
    mean = sum(data) / n
    if n == 1 or all(v == data[0] for v in data):
        return Interval(mean, mean, mean, n, level)
    rng = random.Random(f"bootstrap:{seed}")
    means = sorted(sum(rng.choices(data, k=n)) / n for _ in range(resamples))
    tail = (1.0 - level) / 2.0
    return Interval(mean, _quantile(means, tail), _quantile(means, 1.0 - tail), n, level)


def sign_flip_p_value(
    differences: Sequence[float], *, resamples: int = DEFAULT_RESAMPLES, seed: int = 0
) -> tuple[float | None, bool]:
    """Two-sided sign-flip permutation p-value of the mean of ``differences`` and whether it was
    exact (see the module docstring); None without differences."""
    diffs = [float(d) for d in differences]
    n = len(diffs)
    if n == 0:
        return None, True
    observed = abs(sum(diffs)) - 1e-12  # tolerance: a pattern as extreme as the data counts
    if n <= EXACT_MAX_UNITS:
        extreme = sum(
            abs(sum(d if keep else -d for d, keep in zip(diffs, signs, strict=True))) >= observed
            for signs in itertools.product((True, False), repeat=n)
        )
        return extreme / 2**n, True
    rng = random.Random(f"sign-flip:{seed}")
    extreme = sum(
        abs(sum(d if rng.random() < 0.5 else -d for d in diffs)) >= observed for _ in range(resamples)
    )
    return (extreme + 1) / (resamples + 1), False


def exact_sign_flip_p_value(differences: Sequence[float]) -> float | None:
    """The EXACT two-sided sign-flip p-value of the mean of ``differences``: the share of all 2^n
    sign assignments whose signed sum is at least as far from 0 as the observed one (None without
    differences). Counted, never sampled: the signed sums' distribution is built one difference at
    a time (distinct sums counted at ``_SUM_DIGITS`` decimals), so 10-40 seeds cost little;
    ValueError beyond ``EXACT_SEED_MAX``."""
    diffs = [float(d) for d in differences]
    if any(math.isnan(d) or math.isinf(d) for d in diffs):
        raise ValueError("exact_sign_flip_p_value: a difference is not a finite number")
    n = len(diffs)
    if n == 0:
        return None
    if n > EXACT_SEED_MAX:
        raise ValueError(
            f"exact_sign_flip_p_value: {n} differences; the exact test takes at most {EXACT_SEED_MAX}"
        )
    sums: Counter[float] = Counter({0.0: 1})
    for d in diffs:
        step: Counter[float] = Counter()
        for total, count in sums.items():
            step[round(total + d, _SUM_DIGITS)] += count
            step[round(total - d, _SUM_DIGITS)] += count
        sums = step
    observed = abs(sum(diffs)) - 1e-7  # tolerance: a pattern as extreme as the data counts
    extreme = sum(count for total, count in sums.items() if abs(total) >= observed)
    return min(1.0, extreme / 2**n)


def sign_flip_interval(differences: Sequence[float], *, level: float = 0.95) -> Interval:
    """The mean of ``differences`` and the interval of shifts the exact sign-flip test does not
    reject at ``1 - level`` (see the module docstring); bounds None when the test cannot reject."""
    _check(level, 1)
    diffs = [float(d) for d in differences]
    n = len(diffs)
    if n == 0:
        return Interval(None, None, None, 0, level)
    mean = sum(diffs) / n
    alpha = 1.0 - level

    def rejected(shift: float) -> bool:
        p = exact_sign_flip_p_value([d - shift for d in diffs])
        return p is not None and p <= alpha + 1e-12

    outside_low, outside_high = min(diffs) - 1.0, max(diffs) + 1.0  # every shifted difference one sign
    if not rejected(outside_low):  # 2 / 2^n > alpha: no shift is ever rejected
        return Interval(mean, None, None, n, level)

    def edge(out: float) -> float:
        inside = mean  # the shifted differences sum to 0 there: p = 1
        for _ in range(48):
            middle = (out + inside) / 2.0
            if rejected(middle):
                out = middle
            else:
                inside = middle
        return inside

    return Interval(mean, edge(outside_low), edge(outside_high), n, level)


def seed_test(a: Mapping[_Seed, float], b: Mapping[_Seed, float]) -> SeedTest:
    """``a`` against ``b`` paired by seed (keys: seeds; values: each seed's mean outcome), on the
    seeds both hold, with the exact sign-flip p (``exact_sign_flip_p_value``)."""
    seeds = tuple(sorted((k for k in a if k in b), key=repr))
    diffs = tuple(float(a[k]) - float(b[k]) for k in seeds)
    return SeedTest(seeds, diffs, exact_sign_flip_p_value(diffs))


def wilson_interval(successes: int, n: int, *, level: float = 0.95) -> Interval:
    """The Wilson score interval of the proportion ``successes`` / ``n`` (module docstring); the
    interval's ``n`` is the number of trials (all None without trials)."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if n < 0 or successes < 0 or successes > n:
        raise ValueError(f"wilson_interval: need 0 <= successes <= n, got {successes} of {n}")
    if n == 0:
        return Interval(None, None, None, 0, level)
    z = NormalDist().inv_cdf(1.0 - (1.0 - level) / 2.0)
    p = successes / n
    denominator = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1.0 - p) / n + z * z / (4 * n * n)) / denominator
    low = 0.0 if successes == 0 else max(0.0, centre - half)  # exact at the edges (no float residue)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return Interval(p, low, high, n, level)


def minimal_detectable_effect(sd: float, n: int, *, alpha: float = 0.05, power: float = 0.8) -> float:
    """The smallest true mean difference a paired test over ``n`` seeds detects with probability
    ``power`` at two-sided level ``alpha``: (z_{1-alpha/2} + z_{power}) * sd / sqrt(n), ``sd`` being
    the standard deviation of the per-seed differences (module docstring). ``math.inf`` when the
    exact sign-flip test over n seeds cannot reach ``alpha`` (2 / 2^n > alpha)."""
    if not 0.0 < alpha < 1.0 or not 0.0 < power < 1.0:
        raise ValueError(f"alpha and power must be in (0, 1), got {alpha}, {power}")
    if n < 1:
        raise ValueError(f"minimal_detectable_effect: n must be >= 1, got {n}")
    if math.isnan(sd) or sd < 0:
        raise ValueError(f"minimal_detectable_effect: sd must be >= 0, got {sd}")
    if 2.0 / 2**n > alpha:
        return math.inf
    normal = NormalDist()
    return (normal.inv_cdf(1.0 - alpha / 2.0) + normal.inv_cdf(power)) * sd / math.sqrt(n)


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar p-value: ``only_a`` items right by A alone, ``only_b`` by B alone
    (1.0 without discordant items)."""
    if only_a < 0 or only_b < 0:
        raise ValueError(f"discordant counts must be >= 0, got {only_a}, {only_b}")
    n = only_a + only_b
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(only_a, only_b) + 1)) / 2**n
    return min(1.0, 2 * tail)


def holm_adjust(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm-adjusted p-values, in the order given (None stays None and is not counted in the family).

    Sorted ascending, the k-th smallest of m is multiplied by (m - k + 1), capped at 1, and made
    non-decreasing along the sorted order; a test is rejected at level a when its adjusted p <= a."""
    for p in p_values:
        if p is not None and not 0.0 <= p <= 1.0:  # NaN fails the comparison too
            raise ValueError(f"p-values must lie in [0, 1], got {p!r}")
    present = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    m = len(present)
    adjusted: list[float | None] = [None] * len(p_values)
    running = 0.0
    for k, (p, i) in enumerate(present):
        running = max(running, min(1.0, (m - k) * p))
        adjusted[i] = running
    return adjusted


def paired_test(
    a: Mapping[_Seed, float],
    b: Mapping[_Seed, float],
    *,
    level: float = 0.95,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> PairedTest:
    """``a`` against ``b`` on the units (keys, e.g. (task, seed)) both hold; units only one holds are
    left out (the interval's ``n`` says how many were paired)."""
    _check(level, resamples)
    keys = sorted((k for k in a if k in b), key=repr)
    diffs = [float(a[k]) - float(b[k]) for k in keys]
    p_value, exact = sign_flip_p_value(diffs, resamples=resamples, seed=seed)
    return PairedTest(bootstrap_mean(diffs, level=level, resamples=resamples, seed=seed), p_value, exact)
