"""Owns ArCHer's knobs: ``ArcherConfig`` (every setting of one run, checked; the defaults and where
each comes from are in ``train_service.archer``'s docstring). Shared by the schedule
(``train_service.archer``) and the updates (``train_service.archer_updates``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from train_service.hf_trainer import check_fields


@dataclass(frozen=True)
class ArcherConfig:
    """Every knob of one ArCHer run (see the module docstring for where each default comes from).

    mode: "offline" (ours: IQL-style V, AWR actor on the logged edges of the iteration's trees) or
        "online" (the paper's: V on Q at actions the actor samples, REINFORCE with the critic's
        baseline; in a run every round first plays ``rollout_episodes`` episodes in the environment,
        ``train_service.archer_online``).
    iterations: rounds of ([rollouts +] critic_epochs critic updates [+ actor_epochs actor updates]).
    warmup_iters: rounds of critic updates only before the actor is updated.
    critic_epochs / actor_epochs: optimizer steps of each per round.
    batch_size: transitions per forward pass. grad_accumulation: forward passes per optimizer step.
    gamma: discount per turn. tau: Polyak rate of the target critic.
    critic_lr / actor_lr: Adam learning rates. max_grad_norm: gradient clipping of both.
    expectile: offline V expectile (0.5 = mean regression).
    actor_loss: "auto" (awr offline, pg online), "awr" or "pg".
    awr_beta: AWR inverse temperature. awr_max_weight: cap on AWR weights.
    kl_coef: per-token KL penalty to the frozen starting actor (0 = off).
    temperature / max_new_tokens: sampling of actor actions (online mode).
    head_hidden / max_state_tokens / max_action_tokens: critic shape (train_service.value_model).
    max_length: tokens of history + turn for the actor (the history is cut from the left).
    seed: replay sampling, head init, generation. time_budget_s: stop after this many seconds (a
        safety cap; comparisons use the step budgets).
    rollout_episodes: episodes the actor plays per round (online; ArCHer's ``rollout_size``).
    buffer_capacity: transitions the replay buffer keeps, oldest dropped first (ArCHer's ``capacity``).
    episode_max_steps: actions per rollout episode before it is cut (ours: the environment's horizon).
    env_steps_budget / optimizer_steps_budget: stop after the round that reaches this many
        environment actions / critic + actor optimizer steps (online; null = no limit).
    """

    mode: Literal["offline", "online"] = "offline"
    iterations: int = 2000
    warmup_iters: int = 20
    critic_epochs: int = 5
    actor_epochs: int = 3
    batch_size: int = 4
    grad_accumulation: int = 64
    gamma: float = 0.95
    tau: float = 0.1
    critic_lr: float = 1e-5
    actor_lr: float = 1e-6
    max_grad_norm: float = 1.0
    expectile: float = 0.7
    actor_loss: Literal["auto", "awr", "pg"] = "auto"
    awr_beta: float = 3.0
    awr_max_weight: float = 100.0
    kl_coef: float = 0.05
    temperature: float = 1.0
    max_new_tokens: int = 32
    head_hidden: int = 1024
    max_state_tokens: int = 512
    max_action_tokens: int = 64
    max_length: int = 1024
    seed: int = 0
    time_budget_s: float | None = None
    rollout_episodes: int = 32
    buffer_capacity: int = 10_000
    episode_max_steps: int = 20
    env_steps_budget: int | None = None
    optimizer_steps_budget: int | None = None

    def __post_init__(self) -> None:
        problems = []
        if self.mode not in ("offline", "online"):
            problems.append(f"mode must be 'offline' or 'online', got {self.mode!r}")
        if self.actor_loss not in ("auto", "awr", "pg"):
            problems.append(f"actor_loss must be auto, awr or pg, got {self.actor_loss!r}")
        for name in (
            "iterations",
            "batch_size",
            "grad_accumulation",
            "max_new_tokens",
            "head_hidden",
            "rollout_episodes",
            "buffer_capacity",
            "episode_max_steps",
        ):
            if getattr(self, name) < 1:
                problems.append(f"{name} must be >= 1")
        for name in ("warmup_iters", "critic_epochs", "actor_epochs"):
            if getattr(self, name) < 0:
                problems.append(f"{name} must be >= 0")
        if not 0 <= self.gamma <= 1:
            problems.append("gamma must be in [0, 1]")
        if not 0 < self.tau <= 1:
            problems.append("tau must be in (0, 1]")
        if not 0 < self.expectile < 1:
            problems.append("expectile must be in (0, 1)")
        for name in ("critic_lr", "actor_lr", "max_grad_norm", "awr_beta", "awr_max_weight", "temperature"):
            if not getattr(self, name) > 0:
                problems.append(f"{name} must be > 0")
        if self.kl_coef < 0:
            problems.append("kl_coef must be >= 0")
        if self.max_state_tokens < 8 or self.max_action_tokens < 4 or self.max_length < 16:
            problems.append("max_state_tokens >= 8, max_action_tokens >= 4 and max_length >= 16 are needed")
        for name in ("env_steps_budget", "optimizer_steps_budget"):
            value = getattr(self, name)
            if value is not None and value < 1:
                problems.append(f"{name} must be >= 1 or null")
        if self.time_budget_s is not None and self.time_budget_s <= 0:
            problems.append("time_budget_s must be > 0")
        if problems:
            raise ValueError("invalid ArcherConfig: " + "; ".join(problems))

    @property
    def actor_objective(self) -> str:
        if self.actor_loss != "auto":
            return self.actor_loss
        return "awr" if self.mode == "offline" else "pg"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ArcherConfig:
        check_fields(cls, data)
        return cls(**data)
