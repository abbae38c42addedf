"""Evaluation metrics (core.domain.metrics): dead loops, invalid actions, recovery cuts, aggregates."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.domain.metrics import EpisodeResult, dead_loop, recovery_cut, repeated_actions, summarize


def test_dead_loop_periods() -> None:
    assert dead_loop(["get 1 a", "inventory", "inventory", "inventory"]) == 1
    assert dead_loop(["x", "a", "b", "a", "b", "a", "b"]) == 2
    assert dead_loop(["a", "b", "c", "a", "b", "c", "a", "b", "c"]) == 3
    assert dead_loop(["a", "b", "a", "b"]) is None  # only two repeats
    assert dead_loop(["a", "a", "a", "b"]) is None  # the loop was left
    assert dead_loop([]) is None
    assert dead_loop(["a", "a"], min_repeats=2) == 1


@given(st.lists(st.sampled_from(["a", "b", "c"]), max_size=12), st.integers(1, 3), st.integers(3, 5))
def test_a_repeated_block_is_always_a_dead_loop(prefix: list[str], period: int, repeats: int) -> None:
    block = [f"act{i}" for i in range(period)]
    found = dead_loop(prefix + block * repeats)
    assert found is not None and period % found == 0


def test_repeated_actions_counts_later_repeats() -> None:
    assert repeated_actions(["a", "b", "a", "a", "c"]) == 2
    assert repeated_actions([]) == 0


def test_recovery_cut() -> None:
    assert recovery_cut(6, 2) == 3  # right after the first wrong action
    assert recovery_cut(6, None) == 3
    assert recovery_cut(4, 3) == 3  # at least one action is left to redo
    assert recovery_cut(2, None) == 1
    with pytest.raises(ValueError, match="at least 2 actions"):
        recovery_cut(1, 0)


def test_summarize_counts_only_the_models_actions() -> None:
    episodes = [
        EpisodeResult("1", ("get 1 a", "craft 1 b using 1 a"), (True, True), 1.0, True),
        EpisodeResult(
            "2", ("", "inventory", "inventory", "inventory"), (False, True, True, True), 0.0, False
        ),
        # recovery episode: the first two actions were replayed from a failed prefix
        EpisodeResult("3", ("get 9 z", "bad", "get 1 a"), (True, False, True), 0.0, False, prefix_steps=2),
    ]
    s = summarize(episodes)
    assert s["episodes"] == 3
    assert s["avg_reward"] == pytest.approx(1 / 3)
    assert s["success_rate"] == pytest.approx(1 / 3)
    assert s["avg_steps"] == pytest.approx((2 + 4 + 1) / 3)
    assert s["invalid_action_rate"] == pytest.approx(1 / 7)  # the prefix's invalid action is not counted
    assert s["dead_loop_rate"] == pytest.approx(1 / 3)
    assert s["repeated_action_rate"] == pytest.approx(2 / 7)


def test_summarize_empty_and_bad_input() -> None:
    assert summarize([])["episodes"] == 0
    assert summarize([])["success_rate"] is None
    with pytest.raises(ValueError, match="outside"):
        EpisodeResult("x", (), (), 1.5, True)
    with pytest.raises(ValueError, match="validity flags"):
        EpisodeResult("x", ("a",), (), 0.0, False)
