"""core.domain.training_progress: the start model and each iteration side by side, counts recovered
from the evaluation's rates and episodes, Wilson intervals from those counts."""

from __future__ import annotations

from typing import Any

from core.domain.stats import wilson_interval
from core.domain.training_progress import training_progress

START: dict[str, Any] = {
    "episodes": 20, "success_rate": 0.25, "avg_steps": 10.0, "invalid_action_rate": 0.2,
    "dead_loop_rate": 0.3, "recovery": {"episodes": 0, "success_rate": None},
}  # fmt: skip


def evaluated(success: float, recovery: float, **extra: Any) -> dict[str, Any]:
    return {
        "episodes": 20, "success_rate": success, "avg_steps": 8.0, "invalid_action_rate": 0.125,
        "dead_loop_rate": 0.1, "recovery": {"episodes": 10, "success_rate": recovery}, **extra,
    }  # fmt: skip


def test_start_then_each_iteration_with_wilson_intervals_from_the_counts() -> None:
    points = training_progress([(0, evaluated(0.5, 0.4, start=START)), (1, evaluated(0.65, 0.6)), (2, {})])
    models = list(dict.fromkeys(p.model for p in points))
    assert models == ["start", "iteration 0", "iteration 1"]  # iteration 2 not evaluated: left out
    by = {(p.model, p.metric): p for p in points}
    assert ("start", "recovery") not in by  # its failures define the recovery set
    start = by[("start", "success")]
    assert (start.count, start.n, start.rate) == (5, 20, 0.25)
    expected = wilson_interval(5, 20)
    assert (start.low, start.high) == (expected.low, expected.high)
    assert start.low is not None and start.high is not None and start.low < 0.25 < start.high
    # invalid actions are over actions (avg_steps x episodes), dead loops over episodes
    invalid = by[("iteration 0", "invalid_actions")]
    assert (invalid.count, invalid.n) == (20, 160)
    loops = by[("start", "dead_loops")]
    assert (loops.count, loops.n) == (6, 20)
    recovered = by[("iteration 1", "recovery")]
    assert (recovered.count, recovered.n, recovered.rate) == (6, 10, 0.6)


def test_missing_figures_have_no_interval() -> None:
    (success, recovery, loops, invalid) = training_progress([(0, {"episodes": 0, "success_rate": None})])
    assert success.rate is None
    assert (success.count, success.n, success.low, success.high) == (0, 0, None, None)
    assert recovery.n == 0 and loops.n == 0 and invalid.n == 0
    assert training_progress([]) == []
