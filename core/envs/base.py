"""Owns the Env port: the interface every interactive text environment implements.

Environments are async so that HTTP-backed ones (AgentGym servers) and in-process ones (TextCraft,
ScienceWorld) look the same to the search; in-process ones simply never await anything slow.

Action space (optional): an environment MAY also implement ``ActionSpace``: ``valid_actions()``,
the actions it accepts in its CURRENT state, at most ``MAX_VALID_ACTIONS`` of them, or None when it
cannot list them for this state (a free-text action such as WebShop's search, a server without an
actions endpoint). Constrained decoding (``search.constrain_actions`` / ``evaluation.
constrain_actions``, docs/constrained-decoding.md) limits the model's Action line to that list;
``valid_actions_of(env)`` asks any Env, answering None for one without the capability.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

MAX_VALID_ACTIONS = 512
"""Most actions ``valid_actions()`` lists for one state (a longer list is cut, see each env)."""


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


@runtime_checkable
class ActionSpace(Protocol):
    """Optional Env capability: the actions the environment accepts in its current state."""

    async def valid_actions(self) -> list[str] | None:
        """Distinct actions (at most ``MAX_VALID_ACTIONS``) the environment would accept now, or
        None when it cannot list them for this state."""
        ...


async def valid_actions_of(env: object) -> list[str] | None:
    """``env.valid_actions()`` when the environment has the capability, else None."""
    method = getattr(env, "valid_actions", None)
    if not callable(method):
        return None
    actions = await method()
    if actions is None:
        return None
    return list(dict.fromkeys(str(a) for a in actions if str(a).strip()))[:MAX_VALID_ACTIONS]
