"""Critic metrics computed from stored events (SQLite and PostgreSQL): exact match with the oracle,
mean distance, fallback share and the Direct-Revision baseline on the same pairs, per iteration."""

from __future__ import annotations

import pytest

from core.domain.events import FirstErrorMarked, NewEvent, PairFound, StepVerdict
from core.domain.ids import new_id, pair_stream
from core.domain.trajectory import Step, Trajectory
from core.store.factory import open_store
from train_service.critic_metrics import (
    BASELINE_CRITICS,
    critic_markdown,
    critic_metrics,
    load_critic_metrics,
)


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
    # pair by pair on the 3 oracle pairs (divergence after step 0, last action 5): against first, the
    # critic alone is right where the oracle is 5, first alone where the critic fell back but the
    # oracle is 1; against direct and rules (the last action), the critic alone where both are 1
    versus = {
        "model": {"critic_only": 0, "baseline_only": 0, "p": 1.0},  # the critic IS the model strategy
        "rules": {"critic_only": 1, "baseline_only": 0, "p": 1.0},  # rules = the last action here
        "direct": {"critic_only": 1, "baseline_only": 0, "p": 1.0},
        "first": {"critic_only": 1, "baseline_only": 1, "p": 1.0},
    }
    assert metrics[0] == {
        "pairs": 4,
        "fallback_share": 0.5,
        "oracle_pairs": 3,
        "exact_match": pytest.approx(2 / 3),
        "mean_abs_distance": pytest.approx(4 / 3),
        "direct_exact_match": pytest.approx(1 / 3),
        "first_step_match": pytest.approx(2 / 3),
        "strategies": ["model"],
        "actions_after_divergence": {"5": 4},
        "split": {
            "1": {
                "pairs": 0,
                "critic": None,
                "model": None,
                "reflect": None,
                "rules": None,
                "direct": None,
                "first": None,
                "versus": {},
            },
            "2+": {
                "pairs": 3,
                "critic": pytest.approx(2 / 3),
                "model": pytest.approx(2 / 3),  # the run's critic is the model strategy
                "reflect": None,  # no reflect t' recorded on these pairs
                "rules": pytest.approx(1 / 3),  # no rule fires: the last action
                "direct": pytest.approx(1 / 3),
                "first": pytest.approx(2 / 3),
                "versus": versus,
            },
            "all": {
                "pairs": 3,
                "critic": pytest.approx(2 / 3),
                "model": pytest.approx(2 / 3),  # the run's critic is the model strategy
                "reflect": None,
                "rules": pytest.approx(1 / 3),
                "direct": pytest.approx(1 / 3),
                "first": pytest.approx(2 / 3),
                "versus": versus,
            },
        },
    }
    assert metrics[1]["exact_match"] == 0.0 and metrics[1]["mean_abs_distance"] == 1.0
    assert metrics[1]["fallback_share"] == 0.0 and metrics[1]["direct_exact_match"] == 0.0
    table = critic_markdown(metrics)
    assert "| 0 | model | 4 | 0.500 | 3 | 0.667 | 1.33 | 0.333 | 0.667 |" in table
    assert "judged no step Bad" not in table  # iteration 0 fell back on half its pairs, 1 on none
    with pytest.raises(ValueError, match="given with pair"):
        critic_metrics([(rows[0][0], rows[1][1])])


def test_an_iteration_whose_model_critic_never_judged_bad_is_named_direct_revision() -> None:
    """SmolLM2-135M-Instruct, not taught the judge question, fell back on every pair: the report says
    that iteration's revisions are Direct-Revision's instead of leaving it to a 1.000 in a table."""
    run = new_id()
    rows = [_judged(run, 0, 6, 5, 1, True), _judged(run, 0, 4, 3, 1, True), _judged(run, 1, 6, 1, 1, False)]
    table = critic_markdown(critic_metrics(rows))
    assert "**Iteration 0: the model critic judged no step Bad on any of its 2 pairs" in table
    assert "Iteration 1: the model critic" not in table
    direct = [(p, FirstErrorMarked(p.pair_id, "direct", 5, m.verdicts, fallback=True)) for p, m in rows[:1]]
    assert "judged no step Bad" not in critic_markdown(critic_metrics(direct))  # asked for: no warning


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


def test_critic_against_every_baseline_split_by_actions_after_the_divergence() -> None:
    """One pair with ONE action after the divergence (every critic right), two with several: the
    model critic, the recorded reflect t', rules (an invalid action), direct and first differ."""
    run = new_id()

    def judged(steps: list[tuple[str, str]], t: int, oracle: int, reflect: int, strategy: str = "model"):  # type: ignore[no-untyped-def]
        bad = Trajectory(
            task="Goal: craft stick.",
            instruction="Craft.",
            steps=tuple(Step("t", a, o) for a, o in steps),
            reward=0.0,
        )
        pair = PairFound(new_id(), "search", "3", bad, bad, 1, run_id=run, iteration=0)
        marked = FirstErrorMarked(
            pair.pair_id,
            strategy,
            t,
            (StepVerdict(t, "bad"),),
            oracle_index=oracle,
            baselines={"reflect": reflect},
        )  # type: ignore[arg-type]
        return pair, marked

    ok, invalid = (
        ("get 1 oak logs", "Got 1 oak logs"),
        ("craft 9 x using 1 y", "Could not find a valid recipe"),
    )
    rows = [
        judged([ok, ok], 1, 1, 1),  # one action after the divergence (step 1)
        judged([ok, ok, invalid, ok], 2, 2, 3),  # oracle 2: critic and rules right, first and direct wrong
        judged([ok, invalid, ok, ok], 3, 1, 1),  # oracle 1: reflect, rules and first right
    ]
    split = critic_metrics(rows)[0]["split"]
    assert split["1"] == {
        "pairs": 1,
        "critic": 1.0,
        "model": 1.0,  # the run's critic is the model strategy
        "reflect": 1.0,
        "rules": 1.0,
        "direct": 1.0,
        "first": 1.0,
        "versus": {name: {"critic_only": 0, "baseline_only": 0, "p": 1.0} for name in BASELINE_CRITICS},
    }
    assert split["2+"] == {
        "pairs": 2,
        "critic": 0.5,
        "model": 0.5,
        "reflect": 0.5,
        "rules": 1.0,
        "direct": 0.0,
        "first": 0.5,
        "versus": {
            "model": {"critic_only": 0, "baseline_only": 0, "p": 1.0},
            "reflect": {"critic_only": 1, "baseline_only": 1, "p": 1.0},
            "rules": {"critic_only": 0, "baseline_only": 1, "p": 1.0},
            "direct": {"critic_only": 1, "baseline_only": 0, "p": 1.0},
            "first": {"critic_only": 1, "baseline_only": 1, "p": 1.0},
        },
    }
    assert split["all"]["pairs"] == 3 and split["all"]["rules"] == 1.0
    assert critic_metrics(rows)[0]["actions_after_divergence"] == {"1": 1, "3": 2}
    table = critic_markdown(critic_metrics(rows))
    assert "| 0 | >= 2 | 2 | 0.500 | 0.500 | 0.500 | 1.000 | 0.000 | 0.500 |" in table
    assert "- iteration 0: 1: 1, 3: 2" in table
    assert (
        "- iteration 0: model 0 / 0 (p 1.00); reflect 1 / 1 (p 1.00); rules 0 / 1 (p 1.00); "
        "direct 1 / 0 (p 1.00); first 1 / 1" in table
    )
    # the first-after-divergence strategy: its own t' is the critic column; reflect from baselines
    first = [judged([ok, invalid, ok, ok], 1, 1, 2, "first")]
    assert critic_metrics(first)[0]["split"]["2+"]["critic"] == 1.0
    assert critic_metrics(first)[0]["split"]["2+"]["reflect"] == 0.0


def test_the_default_first_critic_is_compared_with_the_recorded_model_baseline() -> None:
    """Under the default ``first`` critic the model critic's t' (``baselines["model"]``) is a column of
    its own, compared pair by pair; a pair without it leaves the column unknown, never guessed."""
    run = new_id()
    ok = ("get 1 oak logs", "Got 1 oak logs")
    invalid = ("craft 9 x using 1 y", "Could not find a valid recipe")

    def judged(steps: list[tuple[str, str]], oracle: int, baselines: dict[str, int]):  # type: ignore[no-untyped-def]
        bad = Trajectory("Goal: craft stick.", "Craft.", tuple(Step("t", a, o) for a, o in steps), reward=0.0)
        pair = PairFound(new_id(), "search", "3", bad, bad, 1, run_id=run, iteration=0)
        marked = FirstErrorMarked(pair.pair_id, "first", 1, (StepVerdict(1, "bad"),), oracle_index=oracle,
                                  baselines=baselines)  # fmt: skip
        return pair, marked

    rows = [
        judged([ok, invalid, ok], 1, {"model": 2}),  # first right, the model critic one step late
        judged([ok, ok, invalid], 2, {"model": 2}),  # the model critic right, first wrong
        judged([ok, invalid, ok, ok], 1, {"model": 3}),  # first right
    ]
    split = critic_metrics(rows)[0]["split"]["2+"]
    assert split["critic"] == pytest.approx(2 / 3) and split["first"] == pytest.approx(2 / 3)
    assert split["model"] == pytest.approx(1 / 3)
    assert split["versus"]["model"] == {"critic_only": 2, "baseline_only": 1, "p": 1.0}
    assert "| 0 | >= 2 | 3 | 0.667 | 0.333 |" in critic_markdown(critic_metrics(rows))
    without = critic_metrics([*rows, judged([ok, invalid, ok], 1, {})])[0]["split"]["2+"]
    assert without["model"] is None and "model" not in without["versus"]
