"""Torch threads per phase (core.runtime.torch_threads): inference's count after ``configure``,
training's inside ``training_phase`` (restored after, also on an error), nothing changed before
``configure``; bad counts are named."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from core.runtime import torch_threads


@pytest.fixture(autouse=True)
def restore() -> Iterator[None]:
    before = torch.get_num_threads()
    torch_threads.reset()  # an earlier test may have run the embedded loop in this process
    yield
    torch.set_num_threads(before)
    torch_threads.reset()


def test_unconfigured_or_reset_training_keeps_the_thread_count() -> None:
    torch.set_num_threads(1)
    with torch_threads.training_phase():
        assert torch.get_num_threads() == 1
    assert torch_threads.training_threads() is None
    torch_threads.configure(inference=1, training=2)
    torch_threads.reset()
    with torch_threads.training_phase():
        assert torch.get_num_threads() == 1


def test_training_phase_takes_its_threads_and_gives_them_back() -> None:
    torch_threads.configure(inference=1, training=2)
    assert torch.get_num_threads() == 1

    @torch_threads.in_training_phase
    def train() -> int:
        return torch.get_num_threads()

    assert train() == 2
    assert torch.get_num_threads() == 1
    with pytest.raises(RuntimeError, match="boom"), torch_threads.training_phase():
        assert torch.get_num_threads() == 2
        raise RuntimeError("boom")
    assert torch.get_num_threads() == 1


def test_a_thread_count_function_is_asked_when_each_phase_starts() -> None:
    asked: list[int] = []

    def idle_now() -> int:
        asked.append(1)
        return 2 if len(asked) == 1 else 1

    torch_threads.configure(inference=1, training=idle_now)
    with torch_threads.training_phase():
        assert torch.get_num_threads() == 2
    with torch_threads.training_phase():
        assert torch.get_num_threads() == 1
    assert len(asked) == 2 and torch.get_num_threads() == 1
    torch_threads.configure(inference=1, training=lambda: 0)
    with pytest.raises(ValueError, match="training thread count must be >= 1"):
        torch_threads.training_threads()


@pytest.mark.parametrize(("inference", "training"), [(0, 1), (1, 0), (-2, 2)])
def test_bad_counts_are_named(inference: int, training: int) -> None:
    with pytest.raises(ValueError, match="thread counts must be >= 1"):
        torch_threads.configure(inference=inference, training=training)


def test_idle_cores_are_sampled_now_or_read_from_the_load_average(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    cores = os.cpu_count() or 1
    assert 0.0 <= torch_threads.idle_cores(0.05) <= cores
    samples = iter([(100.0, 400.0), (150.0, 500.0)])  # 50 of 100 jiffies idle: half the cores
    monkeypatch.setattr(torch_threads, "_cpu_times", lambda: next(samples))
    monkeypatch.setattr(torch_threads.time, "sleep", lambda _s: None)
    assert torch_threads.idle_cores() == pytest.approx(cores / 2)
    monkeypatch.setattr(torch_threads, "_cpu_times", lambda: None)  # no /proc/stat
    monkeypatch.setattr(torch_threads.os, "getloadavg", lambda: (0.5, 0.0, 0.0))
    assert torch_threads.idle_cores() == pytest.approx(max(0.0, cores - 0.5))
