"""Owns the Policy port: how search, critic and evaluation talk to a language model.

Two real backends implement it: ``openai`` (any OpenAI-compatible server, over httpx) and ``hf``
(a local transformers model folder). Conversations are sequences of ``Message`` (role, content).

A policy MAY also implement ``ContextWindow`` (optional, duck-typed): its context length and how
many tokens a prompt takes, so callers can truncate long episodes to fit
(``core.llm.context.fit_prompt``). A policy without it, or whose ``max_context_tokens`` is None,
is treated as having an unknown (unlimited) context.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from core.domain.trajectory import Message

Conversation = Sequence[Message]


class PolicyError(Exception):
    """A model backend failed: names the backend/server/folder and what came back."""


@dataclass(frozen=True)
class Completion:
    text: str
    tokens: int  # generated tokens
    finish_reason: str = "stop"  # "stop" | "length"
    logprobs: tuple[float, ...] | None = None  # per generated token, when asked


@runtime_checkable
class Policy(Protocol):
    model_version: str  # identifies the weights (folder + hash, or server model name)

    async def sample(
        self,
        conversations: Sequence[Conversation],
        n: int = 1,
        temperature: float = 1.0,
        max_tokens: int = 64,
        seed: int | None = None,
        stop: Sequence[str] | None = None,
        logprobs: bool = False,
    ) -> list[list[Completion]]:
        """n completions for each conversation (outer list aligned with ``conversations``)."""
        ...

    async def score_labels(
        self, conversations: Sequence[Conversation], labels: Sequence[str]
    ) -> list[dict[str, float]]:
        """For each conversation, the log-probability of each label as the assistant's next answer."""
        ...

    async def close(self) -> None: ...


@runtime_checkable
class ContextWindow(Protocol):
    """Optional Policy capability: the context length and prompt token counts (see module docstring)."""

    max_context_tokens: int | None  # prompt + generated tokens the model can hold; None = unknown

    def prompt_tokens(self, conversation: Conversation) -> int:
        """Tokens of ``conversation`` rendered as a prompt (chat template + generation prompt)."""
        ...

    def count_tokens(self, text: str) -> int:
        """Tokens of one message's text (the ``measure`` for truncation)."""
        ...
