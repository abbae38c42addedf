"""Owns RunConfig: everything a Run needs to know, with documented defaults (pure, stdlib only).

A Run is N iterations of search -> critic -> splice -> dataset -> train -> evaluate. The API accepts
this shape (api/schemas.py mirrors it with pydantic for validation and OpenAPI), RunRequested carries
it serialised, and every worker reads it back with ``RunConfig.from_data``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from core.domain.serde import from_dict, to_dict


@dataclass(frozen=True)
class RunConfig:
    env: str = "textcraft"
    """Environment URI (``textcraft``, ``sciworld``, ``agentgym+http://HOST:PORT/NAME``)."""
    model: str = ""
    """Starting model: a local model folder or an OpenAI-compatible base URL."""
    tasks: tuple[str, ...] = ()
    """Explicit task ids to search; empty means ``split`` (cut to ``max_tasks``)."""
    split: str = "train"
    """Named task split used when ``tasks`` is empty."""
    max_tasks: int | None = None
    """Cap on the number of tasks per iteration (first ones of the split, in its order)."""
    eval_tasks: tuple[str, ...] = ()
    """Held-out task ids for evaluation; empty means ``eval_split``."""
    eval_split: str = "test"
    """Named split used for evaluation when ``eval_tasks`` is empty."""
    max_eval_tasks: int | None = 20
    """Cap on evaluation tasks."""
    iterations: int = 3
    """Number of search -> train iterations."""
    alpha_schedule: tuple[float, ...] = (0.5, 0.7, 1.0)
    """Good-trajectory threshold per iteration (inclusive); the last value repeats."""
    beta: float = 0.2
    """A bad leaf's reward must be at most good reward - beta."""
    eta: float = 0.2
    """Share of general chat data in the final training mix (see core/domain/datasets.py)."""
    general_data: str | None = None
    """Path to general chat data (ShareGPT or OpenAI JSONL); None = no general data."""
    search: dict[str, Any] = field(default_factory=dict)
    """Overrides of the search configuration (n_candidates, iterations, max_depth, c_uct, ...)."""
    critic: dict[str, Any] = field(default_factory=lambda: {"strategy": "model"})
    """Critic settings: ``strategy`` in model | direct | rules."""
    splice: dict[str, Any] = field(default_factory=lambda: {"verify": True, "keep_unverified": False})
    """Splicer settings: replay verification and whether unverified samples are kept."""
    train: dict[str, Any] = field(default_factory=dict)
    """Overrides of the SFT configuration (epochs, learning_rate, ...)."""
    evaluation: dict[str, Any] = field(default_factory=dict)
    """Overrides of the evaluation (max_steps, max_tokens, recovery_episodes, baseline, ...)."""
    data_only: bool = False
    """Stop each iteration once its dataset is ready (no training): for teams that train elsewhere."""
    seed: int = 0
    """Seed of everything random in the run."""

    def alpha(self, iteration: int) -> float:
        schedule = self.alpha_schedule or (1.0,)
        return schedule[min(iteration, len(schedule) - 1)]

    def to_data(self) -> dict[str, Any]:
        return to_dict(self)  # type: ignore[no-any-return]

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> RunConfig:
        return from_dict(cls, data)
