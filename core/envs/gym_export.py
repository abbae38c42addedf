"""Owns the agentr -> Gymnasium direction: ``AgentrGymEnv``, any agentr environment (by URI, or an
opened Env) as a ``gymnasium.Env`` with Text spaces. What it answers (seeds, the 5-tuple, terminated
versus truncated) is described in core.envs.gymnasium_bridge, which also registers the Gymnasium ids
(``agentr/TextCraft-v0``, ``agentr/Env-v0``) that make this class.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

import gymnasium

from core.envs.base import Env, EnvError, UnknownTask
from core.envs.gymnasium_bridge import TextSpace
from core.envs.registry import open_env

T = TypeVar("T")


class AgentrGymEnv(gymnasium.Env[str, str]):
    """An agentr environment (by URI, or an opened Env) as a ``gymnasium.Env`` (module docstring)."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, uri: str | None = None, env: Env | None = None, split: str = "test") -> None:
        if (uri is None) == (env is None):
            raise EnvError("AgentrGymEnv: give exactly one of uri= and env=")
        self.observation_space = TextSpace()
        self.action_space = TextSpace()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="agentr-gym-loop", daemon=True)
        self._thread.start()
        if env is None:
            env = open_env(str(uri))
        self.env: Env = env
        self.split = split
        self.task_id: str | None = None
        self._score = 0.0
        self._steps = 0
        self._over = True

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        options = dict(options or {})
        task_id = options.pop("task_id", None)
        split = str(options.pop("split", self.split))
        if options:
            raise EnvError(f"{self.env.name}: unknown reset options {sorted(options)} (task_id, split)")
        if task_id is None:
            ids = self.env.task_ids(split)
            if not ids:
                raise UnknownTask(f"{self.env.name}: split {split!r} has no tasks")
            task_id = ids[int(self.np_random.integers(len(ids)))]
        self.task_id = str(task_id)
        observation = self._run(self.env.reset(self.task_id))
        self._score = 0.0
        self._steps = 0
        self._over = False
        return observation, {"task_id": self.task_id}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._over:
            raise EnvError(f"{self.env.name}: step() before reset() or after the episode ended")
        if not isinstance(action, str):
            raise EnvError(f"{self.env.name}: the action must be a string, got {type(action).__name__}")
        result = self._run(self.env.step(action))
        self._steps += 1
        reward = result.reward - self._score
        self._score = result.reward
        cut = bool(result.info.get("truncated", False))
        terminated = result.done and not cut
        truncated = (result.done and cut) or (not result.done and self._steps >= self.env.max_steps)
        self._over = terminated or truncated
        info = {
            **result.info,
            "valid": result.valid,
            "score": result.reward,
            "raw_score": result.raw_score,
            "task_id": self.task_id,
        }
        return result.observation, reward, terminated, truncated, info

    def close(self) -> None:
        if self._loop.is_closed():
            return
        try:
            self._run(self.env.close())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
            self._loop.close()
