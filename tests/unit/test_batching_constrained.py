"""``BatchingPolicy.sample_actions``: concurrent constrained calls with the same ``SamplingParams`` go
to the wrapped policy as ONE ``sample_actions`` call carrying those params (each conversation keeps
its own seed and its own action list); different params are different batches; bad input is named."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace

import pytest

from core.domain.trajectory import Message
from core.llm.ports import Completion, Conversation, SamplingParams, Seeds, sample_turns
from search_service.batching import BatchingPolicy


class Constrained:
    """A policy with the ActionConstrained capability that records every call it gets."""

    model_version = "fake-constrained"

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], list[Sequence[str] | None], SamplingParams]] = []

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
        raise AssertionError("a constrained call must not sample freely")

    async def sample_actions(
        self,
        conversations: Sequence[Conversation],
        actions: Sequence[Sequence[str] | None],
        params: SamplingParams = SamplingParams(),
    ) -> list[list[Completion]]:
        self.calls.append(([c[-1].content for c in conversations], list(actions), params))
        return [
            [Completion(f"Action: {(listed or ['free'])[0]} #{i}", 3) for i in range(params.n)]
            for listed in actions
        ]

    async def score_labels(
        self, conversations: Sequence[Conversation], labels: Sequence[str]
    ) -> list[dict[str, float]]:
        return []

    async def close(self) -> None:
        return None


def conv(text: str) -> list[Message]:
    return [Message("user", text)]


async def test_concurrent_constrained_calls_are_one_backend_call_with_their_params() -> None:
    inner = Constrained()
    policy = BatchingPolicy(inner, max_batch=8, window_s=0.05)
    params = SamplingParams(n=2, temperature=0.5, max_tokens=12, logprobs=True)
    first, second = await asyncio.gather(
        policy.sample_actions([conv("a"), conv("b")], [["get 1 oak logs"], None], replace(params, seed=10)),
        sample_turns(policy, [conv("c")], [["inventory"]], replace(params, seed=20)),
    )
    assert len(inner.calls) == 1 and policy.stats.backend_calls == 1 and policy.stats.calls == 2
    texts, actions, sent = inner.calls[0]
    assert texts == ["a", "b", "c"]
    assert actions == [["get 1 oak logs"], None, ["inventory"]]
    # the batch keeps every caller's params; each conversation its own seed (10, 11 for the first call)
    assert sent == SamplingParams(n=2, temperature=0.5, max_tokens=12, seed=[10, 11, 20], logprobs=True)
    assert [[c.text for c in row] for row in first] == [
        ["Action: get 1 oak logs #0", "Action: get 1 oak logs #1"],
        ["Action: free #0", "Action: free #1"],
    ]
    assert [c.text for c in second[0]] == ["Action: inventory #0", "Action: inventory #1"]


async def test_different_params_are_different_batches() -> None:
    inner = Constrained()
    policy = BatchingPolicy(inner, max_batch=8, window_s=0.05)
    await asyncio.gather(
        policy.sample_actions([conv("a")], [["x"]], SamplingParams(max_tokens=12)),
        policy.sample_actions([conv("b")], [["y"]], SamplingParams(max_tokens=40)),
    )
    assert sorted(params.max_tokens for _, _, params in inner.calls) == [12, 40]
    assert all(
        params.n == 1 and params.temperature == 1.0 and not params.logprobs for _, _, params in inner.calls
    )


async def test_one_action_list_per_conversation_or_a_named_error() -> None:
    policy = BatchingPolicy(Constrained())
    with pytest.raises(ValueError, match="1 action lists for 2 conversations"):
        await policy.sample_actions([conv("a"), conv("b")], [["x"]])
