"""bench/critic.py --goals multi: its goals are real TextCraft goals of several ingredients, none
searched, held out or judged by the default demo (so the warm-started model never saw them), and
a goal the demo uses is refused by name."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import critic  # noqa: E402

from agentr.cli.demo import DEMO_GOALS, DEMO_HELD_OUT, RunOptions, plan_run  # noqa: E402
from core.domain.config import RunConfig  # noqa: E402
from core.envs.registry import open_env  # noqa: E402
from core.envs.textcraft.solver import solve  # noqa: E402


def demo_config() -> RunConfig:
    return RunConfig.from_data(plan_run(RunOptions(iterations=1, data_only=True)).config)


def test_multi_ingredient_goals_are_unseen_by_the_demo_and_need_several_crafts() -> None:
    config = demo_config()
    goals = critic.multi_ingredient_goals(config)
    assert len(goals) == len(set(goals)) == 18
    assert not set(goals) & (set(DEMO_GOALS) | set(DEMO_HELD_OUT))
    env = open_env(config.env)
    for goal in goals:
        plan = solve(env.goal_of(goal))
        assert 4 <= len(plan) <= critic.MULTI_INGREDIENT_DEPTH - 2, (goal, plan)
        assert sum(a.startswith("craft") for a in plan) >= 2, (goal, plan)  # two crafts at least


def test_a_goal_the_demo_searches_or_holds_out_is_refused() -> None:
    config = demo_config()
    for used in ("goal:birch_boat", "goal:oak_fence"):  # make the demo search / hold out one
        searched = dataclasses.replace(config, tasks=(*config.tasks, used))
        with pytest.raises(ValueError, match=used):
            critic.multi_ingredient_goals(searched)
        held = dataclasses.replace(config, eval_tasks=(*config.eval_tasks, used))
        with pytest.raises(ValueError, match=used):
            critic.multi_ingredient_goals(held)


def test_a_given_model_passes_its_warm_start_and_judge_phase_to_agentr_run() -> None:
    """bench/critic.py --model: the flags reach ``agentr run`` as given; without --model they are
    refused, and a given model runs the demo goals' match only."""
    assert critic.given_model_args("", None, None, None) == ()
    assert critic.given_model_args("/m", 8, 24, 12) == (
        "--model", "/m", "--warm-start-steps", "8", "--judge-phase-steps", "24", "--max-tasks", "12",
    )  # fmt: skip
    assert critic.given_model_args("/m", None, None, None) == ("--model", "/m")
    with pytest.raises(ValueError, match="go with --model"):
        critic.given_model_args("", 8, None, None)
    with pytest.raises(ValueError, match="demo goals' match only"):
        critic.given_model_args("/m", 8, 24, None, goals="multi")
    with pytest.raises(ValueError, match="demo goals' match only"):
        critic.given_model_args("/m", None, None, None, quick=True)
