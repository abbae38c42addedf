"""Owns ArCHer (Zhou et al. 2024): its config, the training schedule and checkpoint, ``train_archer``.

The updates themselves (critic TD, actor token PG / AWR with the KL guard, online sampling) are
``train_service.archer_updates.ArcherLearner``'s; the critic network is ``train_service.value_model``'s.

Hierarchical actor-critic on utterance-level transitions (``core.domain.transitions``):

* HIGH level, the critic (``train_service.value_model``): double Q(s, a) and V(s) heads with a
  Polyak-averaged target copy. Each critic update draws ``batch_size * grad_accumulation``
  transitions (uniformly, with replacement: a replay buffer), and minimises
  ``(Q_i(s, a) - [r + gamma * (1 - done) * V_i^target(s')])^2`` plus a V loss:
  offline (``mode = "offline"``, default: the log is the data, no fresh samples) the IQL expectile
  loss of ``V_i(s)`` towards ``min(Q_1^target, Q_2^target)(s, a_data)`` with expectile ``expectile``;
  online (``mode = "online"``, the paper's rule) the squared error of ``V_i(s)`` towards
  ``min Q^target(s, a_pi)`` at an action the CURRENT actor samples in s. After every critic
  optimizer step the target moves: ``target <- (1 - tau) target + tau online``.
* LOW level, the actor: a token-level policy gradient inside each turn. ``log pi(a | s)`` is the sum
  of the turn's token log-probabilities, with the turn's tokens found by the chat-template masking
  of ``train_service.tokenize`` (history = context). Its weight is the critic's advantage of the
  turn, ``A = min(Q_1, Q_2)(s, a) - min(V_1, V_2)(s)``: offline, advantage-weighted regression on
  the logged action (weight ``min(exp(awr_beta * A), awr_max_weight)``); online, REINFORCE with the
  critic's baseline on an action the actor samples (weight ``A``). ``actor_loss`` can force
  either. Guard: a per-token KL penalty (the k3 estimator) to the frozen starting actor,
  ``kl_coef``; 0 disables it (and loads no reference).
* Schedule: ``iterations`` rounds, each ``critic_epochs`` critic updates then, after
  ``warmup_iters`` critic-only rounds (the paper's warm-up), ``actor_epochs`` actor updates.
  Cancellation and ``time_budget_s`` are checked after every update.

Two modes: ``online`` is the paper's (in a run, ``train_service.archer_online`` plays episodes in
the environment every round into a replay buffer; ``train_archer`` below runs the same updates on a
fixed set of transitions); ``offline`` is ours (IQL + AWR on the logged tree edges). Defaults are
the ArCHer code's (``scripts/config/default.yaml``: gamma 0.95, tau 0.1, critic lr 1e-5, actor lr
1e-6, 5 critic and 3 actor epochs, warm-up 20 iterations, batch 4 x 64 accumulation, max grad norm
1.0, temperature 1.0, 32 new tokens, 2000 iterations, rollout size 32, capacity 10000), IQL's for
the offline parts (expectile 0.7, AWR inverse temperature 3, weights capped at 100); a CPU run sets
the rounds and sizes small (docs/learners.md). The checkpoint is the actor (``save_pretrained``
+ tokenizer + ``meta.json``) with the critic in ``critic/`` (what the ``value`` critic strategy
loads). Runs in one process (``train.launcher`` torchrun is refused for this method).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from core.domain.datasets import EmptyDatasetError
from core.domain.transitions import Transition
from train_service.archer_updates import ArcherLearner
from train_service.checkpoint import CheckpointMeta, existing_checkpoint, write_checkpoint
from train_service.hf_trainer import StepReport, TrainingCancelled, TrainReport, check_fields
from train_service.value_model import UtteranceCritic, save_critic

log = logging.getLogger(__name__)


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


class ActorWithCritic:
    """What ``write_checkpoint`` saves: the actor's weights, then the critic in ``critic/``."""

    def __init__(self, actor: Any, critic: UtteranceCritic) -> None:
        self.actor, self.critic = actor, critic

    def save_pretrained(self, folder: str | Path) -> None:
        self.actor.save_pretrained(folder)
        save_critic(self.critic, Path(folder) / "critic")


def train_archer(
    model_path: str | Path,
    transitions: Sequence[Transition],
    out_dir: str | Path,
    cfg: ArcherConfig | None = None,
    *,
    iteration: int = 0,
    dataset_id: str = "",
    run_id: str | None = None,
    should_stop: Callable[[], bool] | None = None,
    on_step: StepReport | None = None,
) -> TrainReport:
    """Train actor and critic on ``transitions``; the checkpoint (actor + ``critic/``) goes to
    ``out_dir``. Same contract as ``train_service.sft.train_sft`` (cancel, progress, retry reuse)."""
    cfg = cfg or ArcherConfig()
    out = Path(out_dir)
    if dataset_id and (found := existing_checkpoint(out, dataset_id)) is not None:
        return TrainReport(found, {}, reused=True)
    if not transitions:
        raise EmptyDatasetError("nothing to train ArCHer on: no transitions")
    learner = ArcherLearner(model_path, cfg)
    per_round = cfg.critic_epochs + cfg.actor_epochs
    total_steps = (
        cfg.iterations * cfg.critic_epochs + max(0, cfg.iterations - cfg.warmup_iters) * cfg.actor_epochs
    )
    started = time.monotonic()
    critic_losses: list[float] = []
    actor_info: list[dict[str, float]] = []
    step = 0
    out_of_time = False

    def after_update() -> bool:
        """Progress, then cancel (raises) and the time budget (True = stop), after every update."""
        if on_step:
            on_step(step, total_steps, critic_losses[-1] if critic_losses else None)
        if should_stop is not None and should_stop():
            raise TrainingCancelled(
                f"ArCHer training of dataset {dataset_id or '?'} was cancelled at step {step}"
            )
        return cfg.time_budget_s is not None and time.monotonic() - started >= cfg.time_budget_s

    for round_index in range(cfg.iterations):
        for _ in range(cfg.critic_epochs):
            batches = [learner.draw(transitions) for _ in range(cfg.grad_accumulation)]
            critic_losses.append(learner.critic_update(batches))
            step += 1
            if out_of_time := after_update():
                break
        if not out_of_time and round_index >= cfg.warmup_iters:
            for _ in range(cfg.actor_epochs):
                batches = [learner.draw(transitions) for _ in range(cfg.grad_accumulation)]
                actor_info.append(learner.actor_update(batches))
                step += 1
                if out_of_time := after_update():
                    break
        if out_of_time:
            break
    seconds = time.monotonic() - started
    critic_updates = len(critic_losses)
    metrics: dict[str, Any] = {
        "method": "archer",
        "mode": cfg.mode,
        "actor_objective": cfg.actor_objective,
        "transitions": len(transitions),
        "critic_updates": critic_updates,
        "actor_updates": len(actor_info),
        "steps": step,
        "rounds_per_step": per_round,
        "td_loss_first": critic_losses[0] if critic_losses else None,
        "td_loss_last": critic_losses[-1] if critic_losses else None,
        "advantage_mean_last": actor_info[-1]["advantage"] if actor_info else None,
        "kl_last": actor_info[-1]["kl"] if actor_info else None,
        "critic_updates_per_s": round(critic_updates / max(learner.critic_seconds, 1e-9), 3),
        "actor_tokens_per_s": round(learner.actor_tokens / max(learner.actor_seconds, 1e-9), 1)
        if actor_info
        else None,
        "seconds": round(seconds, 3),
        "stopped_by_time_budget": out_of_time,
    }
    learner.actor.config.use_cache = True
    meta = CheckpointMeta(
        iteration=iteration,
        dataset_id=dataset_id,
        base_model=str(model_path),
        config={"method": "archer", **cfg.to_dict()},
        run_id=run_id,
        metrics=metrics,
    )
    path = write_checkpoint(ActorWithCritic(learner.actor, learner.critic), learner.tokenizer, out, meta)
    log.info(
        "ArCHer: %d critic / %d actor updates in %.1fs (TD loss %.4f -> %.4f): checkpoint %s",
        critic_updates,
        len(actor_info),
        seconds,
        metrics["td_loss_first"] or math.nan,
        metrics["td_loss_last"] or math.nan,
        path,
    )
    return TrainReport(path, metrics)
