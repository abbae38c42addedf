"""Our AgentGym client against ``agentr env serve`` over real HTTP (server in a subprocess)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from core.envs.agentgym import AgentGymEnv
from core.envs.base import EnvError, UnknownTask
from core.envs.registry import open_env
from core.envs.textcraft import TextCraftEnv, solve
from tests.support import ServedProcess, free_port, start_http_process

ROOT = Path(__file__).resolve().parents[2]


def start_server(env_uri: str, startup_s: float = 60.0) -> tuple[ServedProcess, int]:
    port = free_port()
    served = start_http_process(
        [
            sys.executable,
            "-c",
            "from core.cli import main; main()",
            "env",
            "serve",
            env_uri,
            "--port",
            str(port),
        ],
        f"http://127.0.0.1:{port}/",
        what=f"agentr env serve {env_uri}",
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        cwd=ROOT,
        timeout_s=startup_s,
    )
    return served, port


@pytest.fixture(scope="module")
def textcraft_server() -> Iterator[int]:
    server, port = start_server("textcraft")
    try:
        yield port
    finally:
        server.stop()


async def test_expert_episodes_over_http_match_in_process(textcraft_server: int) -> None:
    remote = open_env(f"agentgym+http://127.0.0.1:{textcraft_server}/textcraft")
    local = TextCraftEnv()
    try:
        assert remote.task_ids("test") == local.task_ids("test")
        for task_id in ("0", "200", "450", "540"):
            assert await remote.reset(task_id) == await local.reset(task_id)
            for action in [*solve(local.goal_of(task_id)), "inventory"]:
                assert await remote.step(action) == await local.step(action)
        assert isinstance(remote, AgentGymEnv)
        assert await remote.observation() == "The episode is over."
    finally:
        await remote.close()


async def test_invalid_action_and_unknown_task_over_http(textcraft_server: int) -> None:
    remote = open_env(f"agentgym+http://127.0.0.1:{textcraft_server}/textcraft")
    try:
        await remote.reset("3")
        result = await remote.step("dance")
        assert (result.observation, result.valid, result.reward, result.done) == (
            "Could not execute dance",
            False,
            0.0,
            False,
        )
        with pytest.raises(UnknownTask, match="unknown task id '9999'"):
            await remote.reset("9999")
    finally:
        await remote.close()


async def test_action_prefix_is_configurable(textcraft_server: int) -> None:
    base = f"http://127.0.0.1:{textcraft_server}"
    bare = AgentGymEnv(base, "textcraft", action_prefix="")
    prefixed = AgentGymEnv(base, "textcraft")  # default "Action: "
    try:
        for env in (bare, prefixed):
            await env.reset("3")
            assert (await env.step("get 1 birch logs")).observation == "Got 1 birch logs"
    finally:
        await bare.close()
        await prefixed.close()


async def test_error_with_http_200_becomes_env_error(textcraft_server: int) -> None:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{textcraft_server}") as client:
        raw = (await client.post("/step", json={"id": 123456, "action": "inventory"})).json()
    assert raw == {"error": "The id 123456 is not valid."}
    env = AgentGymEnv(f"http://127.0.0.1:{textcraft_server}", "textcraft")
    env._env_id = 123456  # an id the server never issued
    try:
        with pytest.raises(EnvError, match="server error on /step: The id 123456 is not valid"):
            await env.step("inventory")
    finally:
        await env._client.aclose()


async def test_vanished_server_gives_clear_error_after_bounded_retries() -> None:
    server, port = start_server("textcraft")
    env = open_env(f"agentgym+http://127.0.0.1:{port}/textcraft?retries=2&backoff=0.05&timeout=5")
    try:
        await env.reset("1")
        server.stop()
        with pytest.raises(EnvError, match=r"POST http://127.0.0.1:\d+/step failed after 3 attempt\(s\)"):
            await env.step("inventory")
        with pytest.raises(EnvError, match="failed after 3 attempt"):
            await env.reset("1")
    finally:
        server.stop()
        assert isinstance(env, AgentGymEnv)
        await env._client.aclose()
