"""Owns the warm start: expert episodes (TextCraft's solver, or any environment's ``gold_actions``)
and a time-budgeted SFT on them.

The paper's baselines start from an instruction-tuned model; a random-init tiny model starts with
nothing, so MCTS would find no success at all. ``warm_start`` plays the expert solver through the
real environment (so observations are the environment's own), turns each episode into a ``good``
training sample (every assistant turn trained on) and fine-tunes with packing and a learning-rate
schedule fitted to the time budget (DESIGN §5: short prompts, budgeted schedule, packing).

The expert: TextCraft's own solver; for any other environment (a plugin, an AgentGym server, ...)
its ``gold_actions(task_id)`` — the same method ``agentr env check`` probes with — played through the
environment's async port, so ``agentr run --env NAME`` can warm-start the tiny model on a
bring-your-own environment. An environment with neither gets a clear error naming both ways out.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from core.domain.good_samples import trajectory_to_sample
from core.domain.ids import derived_id
from core.domain.trajectory import Step, TrainingSample, Trajectory
from train_service.sft import SFTConfig, TrainJob, TrainReport, train_sft

log = logging.getLogger(__name__)

_GET = re.compile(r"get (\d+) (.+)")
_CRAFT = re.compile(r"craft (\d+) (.+?) using ")


def expert_thought(action: str) -> str:
    """A short, truthful thought for a solver action (what the agent is about to do and why)."""
    if m := _GET.match(action):
        return f"I need {m.group(1)} {m.group(2)}."
    if m := _CRAFT.match(action):
        return f"I have the ingredients for {m.group(2)}."
    return "Let me check my inventory."


class NoExpertError(ValueError):
    """The environment offers no expert to warm-start from (the message says what would)."""


def expert_trajectories(env: Any, task_ids: Sequence[str]) -> Iterator[Trajectory]:
    """Play the expert on each task through ``env``: TextCraft's solver on a ``TextCraftEnv``,
    otherwise the environment's ``gold_actions(task_id)`` (``NoExpertError`` when it has none).

    Episodes whose final reward is not 1 are skipped with a warning (the expert should not fail).
    """
    if not (hasattr(env, "reset_sync") and hasattr(env, "goal_of") and hasattr(env, "book")):
        yield from gold_trajectories(env, task_ids)
        return
    from core.envs.textcraft import solve

    for task_id in task_ids:
        task = env.reset_sync(task_id)
        steps: list[Step] = []
        result = None
        for action in solve(env.goal_of(task_id), env.book):
            result = env.step_sync(action)
            steps.append(
                Step(
                    expert_thought(action),
                    action,
                    result.observation,
                    result.reward,
                    result.done,
                    result.valid,
                )
            )
            if result.done:
                break
        if result is None or result.reward < 1.0:
            log.warning("expert solver did not finish textcraft task %s; skipped", task_id)
            continue
        yield Trajectory(
            task=task,
            instruction=env.instruction,
            steps=tuple(steps),
            reward=1.0,
            provenance={"source": "expert", "env": "textcraft", "task_id": str(task_id)},
        )


def gold_trajectories(env: Any, task_ids: Sequence[str]) -> list[Trajectory]:
    """Episodes of ``env.gold_actions(task_id)`` played through the environment's async port."""
    gold = getattr(env, "gold_actions", None)
    name = getattr(env, "name", type(env).__name__)
    if not callable(gold):
        raise NoExpertError(
            f"environment {name!r} has no expert to warm-start the tiny model from: give it a "
            "gold_actions(task_id) method (docs/envs.md), or pass --warm-start-steps 0 or --model"
        )
    return asyncio.run(_play_gold(env, gold, task_ids, str(name)))


async def _play_gold(env: Any, gold: Any, task_ids: Sequence[str], name: str) -> list[Trajectory]:
    out: list[Trajectory] = []
    for task_id in task_ids:
        task = await env.reset(task_id)
        steps: list[Step] = []
        result = None
        for action in gold(task_id):
            result = await env.step(action)
            thought = f"The next step is {action}."
            steps.append(Step(thought, action, result.observation, result.reward, result.done, result.valid))
            if result.done:
                break
        if result is None or result.reward < 1.0:
            log.warning("the gold actions of %s task %s did not finish it; skipped", name, task_id)
            continue
        provenance = {"source": "expert", "env": name, "task_id": str(task_id)}
        out.append(Trajectory(task, env.instruction, tuple(steps), 1.0, provenance))
    return out


def expert_samples(env: Any, n_episodes: int, split: str = "train") -> list[TrainingSample]:
    """``n_episodes`` expert samples, cycling over the split's tasks in order (deterministic)."""
    if n_episodes < 1:
        raise ValueError(f"n_episodes must be >= 1, got {n_episodes}")
    ids = env.task_ids(split)
    if not ids:
        raise ValueError(f"textcraft split {split!r} has no tasks")
    chosen = [ids[i % len(ids)] for i in range(n_episodes)]
    out: list[TrainingSample] = []
    for i, traj in enumerate(expert_trajectories(env, chosen)):
        out.append(trajectory_to_sample(traj, derived_id("expert", split, i, traj.provenance["task_id"])))
    return out


def warm_start(
    model_path: str | Path,
    env: Any,
    n_episodes: int,
    out_dir: str | Path,
    *,
    time_budget_s: float = 180.0,
    split: str = "train",
    cfg: SFTConfig | None = None,
) -> TrainReport:
    """SFT ``model_path`` on ``n_episodes`` expert TextCraft episodes within ``time_budget_s``.

    Default config: packing, ``time_cosine`` learning-rate schedule over the budget, many epochs
    (the budget, not the epoch count, ends training). Returns the checkpoint report
    (``meta.json`` has iteration -1 and dataset id ``warm-start:<split>:<n>``).
    """
    samples = expert_samples(env, n_episodes, split)
    cfg = cfg or SFTConfig(
        epochs=1000,
        learning_rate=3e-3,
        lr_scheduler="time_cosine",
        warmup=0.05,
        time_budget_s=time_budget_s,
        packing=True,
        max_length=512,
        batch_size=8,
        logging_steps=20,
    )
    log.info("warm start: %d expert episodes, %.0fs budget", len(samples), time_budget_s)
    job = TrainJob(model_path, out_dir, iteration=-1, dataset_id=f"warm-start:{split}:{n_episodes}")
    return train_sft(job, samples, cfg)
