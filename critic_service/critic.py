"""Owns the critic strategies: who judges the bad path's actions, and at what cost in tokens.

- ``model``: the current actor judges each action after the divergence node, in order, given the
  task and the history (ReAct layout from ``core.llm.prompts``) plus one question; the verdict is the
  argmax of ``Policy.score_labels`` over Good / Bad / Uncertain (deterministic, no sampling).
  Two execution plans, same prompts and same verdicts:
    * ``prefix`` (default when the policy is a local HF model): the conversations of consecutive
      steps share their history, so the history's KV cache is computed ONCE and each step only adds
      its new action/observation plus the question (early exit at the first "bad" by default);
    * ``batched``: all steps' conversations in ONE ``score_labels`` call (any Policy, e.g. an
      OpenAI-compatible server).
  ``tokens_processed`` counts the tokens the model actually ran a forward pass over. Each prompt
  fits the model's context when the policy tells it (oldest whole steps dropped, room left for the
  longest label).
- ``direct``: the Direct-Revision baseline (t' = the last action).
- ``rules``: invalid-action observations, tool errors and action loops (core.domain.critic).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

from core.domain.critic import (
    LABEL_WORDS,
    LABELS,
    direct_verdicts,
    judged_range,
    label_from_scores,
    rule_verdicts,
    transition_index,
    verdict_from_scores,
)
from core.domain.events import StepVerdict
from core.domain.trajectory import Message, Trajectory
from core.llm.context import context_limit, fit_prompt
from core.llm.ports import ContextWindow, Policy
from core.llm.prompts import build_messages

Strategy = Literal["model", "direct", "rules"]
STRATEGIES: tuple[Strategy, ...] = ("model", "direct", "rules")
JUDGE_QUESTION = "Judge your last action for reaching the goal. Answer with one word: Good, Bad or Uncertain."
LABEL_TEXTS: tuple[str, ...] = tuple(LABEL_WORDS[label] for label in LABELS)


class CriticConfigError(ValueError):
    """An unknown strategy / plan name in the critic settings."""


@dataclass(frozen=True)
class CriticConfig:
    strategy: Strategy = "model"
    """model | direct | rules."""
    plan: Literal["auto", "prefix", "batched"] = "auto"
    """How ``model`` runs: auto = prefix reuse on a local HF model, else one batched call."""
    early_exit: bool = True
    """Stop judging at the first "bad" verdict (prefix plan; the batched plan judges all steps)."""

    @classmethod
    def from_data(cls, data: dict[str, Any] | None) -> CriticConfig:
        data = dict(data or {})
        strategy = data.get("strategy", "model")
        if strategy not in STRATEGIES:
            raise CriticConfigError(f"critic.strategy: unknown strategy {strategy!r} (model, direct, rules)")
        plan = data.get("plan", "auto")
        if plan not in ("auto", "prefix", "batched"):
            raise CriticConfigError(f"critic.plan: unknown plan {plan!r} (auto, prefix, batched)")
        return cls(strategy=strategy, plan=plan, early_exit=bool(data.get("early_exit", True)))


@dataclass(frozen=True)
class Critique:
    strategy: Strategy
    verdicts: tuple[StepVerdict, ...]
    transition_index: int
    tokens_processed: int = 0
    model_version: str = ""


def label_reserve(policy: object) -> int:
    """Tokens to leave for the longest label after the prompt (0 when the context is unknown)."""
    if context_limit(policy) is None:
        return 0
    return max(cast(ContextWindow, policy).count_tokens(label) for label in LABEL_TEXTS)


def judge_conversation(path: Trajectory, step_index: int, policy: object | None = None) -> list[Message]:
    """The conversation asking about ``path.steps[step_index]`` (history through its observation).

    With a ``policy`` that tells its context length, the oldest whole steps are dropped until the
    prompt and the longest label fit (the judged step and the question are always kept).
    """
    history = build_messages(path.instruction, path.task, path.steps[:step_index])
    judged = build_messages("", "", path.steps[step_index : step_index + 1])[2:]
    question = [*judged, Message("user", JUDGE_QUESTION)]
    if policy is None:
        return [*history, *question]
    return fit_prompt(policy, history, reserve=label_reserve(policy), suffix=question)


def supports_prefix_reuse(policy: Any) -> bool:
    return all(hasattr(policy, name) for name in ("model", "tokenizer", "render", "encode"))


async def judge_batched(
    policy: Policy, path: Trajectory, steps: Sequence[int]
) -> tuple[list[StepVerdict], int]:
    """All steps in ONE score_labels call; tokens counted when the policy can count them."""
    conversations = [judge_conversation(path, i, policy) for i in steps]
    scores = await policy.score_labels(conversations, LABEL_TEXTS)
    verdicts = [verdict_from_scores(i, s) for i, s in zip(steps, scores, strict=True)]
    tokens = 0
    if supports_prefix_reuse(policy):
        local: Any = policy  # a local HF policy: can render and count tokens
        label_tokens = sum(len(local.encode(label)) for label in LABEL_TEXTS)
        for conversation in conversations:
            prompt = len(local.encode(local.render(conversation)))
            tokens += len(LABEL_TEXTS) * prompt + label_tokens
    return verdicts, tokens


async def judge_naive(
    policy: Policy, path: Trajectory, steps: Sequence[int]
) -> tuple[list[StepVerdict], int]:
    """The baseline: one independent full prompt per step (one score_labels call each)."""
    verdicts: list[StepVerdict] = []
    tokens = 0
    for i in steps:
        got, used = await judge_batched(policy, path, [i])
        verdicts.extend(got)
        tokens += used
    return verdicts, tokens


async def judge_prefix(
    policy: Any, path: Trajectory, steps: Sequence[int], early_exit: bool = True, reuse: bool = True
) -> tuple[list[StepVerdict], int]:
    """Judge steps in order reusing the KV cache of the shared history (see PrefixScorer);
    ``reuse=False`` is the naive one-full-prompt-per-step baseline on the same code path."""
    from critic_service.prefix_scoring import PrefixScorer

    scorer = PrefixScorer(policy, reuse=reuse)
    prompts = [policy.render(judge_conversation(path, i, policy)) for i in steps]

    def is_bad(row: list[float]) -> bool:
        return label_from_scores(dict(zip(LABEL_TEXTS, row, strict=True))) == "bad"

    stop = is_bad if early_exit else None
    results = await asyncio.to_thread(scorer.score_in_order, prompts, LABEL_TEXTS, stop)
    verdicts = [
        verdict_from_scores(i, dict(zip(LABEL_TEXTS, row, strict=True)))
        for i, row in zip(steps, results, strict=False)
    ]
    return verdicts, scorer.tokens_processed


async def critique(
    config: CriticConfig, path: Trajectory, shared_steps: int, policy: Policy | None = None
) -> Critique:
    """Run the configured strategy on the bad ``path`` whose steps from ``shared_steps`` are judged."""
    judged = judged_range(len(path.steps), shared_steps)
    if config.strategy == "direct":
        verdicts: Sequence[StepVerdict] = direct_verdicts(len(path.steps), shared_steps)
        return Critique("direct", tuple(verdicts), transition_index(verdicts, len(path.steps), shared_steps))
    if config.strategy == "rules":
        verdicts = rule_verdicts(path.steps, start=shared_steps)
        return Critique("rules", tuple(verdicts), transition_index(verdicts, len(path.steps), shared_steps))
    if policy is None:
        raise CriticConfigError("the model strategy needs a policy (no model reference was given)")
    plan = config.plan
    if plan == "auto":
        plan = "prefix" if supports_prefix_reuse(policy) else "batched"
    if plan == "prefix":
        if not supports_prefix_reuse(policy):
            raise CriticConfigError("critic.plan prefix needs a local HF policy (model + tokenizer)")
        got, tokens = await judge_prefix(policy, path, list(judged), config.early_exit)
    else:
        got, tokens = await judge_batched(policy, path, list(judged))
    return Critique(
        "model",
        tuple(got),
        transition_index(got, len(path.steps), shared_steps),
        tokens_processed=tokens,
        model_version=policy.model_version,
    )
