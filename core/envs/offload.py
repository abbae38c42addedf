"""Owns running environment calls off the event loop, under a time limit.

A synchronous environment (a ``python:`` plugin or entry point with plain methods, ScienceWorld's
Java bridge) would stop every other episode of the process while one of its steps runs, because the
search plays many episodes on one event loop. ``call_env`` runs such a call in a worker thread of a
pool reserved for environments, so N episodes with slow steps overlap; an ``async`` method is awaited
on the loop as it is. Either way the call gets the step timeout: ``AGENTR_ENV_STEP_TIMEOUT`` seconds
(default 300, core.runtime.settings), after which ``EnvTimeout`` names the environment, the call and
the limit. A timed-out thread cannot be stopped; it finishes in the background and its result is
dropped, and the episode fails with the error (the environment is in an unknown state).

TextCraft is not offloaded: its steps are pure in-memory lookups of microseconds, where a thread hop
would cost more than the step. HTTP-backed environments (AgentGym, OpenEnv) have their own
``timeout`` option.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from core.envs.base import EnvError

MAX_ENV_THREADS = 64
"""Environment calls that may run at once in threads (per process)."""

_POOL = ThreadPoolExecutor(max_workers=MAX_ENV_THREADS, thread_name_prefix="agentr-env")


class EnvTimeout(EnvError):
    """An environment call took longer than its step timeout."""


def step_timeout() -> float:
    """The configured step timeout in seconds (``AGENTR_ENV_STEP_TIMEOUT``, default 300)."""
    from core.runtime.settings import load_settings

    return float(load_settings().env_step_timeout)


async def call_env(label: str, what: str, fn: Callable[..., Any], *args: Any, limit_s: float) -> Any:
    """``fn(*args)`` off the loop when it is synchronous, awaited when it is (or returns) an awaitable,
    within ``limit_s`` seconds; EnvTimeout names ``label``, ``what`` and the limit."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit_s
    try:
        if inspect.iscoroutinefunction(fn):
            return await asyncio.wait_for(fn(*args), limit_s)
        context = contextvars.copy_context()
        call = functools.partial(context.run, fn, *args)
        value = await asyncio.wait_for(asyncio.wrap_future(_POOL.submit(call)), limit_s)
        if inspect.isawaitable(value):
            value = await asyncio.wait_for(value, max(deadline - loop.time(), 0.001))
        return value
    except TimeoutError as exc:
        if loop.time() < deadline - 0.001:  # the environment's own TimeoutError, not our limit
            raise
        raise EnvTimeout(
            f"environment {label}: {what} did not answer within {limit_s:g} s (the step timeout; "
            f"set AGENTR_ENV_STEP_TIMEOUT to change it)"
        ) from exc
