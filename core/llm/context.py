"""Owns fitting a conversation into a policy's context window (oldest whole steps dropped first).

``fit_prompt(policy, messages, reserve)`` returns ``messages`` unchanged when the policy does not
tell its context (``core.llm.ports.ContextWindow``) or the rendered prompt plus ``reserve`` tokens
(the answer: ``max_tokens`` when sampling, the longest label when scoring) fits. Otherwise it drops
whole (assistant, observation) pairs, oldest first, with ``core.llm.prompts.truncate_messages``
measured in the policy's tokens, re-checking the rendered length (the chat template adds tokens
per message) until it fits. ``suffix`` messages (e.g. a critic's question after the last
observation) are kept and counted but never dropped. When even the instruction and the task alone
do not fit, ``ContextOverflow`` (a ``PolicyError``) says by how much.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from core.domain.trajectory import Message
from core.llm.ports import ContextWindow, PolicyError
from core.llm.prompts import truncate_messages


class ContextOverflow(PolicyError):
    """The instruction and task alone (plus the reserve) exceed the model's context."""


def context_limit(policy: object) -> int | None:
    """The policy's context length in tokens, or None when it does not tell."""
    limit = getattr(policy, "max_context_tokens", None)
    return int(limit) if isinstance(limit, int) and isinstance(policy, ContextWindow) else None


def fit_prompt(
    policy: object, messages: Sequence[Message], reserve: int, suffix: Sequence[Message] = ()
) -> list[Message]:
    """``messages`` + ``suffix``, with the oldest whole steps of ``messages`` dropped until the
    rendered prompt plus ``reserve`` tokens fits the policy's context (see the module docstring)."""
    full = [*messages, *suffix]
    limit = context_limit(policy)
    if limit is None:
        return full
    assert isinstance(policy, ContextWindow)
    available = limit - reserve
    total = policy.prompt_tokens(full)
    if total <= available:
        return full
    # the chat template's tokens, spread evenly over the messages, so that the measure of a
    # message approximates what it adds to the rendered prompt (rounded up: never too little)
    contents = sum(policy.count_tokens(m.content) for m in full)
    overhead = math.ceil(max(0, total - contents) / len(full))

    def measure(text: str) -> int:
        return policy.count_tokens(text) + overhead

    budget = available - sum(measure(m.content) for m in suffix)
    while True:
        kept = truncate_messages(messages, max(budget, 0), measure)
        candidate = [*kept, *suffix]
        total = policy.prompt_tokens(candidate)
        if total <= available:
            return candidate
        if budget <= 0 or len(kept) <= 2 + len(messages) % 2:
            # nothing left to drop but the head (instruction, task) and a trailing prefill
            raise ContextOverflow(
                f"the prompt needs {total} tokens even with every earlier step omitted; with {reserve} "
                f"tokens reserved for the answer it exceeds the model's context of {limit} tokens"
            )
        budget -= total - available
