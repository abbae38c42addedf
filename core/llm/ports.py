"""Owns the Policy port: how search, critic and evaluation talk to a language model.

Two real backends implement it: ``openai`` (any OpenAI-compatible server, over httpx) and ``hf``
(a local transformers model folder). Conversations are sequences of ``Message`` (role, content).

A policy MAY also implement ``ContextWindow`` (optional, duck-typed): its context length and how
many tokens a prompt takes, so callers can truncate long episodes to fit
(``core.llm.context.fit_prompt``). A policy without it, or whose ``max_context_tokens`` is None,
is treated as having an unknown (unlimited) context.

Seeds are per conversation: ``sample(seed=...)`` takes one int for the call - conversation ``i``
then samples with seed ``seed + i`` - or a sequence of ints, one per conversation. Either way a
conversation's samples depend only on its own seed and its own text, never on which other
conversations share the call, so a caller that batches other callers' conversations together
(``search_service.batching``) passes each conversation's own seed and changes no result.
``conversation_seeds`` turns either form into the per-conversation list.

A policy MAY also implement ``ActionConstrained`` (optional, duck-typed): ``sample_actions``, which
samples ReAct turns whose Action line is one of a given list of valid actions (the Thought stays
free): the ``hf`` backend by a token prefix-trie, the ``openai`` backend by vLLM's structured
outputs; or, given a ``ToolCalls`` action space (core.llm.tool_grammar), a well-formed call of one
of a tool-calling environment's tools or a message: the ``hf`` backend by llguidance, the
``openai`` backend not at all (``CannotConstrain``). ``sample_turns`` is how callers ask: free
sampling without actions, constrained sampling with them, and ``CannotConstrain`` when the policy
has no such capability (docs/constrained-decoding.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from core.domain.trajectory import Message
from core.llm.tool_grammar import ToolCalls

Conversation = Sequence[Message]
ActionSpec = Sequence[str] | ToolCalls | None
"""What one conversation's Action line is constrained to: a list of valid actions, a tool-call
action space (``ToolCalls``: a call of one of the tools, its arguments valid against the tool's JSON
schema, or a message), or nothing (None or an empty list: free)."""
Seeds = int | Sequence[int] | None  # one seed for the call, or one per conversation


def conversation_seeds(seed: Seeds, count: int) -> list[int] | None:
    """The seed of each of ``count`` conversations: None stays None, an int ``s`` gives
    ``[s, s + 1, ...]``, a sequence is checked (ValueError: wrong length or not ints) and copied."""
    if seed is None:
        return None
    if isinstance(seed, int) and not isinstance(seed, bool):
        return [seed + i for i in range(count)]
    if isinstance(seed, str | bytes) or not isinstance(seed, Sequence):
        raise ValueError(f"seed must be an int or a sequence of ints, got {type(seed).__name__}")
    seeds = list(seed)
    if len(seeds) != count:
        raise ValueError(f"{len(seeds)} seeds for {count} conversations: give one seed per conversation")
    bad = [s for s in seeds if not isinstance(s, int) or isinstance(s, bool)]
    if bad:
        raise ValueError(f"seeds must be ints, got {bad[0]!r}")
    return seeds


class PolicyError(Exception):
    """A model backend failed: names the backend/server/folder and what came back."""


class CannotConstrain(PolicyError):
    """Constrained decoding was asked of a policy or server that cannot constrain its output."""


@dataclass(frozen=True)
class Completion:
    text: str
    tokens: int  # generated tokens
    finish_reason: str = "stop"  # "stop" | "length"
    logprobs: tuple[float, ...] | None = None  # per generated token, when asked
    prompt_tokens: int = 0  # the prompt's tokens as the server counted them (usage), 0 when unknown


@dataclass(frozen=True)
class SamplingParams:
    """How a constrained turn is sampled (``ActionConstrained.sample_actions``, ``sample_turns``):
    ``n`` completions per conversation at ``temperature``, at most ``max_tokens`` new tokens each,
    ``seed`` (an int for the call or one per conversation, module docstring; None = fresh) and
    whether each completion carries its tokens' ``logprobs``. The defaults are ``Policy.sample``'s."""

    n: int = 1
    temperature: float = 1.0
    max_tokens: int = 64
    seed: Seeds = None
    logprobs: bool = False


@runtime_checkable
class Policy(Protocol):
    @property
    def model_version(self) -> str:
        """Identifies the weights (folder + hash, or server model name). Read-only for callers: a
        plain attribute or a property (a wrapper passing its inner policy's) both implement it."""
        ...

    async def sample(
        self,
        conversations: Sequence[Conversation],
        n: int = 1,
        temperature: float = 1.0,
        max_tokens: int = 64,
        seed: Seeds = None,
        stop: Sequence[str] | None = None,
        logprobs: bool = False,
    ) -> list[list[Completion]]:
        """n completions for each conversation (outer list aligned with ``conversations``).

        ``seed``: an int for the call or one int per conversation (module docstring); None = fresh.
        """
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


@runtime_checkable
class ActionConstrained(Protocol):
    """Optional Policy capability: turns whose Action line is one of the given valid actions."""

    async def sample_actions(
        self,
        conversations: Sequence[Conversation],
        actions: Sequence[ActionSpec],
        params: SamplingParams = SamplingParams(),
    ) -> list[list[Completion]]:
        """Like ``Policy.sample`` with ``params``; conversation ``i``'s Action line is one of
        ``actions[i]``, or a call / message of its ``ToolCalls`` (None or empty: free for that
        conversation)."""
        ...


def constrains_tool_calls(policy: object) -> bool:
    """Whether ``policy`` constrains tool calls (``ToolCalls`` action spaces: the hf backend, or a
    wrapper over it that says so with ``constrains_tool_calls``). ``constrain_tool_calls``, on by
    default, applies where this holds; other policies (a served model, a scripted one) decode tool
    environments freely (docs/constrained-decoding.md)."""
    return bool(getattr(policy, "constrains_tool_calls", False))


async def sample_turns(
    policy: Policy,
    conversations: Sequence[Conversation],
    actions: Sequence[ActionSpec] | None,
    params: SamplingParams = SamplingParams(),
) -> list[list[Completion]]:
    """ReAct turns from ``policy``: free when ``actions`` is None or lists nothing for any
    conversation, else constrained (``ActionConstrained``); CannotConstrain when the policy has no
    ``sample_actions``."""
    if actions is None or not any(actions):
        return await policy.sample(
            conversations,
            n=params.n,
            temperature=params.temperature,
            max_tokens=params.max_tokens,
            seed=params.seed,
            logprobs=params.logprobs,
        )
    method = getattr(policy, "sample_actions", None)
    if not callable(method):
        raise CannotConstrain(
            f"policy {policy.model_version} cannot constrain its actions (it has no sample_actions): "
            "use the hf backend or a vLLM server, or set constrain_actions (constrain_tool_calls for a "
            "tool-calling environment) to false"
        )
    result: list[list[Completion]] = await method(conversations, actions, params)
    return result
