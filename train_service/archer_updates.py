"""Owns ArCHer's updates: ``ArcherLearner`` (the actor, its frozen KL reference, the critic and its
target, both optimizers) with one method per update, and the losses' helpers.

* critic: ``critic_loss`` / ``critic_update``: double-Q TD towards ``r + gamma (1 - done) V^target(s')``
  plus V towards ``min Q^target`` (offline: IQL's ``expectile_loss`` at the logged action; online:
  squared error at an action the current actor samples), one optimizer step over accumulated
  batches, then the Polyak move of the target (``train_service.value_model.soft_update``);
* actor: ``advantages`` (``min Q - min V`` of the online critic), ``actor_loss`` /
  ``actor_update``: the turn's summed token log-probability (``turn_logps``: the chat-template masks
  of ``train_service.tokenize``, the labels' log-probs from ``train_service.dpo.token_logps``)
  weighted by ``awr_weights`` (offline) or the advantage (online REINFORCE), plus the k3 KL to the
  reference;
* ``sample_actions``: one action per state from the current actor (online mode); ``draw``: a
  replay batch, uniformly with replacement.

The schedule (warm-up, rounds, time budget, cancel) and the checkpoint are ``train_service.archer``'s.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import torch

from core.domain.trajectory import Message, TrainingSample
from core.domain.transitions import Transition
from core.llm.chat_template import hf_messages
from train_service.dpo import token_logps
from train_service.hf_trainer import load_causal_lm, load_tokenizer
from train_service.tokenize import IGNORE_INDEX, TokenizedSample, collate, tokenize_sample
from train_service.value_model import (
    CriticShape,
    UtteranceCritic,
    build_critic,
    encode_texts,
    soft_update,
    state_text,
    target_copy,
)

if TYPE_CHECKING:
    from train_service.archer_config import ArcherConfig

T = TypeVar("T")


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
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        torch.manual_seed(cfg.seed)
        self.tokenizer = load_tokenizer(model_path)
        self.actor: Any = load_causal_lm(model_path, bf16=False)
        self.reference: Any = None
        if cfg.kl_coef > 0:
            self.reference = load_causal_lm(model_path, bf16=False).eval()
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
        per_token = token_logps(logits, batch["labels"])
        return per_token.sum(-1), per_token

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

    def draw(self, data: Sequence[T]) -> list[T]:
        """A replay batch: ``batch_size`` items drawn uniformly with replacement."""
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
        self,
        histories: Sequence[tuple[Message, ...]],
        actions: Sequence[str],
        advantages: torch.Tensor,
        objective: str | None = None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """``objective`` (default: the config's): "awr" weights by exp(beta A), "pg" by A itself."""
        batch = self.turn_batch(histories, actions)
        logp, per_token = self.turn_logps(self.actor, batch)
        if (objective or self.cfg.actor_objective) == "awr":
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
        """One actor optimizer step over ``batches``: logged actions (awr) or sampled ones (pg),
        weighted by the critic's advantage."""

        def pick(batch: Sequence[Transition]) -> tuple[list[tuple[Message, ...]], list[str], torch.Tensor]:
            histories = [t.state_messages() for t in batch]
            if self.cfg.actor_objective == "pg" and self.cfg.mode == "online":
                actions = self.sample_actions(histories)
            else:
                actions = [t.action_text() for t in batch]
            return histories, actions, self.advantages(histories, actions)

        return self._actor_step(batches, pick, self.cfg.actor_objective)

    def weighted_update(self, batches: Sequence[Sequence[tuple[Transition, float]]]) -> dict[str, float]:
        """One actor step on LOGGED actions with given weights and no critic: the online baselines
        (REINFORCE: the episode's return minus the round's mean; filtered BC: 1 on successes)."""

        def pick(
            batch: Sequence[tuple[Transition, float]],
        ) -> tuple[list[tuple[Message, ...]], list[str], torch.Tensor]:
            histories = [t.state_messages() for t, _ in batch]
            actions = [t.action_text() for t, _ in batch]
            return histories, actions, torch.tensor([w for _, w in batch], dtype=torch.float32)

        return self._actor_step(batches, pick, "pg")

    def _actor_step(self, batches: Sequence[Any], pick: Any, objective: str) -> dict[str, float]:
        started = time.monotonic()
        self.actor.train()
        self.actor_opt.zero_grad()
        info = {"pg_loss": 0.0, "kl": 0.0, "advantage": 0.0}
        for batch in batches:
            histories, actions, adv = pick(batch)
            loss, parts = self.actor_loss(histories, actions, adv, objective)
            (loss / len(batches)).backward()
            for k in info:
                info[k] += parts[k] / len(batches)
        torch.nn.utils.clip_grad_norm_(self.actor.parameters(), self.cfg.max_grad_norm)
        self.actor_opt.step()
        self.actor_seconds += time.monotonic() - started
        return info
