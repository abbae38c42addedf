"""The ``oracle`` critic strategy (critic_service/strategies/oracle.py): t' is TextCraft's own first
error, judged by replaying the bad path in the environment it names; an environment without an
oracle is refused by name when a run is configured (API, ``agentr run``'s run_config) and by the
strategy itself; a path without an environment is refused too."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentr.cli.embedded_run import embedded_settings, run_config
from api.schemas import RunConfigIn
from core.domain.critic import CriticInputError
from core.domain.trajectory import Step, Trajectory
from core.envs.textcraft import TextCraftEnv
from core.envs.textcraft.oracle import has_first_error_oracle, oracle_strategy_problem
from critic_service.critic import CriticConfig, CriticConfigError, critique
from critic_service.oracles import Oracles
from critic_service.strategies import REGISTRY

ENV = "textcraft?distractors=0"
TASK = "goal:oak_slab"  # expert: get 1 oak logs; craft 4 oak planks using 1 oak logs; craft 6 oak slab ...


async def _played(actions: list[str], env_uri: str = ENV, task_id: str = TASK) -> Trajectory:
    """The path ``actions`` really makes in TextCraft (its observations), provenance as a search pair's."""
    env = TextCraftEnv(distractors=0)
    task = await env.reset(task_id)
    steps = []
    for action in actions:
        result = await env.step(action)
        steps.append(Step("", action, result.observation, result.reward, result.done, valid=result.valid))
    return Trajectory(
        task=task,
        instruction=env.instruction,
        steps=tuple(steps),
        reward=0.0,
        provenance={"env_uri": env_uri, "task_id": task_id, "iteration": 0},
    )


async def test_t_prime_is_the_oracles_first_error() -> None:
    # step 0 and 1 follow the expert; step 2 is an inventory look-up (no progress): the first error;
    # step 3 (a rejected craft) is an error too, but not the first
    path = await _played(
        [
            "get 1 oak logs",
            "craft 4 oak planks using 1 oak logs",
            "inventory",
            "craft 1 oak door using 6 oak planks",
        ]
    )
    result = await critique(CriticConfig(strategy="oracle"), path, 1)
    assert (result.strategy, result.transition_index, result.fallback) == ("oracle", 2, False)
    assert [(v.step_index, v.label, v.method) for v in result.verdicts] == [
        (1, "good", "oracle"),
        (2, "bad", "oracle"),
    ]
    assert "no progress" in result.verdicts[1].reason
    # the same index the critic worker records as the oracle's (FirstErrorMarked.oracle_index)
    assert Oracles().oracle_index(ENV, TASK, path, 1) == 2
    # judged from the divergence on: an error before it is not t'
    early = await _played(["inventory", "get 1 oak logs", "get 1 spruce logs"])
    assert (await critique(CriticConfig(strategy="oracle"), early, 1)).transition_index == 2


async def test_no_error_found_falls_back_to_the_last_action() -> None:
    # every step is progress; the path only ran out of steps before the slab
    path = await _played(["get 1 oak logs", "craft 4 oak planks using 1 oak logs"])
    result = await critique(CriticConfig(strategy="oracle"), path, 0)
    assert (result.transition_index, result.fallback) == (1, True)
    assert all(v.label == "good" for v in result.verdicts)


async def test_a_path_without_its_environment_or_with_no_oracle_is_refused_by_name() -> None:
    played = await _played(["get 1 oak logs", "inventory"])
    bare = Trajectory(task=played.task, instruction="", steps=played.steps, reward=0.0)
    with pytest.raises(CriticConfigError, match="names no env_uri and task_id"):
        await critique(CriticConfig(strategy="oracle"), bare, 0)
    elsewhere = Trajectory(
        task=played.task,
        instruction="",
        steps=played.steps,
        reward=0.0,
        provenance={"env_uri": "sciworld", "task_id": "0"},
    )
    with pytest.raises(CriticConfigError, match="'sciworld' has none"):
        await critique(CriticConfig(strategy="oracle"), elsewhere, 0)
    # a path whose recorded observations the replay contradicts: the oracle cannot judge it
    wrong = Trajectory(
        task=played.task,
        instruction="",
        steps=(Step("", "get 1 oak logs", "Got 7 diamonds"),),
        reward=0.0,
        provenance={"env_uri": ENV, "task_id": TASK},
    )
    with pytest.raises(CriticInputError, match="the oracle cannot judge this path"):
        await critique(CriticConfig(strategy="oracle"), wrong, 0)
    assert not REGISTRY["oracle"].needs_policy


def test_which_environments_have_an_oracle() -> None:
    assert has_first_error_oracle("textcraft") and has_first_error_oracle("textcraft?distractors=3")
    assert has_first_error_oracle("agentgym+http://127.0.0.1:36001/textcraft")
    assert not has_first_error_oracle("sciworld")
    assert not has_first_error_oracle("agentgym+http://127.0.0.1:36001/webshop")
    assert oracle_strategy_problem("first", "sciworld") is None  # only the oracle critic has the condition
    assert oracle_strategy_problem("oracle", ENV) is None


def test_a_run_configured_with_the_oracle_on_an_env_without_one_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="critic.strategy oracle needs .* 'sciworld' has none"):
        RunConfigIn.model_validate({"model": "m", "env": "sciworld", "critic": {"strategy": "oracle"}})
    accepted = RunConfigIn.model_validate({"model": "m", "env": ENV, "critic": {"strategy": "oracle"}})
    assert accepted.to_domain().critic == {"strategy": "oracle"}
    settings, home = embedded_settings(tmp_path / "home")
    with pytest.raises(ValueError, match="'sciworld' has none"):
        run_config(settings, home, {"env": "sciworld", "model": "m", "critic": {"strategy": "oracle"}})
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())  # nothing was started
