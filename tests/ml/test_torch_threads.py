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


@pytest.mark.parametrize(("inference", "training"), [(0, 1), (1, 0), (-2, 2)])
def test_bad_counts_are_named(inference: int, training: int) -> None:
    with pytest.raises(ValueError, match="thread counts must be >= 1"):
        torch_threads.configure(inference=inference, training=training)


def test_the_training_default_is_fixed_never_the_momentary_load(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(torch_threads.os, "sched_getaffinity", lambda _pid: {0, 1, 2, 3})
    assert torch_threads.default_training_threads() == torch_threads.DEFAULT_TRAINING_THREADS == 2
    # no sampling of /proc/stat or the load average: the same answer however busy the cores are
    assert not hasattr(torch_threads, "idle_cores")
    monkeypatch.setattr(torch_threads.os, "getloadavg", lambda: (64.0, 64.0, 64.0))
    assert torch_threads.default_training_threads() == 2
    monkeypatch.setattr(torch_threads.os, "sched_getaffinity", lambda _pid: {0})  # one usable core
    assert torch_threads.default_training_threads() == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # explicit: taken as it is
    assert torch_threads.default_training_threads() == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "two")
    with pytest.raises(ValueError, match="OMP_NUM_THREADS must be a whole number >= 1, got 'two'"):
        torch_threads.default_training_threads()


def test_run_conditions_name_threads_precision_and_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    from core.runtime import cpu_features

    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "SSE41")
    record = torch_threads.run_conditions(training=2, precision="fp32")
    assert record["threads"]["training"] == 2 and record["threads"]["inference"] == 1
    assert record["precision"] == "fp32" and record["torch"] == torch.__version__
    cpu = record["cpu"]
    assert cpu["model"] == cpu_features.cpu_model() and cpu["model"]
    assert cpu["capability"] == torch.backends.cpu.get_cpu_capability()
    assert cpu["isa_caps"] == {"ONEDNN_MAX_CPU_ISA": "SSE41"}
    assert torch_threads.recorded_training_threads(record) == 2
    assert torch_threads.recorded_training_threads({}) is None  # a run recorded before this existed
    torch.set_num_threads(1)
    assert torch_threads.checkpoint_conditions("mixed_bf16")["threads"]["training"] == 1
