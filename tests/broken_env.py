"""A deliberately broken environment (for ``agentr env check`` tests): every fault the Env contract
names, each switchable so a test can show the check naming exactly the fault it planted.

Faults: ``nondeterministic`` (reset observation changes each time), ``reward`` (step reward 5.0),
``shared_clone`` (clone shares its state with the original), ``unknown`` (unknown task ids answer an
observation instead of raising UnknownTask), ``close`` (close raises).
"""

from __future__ import annotations

import itertools

from core.envs.base import StepResult

_COUNTER = itertools.count()


class BrokenEnv:
    name = "broken"
    instruction = "Say go."
    max_steps = 5

    def __init__(self, faults: set[str]) -> None:
        self.faults = faults
        self.state = {"steps": 0}

    def task_ids(self, split: str = "test") -> list[str]:
        return ["a", "b"]

    def reset(self, task_id: str) -> str:
        if task_id not in ("a", "b") and "unknown" not in self.faults:
            from core.envs.base import UnknownTask

            raise UnknownTask(f"broken: unknown task id {task_id!r}")
        self.state = {"steps": 0} if "shared_clone" not in self.faults else self.state
        self.state["steps"] = 0
        suffix = f" #{next(_COUNTER)}" if "nondeterministic" in self.faults else ""
        return f"Task {task_id}{suffix}"

    def step(self, action: str) -> StepResult:
        self.state["steps"] += 1
        reward = 5.0 if "reward" in self.faults else 0.0
        return StepResult(f"step {self.state['steps']}: {action}", reward, False)

    def clone(self) -> BrokenEnv:
        twin = BrokenEnv(self.faults)
        twin.state = self.state if "shared_clone" in self.faults else dict(self.state)
        return twin

    def close(self) -> None:
        if "close" in self.faults:
            raise RuntimeError("broken: cannot close")


def make(faults: str = "") -> BrokenEnv:
    """``python:tests.broken_env:make?faults=reward,close``."""
    return BrokenEnv({f for f in faults.split(",") if f})


def not_an_env() -> object:
    """A factory whose product has none of the Env methods."""
    return object()
