"""ScienceWorld adapter: AgentGym game index, gold paths to score 100 on the fast path, failure
handling, HTTP serving, and the missing-Java message. Needs Java 17 (marked ``java``)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from core.envs.base import MAX_VALID_ACTIONS, EnvError, UnknownTask
from core.envs.registry import open_env
from core.envs.sciworld import AGENTGYM_EXCLUDED_TASKS, SciWorldEnv
from tests.integration.test_envs_agentgym_http import start_server

needs_java = pytest.mark.skipif(
    shutil.which("java") is None, reason="ScienceWorld needs Java 17: no `java` on PATH (CI installs it)"
)
pytestmark = pytest.mark.java


@pytest.fixture(scope="module")
def sciworld() -> Iterator[SciWorldEnv]:
    if shutil.which("java") is None:
        pytest.skip("ScienceWorld needs Java 17: no `java` on PATH (CI installs it)")
    env = SciWorldEnv()
    try:
        yield env
    finally:
        env.close_sync()


@needs_java
def test_agentgym_game_index(sciworld: SciWorldEnv) -> None:
    assert len(sciworld.games) == 4639
    assert sciworld.game("0") == ("boil", 0)
    names = [name for name, _ in sciworld.games]
    assert len(set(names)) == 23  # 30 task types minus AgentGym's 7 exclusions
    assert "inclined-plane-friction-named-surfaces" not in names  # task 9-2 is excluded
    assert "grow-plant" not in names  # task 5-1 is excluded
    with pytest.raises(UnknownTask, match="unknown task id '4639'"):
        sciworld.game("4639")
    splits = {s: sciworld.task_ids(s) for s in ("train", "dev", "test")}
    assert sum(len(ids) for ids in splits.values()) == 4639
    assert not set(splits["train"]) & set(splits["test"])
    # the recorded tables (a client lists tasks from them with no Java; the adapter never asks its
    # own simulator) are the simulator's own answers
    from core.envs.sciworld_tasks import GAMES, TASK_VARIATIONS

    asked = SciWorldEnv()
    try:
        simulator = asked.simulator
        counted = [
            (name, int(simulator.get_max_variations(name)))
            for key, name in simulator.tasks.items()
            if key not in AGENTGYM_EXCLUDED_TASKS
        ]
        assert counted == list(TASK_VARIATIONS) and GAMES == len(sciworld.games) == 4639
        assert asked.simulator_splits() == splits
    finally:
        asked.close_sync()
    served = open_env("agentgym+http://127.0.0.1:9/sciworld")  # no server needed to list tasks
    assert served.task_ids() == splits["test"] and len(served.task_ids("all")) == 4639


@needs_java
@pytest.mark.parametrize("task_id", ["0", "300", "1000", "2500", "4000"])
async def test_gold_paths_reach_score_100(sciworld: SciWorldEnv, task_id: str) -> None:
    gold = sciworld.gold_actions(task_id)
    observation = await sciworld.reset(task_id)
    assert "Your task is to" in observation and "This room is called" in observation
    result = None
    for action in gold:
        result = await sciworld.step(action)
        if result.done:
            break
    assert result is not None
    assert (result.raw_score, result.reward, result.done) == (100, 1.0, True), sciworld.game(task_id)


@needs_java
async def test_invalid_action_and_failure(sciworld: SciWorldEnv) -> None:
    await sciworld.reset("0")
    bad = await sciworld.step("fly to the moon")
    assert (bad.valid, bad.done, bad.reward) == (False, False, 0.0)
    assert bad.observation.startswith("No known action matches")
    # focusing on the wrong object fails the boil task: score -100 -> reward 0 and done
    await sciworld.reset("0")
    failed = await sciworld.step("focus on agent")
    assert (failed.raw_score, failed.reward, failed.done) == (-100, 0.0, True)
    assert failed.info.get("failed") is True
    assert await sciworld.clone() is None


@needs_java
async def test_valid_actions_are_the_simulators_combinations_and_accepted(sciworld: SciWorldEnv) -> None:
    await sciworld.reset("0")
    listed = await sciworld.valid_actions()
    assert listed is not None and 0 < len(listed) <= MAX_VALID_ACTIONS and len(set(listed)) == len(listed)
    assert {"look around", "inventory", "look at kitchen"} <= set(listed)
    for action in listed[:3] + listed[-3:]:
        await sciworld.reset("0")
        assert (await sciworld.step(action)).valid, action
    await sciworld.reset("0")
    await sciworld.step("focus on agent")  # fails the task: the episode is over
    assert await sciworld.valid_actions() is None


@needs_java
async def test_client_against_served_sciworld(sciworld: SciWorldEnv) -> None:
    gold = sciworld.gold_actions("300")
    description = (await sciworld.reset("300")).split("\n\n", 1)[0]
    proc, port = start_server("sciworld", startup_s=90)
    remote = open_env(f"agentgym+http://127.0.0.1:{port}/sciworld?timeout=120")
    try:
        first = await remote.reset("300")
        assert first.startswith(description) and "This room is called" in first
        bad = await remote.step("fly to the moon")
        assert (bad.valid, bad.done) == (False, False)
        last = None
        for action in gold:
            last = await remote.step(action)
            if last.done:
                break
        # the served score (0-100) travels as "score" and comes back normalised
        assert last is not None and (last.raw_score, last.reward, last.done) == (100, 1.0, True)
    finally:
        await remote.close()
        proc.stop()


def test_missing_java_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("PATH", str(tmp_path))  # a PATH without java
    with pytest.raises(EnvError, match="no `java` executable on PATH .*Java 17"):
        SciWorldEnv()
    with pytest.raises(EnvError, match="Java 17"):
        open_env("sciworld")
