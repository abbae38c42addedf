"""Owns torch's intra-op thread count per phase in a process that both infers and trains
(``agentr run``, the embedded loop).

Measured on 2 idle cores with the demo's tiny model (docs/results.md): training runs 1.7x faster on
two intra-op threads than on one, while decoding runs 1.6-1.9x SLOWER on two (its kernels are too
short to split). So inference keeps ONE intra-op thread and gets its parallelism from decoding
several prompts at once in threads of its own (``core.llm.hf``: decode threads), and training takes
``training`` threads for the length of a ``training_phase()`` block.

Nothing is changed until ``configure`` is called: a Celery train worker or a test keeps torch's own
setting (or ``OMP_NUM_THREADS``).
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

log = logging.getLogger(__name__)

_training_threads: int | Callable[[], int] | None = None
P = ParamSpec("P")
R = TypeVar("R")


def _cpu_times() -> tuple[float, float] | None:
    """(idle, total) jiffies of all cores from /proc/stat, or None where there is none."""
    try:
        with open("/proc/stat") as stat:
            fields = [float(x) for x in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    if len(fields) < 5:
        return None
    return fields[3] + fields[4], sum(fields[:8])  # idle + iowait; user .. steal


def idle_cores(window_s: float = 0.3) -> float:
    """How many cores are idle NOW: sampled from /proc/stat over ``window_s`` (the load average
    lags by a minute, so a test or build that just ended would still count), else the load average."""
    cores = os.cpu_count() or 1
    first = _cpu_times()
    if first is not None:
        time.sleep(window_s)
        second = _cpu_times()
        if second is not None and second[1] > first[1]:
            return cores * (second[0] - first[0]) / (second[1] - first[1])
    try:
        return max(0.0, cores - os.getloadavg()[0])
    except OSError:  # no load average on this platform
        return float(cores)


def configure(*, inference: int, training: int | Callable[[], int]) -> None:
    """Use ``inference`` intra-op threads from now on and ``training`` inside ``training_phase()``:
    a count, or a function asked at the start of each phase (e.g. how many cores are idle then)."""
    if inference < 1 or (isinstance(training, int) and training < 1):
        raise ValueError(f"thread counts must be >= 1, got inference={inference}, training={training}")
    import torch

    global _training_threads
    torch.set_num_threads(inference)
    _training_threads = training
    told = training if isinstance(training, int) else "decided at each phase's start"
    log.info("torch threads: %d for inference, %s for training", inference, told)


def reset() -> None:
    """Forget ``configure``'s training setting: training phases change nothing again (a test that
    ran the embedded loop in-process gives the next one a clean process state)."""
    global _training_threads
    _training_threads = None


def training_threads() -> int | None:
    """The thread count a training phase starting now takes, or None when ``configure`` was never
    called."""
    wanted = _training_threads
    if wanted is None or isinstance(wanted, int):
        return wanted
    count = wanted()
    if count < 1:
        raise ValueError(f"the training thread count must be >= 1, got {count}")
    return count


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
