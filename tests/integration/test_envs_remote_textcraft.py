"""TextCraft over AgentGym HTTP has the tools of the in-process TextCraft: the expert (the goal read
from the server's first observation, our solver's plan for it), the warm start's expert episodes, the
first-error oracle that scores the critic's t', and ``env check`` / ``env tasks``; and ``agentr run
--env agentgym+http://.../textcraft`` warm-starts on the server and scores t' against the oracle.

The server is ``agentr env serve textcraft`` in a subprocess (AgentGym's own server is replayed in
tests/integration/test_agentgym_conformance.py)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.domain.trajectory import Step, Trajectory
from core.envs.base import EnvError
from core.envs.registry import open_env
from core.envs.textcraft import TextCraftEnv, solve
from core.envs.textcraft.oracle import TextCraftOracle
from core.envs.textcraft.remote import RemoteTextCraftEnv, goal_in_observation, oracle_task_id
from critic_service.oracles import Oracles, served_textcraft
from tests.integration.test_envs_agentgym_http import start_server
from train_service.warm_start import expert_trajectories

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def server() -> Iterator[int]:
    served, port = start_server("textcraft?distractors=0")
    try:
        yield port
    finally:
        served.stop()


def test_goal_is_read_from_the_first_observation() -> None:
    local = TextCraftEnv()
    observation = local.reset_sync("goal:stone_pickaxe")
    assert goal_in_observation(observation) == "minecraft:stone_pickaxe"
    assert oracle_task_id(observation) == "goal:stone_pickaxe"
    assert goal_in_observation("Crafting commands:\nnothing here") is None
    assert served_textcraft("agentgym+http://h:1/textcraft?max_steps=6")
    assert served_textcraft("agentgym+https://h:1/prefix/textcraft")
    assert not served_textcraft("agentgym+http://h:1/sciworld") and not served_textcraft("textcraft")


def test_the_expert_plays_through_the_server(server: int) -> None:
    """As the warm start does: ``expert_trajectories`` (its own event loop) on an opened env."""
    remote = open_env(f"agentgym+http://127.0.0.1:{server}/textcraft")
    assert isinstance(remote, RemoteTextCraftEnv)
    with pytest.raises(EnvError, match="reset it first"):
        remote.gold_actions("7")
    ids = remote.task_ids("demo")[:2] + ["300", "540"]  # depth 1, 1, 2 and 4
    episodes = list(expert_trajectories(remote, ids))
    assert [e.provenance["task_id"] for e in episodes] == ids
    local = TextCraftEnv(distractors=0)
    for episode, task_id in zip(episodes, ids, strict=True):
        assert episode.reward == 1.0 and episode.steps[-1].done
        assert [s.action for s in episode.steps] == solve(local.goal_of(task_id))
        assert remote.goal_of(task_id) == local.goal_of(task_id)
        assert episode.task == local.reset_sync(task_id)


def test_the_oracle_judges_served_paths_by_goal(server: int) -> None:
    uri = f"agentgym+http://127.0.0.1:{server}/textcraft"
    local = TextCraftEnv(distractors=0)
    task = local.reset_sync("300")
    plan = solve(local.goal_of("300"))
    actions = [plan[0], "get 1 dirt", *plan[1:]]  # the second action fetches what no plan needs
    steps = []
    for action in actions:
        result = local.step_sync(action)
        steps.append(Step("", action, result.observation, result.reward, result.done, result.valid))
    path = Trajectory(task, local.instruction, tuple(steps), steps[-1].reward)
    expected = TextCraftOracle().first_error("300", actions, start=1)
    assert expected == 1
    oracles = Oracles()
    # the served id need not name the same goal as ours: the observation's goal decides
    assert oracles.oracle_index(uri, "9999", path, 1) == expected
    assert oracles.oracle_index(uri, "300", path, 2) == TextCraftOracle().first_error("300", actions, start=2)
    blind = Trajectory("no goal in this text", local.instruction, tuple(steps), 0.0)
    assert oracles.oracle_index(uri, "300", blind, 1) is None


def test_env_check_and_env_tasks_on_the_server(server: int) -> None:
    uri = f"agentgym+http://127.0.0.1:{server}/textcraft"
    cli = [sys.executable, "-c", "from agentr.cli import main; main()", "env"]
    env = {**os.environ, "COLUMNS": "200"}
    run = {"capture_output": True, "text": True, "timeout": 120, "env": env, "cwd": ROOT}
    checked = subprocess.run([*cli, "check", uri], **run)  # type: ignore[call-overload]
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "PASS step results" in checked.stdout and "the Env contract holds" in checked.stdout
    listed = subprocess.run([*cli, "tasks", uri, "--split", "demo"], **run)  # type: ignore[call-overload]
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split() == TextCraftEnv().task_ids("demo")


@pytest.mark.slow
def test_agentr_run_warm_starts_on_the_server_and_scores_t_prime_against_the_oracle(
    server: int, tmp_path: Path
) -> None:
    """The command itself, ``--quick`` scale, on the served TextCraft: the tiny model warm-starts on
    expert episodes played through the server, and the critic's t' is scored by the oracle."""
    from tests.e2e.quick_runs import agentr_env

    home = tmp_path / "home"
    tasks = TextCraftEnv().task_ids("demo")[:2]
    uri = f"agentgym+http://127.0.0.1:{server}/textcraft?max_steps=6"
    agentr = [sys.executable, "-c", "from agentr.cli import main; main()"]  # this checkout's code
    argv = [*agentr, "run", "--quick", "--env", uri, "--tasks", ",".join(tasks), "--iterations", "1"]
    proc = subprocess.run(
        [*argv, "--data-only"], env=agentr_env(home), capture_output=True, text=True, timeout=1800, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "warm start: 2 expert episodes" in proc.stderr, proc.stderr[-2000:]
    (run_dir,) = [p for p in (home / "runs").iterdir() if p.is_dir()]
    report = json.loads((run_dir / "report.json").read_text())
    assert report["status"] == "completed" and report["config"]["env"] == uri
    assert report["datasets"]["0"]["pairs"] > 0, report["datasets"]
    critic = report["critic"]["0"]
    assert critic["oracle_pairs"] > 0, critic  # t' scored against the oracle
    assert critic["exact_match"] is not None


def test_the_oracle_judges_paths_served_under_agentgym_rules() -> None:
    """A server with AgentGym's rules answers AgentGym's messages (a wrong recipe names their
    ``ItemTagWithCount``): the oracle replays under those rules, so the pair is scored (issue 49)."""
    served, port = start_server("textcraft?rules=agentgym&distractors=0")
    try:
        uri = f"agentgym+http://127.0.0.1:{port}/textcraft"
        remote = open_env(uri)

        async def play() -> Trajectory:
            task = await remote.reset(_agentgym_id("stick"))
            plan = solve("minecraft:stick")
            actions = ["get 4 dirt", "craft 1 stick using 4 dirt", *plan]
            steps = []
            for action in actions:
                result = await remote.step(action)
                steps.append(Step("", action, result.observation, result.reward, result.done, result.valid))
            await remote.close()
            return Trajectory(task, remote.instruction, tuple(steps), steps[-1].reward)

        path = asyncio.run(play())
    finally:
        served.stop()
    assert "ItemTagWithCount" in path.steps[1].observation  # their message, not ours
    local = TextCraftOracle(TextCraftEnv(rules="agentgym"))
    actions = [s.action for s in path.steps]
    expected = local.first_error("goal:stick", actions, start=0)
    assert expected == 0  # dirt is in no plan for a stick
    oracles = Oracles()
    assert oracles.oracle_index(uri, "0", path, 0) == expected
    assert oracles.oracle_index(uri, "0", path, 1) == local.first_error("goal:stick", actions, start=1) == 1
    # the same path under the URI's agentr rules is still judged: the agentgym replay matches it
    assert Oracles().oracle_index(uri + "?rules=agentr", "0", path, 1) == 1


def _agentgym_id(goal: str) -> str:
    env = TextCraftEnv(rules="agentgym")
    return next(t for t in env.task_ids("all") if env.goal_of(t) == f"minecraft:{goal}")
