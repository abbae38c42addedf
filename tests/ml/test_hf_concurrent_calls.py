"""HFPolicy's concurrent calls (core/llm/hf.py) on a real tiny Llama: a sampling call and a label
scoring call on ONE model copy really run their forward passes at the same time (a barrier both
must reach inside the model's forward), give exactly what each gives alone, and with
``concurrent_calls=1`` they take turns; settings that cannot hold are named."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
import torch

from core.domain.trajectory import Message
from core.llm.hf import HFPolicy
from core.llm.tiny import build_tiny_model, default_corpus


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tiny") / "model"
    return build_tiny_model(folder, default_corpus(), hidden=64, layers=2, heads=2, vocab_size=512, seed=0)


class Meeting(HFPolicy):
    """HFPolicy whose first forward pass in each thread (a call's first pass: one decode thread)
    waits up to ``patience`` seconds for another thread's; ``met`` says whether they met."""

    patience: float
    barrier: threading.Barrier
    met: list[bool]
    threads: set[int]

    def meet(self, patience: float) -> None:
        self.patience, self.barrier, self.met, self.threads = patience, threading.Barrier(2), [], set()

    def _forward(self, *args: Any, **kwargs: Any) -> Any:
        if threading.get_ident() not in self.threads:
            self.threads.add(threading.get_ident())
            try:
                self.barrier.wait(timeout=self.patience)
                self.met.append(True)
            except threading.BrokenBarrierError:
                self.met.append(False)
        return super()._forward(*args, **kwargs)


def load(folder: Path, cls: type[HFPolicy] = HFPolicy, **options: Any) -> HFPolicy:
    torch.set_num_threads(1)
    return cls.from_folder(folder, device="cpu", prefix_cache_mb=64, prefix_block_tokens=16, **options)


SAMPLED = [[Message("system", "You craft items."), Message("user", "Goal: craft 1 oak planks.")]]
JUDGED = [[Message("system", "Judge the action."), Message("user", "Action: get 1 oak log. Good or Bad?")]]


async def both(policy: HFPolicy) -> tuple[list[str], list[dict[str, float]]]:
    sampled, scored = await asyncio.gather(
        policy.sample(SAMPLED, n=2, temperature=1.0, max_tokens=12, seed=5),
        policy.score_labels(JUDGED, ["Good", "Bad"]),
    )
    return [c.text for c in sampled[0]], scored


async def test_a_sample_and_a_scoring_call_run_at_once_and_give_what_each_gives_alone(
    tiny_folder: Path,
) -> None:
    alone = load(tiny_folder)
    assert alone.concurrent_calls == 2  # the CPU default
    sampled = await alone.sample(SAMPLED, n=2, temperature=1.0, max_tokens=12, seed=5)
    scored = await alone.score_labels(JUDGED, ["Good", "Bad"])
    shared = load(tiny_folder, Meeting)
    assert isinstance(shared, Meeting)
    shared.meet(patience=20)
    texts, scores = await both(shared)
    assert shared.met == [True, True]  # both calls were inside the model at the same time
    assert texts == [c.text for c in sampled[0]]
    assert scores == scored  # exactly, not approximately: each call ran its own passes


async def test_one_concurrent_call_makes_them_take_turns(tiny_folder: Path) -> None:
    policy = load(tiny_folder, Meeting, concurrent_calls=1)
    assert isinstance(policy, Meeting)
    policy.meet(patience=1)
    await both(policy)
    assert policy.met == [False, False]  # the second call could not enter while the first held the model


def test_settings_that_cannot_hold_are_named(tiny_folder: Path) -> None:
    with pytest.raises(ValueError, match="concurrent_calls must be >= 1"):
        load(tiny_folder, concurrent_calls=0)
    with pytest.raises(ValueError, match="needs batch_invariant"):
        load(tiny_folder, batch_invariant=False, concurrent_calls=2)
    assert load(tiny_folder, batch_invariant=False).concurrent_calls == 1  # shared padded passes


async def test_concurrent_calls_with_decode_threads_keep_their_own_pools(tiny_folder: Path) -> None:
    """Two calls at once, each decoding its prompts in decode threads: each gets a pool of its own
    (none shut down under the other), samples as alone, and close() ends every pool."""
    convs = [[*SAMPLED[0][:1], Message("user", f"Goal: craft {i} oak planks.")] for i in range(4)]
    alone = load(tiny_folder, decode_threads=2)
    expected = [await alone.sample(convs[:2], n=2, temperature=1.0, max_tokens=12, seed=[1, 2]),
                await alone.sample(convs[2:], n=2, temperature=1.0, max_tokens=12, seed=[3, 4])]  # fmt: skip
    policy = load(tiny_folder, decode_threads=2)
    got = await asyncio.gather(
        policy.sample(convs[:2], n=2, temperature=1.0, max_tokens=12, seed=[1, 2]),
        policy.sample(convs[2:], n=2, temperature=1.0, max_tokens=12, seed=[3, 4]),
    )
    assert [[[c.text for c in row] for row in call] for call in got] == [
        [[c.text for c in row] for row in call] for call in expected
    ]
    assert 1 <= len(policy._idle_pools) <= policy.concurrent_calls
    pools = list(policy._idle_pools)
    await policy.close()
    assert policy._idle_pools == [] and all(pool._shutdown for pool in pools)
    await alone.close()
