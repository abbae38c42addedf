"""Owns the judge's prompt: the conversation that asks a model about one step of a path
(``judge_conversation``: the ReAct history through the step's observation, then ``JUDGE_QUESTION``)
and the label texts it scores (``LABEL_TEXTS``: Good / Bad / Uncertain). The ``model`` critic
strategy asks it (``critic_service``) and the judge warm start trains on it
(``train_service.judge_data``), so both see the very same prompt.

For a served chat model that gives no label log-probabilities (OpenAI's API), the judge reads the
model's TEXT answer instead: step by step (``judge_conversation`` answered in words, parsed strictly,
``core.domain.critic.verdict_from_text``) or about the whole trajectory at once
(``whole_judge_conversation``: the whole history, then ``WHOLE_JUDGE_QUESTION``, answered with a step
number or None, ``core.domain.critic.parse_first_error_answer``)."""

from __future__ import annotations

from typing import cast

from core.domain.critic import LABEL_WORDS, LABELS
from core.domain.trajectory import Message, Trajectory
from core.llm.context import context_limit, fit_prompt
from core.llm.ports import ContextWindow
from core.llm.prompts import JUDGE_QUESTION, build_messages

LABEL_TEXTS: tuple[str, ...] = tuple(LABEL_WORDS[label] for label in LABELS)
WHOLE_JUDGE_QUESTION = (
    "The task was not accomplished. Your actions above are numbered 1 to {last} in the order you took "
    "them. Which action, from action {first} on, was the first wrong one: it failed, or it did not help "
    "reach the goal (a wrong item, count, tool, argument or recipe, a repeat, giving up too early)? "
    "Answer with its number only, or None if none was wrong."
)


def label_reserve(policy: object) -> int:
    """Tokens to leave for the longest label after the prompt (0 when the context is unknown)."""
    if context_limit(policy) is None:
        return 0
    return max(cast(ContextWindow, policy).count_tokens(label) for label in LABEL_TEXTS)


def whole_judge_conversation(path: Trajectory, start: int, policy: object | None = None) -> list[Message]:
    """The conversation asking which step of ``path`` (from ``start``, 0-based) was the first wrong
    one: the whole ReAct history, then ``WHOLE_JUDGE_QUESTION`` with 1-based numbers. With a policy that
    tells its context length, the oldest whole steps are dropped to fit (never the question)."""
    history = build_messages(path.instruction, path.task, path.steps)
    question = [Message("user", WHOLE_JUDGE_QUESTION.format(first=start + 1, last=len(path.steps)))]
    if policy is None:
        return [*history, *question]
    return fit_prompt(policy, history, reserve=16, suffix=question)


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
