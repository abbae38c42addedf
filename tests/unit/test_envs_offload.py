"""Synchronous environments step off the event loop, and every in-process call has a step timeout
(core/envs/offload.py, core/envs/plugin.py)."""

from __future__ import annotations

import asyncio

import pytest

from core.envs.offload import EnvTimeout
from core.envs.registry import open_env
from tests import rendezvous_env


async def _episode(uri: str, task_id: str) -> str:
    env = open_env(uri)
    await env.reset(task_id)
    result = await env.step("wave")
    await env.close()
    assert result.done and result.reward == 1.0
    return result.observation


async def test_four_sync_episodes_are_in_flight_at_once() -> None:
    # a four-party barrier: the steps return only when all four wait at it together, which a step run
    # on the event loop makes impossible (it blocks the loop; the barrier breaks after 10 s)
    uri = "python:tests.rendezvous_env:make_rendezvous?parties=4"
    observations = await asyncio.gather(*(_episode(uri, t) for t in "abcd"))
    assert observations == [f"{t}: wave met 3 others" for t in "abcd"]
    assert not rendezvous_env.BARRIERS[4].broken


async def test_a_stuck_sync_step_times_out_naming_env_and_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTR_ENV_STEP_TIMEOUT", "0.3")
    env = open_env("python:tests.rendezvous_env:make_stuck")
    await env.reset("a")
    rendezvous_env.RELEASE.clear()
    try:
        with pytest.raises(
            EnvTimeout, match=r"environment rendezvous_env: step\(\) did not answer within 0.3 s"
        ):
            await env.step("wave")
    finally:
        rendezvous_env.RELEASE.set()


async def test_a_stuck_async_step_times_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTR_ENV_STEP_TIMEOUT", "0.2")
    env = open_env("python:tests.rendezvous_env:make_async_stuck")
    await env.reset("a")
    with pytest.raises(EnvTimeout, match="AGENTR_ENV_STEP_TIMEOUT"):
        await env.step("wave")


def test_a_bad_step_timeout_setting_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from pydantic import ValidationError

    monkeypatch.setenv("AGENTR_ENV_STEP_TIMEOUT", "0")
    with pytest.raises(ValidationError, match="env_step_timeout"):
        open_env("python:tests.rendezvous_env:make_stuck")
