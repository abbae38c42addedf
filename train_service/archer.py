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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from core.domain.datasets import EmptyDatasetError
from core.domain.transitions import Transition
from train_service.archer_config import ArcherConfig
from train_service.archer_updates import ArcherLearner
from train_service.checkpoint import CheckpointMeta, existing_checkpoint, write_checkpoint
from train_service.hf_trainer import TrainingCancelled, TrainJob, TrainReport
from train_service.value_model import UtteranceCritic, save_critic

__all__ = ["ArcherConfig", "train_archer"]

log = logging.getLogger(__name__)


class ActorWithCritic:
    """What ``write_checkpoint`` saves: the actor's weights, then the critic in ``critic/``."""

    def __init__(self, actor: Any, critic: UtteranceCritic) -> None:
        self.actor, self.critic = actor, critic

    def save_pretrained(self, folder: str | Path) -> None:
        self.actor.save_pretrained(folder)
        save_critic(self.critic, Path(folder) / "critic")


def train_archer(
    job: TrainJob, transitions: Sequence[Transition], cfg: ArcherConfig | None = None
) -> TrainReport:
    """Train actor and critic on ``transitions``; the checkpoint (actor + ``critic/``) goes to
    ``job.out_dir``. Same contract as ``train_service.sft.train_sft`` (cancel, progress, retry reuse)."""
    cfg = cfg or ArcherConfig()
    out = Path(job.out_dir)
    if job.dataset_id and (found := existing_checkpoint(out, job.dataset_id)) is not None:
        return TrainReport(found, {}, reused=True)
    if not transitions:
        raise EmptyDatasetError("nothing to train ArCHer on: no transitions")
    learner = ArcherLearner(job.model_path, cfg)
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
        if job.on_step:
            job.on_step(step, total_steps, critic_losses[-1] if critic_losses else None)
        if job.should_stop is not None and job.should_stop():
            raise TrainingCancelled(
                f"ArCHer training of dataset {job.dataset_id or '?'} was cancelled at step {step}"
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
        iteration=job.iteration,
        dataset_id=job.dataset_id,
        base_model=str(job.model_path),
        config={"method": "archer", **cfg.to_dict()},
        run_id=job.run_id,
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
