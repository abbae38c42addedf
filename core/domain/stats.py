"""Owns the statistics of method comparisons: bootstrap intervals and a paired test (pure, stdlib only).

The unit of a comparison is one (task, seed): a model's rate on that task's episodes of that run
seed. ``bootstrap_mean`` gives the mean over units with a percentile bootstrap interval (resampling
units with replacement, ``resamples`` times, seeded: the same numbers on every machine).
``paired_test`` compares two methods on the units both have (same task, same seed): the mean
difference ``a - b`` with its percentile bootstrap interval, and a two-sided sign-flip permutation
p-value (under the null the sign of each unit's difference is a coin flip; exact enumeration of all
2^n sign patterns when n <= ``EXACT_MAX_UNITS``, else ``resamples`` random patterns with the +1
correction, so p is never 0). A difference whose interval holds 0 (p above the level) is no
difference: callers must report it as none.

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
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

EXACT_MAX_UNITS = 16
DEFAULT_RESAMPLES = 10_000


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
        """The interval excludes 0 (at its level)."""
        d = self.difference
        return d.low is not None and d.high is not None and (d.low > 0 or d.high < 0)

    def to_data(self) -> dict[str, object]:
        return {
            "difference": self.difference.to_data(),
            "p_value": _round(self.p_value),
            "exact": self.exact,
            "significant": self.significant,
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
    a: Mapping[Hashable, float],
    b: Mapping[Hashable, float],
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


def wilson_interval(successes: int, n: int, z: float = 1.96) -> Interval:
    """The share ``successes / n`` with its Wilson score interval (module docstring); all None for
    ``n == 0``. ``level`` is 0.95 for the default ``z``."""
    if n < 0 or not 0 <= successes <= n:
        raise ValueError(f"wilson_interval: need 0 <= successes <= n, got {successes} of {n}")
    if n == 0:
        return Interval(None, None, None, 0)
    share = successes / n
    denominator = 1 + z * z / n
    centre = (share + z * z / (2 * n)) / denominator
    half = z * math.sqrt(share * (1 - share) / n + z * z / (4 * n * n)) / denominator
    return Interval(share, max(0.0, centre - half), min(1.0, centre + half), n)
