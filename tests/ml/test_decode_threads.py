"""The hf backend's decode threads (core/llm/hf.py) on a real tiny Llama: a call's prompts decoded
in several threads at once give exactly the samples (texts and log-probabilities) of one prompt at a
time, with the prefix cache shared between the threads; the threads are really used; one thread
unless set; a bad setting is named."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import torch

from core.domain.trajectory import Message
from core.llm.hf import DECODE_THREADS_ENV, HFPolicy
from core.llm.ports import PolicyError
from core.llm.tiny import build_tiny_model, default_corpus


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tiny") / "model"
    return build_tiny_model(folder, default_corpus(), hidden=64, layers=2, heads=2, vocab_size=512, seed=0)


def conversations(count: int) -> list[list[Message]]:
    """``count`` episodes sharing their system prompt and first turns, each with its own goal."""
    out = []
    for i in range(count):
        messages = [
            Message("system", "You craft items. Answer with a thought and one action."),
            Message(
                "user", f"Crafting commands:\ncraft 4 oak planks using 1 oak log\n\nGoal: craft item {i}."
            ),
        ]
        for turn in range(i % 3):
            messages.append(Message("assistant", f"Thought: step {turn}.\nAction: get 1 oak log"))
            messages.append(Message("user", f"Got 1 oak log (turn {turn})"))
        out.append(messages)
    return out


def first_seed_offset(convs: list[list[Message]]) -> list[int]:
    """Each conversation's own seed offset: its goal's number (``conversations``), wherever it sits."""
    return [int(c[1].content.rsplit("item ", 1)[1].rstrip(".")) for c in convs]


class ThreadRecorder(HFPolicy):
    """HFPolicy that notes which thread decoded each chunk (nothing else changes)."""

    threads: set[str]

    def _decode_chunk(self, *args: Any, **kwargs: Any) -> Any:
        self.threads.add(threading.current_thread().name)
        return super()._decode_chunk(*args, **kwargs)


def load(folder: Path, threads: int, cls: type[HFPolicy] = HFPolicy) -> HFPolicy:
    torch.set_num_threads(1)
    policy = cls.from_folder(
        folder, device="cpu", prefix_cache_mb=64, prefix_block_tokens=16, decode_threads=threads
    )
    if isinstance(policy, ThreadRecorder):
        policy.threads = set()
    return policy


async def samples(
    policy: HFPolicy, convs: list[list[Message]], n: int
) -> list[list[tuple[str, tuple[float, ...]]]]:
    rows = await policy.sample(
        convs,
        n=n,
        temperature=1.0,
        max_tokens=16,
        seed=[11 + i for i in first_seed_offset(convs)],
        logprobs=True,
    )
    return [[(c.text, c.logprobs or ()) for c in row] for row in rows]


@pytest.mark.parametrize("n", [1, 3])
async def test_prompts_decoded_in_threads_sample_exactly_as_one_at_a_time(tiny_folder: Path, n: int) -> None:
    convs = conversations(7)
    serial = load(tiny_folder, 1)
    threaded = load(tiny_folder, 3, ThreadRecorder)
    assert serial.decode_threads() == 1 and threaded.decode_threads() == 3
    reference = await samples(serial, convs, n)
    for _ in range(2):  # cold, then with every prefix cached by whichever thread got there first
        assert await samples(threaded, convs, n) == reference
    assert isinstance(threaded, ThreadRecorder)
    assert len(threaded.threads) >= 2, threaded.threads  # the prompts really went to several threads
    assert all(name.startswith("hf-decode") for name in threaded.threads)
    assert threaded.prefix_cache is not None and threaded.prefix_cache.stats.hit_tokens > 0
    # a prompt alone samples as it did among the others
    assert (await samples(threaded, convs[3:4], n))[0] == reference[3]
    await threaded.close()


def test_one_decode_thread_by_default_the_setting_otherwise(
    tiny_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(DECODE_THREADS_ENV, raising=False)
    assert HFPolicy.from_folder(tiny_folder, device="cpu").decode_threads() == 1
    monkeypatch.setenv(DECODE_THREADS_ENV, "3")
    assert HFPolicy.from_folder(tiny_folder, device="cpu").decode_threads() == 3
    assert HFPolicy.from_folder(tiny_folder, device="cpu", decode_threads=2).decode_threads() == 2
    shared = HFPolicy.from_folder(tiny_folder, device="cpu", batch_invariant=False)
    assert shared.decode_threads() == 1  # shared padded passes: one batch, no threads


@pytest.mark.parametrize("raw", ["two", "0", "-1", "1.5"])
def test_a_bad_decode_thread_setting_is_named(
    tiny_folder: Path, monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    monkeypatch.setenv(DECODE_THREADS_ENV, raw)
    with pytest.raises(PolicyError, match=DECODE_THREADS_ENV):
        HFPolicy.from_folder(tiny_folder, device="cpu")
    monkeypatch.delenv(DECODE_THREADS_ENV)
    with pytest.raises(ValueError, match="decode_threads must be >= 1"):
        HFPolicy.from_folder(tiny_folder, device="cpu", decode_threads=0)
