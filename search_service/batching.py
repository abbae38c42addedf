"""Owns cross-tree batching of policy calls: concurrent ``sample()`` calls become one backend call.

Several trees are searched concurrently in one worker; each expansion asks the policy for
``n_candidates`` actions of ONE conversation. ``BatchingPolicy`` wraps any Policy and gathers the
calls that arrive within a short window (or until ``max_batch`` conversations are waiting) into a
single ``sample()`` of the wrapped policy, so a GPU/HTTP backend sees one batch instead of many
small requests. Calls only merge when their sampling parameters (n, temperature, max_tokens, stop,
logprobs) are equal.

Seeds are per conversation (``core.llm.ports.conversation_seeds``): the backend call carries one seed
per conversation, each caller's own (``seed + i`` for its i-th conversation when it gave an int), so
a conversation's samples never depend on which other calls arrived in the same window, nor in what
order - a tree searched alone, alongside other trees, or after a worker restart samples the same.
A caller without a seed gets a fresh random one for each of its conversations.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import cast

from core.llm.context import context_limit
from core.llm.ports import (
    ActionSpec,
    Completion,
    ContextWindow,
    Conversation,
    Policy,
    SamplingParams,
    Seeds,
    constrains_tool_calls,
    conversation_seeds,
    sample_turns,
)

# (n, temperature, max_tokens, stop, logprobs, constrained)
SampleKey = tuple[int, float, int, tuple[str, ...] | None, bool, bool]


@dataclass
class _Call:
    conversations: Sequence[Conversation]
    seeds: list[int] | None  # one per conversation
    future: asyncio.Future[list[list[Completion]]]
    actions: list[ActionSpec] | None = None  # constrained calls: one spec per conversation


@dataclass
class BatchStats:
    calls: int = 0  # sample() calls received
    backend_calls: int = 0  # sample() calls made on the wrapped policy
    conversations: int = 0
    largest_batch: int = 0  # conversations in the largest backend call
    history: list[int] = field(default_factory=list)  # conversations per backend call (last 1000)


def batch_seeds(calls: Sequence[_Call]) -> list[int] | None:
    """The per-conversation seeds of a batch, in conversation order: each call's own; None when no
    call has a seed (the backend draws fresh ones), a fresh random seed for a seedless call's
    conversations when others have seeds."""
    if all(call.seeds is None for call in calls):
        return None
    fresh = random.SystemRandom()
    out: list[int] = []
    for call in calls:
        if call.seeds is None:
            out.extend(fresh.randrange(1 << 31) for _ in call.conversations)
        else:
            out.extend(call.seeds)
    return out


class BatchingPolicy:
    """A Policy that batches concurrent ``sample()`` calls into calls of ``inner``."""

    def __init__(
        self, inner: Policy, *, max_batch: int = 32, window_s: float = 0.005, owns_inner: bool = True
    ) -> None:
        """``owns_inner``: ``close()`` closes the wrapped policy too (False where another owner,
        e.g. a ``core.llm.policy_cache.PolicyCache``, closes it)."""
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        self.inner = inner
        self.owns_inner = owns_inner
        self.max_batch = max_batch
        self.window_s = window_s
        self.stats = BatchStats()
        self._pending: dict[SampleKey, list[_Call]] = {}
        self._timers: dict[SampleKey, asyncio.Task[None]] = {}
        self._running: set[asyncio.Task[None]] = set()

    @property
    def model_version(self) -> str:
        return self.inner.model_version

    # ContextWindow, passed through (None when the wrapped policy does not tell its context)
    @property
    def max_context_tokens(self) -> int | None:
        return context_limit(self.inner)

    def prompt_tokens(self, conversation: Conversation) -> int:
        return cast(ContextWindow, self.inner).prompt_tokens(conversation)

    def count_tokens(self, text: str) -> int:
        return cast(ContextWindow, self.inner).count_tokens(text)

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
        return await self._enqueue(conversations, n, temperature, max_tokens, seed, stop, logprobs, None)

    @property
    def constrains_tool_calls(self) -> bool:
        """The inner policy's capability (core.llm.ports.constrains_tool_calls)."""
        return constrains_tool_calls(self.inner)

    async def sample_actions(
        self,
        conversations: Sequence[Conversation],
        actions: Sequence[ActionSpec],
        params: SamplingParams = SamplingParams(),
    ) -> list[list[Completion]]:
        if len(actions) != len(conversations):
            raise ValueError(f"{len(actions)} action lists for {len(conversations)} conversations")
        return await self._enqueue(
            conversations,
            params.n,
            params.temperature,
            params.max_tokens,
            params.seed,
            None,
            params.logprobs,
            list(actions),
        )

    async def _enqueue(
        self,
        conversations: Sequence[Conversation],
        n: int,
        temperature: float,
        max_tokens: int,
        seed: Seeds,
        stop: Sequence[str] | None,
        logprobs: bool,
        actions: list[ActionSpec] | None,
    ) -> list[list[Completion]]:
        if not conversations:
            return []
        seeds = conversation_seeds(seed, len(conversations))  # ValueError here, not in the batch
        key: SampleKey = (
            n,
            float(temperature),
            max_tokens,
            tuple(stop) if stop else None,
            logprobs,
            actions is not None,
        )
        future: asyncio.Future[list[list[Completion]]] = asyncio.get_running_loop().create_future()
        calls = self._pending.setdefault(key, [])
        calls.append(_Call(conversations, seeds, future, actions))
        self.stats.calls += 1
        waiting = sum(len(c.conversations) for c in calls)
        if waiting >= self.max_batch:
            self._flush(key)
        elif key not in self._timers:
            self._timers[key] = asyncio.create_task(self._flush_after_window(key))
        return await future

    async def _flush_after_window(self, key: SampleKey) -> None:
        await asyncio.sleep(self.window_s)
        self._timers.pop(key, None)
        self._flush(key)

    def _flush(self, key: SampleKey) -> None:
        timer = self._timers.pop(key, None)
        if timer is not None and timer is not asyncio.current_task():
            timer.cancel()
        calls = self._pending.pop(key, [])
        if calls:
            task = asyncio.create_task(self._run(key, calls))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def _run(self, key: SampleKey, calls: list[_Call]) -> None:
        n, temperature, max_tokens, stop, logprobs, constrained = key
        conversations = [conv for call in calls for conv in call.conversations]
        self.stats.backend_calls += 1
        self.stats.conversations += len(conversations)
        self.stats.largest_batch = max(self.stats.largest_batch, len(conversations))
        self.stats.history = (self.stats.history + [len(conversations)])[-1000:]
        try:
            if constrained:
                actions = [a for call in calls for a in (call.actions or [None] * len(call.conversations))]
                results = await sample_turns(
                    self.inner,
                    conversations,
                    actions,
                    SamplingParams(n, temperature, max_tokens, batch_seeds(calls), logprobs),
                )
            else:
                results = await self.inner.sample(
                    conversations,
                    n=n,
                    temperature=temperature,
                    max_tokens=max_tokens,
                    seed=batch_seeds(calls),
                    stop=list(stop) if stop else None,
                    logprobs=logprobs,
                )
            if len(results) != len(conversations):
                raise RuntimeError(
                    f"policy returned {len(results)} results for {len(conversations)} conversations"
                )
        except BaseException as exc:  # hand the failure to every waiting caller
            for call in calls:
                if not call.future.done():
                    call.future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        offset = 0
        for call in calls:
            size = len(call.conversations)
            if not call.future.done():
                call.future.set_result(results[offset : offset + size])
            offset += size

    async def score_labels(
        self, conversations: Sequence[Conversation], labels: Sequence[str]
    ) -> list[dict[str, float]]:
        return await self.inner.score_labels(conversations, labels)

    async def close(self) -> None:
        for timer in list(self._timers.values()):
            timer.cancel()
        for key in list(self._pending):
            for call in self._pending.pop(key):
                if not call.future.done():
                    call.future.set_exception(RuntimeError("policy closed while a call was waiting"))
        if self.owns_inner:
            await self.inner.close()
