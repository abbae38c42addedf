"""Owns the Env port: the interface every interactive text environment implements.

Environments are async so that HTTP-backed ones (AgentGym servers) and in-process ones (TextCraft,
ScienceWorld) look the same to the search; in-process ones simply never await anything slow.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


class EnvError(Exception):
    """An environment could not be opened or stopped answering (names the env and the cause)."""


class UnknownTask(EnvError):
    """A task id that the environment does not have."""


@dataclass(frozen=True)
class StepResult:
    observation: str
    reward: float  # normalised to [0, 1]
    done: bool
    valid: bool = True  # False when the environment could not execute the action
    raw_score: float | None = None  # the environment's own score before normalisation
    info: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Env(Protocol):
    name: str
    instruction: str  # system prompt: what the agent is and the action format
    max_steps: int  # per-episode step limit

    def task_ids(self, split: str = "test") -> list[str]:
        """Task ids of a named split ("train", "test", or env-specific names)."""
        ...

    async def reset(self, task_id: str) -> str:
        """Start task ``task_id``; returns the first observation (the task description)."""
        ...

    async def step(self, action: str) -> StepResult: ...

    async def clone(self) -> Env | None:
        """An independent copy in the same state, or None when the environment cannot clone."""
        ...

    async def close(self) -> None: ...
