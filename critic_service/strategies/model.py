"""Owns the ``model`` critic strategy: the current actor judges each action after the divergence node.

In order, given the task and the history (ReAct layout from ``core.llm.prompts``) plus
``JUDGE_QUESTION``, which defines Good / Bad / Uncertain (the prompt: ``core.llm.judge_prompt``); the
verdict is the argmax of the LENGTH-NORMALISED label scores (mean log-probability per label token,
``core.domain.critic.normalise_label_scores``; no sampling). Two execution plans, same prompts and
same verdicts:

* ``prefix`` (default when the policy is a local HF model): the conversations of consecutive steps
  share their history, so the history's KV cache is computed ONCE and each step only adds its new
  action/observation plus the question (early exit at the first "bad" by default);
* ``batched``: all steps' conversations in ONE ``score_labels`` call (any Policy, e.g. an
  OpenAI-compatible server).

For a served chat model without label log-probabilities (OpenAI's API; any OpenAI-compatible
endpoint), two plans read the model's TEXT answer (greedy, a few tokens), never guessing:

* ``text`` (step by step): every judged step's conversation answered in words in one batched
  ``sample`` call, parsed strictly (``core.domain.critic.verdict_from_text``: an answer that is not a
  verdict is ``uncertain`` with the reason);
* ``whole`` (whole trajectory): ONE conversation with the whole history and
  ``WHOLE_JUDGE_QUESTION``, answered with a step number (``core.domain.critic.
  parse_first_error_answer``): that step is judged bad; None or an unparsed answer judges none (t'
  falls back to the last action, ``fallback`` recorded, the answer kept as the verdict's reason).

``tokens_processed`` is then the prompt tokens (the server's ``usage.prompt_tokens``, else the
policy's own count) plus the generated ones, per trace or pair.

When no step is judged bad, t' falls back to the last action (Direct-Revision); ``Critique.fallback``
says so and the worker records it on FirstErrorMarked. ``tokens_processed`` counts the tokens the
model actually ran a forward pass over; each prompt fits the model's context when the policy tells
it (oldest whole steps dropped, room left for the longest label).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from core.domain.critic import (
    fell_back,
    judged_range,
    label_from_scores,
    normalise_label_scores,
    parse_first_error_answer,
    transition_index,
    verdict_from_scores,
    verdict_from_text,
)
from core.domain.events import CriticStrategyName, StepVerdict
from core.domain.trajectory import Trajectory
from core.llm.judge_prompt import LABEL_TEXTS, judge_conversation, whole_judge_conversation
from core.llm.ports import Policy
from critic_service.strategies.base import ActorUse, CriticConfigError, CriticOptions, Critique, TraceUse
from critic_service.strategies.scoring import label_token_counts, normalised_verdict, supports_prefix_reuse


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


def _prompt_tokens(policy: Policy, conversation: Any, completion: Any) -> int:
    if completion.prompt_tokens:
        return int(completion.prompt_tokens)
    counter = getattr(policy, "prompt_tokens", None)
    if callable(counter):
        return int(counter(conversation))
    render, count = getattr(policy, "render", None), getattr(policy, "count_tokens", None)
    if callable(render) and callable(count):
        return int(count(render(conversation)))
    return 0


async def judge_text(policy: Policy, path: Trajectory, steps: Sequence[int]) -> tuple[list[StepVerdict], int]:
    """Step by step, in words: each step's judge conversation answered greedily, parsed strictly."""
    conversations = [judge_conversation(path, i, policy) for i in steps]
    answers = await policy.sample(conversations, n=1, temperature=0.0, max_tokens=8)
    verdicts, tokens = [], 0
    for i, conversation, (answer, *_rest) in zip(steps, conversations, answers, strict=True):
        verdicts.append(verdict_from_text(i, answer.text))
        tokens += _prompt_tokens(policy, conversation, answer) + answer.tokens
    return verdicts, tokens


async def judge_whole(policy: Policy, path: Trajectory, start: int) -> tuple[list[StepVerdict], int]:
    """The whole trajectory at once: the step the model names is bad; none named judges none."""
    conversation = whole_judge_conversation(path, start, policy)
    ((answer, *_rest),) = await policy.sample([conversation], n=1, temperature=0.0, max_tokens=12)
    tokens = _prompt_tokens(policy, conversation, answer) + answer.tokens
    number, why = parse_first_error_answer(answer.text, start + 1, len(path.steps))
    if number is None:
        return [StepVerdict(start, "uncertain", method="text", reason=why)], tokens
    return [StepVerdict(number - 1, "bad", method="text", reason=why)], tokens


@dataclass(frozen=True)
class ModelStrategy:
    name: CriticStrategyName = "model"
    needs_policy: bool = True
    on_traces: TraceUse = "model"

    def actor_use(self, options: CriticOptions) -> ActorUse:
        return "required"

    async def judge(
        self, options: CriticOptions, path: Trajectory, shared_steps: int, policy: Policy | None
    ) -> Critique:
        assert policy is not None  # needs_policy: the caller checked
        judged = list(judged_range(len(path.steps), shared_steps))
        plan = options.plan
        if plan == "auto":
            plan = "prefix" if supports_prefix_reuse(policy) else "batched"
        if plan == "prefix":
            if not supports_prefix_reuse(policy):
                raise CriticConfigError("critic.plan prefix needs a local HF policy (model + tokenizer)")
            got, tokens = await judge_prefix(policy, path, judged, options.early_exit)
        elif plan == "text":
            got, tokens = await judge_text(policy, path, judged)
        elif plan == "whole":
            got, tokens = await judge_whole(policy, path, shared_steps)
        else:
            got, tokens = await judge_batched(policy, path, judged)
        return Critique(
            self.name,
            tuple(got),
            transition_index(got, len(path.steps), shared_steps),
            tokens_processed=tokens,
            model_version=policy.model_version,
            fallback=fell_back(got, self.name),
        )


STRATEGY = ModelStrategy()
