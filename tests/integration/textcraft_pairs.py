"""Owns the real TextCraft bad/good pair that the critic and splice worker tests share.

The good path is the gold recipe of a test task with at least three recipe steps; the bad path shares
its first step and then goes wrong with the caller's actions (starting with an invalid craft).
"""

from __future__ import annotations

from collections.abc import Sequence

from core.domain.trajectory import Step, Trajectory
from core.envs.textcraft import TextCraftEnv
from core.envs.textcraft.solver import solve

ENV_URI = "textcraft?distractors=2"
INVALID_CRAFT = "craft 1 golden apple using 8 gold ingot, 1 apple"
SHARED_STEPS = 1


async def play(env: TextCraftEnv, task_id: str, actions: Sequence[str]) -> Trajectory:
    """Play ``actions`` from a fresh reset of ``task_id``; each step's thought is "I do <action>"."""
    task = await env.reset(task_id)
    steps = []
    for action in actions:
        result = await env.step(action)
        steps.append(
            Step(f"I do {action}", action, result.observation, result.reward, result.done, result.valid)
        )
    return Trajectory(task=task, instruction=env.instruction, steps=tuple(steps), reward=steps[-1].reward)


async def textcraft_pair(wrong: Sequence[str]) -> tuple[str, Trajectory, Trajectory, int]:
    """(task_id, bad, good, shared steps): gold recipe vs. its first step followed by ``wrong``."""
    env = TextCraftEnv(distractors=2)
    try:
        task_id = next(t for t in env.task_ids("test") if len(solve(env.goal_of(t))) >= 3)
        gold = solve(env.goal_of(task_id))
        good = await play(env, task_id, gold)
        assert good.reward == 1.0
        bad = await play(env, task_id, gold[:SHARED_STEPS] + list(wrong))
    finally:
        await env.close()
    return task_id, bad, good, SHARED_STEPS
