"""Synchronous environments for the off-the-loop tests (tests/unit/test_envs_offload.py), opened as
``python:tests.rendezvous_env:...``.

``make_rendezvous(parties=N)``: every step waits at a module-level ``threading.Barrier`` of N parties,
so N steps complete only when all N are in flight at once (a step run on the event loop blocks it and
the barrier breaks after its timeout). ``make_stuck()``: a step that blocks until the test releases
``RELEASE``; ``make_async_stuck()`` the same with an ``async`` step that never returns.
"""

from __future__ import annotations

import asyncio
import threading

BARRIERS: dict[int, threading.Barrier] = {}
RELEASE = threading.Event()


class RendezvousEnv:
    name = "rendezvous"
    max_steps = 3

    def __init__(self, barrier: threading.Barrier) -> None:
        self.barrier = barrier
        self.task = ""

    def task_ids(self, split: str = "test") -> list[str]:
        return ["a", "b", "c", "d"]

    def reset(self, task_id: str) -> str:
        self.task = task_id
        return f"task {task_id}"

    def step(self, action: str) -> tuple[str, float, bool]:
        self.barrier.wait()  # raises BrokenBarrierError after its timeout when the others never come
        return f"{self.task}: {action} met {self.barrier.parties - 1} others", 1.0, True


def make_rendezvous(parties: str = "2") -> RendezvousEnv:
    count = int(parties)
    barrier = BARRIERS.setdefault(count, threading.Barrier(count, timeout=10))
    return RendezvousEnv(barrier)


class StuckEnv(RendezvousEnv):
    name = "stuck"

    def step(self, action: str) -> tuple[str, float, bool]:
        RELEASE.wait(30)
        return "released", 0.0, False


class AsyncStuckEnv(RendezvousEnv):
    name = "async-stuck"

    async def step(self, action: str) -> tuple[str, float, bool]:  # type: ignore[override]
        await asyncio.sleep(3600)
        return "never", 0.0, False


def make_stuck() -> StuckEnv:
    return StuckEnv(threading.Barrier(1))


def make_async_stuck() -> AsyncStuckEnv:
    return AsyncStuckEnv(threading.Barrier(1))
