"""Critic metrics computed from stored events (SQLite and PostgreSQL): exact match with the oracle,
mean distance, fallback share and the Direct-Revision baseline on the same pairs, per iteration."""

from __future__ import annotations

import pytest

from core.domain.events import FirstErrorMarked, NewEvent, PairFound, StepVerdict
from core.domain.ids import new_id, pair_stream
from core.domain.trajectory import Step, Trajectory
from core.store.factory import open_store
from train_service.critic_metrics import critic_markdown, critic_metrics, load_critic_metrics


def _path(n: int) -> Trajectory:
    steps = tuple(Step(f"t{i}", f"get {i + 1} oak logs", f"Got {i + 1} oak logs") for i in range(n))
    return Trajectory(task="Goal: craft stick.", instruction="Craft.", steps=steps, reward=0.0)


def _judged(run_id: str, iteration: int, n_steps: int, t: int, oracle: int | None, fallback: bool):  # type: ignore[no-untyped-def]
    pair_id = new_id()
    pair = PairFound(
        pair_id, "search", "3", _path(n_steps), _path(n_steps), 1, run_id=run_id, iteration=iteration
    )
    label = "uncertain" if fallback else "bad"
    marked = FirstErrorMarked(
        pair_id, "model", t, (StepVerdict(t, label),), fallback=fallback, oracle_index=oracle
    )
    return pair, marked


def test_metrics_per_iteration() -> None:
    run = new_id()
    rows = [
        _judged(run, 0, 6, 1, 1, False),  # exact
        _judged(run, 0, 6, 5, 1, True),  # fallback, 4 off; the last action is not the oracle's
        _judged(run, 0, 6, 5, 5, True),  # fallback that happens to be right (direct is right too)
        _judged(run, 0, 6, 2, None, False),  # no oracle index: out of the match rates
        _judged(run, 1, 4, 2, 1, False),  # 1 off
    ]
    metrics = critic_metrics(rows)
    assert metrics[0] == {
        "pairs": 4,
        "fallback_share": 0.5,
        "oracle_pairs": 3,
        "exact_match": pytest.approx(2 / 3),
        "mean_abs_distance": pytest.approx(4 / 3),
        "direct_exact_match": pytest.approx(1 / 3),
        "first_step_match": pytest.approx(2 / 3),
        "strategies": ["model"],
    }
    assert metrics[1]["exact_match"] == 0.0 and metrics[1]["mean_abs_distance"] == 1.0
    assert metrics[1]["fallback_share"] == 0.0 and metrics[1]["direct_exact_match"] == 0.0
    table = critic_markdown(metrics)
    assert "| 0 | model | 4 | 0.500 | 3 | 0.667 | 1.33 | 0.333 | 0.667 |" in table
    with pytest.raises(ValueError, match="given with pair"):
        critic_metrics([(rows[0][0], rows[1][1])])


async def test_metrics_from_the_store(store_url: str) -> None:
    store = await open_store(store_url, create_tables=True)
    try:
        run, other = new_id(), new_id()
        rows = [
            _judged(run, 0, 5, 1, 1, False),
            _judged(run, 0, 5, 4, 2, True),
            _judged(other, 0, 5, 4, 4, True),
        ]
        for pair, marked in rows:
            await store.append(
                [NewEvent(pair_stream(pair.pair_id), pair), NewEvent(pair_stream(pair.pair_id), marked)]
            )
        pending = _judged(run, 0, 5, 1, 1, False)[0]  # found but not critiqued yet: left out
        await store.append([NewEvent(pair_stream(pending.pair_id), pending)])
        metrics = await load_critic_metrics(store, run)
        assert list(metrics) == [0]
        assert metrics[0]["pairs"] == 2 and metrics[0]["exact_match"] == 0.5
        assert metrics[0]["fallback_share"] == 0.5 and metrics[0]["mean_abs_distance"] == 1.0
        assert metrics[0]["direct_exact_match"] == 0.0
    finally:
        await store.close()
