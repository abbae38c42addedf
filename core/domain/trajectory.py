"""Owns the trajectory value objects: messages with loss weights, steps, and whole trajectories.

A trajectory is what the dataset is made of: a system instruction, the task observation, then
alternating assistant turns ("Thought: ...\\nAction: ...") and user observations. Each message
carries a loss weight (0 = context only, 1 = trained on).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Role = Literal["system", "user", "assistant"]


@dataclass(frozen=True)
class Message:
    role: Role
    content: str
    weight: int = 0  # 1 = this assistant message contributes to the loss


@dataclass(frozen=True)
class Step:
    """One agent turn: what it thought, the action it took, and what the environment answered."""

    thought: str
    action: str
    observation: str
    reward: float = 0.0
    done: bool = False
    valid: bool = True


@dataclass(frozen=True)
class Trajectory:
    """A task and the steps taken on it, with the final reward in [0, 1] (None when unknown)."""

    task: str  # the task observation (first user message)
    instruction: str  # the system instruction describing the action format
    steps: tuple[Step, ...]
    reward: float | None = None
    provenance: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TrainingSample:
    """A ready-to-train conversation: messages with per-message loss weights and provenance."""

    sample_id: str
    kind: Literal["revision", "good", "general"]
    messages: tuple[Message, ...]
    reward: float | None = None
    provenance: dict[str, Any] = field(default_factory=dict)
