"""Gymnasium both ways (core/envs/gymnasium_bridge.py, agentr/gym.py): agentr environments as
``gymnasium.Env`` with Text spaces, and text Gymnasium environments as ``gym:ID`` env URIs; seeds
honoured, terminated and truncated kept apart."""

from __future__ import annotations

import subprocess
import sys

import gymnasium
import pytest

import agentr.gym  # noqa: F401 - registers agentr/TextCraft-v0 and agentr/Env-v0
from core.envs.base import EnvError
from core.envs.contract import check_env
from core.envs.registry import open_env
from core.envs.textcraft import TextCraftEnv, solve

GUESS = "gym:tests.gym_text_env:Guess-v0"


def test_the_documented_one_liner_runs() -> None:
    code = (
        "import gymnasium, agentr.gym; e = gymnasium.make('agentr/TextCraft-v0'); print(e.reset(seed=0)[1])"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "task_id" in done.stdout


def test_textcraft_as_gymnasium_env_seeds_and_terminates() -> None:
    env = gymnasium.make("agentr/TextCraft-v0")
    assert isinstance(env.observation_space, gymnasium.spaces.Text)
    assert isinstance(env.action_space, gymnasium.spaces.Text)
    first, info = env.reset(seed=0)
    again, info_again = env.reset(seed=0)
    assert (first, info["task_id"]) == (again, info_again["task_id"])
    assert env.observation_space.contains(first)
    other = {env.reset(seed=seed)[1]["task_id"] for seed in range(1, 6)}
    assert other - {info["task_id"]}  # other seeds draw other tasks
    _observation, info = env.reset(options={"task_id": "3"})
    goal = TextCraftEnv().goal_of("3")
    total = 0.0
    for action in solve(goal):
        _observation, reward, terminated, truncated, step_info = env.step(action)
        total += float(reward)
    assert (terminated, truncated) == (True, False)
    assert total == pytest.approx(1.0) and step_info["score"] == 1.0
    with pytest.raises(EnvError, match="after the episode ended"):
        env.step("inventory")
    env.close()


def test_a_step_limit_truncates_and_does_not_terminate() -> None:
    env = gymnasium.make("agentr/Env-v0", uri="textcraft?max_steps=2&distractors=0")
    env.reset(seed=3)
    assert env.step("inventory")[2:4] == (False, False)
    _observation, reward, terminated, truncated, info = env.step("inventory")
    assert (terminated, truncated, reward) == (False, True, 0.0)
    assert info["truncated"] is True
    env.close()


async def test_a_text_gymnasium_env_through_a_gym_uri() -> None:
    env = open_env(GUESS)
    assert env.max_steps == 3  # the spec's max_episode_steps
    first = await env.reset("5")
    assert await env.reset("5") == first  # the task id is the seed
    from tests.gym_text_env import WORDS, GuessEnv

    probe = GuessEnv()
    probe.reset(seed=5)
    wrong = next(w for w in WORDS if w != probe.secret)
    result = await env.step(wrong)
    assert (result.done, result.valid, result.reward) == (False, True, 0.0)
    assert (await env.step("zzz")).valid is False
    cut = await env.step(wrong)  # the third step: Gymnasium's TimeLimit truncates
    assert cut.done and cut.info["truncated"] is True and cut.info["terminated"] is False
    await env.reset("5")
    won = await env.step(probe.secret)
    assert won.done and won.reward == 1.0 and won.raw_score == 1.0
    assert won.info["terminated"] is True and won.info["truncated"] is False
    await env.close()


async def test_a_gym_uri_passes_the_env_contract() -> None:
    checks = await check_env(lambda: open_env(GUESS), actions=("apple", "birch"))
    assert {c.name: c.status for c in checks if c.status == "fail"} == {}


async def test_agentr_env_round_trips_through_gymnasium() -> None:
    env = open_env("gym:agentr/TextCraft-v0?max_steps=60")
    observation = await env.reset("0")
    goal = observation.rsplit("Goal: craft ", 1)[1].strip().rstrip(".").replace(" ", "_")
    textcraft = TextCraftEnv()
    plan = solve(textcraft.goal_of(f"goal:{goal}"))
    for action in plan:
        result = await env.step(action)
    assert result.done and result.reward == 1.0 and result.info["terminated"] is True
    await env.close()


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("gym:tests.gym_text_env:Numbers-v0", "not a Text space"),
        ("gym:NoSuchEnv-v0", "Gymnasium cannot make 'NoSuchEnv-v0'"),
        ("gym:json:Anything-v0", "standard-library module"),
        (GUESS + "?speed=2", "unknown option"),
        (GUESS + "?reward_min=1&reward_max=0", "reward_max"),
    ],
)
def test_bad_gym_uris_are_refused_by_name(uri: str, message: str) -> None:
    with pytest.raises(EnvError, match=message):
        open_env(uri)
