"""Owns torch's intra-op thread count per phase in a process that both infers and trains
(``agentr run``, the embedded loop), and the record of the conditions a run was made under.

Training gains from two intra-op threads while decoding loses (its kernels are too short to
split; the figures are in docs/results.md). So inference keeps ONE intra-op thread and gets its
parallelism from decoding several prompts at once in threads of its own (``core.llm.hf``: decode
threads), and training takes ``training`` threads for the length of a ``training_phase()`` block.

The training count is a fixed setting, never the machine's momentary load: the thread count changes
the order of float reductions and so the trained weights. ``agentr run --threads N`` sets it;
without it ``$OMP_NUM_THREADS`` (when set), else ``DEFAULT_TRAINING_THREADS`` (2), fewer only where
this process may use fewer cores (``default_training_threads``). ``run_conditions`` is what a run
records (its config's ``runtime``, report.md, every checkpoint's meta.json): the thread counts, the
precision and the CPU (``core.runtime.cpu_features.describe``); a ``--resume`` takes the recorded
count.

Nothing is changed until ``configure`` is called: a Celery train worker or a test keeps torch's own
setting (or ``OMP_NUM_THREADS``).
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, ParamSpec, TypeVar

log = logging.getLogger(__name__)

DEFAULT_TRAINING_THREADS = 2  # the measured best for the tiny model on 2 cores (module docstring)
INFERENCE_THREADS = 1  # decoding the tiny model is slower on 2 (module docstring)

_training_threads: int | None = None
P = ParamSpec("P")
R = TypeVar("R")


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity; all cores where there is none): a
    property of the machine and the process's placement, not of the load at this moment."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no affinity on this platform
        return os.cpu_count() or 1


def explicit_threads() -> int | None:
    """``$OMP_NUM_THREADS`` as a positive count, or None when unset (ValueError when malformed)."""
    raw = os.environ.get("OMP_NUM_THREADS", "").strip()
    if not raw:
        return None
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"OMP_NUM_THREADS must be a whole number >= 1, got {raw!r}")
    return int(raw)


def default_training_threads() -> int:
    """Training's intra-op threads when ``--threads`` is not given: ``$OMP_NUM_THREADS`` when set,
    else ``DEFAULT_TRAINING_THREADS`` (fewer only where this process may use fewer cores)."""
    explicit = explicit_threads()
    if explicit is not None:
        return explicit
    return min(DEFAULT_TRAINING_THREADS, usable_cores())


def configure(*, inference: int, training: int) -> None:
    """Use ``inference`` intra-op threads from now on and ``training`` inside ``training_phase()``."""
    if inference < 1 or training < 1:
        raise ValueError(f"thread counts must be >= 1, got inference={inference}, training={training}")
    import torch

    global _training_threads
    torch.set_num_threads(inference)
    _training_threads = training
    log.info("torch threads: %d for inference, %d for training", inference, training)


def run_conditions(*, training: int, precision: str) -> dict[str, Any]:
    """What a run records about how it computes (its config's ``runtime``; report.md shows it): the
    thread counts (training, inference, inter-op, decode threads), the training precision (``fp32``,
    ``mixed_bf16``, ``bf16``) and the CPU (``cpu_features.describe``)."""
    import torch

    from core.runtime.cpu_features import describe

    decode = os.environ.get("AGENTR_HF_DECODE_THREADS", "").strip()
    return {
        "threads": {
            "training": training,
            "inference": INFERENCE_THREADS,
            "interop": torch.get_num_interop_threads(),
            "decode": int(decode) if decode.isdigit() else 1,
        },
        "precision": precision,
        "cpu": describe(),
        "torch": str(torch.__version__),
    }


def recorded_training_threads(runtime: dict[str, Any]) -> int | None:
    """The training thread count a run's ``runtime`` record names, or None (an older run)."""
    threads = (runtime or {}).get("threads") or {}
    count = threads.get("training") if isinstance(threads, dict) else None
    return count if isinstance(count, int) and not isinstance(count, bool) and count >= 1 else None


def checkpoint_conditions(precision: str) -> dict[str, Any]:
    """What a checkpoint's meta.json records: the threads torch trained it with (the count in
    effect now, at the end of training), its precision and the CPU."""
    import torch

    from core.runtime.cpu_features import describe

    return {
        "threads": {"training": torch.get_num_threads(), "interop": torch.get_num_interop_threads()},
        "precision": precision,
        "cpu": describe(),
        "torch": str(torch.__version__),
    }


def reset() -> None:
    """Forget ``configure``'s training setting: training phases change nothing again (a test that
    ran the embedded loop in-process gives the next one a clean process state)."""
    global _training_threads
    _training_threads = None


def training_threads() -> int | None:
    """The thread count a training phase takes, or None when ``configure`` was never called."""
    return _training_threads


@contextmanager
def training_phase() -> Iterator[None]:
    """Train with the configured thread count; the previous count is restored afterwards."""
    wanted = training_threads()
    if wanted is None:
        yield
        return
    import torch

    log.info("training phase: %d torch threads", wanted)
    before = torch.get_num_threads()
    torch.set_num_threads(wanted)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def in_training_phase(fn: Callable[P, R]) -> Callable[P, R]:
    """Decorator: ``fn`` runs inside ``training_phase()``."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with training_phase():
            return fn(*args, **kwargs)

    return wrapper
