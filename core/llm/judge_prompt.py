"""Owns the judge's prompt: the conversation that asks a model about one step of a path
(``judge_conversation``: the ReAct history through the step's observation, then ``JUDGE_QUESTION``)
and the label texts it scores (``LABEL_TEXTS``: Good / Bad / Uncertain). The ``model`` critic
strategy asks it (``critic_service``) and the judge warm start trains on it
(``train_service.judge_data``), so both see the very same prompt."""

from __future__ import annotations

from typing import cast

from core.domain.critic import LABEL_WORDS, LABELS
from core.domain.trajectory import Message, Trajectory
from core.llm.context import context_limit, fit_prompt
from core.llm.ports import ContextWindow
from core.llm.prompts import JUDGE_QUESTION, build_messages

LABEL_TEXTS: tuple[str, ...] = tuple(LABEL_WORDS[label] for label in LABELS)


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
