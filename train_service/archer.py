"""Owns ArCHer (Zhou et al. 2024): its config, critic (TD) and actor (token PG) updates, ``train_archer``.

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

Defaults are the ArCHer code's (``scripts/config/default.yaml``: gamma 0.95, tau 0.1, critic lr
1e-5, actor lr 1e-6, 5 critic and 3 actor epochs, warm-up 20 iterations, batch 4 x 64
accumulation, max grad norm 1.0, temperature 1.0, 32 new tokens), IQL's for the offline parts
(expectile 0.7, AWR inverse temperature 3, weights capped at 100); the iteration count and a time
budget are the caller's (a CPU run sets them small). The checkpoint is the actor (``save_pretrained``
+ tokenizer + ``meta.json``) with the critic in ``critic/`` (what the ``value`` critic strategy
loads). Runs in one process (``train.launcher`` torchrun is refused for this method).
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from core.domain.datasets import EmptyDatasetError
from core.domain.trajectory import Message, TrainingSample
from core.domain.transitions import Transition
from core.llm.chat_template import check_template, hf_messages
from train_service.checkpoint import CheckpointMeta, existing_checkpoint, write_checkpoint
from train_service.sft import TrainingCancelled, TrainReport
from train_service.tokenize import IGNORE_INDEX, TokenizedSample, collate, tokenize_sample
from train_service.value_model import (
    CriticShape,
    UtteranceCritic,
    build_critic,
    encode_texts,
    save_critic,
    soft_update,
    state_text,
    target_copy,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ArcherConfig:
    """Every knob of one ArCHer run (see the module docstring for where each default comes from).

    mode: "offline" (IQL-style V, AWR actor on logged actions) or "online" (V on Q at actions the
        actor samples, REINFORCE with the critic's baseline).
    iterations: rounds of (critic_epochs critic updates [+ actor_epochs actor updates]).
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
    seed: replay sampling, head init, generation. time_budget_s: stop after this many seconds.
    """

    mode: Literal["offline", "online"] = "offline"
    iterations: int = 40
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

    def __post_init__(self) -> None:
        problems = []
        if self.mode not in ("offline", "online"):
            problems.append(f"mode must be 'offline' or 'online', got {self.mode!r}")
        if self.actor_loss not in ("auto", "awr", "pg"):
            problems.append(f"actor_loss must be auto, awr or pg, got {self.actor_loss!r}")
        for name in ("iterations", "batch_size", "grad_accumulation", "max_new_tokens", "head_hidden"):
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
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"ArcherConfig: unknown field(s) {sorted(unknown)}")
        return cls(**data)


def expectile_loss(diff: torch.Tensor, expectile: float) -> torch.Tensor:
    """IQL's asymmetric square: mean(|expectile - 1(diff < 0)| * diff^2), diff = target - prediction."""
    weight = torch.where(diff < 0, 1.0 - expectile, expectile)
    return (weight * diff.pow(2)).mean()


def awr_weights(advantages: torch.Tensor, beta: float, max_weight: float) -> torch.Tensor:
    return torch.exp(beta * advantages).clamp(max=max_weight)


def _left_cut(sample: TokenizedSample, max_length: int) -> TokenizedSample:
    if len(sample.input_ids) <= max_length:
        return sample
    ids, labels = sample.input_ids[-max_length:], list(sample.labels[-max_length:])
    labels[0] = IGNORE_INDEX
    return TokenizedSample(ids, labels, None, sample.sample_ids)


class ArcherLearner:
    """The actor, its critic and their optimizers; one method per update (module docstring)."""

    def __init__(self, model_path: str | Path, cfg: ArcherConfig) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        torch.manual_seed(cfg.seed)
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        check_template(self.tokenizer)
        self.actor: Any = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
        self.actor.config.use_cache = False
        self.reference: Any = None
        if cfg.kl_coef > 0:
            self.reference = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
            for p in self.reference.parameters():
                p.requires_grad_(False)
        shape = CriticShape(cfg.head_hidden, cfg.max_state_tokens, cfg.max_action_tokens)
        self.critic: UtteranceCritic = build_critic(model_path, shape, cfg.seed)
        self.target: UtteranceCritic = target_copy(self.critic)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=cfg.critic_lr)
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=cfg.actor_lr)
        self.actor_tokens = 0
        self.actor_seconds = 0.0
        self.critic_seconds = 0.0

    # ------------------------------------------------------------------ inputs
    def _states(self, histories: Sequence[tuple[Message, ...]]) -> dict[str, torch.Tensor]:
        texts = [state_text(self.tokenizer, h) for h in histories]
        return encode_texts(self.tokenizer, texts, self.cfg.max_state_tokens, left=True)

    def _actions(self, actions: Sequence[str]) -> dict[str, torch.Tensor]:
        return encode_texts(self.tokenizer, actions, self.cfg.max_action_tokens, left=False)

    def turn_batch(self, histories: Sequence[tuple[Message, ...]], actions: Sequence[str]) -> dict[str, Any]:
        """History + one assistant turn per row; labels only on the turn's tokens."""
        rows = []
        for i, (history, action) in enumerate(zip(histories, actions, strict=True)):
            sample = TrainingSample(f"turn-{i}", "good", (*history, Message("assistant", action, 1)))
            rows.append(_left_cut(tokenize_sample(self.tokenizer, sample), self.cfg.max_length))
        return collate(rows, self.tokenizer.pad_token_id)

    def turn_logps(self, model: Any, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """(sum of the turn's token log-probs [B], per-token log-probs [B, T-1] masked)."""
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        labels = batch["labels"]
        shifted = labels[:, 1:].clone()
        mask = shifted != IGNORE_INDEX
        shifted[~mask] = 0
        per_token = torch.gather(
            torch.log_softmax(logits[:, :-1].float(), -1), 2, shifted.unsqueeze(-1)
        ).squeeze(-1)
        return (per_token * mask).sum(-1), per_token * mask

    @torch.no_grad()
    def sample_actions(self, histories: Sequence[tuple[Message, ...]]) -> list[str]:
        """One action per state from the current actor (sampled at ``temperature``)."""
        tok = self.tokenizer
        prompts = [
            tok.apply_chat_template(hf_messages(h), add_generation_prompt=True, tokenize=False)
            for h in histories
        ]
        side = tok.padding_side
        tok.padding_side = "left"
        try:
            enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        finally:
            tok.padding_side = side
        ids = enc["input_ids"][:, -self.cfg.max_length :]
        mask = enc["attention_mask"][:, -self.cfg.max_length :]
        self.actor.config.use_cache = True
        out = self.actor.generate(
            input_ids=ids,
            attention_mask=mask,
            do_sample=True,
            temperature=self.cfg.temperature,
            max_new_tokens=self.cfg.max_new_tokens,
            pad_token_id=tok.pad_token_id,
        )
        self.actor.config.use_cache = False
        return [str(tok.decode(row[ids.shape[1] :], skip_special_tokens=True)).strip() for row in out]

    def _draw(self, data: Sequence[Transition]) -> list[Transition]:
        return [data[self.rng.randrange(len(data))] for _ in range(self.cfg.batch_size)]

    # ------------------------------------------------------------------ critic
    def critic_loss(self, batch: Sequence[Transition]) -> tuple[torch.Tensor, dict[str, float]]:
        cfg = self.cfg
        histories = [t.state_messages() for t in batch]
        states = self._states(histories)
        actions = self._actions([t.action_text() for t in batch])
        q1, q2, v1, v2 = self.critic(states, actions)
        reward = torch.tensor([t.reward for t in batch], dtype=torch.float32)
        done = torch.tensor([float(t.done) for t in batch])
        with torch.no_grad():
            next_v1, next_v2 = torch.zeros(len(batch)), torch.zeros(len(batch))
            live = [i for i, t in enumerate(batch) if not t.done]
            if live:
                nv1, nv2 = self.target.values(self._states([batch[i].next_state_messages() for i in live]))
                next_v1[live], next_v2[live] = nv1, nv2
            y1 = reward + cfg.gamma * (1 - done) * next_v1
            y2 = reward + cfg.gamma * (1 - done) * next_v2
            if cfg.mode == "online":
                pi = self._actions(self.sample_actions(histories))
                tq1, tq2, _, _ = self.target(states, pi)
            else:
                tq1, tq2, _, _ = self.target(states, actions)
            v_target = torch.minimum(tq1, tq2)
        q_loss = torch.nn.functional.mse_loss(q1, y1) + torch.nn.functional.mse_loss(q2, y2)
        if cfg.mode == "online":
            v_loss = torch.nn.functional.mse_loss(v1, v_target) + torch.nn.functional.mse_loss(v2, v_target)
        else:
            v_loss = expectile_loss(v_target - v1, cfg.expectile) + expectile_loss(
                v_target - v2, cfg.expectile
            )
        return q_loss + v_loss, {"q_loss": float(q_loss.detach()), "v_loss": float(v_loss.detach())}

    def critic_update(self, batches: Sequence[Sequence[Transition]]) -> float:
        """One optimizer step over ``batches`` (gradient accumulation), then the target's soft update."""
        started = time.monotonic()
        self.critic.train()
        self.critic_opt.zero_grad()
        total = 0.0
        for batch in batches:
            loss, _ = self.critic_loss(batch)
            (loss / len(batches)).backward()
            total += float(loss.detach()) / len(batches)
        torch.nn.utils.clip_grad_norm_(self.critic.parameters(), self.cfg.max_grad_norm)
        self.critic_opt.step()
        soft_update(self.target, self.critic, self.cfg.tau)
        self.critic_seconds += time.monotonic() - started
        return total

    # ------------------------------------------------------------------ actor
    @torch.no_grad()
    def advantages(self, histories: Sequence[tuple[Message, ...]], actions: Sequence[str]) -> torch.Tensor:
        """A = min(Q1, Q2)(s, a) - min(V1, V2)(s) from the online critic."""
        self.critic.eval()
        q1, q2, v1, v2 = self.critic(self._states(histories), self._actions(actions))
        return torch.minimum(q1, q2) - torch.minimum(v1, v2)

    def actor_loss(
        self, histories: Sequence[tuple[Message, ...]], actions: Sequence[str], advantages: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, float]]:
        batch = self.turn_batch(histories, actions)
        logp, per_token = self.turn_logps(self.actor, batch)
        if self.cfg.actor_objective == "awr":
            weights = awr_weights(advantages, self.cfg.awr_beta, self.cfg.awr_max_weight)
        else:
            weights = advantages
        loss = -(weights.detach() * logp).mean()
        kl = torch.zeros(())
        if self.reference is not None:
            with torch.no_grad():
                _, ref_token = self.turn_logps(self.reference, batch)
            mask = batch["labels"][:, 1:] != IGNORE_INDEX
            delta = (ref_token - per_token)[mask]  # log(ref / pi) per turn token
            kl = (torch.exp(delta) - delta - 1).mean()
            loss = loss + self.cfg.kl_coef * kl
        self.actor_tokens += int(batch["attention_mask"].sum())
        return loss, {
            "pg_loss": float(loss.detach()),
            "kl": float(kl.detach()),
            "advantage": float(advantages.mean()),
        }

    def actor_update(self, batches: Sequence[Sequence[Transition]]) -> dict[str, float]:
        """One actor optimizer step over ``batches``: logged actions (awr) or sampled ones (pg)."""
        started = time.monotonic()
        self.actor.train()
        self.actor_opt.zero_grad()
        info = {"pg_loss": 0.0, "kl": 0.0, "advantage": 0.0}
        for batch in batches:
            histories = [t.state_messages() for t in batch]
            if self.cfg.actor_objective == "pg" and self.cfg.mode == "online":
                actions = self.sample_actions(histories)
            else:
                actions = [t.action_text() for t in batch]
            adv = self.advantages(histories, actions)
            loss, parts = self.actor_loss(histories, actions, adv)
            (loss / len(batches)).backward()
            for k in info:
                info[k] += parts[k] / len(batches)
        torch.nn.utils.clip_grad_norm_(self.actor.parameters(), self.cfg.max_grad_norm)
        self.actor_opt.step()
        self.actor_seconds += time.monotonic() - started
        return info


class _ActorWithCritic:
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
    on_step: Callable[[int, int, float | None], None] | None = None,
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
            batches = [learner._draw(transitions) for _ in range(cfg.grad_accumulation)]
            critic_losses.append(learner.critic_update(batches))
            step += 1
            if out_of_time := after_update():
                break
        if not out_of_time and round_index >= cfg.warmup_iters:
            for _ in range(cfg.actor_epochs):
                batches = [learner._draw(transitions) for _ in range(cfg.grad_accumulation)]
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
    path = write_checkpoint(_ActorWithCritic(learner.actor, learner.critic), learner.tokenizer, out, meta)
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
