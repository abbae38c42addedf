"""Owns "did training help?": the starting model and each iteration's model side by side on the
held-out evaluation, each rate with its Wilson interval from the counts behind it (pure).

An iteration's evaluation metrics (``IterationEvaluated.metrics``, ``core.domain.metrics.summarize``
per group) carry rates and the number of episodes; the counts are recovered from them: successes =
success_rate x episodes, episodes in a dead loop = dead_loop_rate x episodes, invalid actions =
invalid_action_rate x actions (actions = avg_steps x episodes). The starting model's figures are
iteration 0's ``metrics["start"]`` (evaluated before any training). Recovery is the share of the
starting model's failed held-out episodes, cut at seeded steps, that a model then completes; the
starting model has no recovery figure of its own set (its failures define it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from core.domain.stats import wilson_interval

PROGRESS_METRICS: tuple[tuple[str, str, bool], ...] = (
    ("success", "held-out success", True),
    ("recovery", "recovery", True),
    ("dead_loops", "dead loops", False),
    ("invalid_actions", "invalid actions", False),
)
"""(key, label, higher is better) of each figure, in the order the run page shows them."""


@dataclass(frozen=True)
class ProgressPoint:
    model: str  # "start" or "iteration N"
    iteration: int | None  # None: the starting model
    metric: str  # a key of PROGRESS_METRICS
    rate: float | None
    count: int  # successes, recovered prefixes, episodes in a dead loop or invalid actions
    n: int  # episodes, recovery prefixes or actions
    low: float | None  # the 95% Wilson interval of count / n
    high: float | None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _counted(rate: float | None, n: float | None) -> tuple[int, int]:
    """(count, n) from a rate over n units; (0, 0) when either is unknown."""
    if rate is None or n is None or n <= 0:
        return 0, 0
    total = round(n)
    return min(total, max(0, round(rate * total))), total


def _figures(summary: Mapping[str, Any]) -> dict[str, tuple[float | None, int, int]]:
    episodes = _number(summary.get("episodes"))
    steps = _number(summary.get("avg_steps"))
    actions = episodes * steps if episodes is not None and steps is not None else None
    out: dict[str, tuple[float | None, int, int]] = {}
    for key, rate_name, units in (
        ("success", "success_rate", episodes),
        ("dead_loops", "dead_loop_rate", episodes),
        ("invalid_actions", "invalid_action_rate", actions),
    ):
        rate = _number(summary.get(rate_name))
        out[key] = (rate, *_counted(rate, units))
    recovery = summary.get("recovery")
    if isinstance(recovery, Mapping):
        rate = _number(recovery.get("success_rate"))
        out["recovery"] = (rate, *_counted(rate, _number(recovery.get("episodes"))))
    else:
        out["recovery"] = (None, 0, 0)
    return out


def _points(model: str, iteration: int | None, summary: Mapping[str, Any]) -> list[ProgressPoint]:
    figures = _figures(summary)
    points = []
    for key, _label, _higher in PROGRESS_METRICS:
        rate, count, n = figures[key]
        interval = wilson_interval(count, n)
        points.append(ProgressPoint(model, iteration, key, rate, count, n, interval.low, interval.high))
    return points


def training_progress(evaluations: Iterable[tuple[int, Mapping[str, Any]]]) -> list[ProgressPoint]:
    """The starting model then each evaluated iteration's model, from ``(iteration, eval metrics)``
    in iteration order (iterations not evaluated are left out); empty when none is evaluated."""
    out: list[ProgressPoint] = []
    for iteration, metrics in evaluations:
        if not metrics:
            continue
        start = metrics.get("start")
        if iteration == 0 and isinstance(start, Mapping):
            points = _points("start", None, start)
            # the start's own failures define the recovery set: it has no recovery figure
            out += [p for p in points if p.metric != "recovery"]
        out += _points(f"iteration {iteration}", iteration, metrics)
    return out
