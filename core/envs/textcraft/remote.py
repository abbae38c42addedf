"""Owns TextCraft's tools for a TextCraft served over HTTP (``agentgym+http://HOST:PORT/textcraft``):
the goal read from a task's first observation, the expert's actions for that goal (the warm start
and ``agentr env check`` play them), and the goal id under which the first-error oracle judges a path.

A TextCraft server (AgentGym's, or ``agentr env serve textcraft``) says its goal in the last line of
the first observation, ``Goal: craft NAME.``; the recipes it lists are the Minecraft 1.16.5 recipes our
recipe book holds (the same files), so our solver's plan for that goal is a plan on the server. The
goal is remembered per task id at ``reset``: ``goal_of`` / ``gold_actions`` of a task not yet reset
raise EnvError saying so.
"""

from __future__ import annotations

import re

from core.envs.agentgym import AgentGymEnv
from core.envs.base import EnvError
from core.envs.textcraft.recipes import MINECRAFT, RecipeBook, item_id_of, recipe_book

_GOAL_LINE = re.compile(r"^Goal: craft (.+?)\.\s*$", re.MULTILINE)


def goal_in_observation(observation: str) -> str | None:
    """``"...\\n\\nGoal: craft stone pickaxe."`` -> ``"minecraft:stone_pickaxe"`` (None without one)."""
    found = _GOAL_LINE.findall(observation or "")
    return item_id_of(found[-1]) if found else None


def oracle_task_id(observation: str) -> str | None:
    """The in-process id (``goal:NAME``) of the task whose first observation is ``observation``."""
    goal = goal_in_observation(observation)
    return f"goal:{goal.removeprefix(MINECRAFT)}" if goal else None


class RemoteTextCraftEnv(AgentGymEnv):
    """An AgentGym TextCraft session that also knows each reset task's goal and its expert plan."""

    def __init__(self, *args: object, book: RecipeBook | None = None, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.book = book or recipe_book()
        self._goals: dict[str, str] = {}

    async def reset(self, task_id: str) -> str:
        observation = await super().reset(task_id)
        goal = goal_in_observation(observation)
        if goal is not None:
            self._goals[str(self.task_id)] = goal
        return observation

    def goal_of(self, task_id: str) -> str:
        """The goal item id of ``task_id`` as the server stated it when the task was reset."""
        key = str(task_id).strip()
        goal = self._goals.get(key)
        if goal is None:
            raise EnvError(
                f"agentgym {self.name}: the goal of task {task_id!r} is not known yet: reset it first "
                "(the goal is read from the server's first observation)"
            )
        return goal

    def gold_actions(self, task_id: str) -> list[str]:
        """The expert solver's actions for the goal the server gave ``task_id`` (reset it first)."""
        from core.envs.textcraft.solver import solve

        goal = self.goal_of(task_id)
        if goal not in self.book.item_recipes:
            raise EnvError(f"agentgym {self.name}: task {task_id!r} asks for {goal}, which no recipe makes")
        return solve(goal, self.book)
