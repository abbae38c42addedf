"""Owns the ReAct prompt layout: message building, assistant-turn format, action parsing, truncation.

Layout (one place for the whole project)::

    system     the environment's instruction
    user       the task observation
    assistant  "Thought: ...\\nAction: ..."      } one pair per step, always together
    user       the environment's observation     }
    ...

Truncation drops whole (assistant, observation) pairs, oldest first, and never separates an action
from the observation it produced. Pure: stdlib only, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from core.domain.trajectory import Message, Step

REACT_FORMAT_HINT = "Answer in exactly two lines:\nThought: <your reasoning>\nAction: <one command>"

OMITTED_NOTE = "[{n} earlier steps omitted]"

# The critic's question, asked after the judged action's observation (critic_service.critic). It
# defines the three labels; the answer is scored, never sampled (label log-probabilities).
JUDGE_QUESTION = (
    "Judge your last action. Good: the environment accepted it and it brings you closer to the goal. "
    "Bad: it failed, or it does not help reach the goal (a wrong item, count or recipe, a repeat). "
    "Uncertain: you cannot tell yet. Answer with one word: Good, Bad or Uncertain."
)

_ACTION_RE = re.compile(r"(?im)^[ \t>*#`\"]*action[ \t]*[:：][ \t]*(.*)$")
_THOUGHT_RE = re.compile(r"(?is)^\s*[*#`\"]*thought[ \t]*[:：][ \t]*(.*)$")
_WRAPPERS = ("`", '"', "'", "[", "]", "*")


@dataclass(frozen=True)
class ParsedAction:
    """An assistant turn split into its thought and action; ``normalized`` compares candidates."""

    thought: str
    action: str
    normalized: str


def format_assistant(thought: str, action: str) -> str:
    """The assistant turn text: ``Thought: ...\\nAction: ...`` (single-line action)."""
    action_line = " ".join(action.split())
    return f"Thought: {thought.strip()}\nAction: {action_line}"


def _unwrap(text: str) -> str:
    """Strip whitespace, wrapping quotes/backticks/brackets/asterisks and trailing periods."""
    previous = None
    text = text.strip()
    while text != previous:
        previous = text
        text = text.strip("".join(_WRAPPERS) + " \t")
        if text.endswith("."):
            text = text[:-1]
    return text


def normalize_action(action: str) -> str:
    """Lowercase, collapse whitespace, strip wrapping quotes/brackets and a trailing period."""
    return " ".join(_unwrap(action).split()).lower()


def parse_action(text: str) -> ParsedAction | None:
    """Split a model's answer into thought and action; None when it holds no usable action.

    Accepts ``Action:`` in any case, with markdown decoration, anywhere in the text; the action is the
    rest of the FIRST ``Action:`` line (a model that rambles on after it is cut there). When the answer
    has no ``Action:`` marker it is not an action (None), even if it looks like a command.
    """
    if not text:
        return None
    match = _ACTION_RE.search(text)
    if match is None:
        return None
    raw_action = match.group(1).strip()
    normalized = normalize_action(raw_action)
    if not normalized:
        return None
    action = _unwrap(raw_action)
    before = text[: match.start()]
    thought_match = _THOUGHT_RE.search(before)
    thought = thought_match.group(1) if thought_match else before
    return ParsedAction(thought=" ".join(thought.split()), action=action, normalized=normalized)


def build_messages(instruction: str, task: str, steps: Sequence[Step]) -> list[Message]:
    """The full ReAct conversation for ``steps`` taken on ``task`` (no truncation)."""
    messages = [Message("system", instruction), Message("user", task)]
    for step in steps:
        messages.append(Message("assistant", format_assistant(step.thought, step.action)))
        messages.append(Message("user", step.observation))
    return messages


def _check_layout(messages: Sequence[Message]) -> None:
    if len(messages) < 2 or messages[0].role != "system" or messages[1].role != "user":
        raise ValueError("a ReAct conversation starts with a system instruction and a user task message")
    for index, message in enumerate(messages[2:], start=2):
        expected = "assistant" if index % 2 == 0 else "user"
        if message.role != expected:
            raise ValueError(
                f"message {index} has role {message.role!r}, expected {expected!r}: "
                "after the task, assistant turns and observations must alternate"
            )


def truncate_messages(
    messages: Sequence[Message],
    budget: int,
    measure: Callable[[str], int] = len,
    note_omitted: bool = True,
) -> list[Message]:
    """Drop the oldest whole (assistant, observation) pairs until the conversation fits ``budget``.

    ``measure`` sizes a message's content (characters by default; pass a tokenizer's length for
    tokens). The system instruction and the task are always kept; a trailing assistant turn without
    its observation (a prefill) is kept too. When pairs are dropped and ``note_omitted`` is set, the
    task message is suffixed with a short note saying how many steps were omitted. If even the head
    alone exceeds the budget, the head is returned with no pairs (never a half pair).
    """
    _check_layout(messages)
    head = list(messages[:2])
    body = list(messages[2:])
    tail: list[Message] = []
    if len(body) % 2 == 1:  # trailing assistant turn without observation
        tail = [body.pop()]
    pairs = [(body[i], body[i + 1]) for i in range(0, len(body), 2)]

    def size(dropped: int, kept: Sequence[tuple[Message, Message]]) -> int:
        task = head[1].content
        if dropped and note_omitted:
            task = f"{task}\n{OMITTED_NOTE.format(n=dropped)}"
        total = measure(head[0].content) + measure(task) + sum(measure(m.content) for m in tail)
        return total + sum(measure(a.content) + measure(o.content) for a, o in kept)

    # Find the fewest drops that fit: sizes fall as more oldest pairs are dropped.
    dropped = 0
    while dropped < len(pairs) and size(dropped, pairs[dropped:]) > budget:
        dropped += 1
    kept = pairs[dropped:]
    task_message = head[1]
    if dropped and note_omitted:
        task_message = Message(
            "user", f"{task_message.content}\n{OMITTED_NOTE.format(n=dropped)}", task_message.weight
        )
    out = [head[0], task_message]
    for assistant, observation in kept:
        out.extend((assistant, observation))
    out.extend(tail)
    return out


def build_prompt(
    instruction: str,
    task: str,
    steps: Sequence[Step],
    budget: int | None = None,
    measure: Callable[[str], int] = len,
) -> list[Message]:
    """The conversation to ask the policy for the next action, truncated to ``budget`` when given."""
    messages = build_messages(instruction, task, steps)
    if budget is None:
        return messages
    return truncate_messages(messages, budget, measure)
