"""Owns the ``reflect`` critic strategy: the likelihood the actor gives to a reflection right after
each judged step.

The scored text is the assistant turn that revision training teaches after a wrong step (``Thought:
<reflection>``, one per template of ``core.domain.reflections.DEFAULT_TEMPLATES``, the wrong action
filled in). A step's score is the mean over the templates of their mean log-probability per token;
t' is the first step whose score is within ``reflect_margin`` of the best
(``core.domain.critic.reflect_transition``; margin 0 = argmax). It never falls back: every path gets
a t' from its own scores.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from core.domain.critic import CriticInputError, judged_range, normalise_label_scores, reflect_verdicts
from core.domain.events import CriticStrategyName, StepVerdict
from core.domain.reflections import DEFAULT_TEMPLATES
from core.domain.trajectory import Message, Trajectory
from core.llm.context import context_limit, fit_prompt
from core.llm.ports import ContextWindow, Policy
from core.llm.prompts import build_messages
from critic_service.strategies.base import ActorUse, CriticOptions, Critique, TraceUse
from critic_service.strategies.scoring import label_token_counts, supports_prefix_reuse


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


@dataclass(frozen=True)
class ReflectStrategy:
    name: CriticStrategyName = "reflect"
    needs_policy: bool = True
    on_traces: TraceUse = "model"

    def actor_use(self, options: CriticOptions) -> ActorUse:
        return "required"

    async def judge(
        self, options: CriticOptions, path: Trajectory, shared_steps: int, policy: Policy | None
    ) -> Critique:
        assert policy is not None  # needs_policy: the caller checked
        judged = list(judged_range(len(path.steps), shared_steps))
        reflected, tokens = await judge_reflect(policy, path, judged, options.reflect_margin)
        t_prime = next((v.step_index for v in reflected if v.label == "bad"), None)
        if t_prime is None:
            raise CriticInputError("reflect: no step was chosen")  # reflect_verdicts always marks one
        return Critique(
            self.name,
            reflected,
            t_prime,
            tokens_processed=tokens,
            model_version=policy.model_version,
            fallback=False,
        )


STRATEGY = ReflectStrategy()
