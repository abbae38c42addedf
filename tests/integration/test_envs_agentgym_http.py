"""``agentr env serve`` over real HTTP (server in a subprocess): our AgentGym client against it, and
the requests AgentGym's own clients make (their field names and value shapes) answered as
AgentGym's servers answer them."""

from __future__ import annotations

import asyncio
import os
import shutil
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
            "from agentr.cli import main; main()",
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
    local.open_ended = True  # AgentGym's episode, as the server plays it: on past the goal
    try:
        assert remote.task_ids("test") == local.task_ids("test")
        for task_id in ("0", "200", "450", "540"):
            assert await remote.reset(task_id) == await local.reset(task_id)
            for action in [*solve(local.goal_of(task_id)), "inventory"]:
                assert await remote.step(action) == await local.step(action)
        assert isinstance(remote, AgentGymEnv)
        assert (await remote.observation()).startswith("Inventory: [")  # the episode went on
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
    bare = AgentGymEnv(base, "textcraft")  # default: bare actions
    prefixed = AgentGymEnv(base, "textcraft", action_prefix="Action: ")  # our server strips it
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


def test_their_textcraft_client_requests_against_ours(textcraft_server: int) -> None:
    """The request sequence of AgentGym's TextCraftEnvClient, checked field by field."""
    with httpx.Client(base_url=f"http://127.0.0.1:{textcraft_server}") as client:
        created = client.post(
            "/create", json={"minecraft_dir": "agentenv_textcraft/", "commands": None, "goal": None}
        ).json()
        assert set(created) == {"id", "observation", "reward", "done"}
        env_id = created["id"]
        # their observe() right after create reads this observation: the task of data_idx = id
        assert created["observation"] == TextCraftEnv().observation_for(str(env_id % 544))
        reset = client.post("/reset", json={"id": env_id, "data_idx": 3}).json()
        assert reset == {
            "id": env_id,
            "observation": TextCraftEnv().observation_for("3"),
            "reward": 0,
            "done": False,
        }
        # out of range: wrapped modulo 544 as their server does (their client reads "observation")
        wrapped = client.post("/reset", json={"id": env_id, "data_idx": 547}).json()
        assert wrapped["observation"] == reset["observation"]
        step = client.post("/step", json={"id": env_id, "action": "get 1 birch logs"}).json()
        assert {"observation", "reward", "done"} <= set(step)
        assert step == {"observation": "Got 1 birch logs", "reward": 0, "done": False}
        assert isinstance(step["reward"], int)  # their reward is the integer 0 or 1
        assert client.get(f"/observation?id={env_id}").json() == "Got 1 birch logs"
        assert client.post("/close", json={"id": env_id}).json() is True
        assert client.post("/close", json={"id": env_id}).json() is False  # theirs: False


@pytest.mark.java
@pytest.mark.skipif(shutil.which("java") is None, reason="ScienceWorld needs Java 17 (CI installs it)")
def test_their_sciworld_client_requests_against_ours() -> None:
    """AgentGym's SciworldEnvClient: create without a body, reset reads task_description, step reads
    score (0-100) as its reward."""
    server, port = start_server("sciworld", startup_s=90)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120) as client:
            created = client.post("/create").json()
            assert set(created) == {"id"}
            reset = client.post("/reset", json={"id": created["id"], "data_idx": 300}).json()
            assert {
                "task_name",
                "var_num",
                "task_description",
                "observation",
                "reward",
                "score",
                "deleted",
                "done",
            } <= set(reset)
            assert reset["task_description"].startswith("Your task is")
            assert reset["observation"].startswith("This room is called")
            step = client.post("/step", json={"id": created["id"], "action": "look around"}).json()
            assert {"observation", "reward", "score", "done"} <= set(step)
            assert isinstance(step["score"], int | float)
            bad = client.post("/reset", json={"id": created["id"], "data_idx": 10**6}).json()
            assert bad == {"error": "list index out of range"}
            assert client.post("/close", json={"id": created["id"]}).json() is True
    finally:
        server.stop()


class _SlowCreateServer:
    """A real HTTP server (stdlib, own thread) whose /create answers after ``delay`` seconds, counting
    the creates it received; other routes answer a TextCraft-shaped reset / step."""

    def __init__(self, delay: float) -> None:
        import http.server
        import json as json_module
        import threading
        import time

        self.creates = 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                if self.path == "/create":
                    outer.creates += 1
                    time.sleep(delay)
                    body: object = {"id": outer.creates, "observation": "", "reward": 0, "done": False}
                else:
                    body = {"observation": "Goal: craft stick.", "reward": 0, "done": False}
                data = json_module.dumps(body).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up waiting

            def log_message(self, *args: object) -> None:
                return

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


async def test_a_create_that_times_out_is_not_sent_again() -> None:
    server = _SlowCreateServer(delay=1.5)
    env = open_env(f"agentgym+http://127.0.0.1:{server.port}/textcraft?retries=3&backoff=0.01&timeout=0.3")
    try:
        with pytest.raises(EnvError, match=r"/create failed after 1 attempt\(s\): ReadTimeout.*could orphan"):
            await env.reset("1")
        await asyncio.sleep(0.3)
        assert server.creates == 1  # one environment on the server, not four
    finally:
        assert isinstance(env, AgentGymEnv)
        await env._client.aclose()
        server.stop()
