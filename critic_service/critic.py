"""Owns the critic strategies: who judges the bad path's actions, and at what cost in tokens.

- ``model``: the current actor judges each action after the divergence node, in order, given the
  task and the history (ReAct layout from ``core.llm.prompts``) plus ``JUDGE_QUESTION``, which
  defines Good / Bad / Uncertain; the verdict is the argmax of the LENGTH-NORMALISED label scores
  (mean log-probability per label token, ``core.domain.critic.normalise_label_scores``; no sampling).
  Two execution plans, same prompts and same verdicts:
    * ``prefix`` (default when the policy is a local HF model): the conversations of consecutive
      steps share their history, so the history's KV cache is computed ONCE and each step only adds
      its new action/observation plus the question (early exit at the first "bad" by default);
    * ``batched``: all steps' conversations in ONE ``score_labels`` call (any Policy, e.g. an
      OpenAI-compatible server).
  When no step is judged bad, t' falls back to the last action (Direct-Revision); ``Critique.fallback``
  says so and the worker records it on FirstErrorMarked.
- ``reflect``: the likelihood the actor gives to a reflection right after each judged step — the
  assistant turn that revision training teaches after a wrong step (``Thought: <reflection>``, one per
  template of ``core.domain.reflections.DEFAULT_TEMPLATES``, the wrong action filled in). A step's
  score is the mean over the templates of their mean log-probability per token; t' is the first step
  whose score is within ``reflect_margin`` of the best (``core.domain.critic.reflect_transition``;
  margin 0 = argmax). It never falls back: every path gets a t' from its own scores.
- ``value``: ArCHer's advantage A = min Q - min V of each step after the divergence, from the critic
  of an ``archer`` checkpoint (``critic.value_model``, else the actor's folder); t' is the first step
  with A < ``value_threshold`` (fallback to the last action otherwise): critic_service/value_critic.py.
- ``direct``: the Direct-Revision baseline (t' = the last action).
- ``first``: the first-after-divergence baseline (t' = the first action after the divergence: what
  a critic answering Bad to everything gives).
- ``rules``: invalid-action observations, tool errors and action loops (core.domain.critic).

``tokens_processed`` counts the tokens the model actually ran a forward pass over. Each prompt fits
the model's context when the policy tells it (oldest whole steps dropped, room left for the longest
label).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

from core.domain.critic import (
    CriticInputError,
    direct_verdicts,
    fell_back,
    first_step_verdicts,
    judged_range,
    label_from_scores,
    normalise_label_scores,
    reflect_verdicts,
    rule_verdicts,
    transition_index,
    verdict_from_scores,
)
from core.domain.events import StepVerdict
from core.domain.reflections import DEFAULT_TEMPLATES
from core.domain.trajectory import Message, Trajectory
from core.llm.context import context_limit, fit_prompt
from core.llm.judge_prompt import LABEL_TEXTS, judge_conversation
from core.llm.ports import ContextWindow, Policy
from core.llm.prompts import JUDGE_QUESTION, build_messages

Strategy = Literal["model", "direct", "rules", "reflect", "value", "first"]
STRATEGIES: tuple[Strategy, ...] = ("model", "direct", "rules", "reflect", "value", "first")
MAX_REFLECT_MARGIN = 10.0

__all__ = ["JUDGE_QUESTION", "LABEL_TEXTS", "STRATEGIES", "CriticConfig", "Critique", "critique"]


class CriticConfigError(ValueError):
    """An unknown strategy / plan name in the critic settings."""


@dataclass(frozen=True)
class CriticConfig:
    strategy: Strategy = "model"
    """model | direct | rules | reflect | value | first."""
    plan: Literal["auto", "prefix", "batched"] = "auto"
    """How ``model`` runs: auto = prefix reuse on a local HF model, else one batched call."""
    early_exit: bool = True
    """Stop judging at the first "bad" verdict (prefix plan; the batched plan judges all steps)."""
    reflect_margin: float = 0.0
    """reflect: t' is the first step whose reflection score is within this many nats per token of
    the best step's (0 = the argmax)."""
    value_threshold: float = 0.0
    """value: t' is the first step whose advantage min Q - min V is below this."""
    value_model: str | None = None
    """value: the checkpoint folder whose ``critic/`` scores the steps (an archer run's); None = the
    iteration's actor folder."""
    compare_reflect: bool = True
    """Also find the ``reflect`` strategy's t' on every search pair, with the same model, recorded
    as ``FirstErrorMarked.baselines["reflect"]`` (the per-iteration critic baselines of the run
    report; only pairs with >= 2 actions after the divergence cost model passes)."""

    @classmethod
    def from_data(cls, data: dict[str, Any] | None) -> CriticConfig:
        data = dict(data or {})
        strategy = data.get("strategy", "model")
        if strategy not in STRATEGIES:
            raise CriticConfigError(
                f"critic.strategy: unknown strategy {strategy!r} ({', '.join(STRATEGIES)})"
            )
        plan = data.get("plan", "auto")
        if plan not in ("auto", "prefix", "batched"):
            raise CriticConfigError(f"critic.plan: unknown plan {plan!r} (auto, prefix, batched)")
        margin = data.get("reflect_margin", 0.0)
        if (
            isinstance(margin, bool)
            or not isinstance(margin, int | float)
            or not 0.0 <= float(margin) <= MAX_REFLECT_MARGIN
        ):
            raise CriticConfigError(
                f"critic.reflect_margin: must be a number in [0, {MAX_REFLECT_MARGIN}], got {margin!r}"
            )
        threshold = data.get("value_threshold", 0.0)
        numeric = isinstance(threshold, int | float) and not isinstance(threshold, bool)
        if not numeric or not -1e6 <= threshold <= 1e6:
            raise CriticConfigError(f"critic.value_threshold: must be a number, got {threshold!r}")
        value_model = data.get("value_model")
        if value_model is not None and (not isinstance(value_model, str) or not value_model.strip()):
            raise CriticConfigError(f"critic.value_model: must be a checkpoint folder, got {value_model!r}")
        return cls(
            strategy=strategy,
            plan=plan,
            early_exit=bool(data.get("early_exit", True)),
            reflect_margin=float(margin),
            value_threshold=float(threshold),
            value_model=value_model,
            compare_reflect=bool(data.get("compare_reflect", True)),
        )


@dataclass(frozen=True)
class Critique:
    strategy: Strategy
    verdicts: tuple[StepVerdict, ...]
    transition_index: int
    tokens_processed: int = 0
    model_version: str = ""
    fallback: bool = False
    """No step was judged bad: t' is the last action (Direct-Revision's rule; always so for direct)."""


def label_token_counts(policy: object, labels: Sequence[str]) -> dict[str, int]:
    """Tokens of each label as the policy scores it (the divisor of length normalisation).

    A local HF policy encodes the label; a policy with ``label_token_counts`` (the OpenAI-compatible
    backend, exact over /tokenize, 1 in its first-token-only mode) tells it. Otherwise the scores are
    left as they are (count 1), which the label scores' method cannot then distinguish.
    """
    encode = getattr(policy, "encode", None)
    if callable(encode):
        return {label: len(encode(label)) for label in labels}
    tell = getattr(policy, "label_token_counts", None)
    if callable(tell):
        counts = tell(labels)
        if counts:
            return {label: int(counts.get(label) or 1) for label in labels}
    return {label: 1 for label in labels}


def normalised_verdict(step_index: int, summed: dict[str, float], counts: dict[str, int]) -> StepVerdict:
    return verdict_from_scores(step_index, normalise_label_scores(summed, counts))


def supports_prefix_reuse(policy: Any) -> bool:
    return all(hasattr(policy, name) for name in ("model", "tokenizer", "render", "encode"))


async def judge_batched(
    policy: Policy, path: Trajectory, steps: Sequence[int]
) -> tuple[list[StepVerdict], int]:
    """All steps in ONE score_labels call; tokens counted when the policy can count them."""
    conversations = [judge_conversation(path, i, policy) for i in steps]
    scores = await policy.score_labels(conversations, LABEL_TEXTS)
    counts = label_token_counts(policy, LABEL_TEXTS)
    verdicts = [normalised_verdict(i, s, counts) for i, s in zip(steps, scores, strict=True)]
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
    counts = label_token_counts(policy, LABEL_TEXTS)

    def scores_of(row: list[float]) -> dict[str, float]:
        return normalise_label_scores(dict(zip(LABEL_TEXTS, row, strict=True)), counts)

    def is_bad(row: list[float]) -> bool:
        return label_from_scores(scores_of(row)) == "bad"

    stop = is_bad if early_exit else None
    results = await asyncio.to_thread(scorer.score_in_order, prompts, LABEL_TEXTS, stop)
    verdicts = [verdict_from_scores(i, scores_of(row)) for i, row in zip(steps, results, strict=False)]
    return verdicts, scorer.tokens_processed


# --------------------------------------------------------------------------------------------
# reflect: the likelihood of a reflection right after each step
# --------------------------------------------------------------------------------------------


def reflection_texts(action: str) -> tuple[str, ...]:
    """The assistant-turn openings scored after a step: ``Thought: <template>`` for every default
    reflection template (``{action}`` filled with the step's action), as the splicer writes them."""
    wrong = " ".join(action.split()) or "that action"
    return tuple(
        f"Thought: {DEFAULT_TEMPLATES[key].format(action=wrong)}" for key in sorted(DEFAULT_TEMPLATES)
    )


def reflect_conversation(path: Trajectory, step_index: int, policy: object | None = None) -> list[Message]:
    """History through ``path.steps[step_index]`` and its observation: the next turn is the agent's."""
    history = build_messages(path.instruction, path.task, path.steps[: step_index + 1])
    if policy is None or context_limit(policy) is None:
        return history
    window = cast(ContextWindow, policy)
    reserve = max(window.count_tokens(text) for text in reflection_texts(path.steps[step_index].action))
    return fit_prompt(policy, history, reserve=reserve)


async def judge_reflect(
    policy: Policy, path: Trajectory, steps: Sequence[int], margin: float = 0.0
) -> tuple[tuple[StepVerdict, ...], int]:
    """Score the reflection after every judged step (see the module docstring); prefix reuse on a
    local HF policy, else one ``score_labels`` call per step (labels differ by the step's action)."""
    step_scores: list[tuple[int, float]] = []
    tokens = 0
    if supports_prefix_reuse(policy):
        from critic_service.prefix_scoring import PrefixScorer

        local: Any = policy
        scorer = PrefixScorer(local)
        groups = [reflection_texts(path.steps[i].action) for i in steps]
        prompts = [local.render(reflect_conversation(path, i, policy)) for i in steps]
        rows = await asyncio.to_thread(scorer.score_in_order, prompts, groups)
        for i, texts, row in zip(steps, groups, rows, strict=True):
            counts = label_token_counts(policy, texts)
            means = [score / counts[text] for text, score in zip(texts, row, strict=True)]
            step_scores.append((i, sum(means) / len(means)))
        tokens = scorer.tokens_processed
    else:
        for i in steps:
            texts = reflection_texts(path.steps[i].action)
            (summed,) = await policy.score_labels([reflect_conversation(path, i, policy)], texts)
            normalised = normalise_label_scores(summed, label_token_counts(policy, texts))
            step_scores.append((i, sum(normalised.values()) / len(normalised)))
    return reflect_verdicts(step_scores, margin), tokens


async def critique(
    config: CriticConfig, path: Trajectory, shared_steps: int, policy: Policy | None = None
) -> Critique:
    """Run the configured strategy on the bad ``path`` whose steps from ``shared_steps`` are judged."""
    judged = judged_range(len(path.steps), shared_steps)
    n_steps = len(path.steps)
    if config.strategy == "direct":
        verdicts: Sequence[StepVerdict] = direct_verdicts(n_steps, shared_steps)
        return Critique(
            "direct", tuple(verdicts), transition_index(verdicts, n_steps, shared_steps), fallback=True
        )
    if config.strategy == "first":
        verdicts = first_step_verdicts(n_steps, shared_steps)
        return Critique("first", tuple(verdicts), transition_index(verdicts, n_steps, shared_steps))
    if config.strategy == "rules":
        verdicts = rule_verdicts(path.steps, start=shared_steps)
        return Critique(
            "rules",
            tuple(verdicts),
            transition_index(verdicts, n_steps, shared_steps),
            fallback=fell_back(verdicts, "rules"),
        )
    if config.strategy == "value":
        from critic_service.value_critic import folder_of, judge_value

        checkpoint = config.value_model or (folder_of(policy) if policy is not None else None)
        if checkpoint is None:
            raise CriticConfigError(
                "the value strategy needs critic.value_model (an archer checkpoint) or a local actor folder"
            )
        try:
            valued, fallback, used = await judge_value(path, list(judged), checkpoint, config.value_threshold)
        except (ValueError, OSError) as exc:
            raise CriticConfigError(f"value critic: {exc}") from exc
        return Critique(
            "value",
            valued,
            transition_index(valued, n_steps, shared_steps),
            tokens_processed=used,
            model_version=checkpoint,
            fallback=fallback,
        )
    if policy is None:
        raise CriticConfigError(
            f"the {config.strategy} strategy needs a policy (no model reference was given)"
        )
    if config.strategy == "reflect":
        reflected, tokens = await judge_reflect(policy, path, list(judged), config.reflect_margin)
        t_prime = next((v.step_index for v in reflected if v.label == "bad"), None)
        if t_prime is None:
            raise CriticInputError("reflect: no step was chosen")  # reflect_verdicts always marks one
        return Critique(
            "reflect",
            reflected,
            t_prime,
            tokens_processed=tokens,
            model_version=policy.model_version,
            fallback=False,
        )
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
        transition_index(got, n_steps, shared_steps),
        tokens_processed=tokens,
        model_version=policy.model_version,
        fallback=fell_back(got, "model"),
    )


async def reflect_baseline(
    config: CriticConfig, path: Trajectory, shared_steps: int, policy: Policy | None
) -> dict[str, int]:
    """``FirstErrorMarked.baselines``: the ``reflect`` strategy's t' on the same bad path with the
    same model, when ``config.compare_reflect`` and a model is at hand (the strategy is not reflect
    itself). One action after the divergence needs no model: that action is every critic's t'."""
    if not config.compare_reflect or policy is None or config.strategy == "reflect":
        return {}
    judged = judged_range(len(path.steps), shared_steps)
    if len(judged) == 1:
        return {"reflect": judged.start}
    verdicts, _ = await judge_reflect(policy, path, list(judged), config.reflect_margin)
    return {"reflect": next(v.step_index for v in verdicts if v.label == "bad")}
