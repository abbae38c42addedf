"""Concurrent evaluation (``train_service.evaluation.evaluate``) with a real tiny model on real
TextCraft: one model's held-out, seen and recovery episodes go to the policy in the SAME batch per
turn; with batch-invariant passes (``shared_passes = false``) every episode is exactly what it is
when each set is played on its own with the same seeds; with shared passes (the default) the
evaluation is deterministic per seed and the policy's own setting is restored afterwards.

The policy is the warm-started tiny model of ``agentr run --quick`` (loaded by ``from_pretrained``);
the starting model's recovery set is built by the same ``evaluate`` call, as in a run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest
import torch

from core.domain.eval_protocol import RecoveryPrefix, episode_seed
from core.domain.metrics import summarize
from core.envs.registry import open_env
from core.llm.hf import HFPolicy
from core.llm.ports import Completion, Conversation, Seeds
from tests.e2e.helpers import quick_tiny_model
from train_service.evaluation import EvalConfig, evaluate, play, recovery_seed

pytestmark = pytest.mark.slow

ENV = "textcraft?distractors=0&max_steps=6"
HELD_OUT = ["goal:oak_planks", "goal:birch_button", "goal:stick"]
SEEN = ["goal:spruce_planks", "goal:jungle_button"]
CFG = EvalConfig(
    max_steps=6, max_tokens=32, episodes_per_task=2, temperature=1.0, recovery_episodes=4, shared_passes=False
)


class Recording:
    """The tiny HF policy, recording each sample call's batch size and whether it was batch-invariant."""

    def __init__(self, inner: HFPolicy) -> None:
        self.inner = inner
        self.calls: list[tuple[int, bool]] = []

    @property
    def model_version(self) -> str:
        return self.inner.model_version

    @property
    def batch_invariant(self) -> bool:
        return self.inner.batch_invariant

    @batch_invariant.setter
    def batch_invariant(self, value: bool) -> None:
        self.inner.batch_invariant = value

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)

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
        self.calls.append((len(conversations), self.inner.batch_invariant))
        return await self.inner.sample(conversations, n, temperature, max_tokens, seed, stop, logprobs)

    async def score_labels(
        self, conversations: Sequence[Conversation], labels: Sequence[str]
    ) -> list[dict[str, float]]:
        return await self.inner.score_labels(conversations, labels)

    async def close(self) -> None:
        await self.inner.close()


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> str:
    torch.set_num_threads(1)
    ref, _config = quick_tiny_model(tmp_path_factory.mktemp("concurrency-home"))
    return ref


def _open() -> Any:
    return open_env(ENV)


async def test_concurrent_sets_match_each_set_played_alone(model: str) -> None:
    policy = Recording(HFPolicy.from_folder(model, device="cpu"))
    start = await evaluate(policy, _open, HELD_OUT, CFG, seed=3, seen=SEEN, build_recovery_set=True)
    prefixes = [RecoveryPrefix.from_data(p) for p in start["recovery_set"]]
    assert prefixes, "the quick model fails some held-out episode here, so there is a recovery set"
    assert {p.task_id for p in prefixes} <= set(HELD_OUT)  # held-out episodes only, never seen ones
    episodes = 2 * (len(HELD_OUT) + len(SEEN))
    # the starting model: held-out and seen episodes in one batch, then its recovery continuations
    assert policy.calls[0] == (episodes, True)
    continuations = len(prefixes) * CFG.recovery_seeds  # each prefix continued under every recovery seed
    assert any(size == continuations for size, _ in policy.calls[1:])

    policy.calls.clear()
    metrics = await evaluate(policy, _open, HELD_OUT, CFG, seed=3, seen=SEEN, recovery=prefixes)
    assert policy.calls[0] == (episodes + continuations, True)  # every set in the first turn's batch
    assert len(policy.calls) <= CFG.max_steps  # one call per turn for all sets together

    # the same episodes, each set on its own (the sequential protocol), same seeds
    def seeds(tasks: list[str]) -> list[int]:
        return [episode_seed(3, t, e) for t in tasks for e in range(CFG.episodes_per_task)]

    def runs(tasks: list[str]) -> list[str]:
        return [t for t in tasks for _ in range(CFG.episodes_per_task)]

    held = await play(policy, _open, runs(HELD_OUT), CFG, seeds=seeds(HELD_OUT))
    seen = await play(policy, _open, runs(SEEN), CFG, seeds=seeds(SEEN))
    continued = [(p, c) for p in prefixes for c in range(CFG.recovery_seeds)]
    recovered = await play(
        policy,
        _open,
        [p.task_id for p, _ in continued],
        CFG,
        seeds=[recovery_seed(3, p, c) for p, c in continued],
        prefixes=[p.actions for p, _ in continued],
    )
    alone = summarize(held)
    assert {k: metrics[k] for k in alone} == alone
    assert {k: metrics["seen"][k] for k in summarize(seen)} == summarize(seen)
    assert metrics["recovery"]["episodes"] == CFG.recovery_seeds * len(prefixes)
    assert {k: metrics["recovery"][k] for k in summarize(recovered)} == summarize(recovered)
    assert metrics["seen"]["tasks"] == SEEN and metrics["tasks"] == HELD_OUT
    await policy.close()


async def test_shared_passes_are_deterministic_per_seed_and_restored(model: str) -> None:
    policy = Recording(HFPolicy.from_folder(model, device="cpu"))
    assert policy.batch_invariant  # the CPU default
    shared = replace(CFG, shared_passes=True)
    first = await evaluate(policy, _open, HELD_OUT, shared, seed=3, seen=SEEN, build_recovery_set=True)
    assert policy.calls and all(not invariant for _, invariant in policy.calls)
    assert policy.batch_invariant  # restored
    second = await evaluate(policy, _open, HELD_OUT, shared, seed=3, seen=SEEN, build_recovery_set=True)
    assert first == second
    await policy.close()


async def test_a_task_both_held_out_and_seen_is_refused(model: str) -> None:
    policy = HFPolicy.from_folder(model, device="cpu")
    with pytest.raises(ValueError, match="both held-out and seen"):
        await evaluate(policy, _open, HELD_OUT, CFG, seen=[HELD_OUT[0]])
    await policy.close()
