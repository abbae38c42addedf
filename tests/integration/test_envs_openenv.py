"""OpenEnv interop, both ways, against openenv-core itself (0.3.0, installed by .ci/test):

- our ``openenv+http://`` / ``openenv+ws://`` client (core.envs.openenv) plays a small text game
  served by openenv-core's OWN server code (``create_app`` -> ``HTTPEnvServer`` under uvicorn);
- openenv-core's OWN client (``GenericEnvClient``, its WebSocket ``EnvClient``) plays TextCraft served
  by ``agentr env serve textcraft --protocol openenv`` (a real process) to reward 1 with our solver's
  plan, and our HTTP answers validate against openenv-core's response models;
- bad input: an unknown action field, an ambiguous schema, a step the server refuses, a server that
  is down or never answers -> EnvError naming the URL and the server's words.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.envs.base import EnvError, UnknownTask
from core.envs.contract import check_env
from core.envs.registry import open_env
from core.envs.textcraft import solve
from tests.support import free_port, start_http_process

env_server = pytest.importorskip(
    "openenv.core.env_server", reason="openenv-core is not installed (.ci/test installs openenv-core==0.3.0)"
)
generic_client = pytest.importorskip("openenv.core.generic_client", reason="openenv-core's client")

ROOT = Path(__file__).resolve().parents[2]
Action, Observation, State = env_server.Action, env_server.Observation, env_server.State


# ---- a text game written against openenv-core's Environment, served by its own create_app ---------
class DialAction(Action):  # type: ignore[misc, valid-type]
    command: str
    note: str | None = None


class DialObservation(Observation):  # type: ignore[misc, valid-type]
    prompt: str = ""
    position: int = 0


class DialGame(env_server.Environment):  # type: ignore[misc, name-defined]
    """Turn the dial to the target (2 + seed % 3), then ``submit``: reward 1 on target, else 0."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self.target = 2
        self.position = 0
        self._state = State(episode_id=None, step_count=0)

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> Any:
        self.target, self.position = 2 + (seed or 0) % 3, 0
        self._state = State(episode_id=episode_id, step_count=0)
        return DialObservation(prompt=f"Turn the dial to {self.target}, then submit.", position=0)

    def step(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> Any:
        self._state.step_count += 1
        command = action.command.strip()
        if command == "jam":
            raise ValueError("the dial is jammed")
        if command == "slow":
            time.sleep(1.5)
        if command in ("up", "down"):
            self.position += 1 if command == "up" else -1
            return DialObservation(
                prompt=f"The dial shows {self.position}.", position=self.position, reward=0.0
            )
        if command == "submit":
            won = self.position == self.target
            return DialObservation(
                prompt="Opened." if won else "Wrong.", position=self.position, reward=float(won), done=True
            )
        return DialObservation(prompt=f"Unknown command {command!r}.", position=self.position, reward=0.0)

    @property
    def state(self) -> Any:
        return self._state


class TwoFields(Action):  # type: ignore[misc, valid-type]
    alpha: str = ""
    beta: str = ""


class _Threaded:
    def __init__(self, app: Any) -> None:
        import uvicorn

        self.port = free_port()
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="critical", lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("openenv-core's app did not start under uvicorn")
            time.sleep(0.05)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


@pytest.fixture(scope="module")
def dial() -> Iterator[int]:
    app = env_server.create_app(DialGame, DialAction, DialObservation, env_name="dial", max_concurrent_envs=4)
    served = _Threaded(app)
    try:
        yield served.port
    finally:
        served.stop()


@pytest.fixture(scope="module")
def ambiguous() -> Iterator[int]:
    served = _Threaded(env_server.create_app(DialGame, TwoFields, DialObservation, env_name="two"))
    try:
        yield served.port
    finally:
        served.stop()


async def test_our_client_plays_a_game_served_by_openenv_core(dial: int) -> None:
    env = open_env(f"openenv+http://127.0.0.1:{dial}?tasks=0-2")
    try:
        assert env.task_ids() == ["0", "1", "2"]
        first = await env.reset("1")  # seed 1: target 3
        assert first == "Turn the dial to 3, then submit."
        assert env.action_field == "command" and env.observation_field == "prompt"  # type: ignore[attr-defined]
        results = [await env.step(a) for a in ("up", "Thought: one more.\nAction: up", "up")]
        assert [r.observation for r in results] == [f"The dial shows {i}." for i in (1, 2, 3)]
        assert [(r.reward, r.done, r.valid) for r in results] == [(0.0, False, True)] * 3
        assert results[-1].info["observation"] == {"prompt": "The dial shows 3.", "position": 3}
        state = await env.state()  # type: ignore[attr-defined]
        assert state["step_count"] == 3
        last = await env.step("submit")
        assert (last.observation, last.reward, last.done, last.raw_score) == ("Opened.", 1.0, True, 1.0)
        # the same session plays the next episode; a wrong submit scores 0
        assert await env.reset("0") == "Turn the dial to 2, then submit."
        lost = await env.step("submit")
        assert (lost.observation, lost.reward, lost.done) == ("Wrong.", 0.0, True)
    finally:
        await env.close()


async def test_ws_uri_named_fields_and_reward_scale(dial: int) -> None:
    uri = f"openenv+ws://127.0.0.1:{dial}/ws?action_field=command&observation_field=position&reward_max=2"
    env = open_env(uri)
    try:
        assert await env.reset("2") == "0"  # the observation field is an int: shown as JSON
        for action in ("up",) * 4:
            await env.step(action)
        result = await env.step("submit")
        assert (result.reward, result.raw_score, result.done) == (0.5, 1.0, True)  # 1 of [0, 2]
    finally:
        await env.close()


async def test_several_sessions_at_once_and_the_contract(dial: int) -> None:
    uri = f"openenv+http://127.0.0.1:{dial}?tasks=0-5"
    checks = await check_env(lambda: open_env(uri), actions=("up", "down", "submit"))
    failed = [c for c in checks if c.status == "fail"]
    assert not failed, failed
    by_name = {c.name: c.status for c in checks}
    assert by_name["clone independence"] == "skip"
    # "unknown task": a non-seed id is refused on our side (task_field=seed)
    assert by_name["unknown task"] == "pass"


async def test_bad_input_is_named(dial: int, ambiguous: int) -> None:
    env = open_env(f"openenv+http://127.0.0.1:{dial}?action_field=cmd")
    with pytest.raises(EnvError) as wrong:
        await env.reset("0")
    text = str(wrong.value)
    assert "unknown action field 'cmd'" in text and f"127.0.0.1:{dial}" in text and "command, note" in text
    await env.close()

    env = open_env(f"openenv+http://127.0.0.1:{ambiguous}")
    with pytest.raises(
        EnvError, match=r"cannot tell which action field .* \(fields: alpha, beta\).*action_field="
    ):
        await env.reset("0")
    await env.close()

    env = open_env(f"openenv+http://127.0.0.1:{dial}")
    try:
        with pytest.raises(UnknownTask, match="not a seed"):
            await env.reset("goal:stick")
        await env.reset("0")
        with pytest.raises(EnvError, match=r"refused 'step' \(EXECUTION_ERROR\): the dial is jammed") as jam:
            await env.step("jam")
        assert f"ws://127.0.0.1:{dial}/ws" in str(jam.value)
        assert (await env.step("up")).observation == "The dial shows 1."  # the session goes on
    finally:
        await env.close()

    env = open_env(f"openenv+http://127.0.0.1:{dial}?timeout=0.5")
    try:
        await env.reset("0")
        with pytest.raises(
            EnvError, match=rf"no answer to 'step' from ws://127.0.0.1:{dial}/ws within 0.5 s"
        ):
            await env.step("slow")
        with pytest.raises(EnvError, match="was lost"):
            await env.step("up")
        assert await env.reset("0") == "Turn the dial to 2, then submit."  # a new session
    finally:
        await env.close()

    with pytest.raises(EnvError, match="unknown option"):
        open_env(f"openenv+http://127.0.0.1:{dial}?actionfield=x")
    with pytest.raises(EnvError, match="transport must be"):
        open_env("openenv+ftp://127.0.0.1:1")


async def test_server_down_or_silent_is_a_clear_error() -> None:
    port = free_port()  # nothing listens there
    env = open_env(f"openenv+http://127.0.0.1:{port}?action_field=command&timeout=2")
    with pytest.raises(EnvError, match=rf"cannot reach http://127.0.0.1:{port}/schema: ConnectError"):
        await env.reset("0")
    await env.close()
    with socket.socket() as silent:  # accepts connections (backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        env = open_env(f"openenv+http://127.0.0.1:{port}?timeout=0.5")
        started = time.monotonic()
        with pytest.raises(EnvError, match=rf"cannot reach http://127.0.0.1:{port}/schema: ReadTimeout"):
            await env.reset("0")
        assert time.monotonic() - started < 10
        await env.close()


# ---- openenv-core's own client against `agentr env serve --protocol openenv` --------------------
@pytest.fixture(scope="module")
def served_textcraft() -> Iterator[int]:
    port = free_port()
    served = start_http_process(
        [sys.executable, "-c", "from agentr.cli import main; main()", "env", "serve"]
        + ["textcraft?distractors=0", "--protocol", "openenv", "--port", str(port), "--max-sessions", "4"],
        f"http://127.0.0.1:{port}/health",
        what="agentr env serve textcraft --protocol openenv",
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        cwd=ROOT,
    )
    try:
        yield port
    finally:
        served.stop()


async def test_openenv_core_client_plays_textcraft_to_the_end(served_textcraft: int) -> None:
    plan = solve("stone_pickaxe")
    async with generic_client.GenericEnvClient(base_url=f"http://127.0.0.1:{served_textcraft}") as client:
        first = await client.reset(task_id="goal:stone_pickaxe")
        assert first.done is False and first.reward is None
        assert "Goal: craft stone pickaxe." in first.observation["text"]
        assert first.observation["task_id"] == "goal:stone_pickaxe"
        results = [await client.step({"action": action}) for action in plan]
        assert [r.done for r in results] == [False] * (len(plan) - 1) + [True]
        assert [r.reward for r in results] == [0.0] * (len(plan) - 1) + [1.0]
        assert all(r.observation["valid"] for r in results)
        state = await client.state()
        assert state["step_count"] == len(plan) and state["done"] is True
        seeded = await client.reset(seed=3)  # seed: index into the served ids (split all: "0".."543")
        assert seeded.observation["task_id"] == "3"
        with pytest.raises(RuntimeError, match="VALIDATION_ERROR"):
            await client.step({"bogus": "get 1 oak logs"})
        with pytest.raises(RuntimeError, match=r"unknown task id 'nope'.*EXECUTION_ERROR"):
            await client.reset(task_id="nope")


def test_http_answers_validate_against_openenv_core_models(served_textcraft: int) -> None:
    base = f"http://127.0.0.1:{served_textcraft}"
    types = env_server.types
    env_server.SchemaResponse.model_validate(httpx.get(f"{base}/schema").json())
    env_server.HealthResponse.model_validate(httpx.get(f"{base}/health").json())
    metadata = types.EnvironmentMetadata.model_validate(httpx.get(f"{base}/metadata").json())
    assert metadata.name == "textcraft" and "craft" in metadata.description.lower()
    reset = types.ResetResponse.model_validate(httpx.post(f"{base}/reset", json={"seed": 0}).json())
    assert reset.observation["task_id"] == "0" and reset.done is False
    step = httpx.post(f"{base}/step", json={"action": {"action": "inventory"}, "timeout_s": 30})
    assert types.StepResponse.model_validate(step.json()).observation["text"]
    state = State.model_validate(httpx.get(f"{base}/state").json())
    assert state.step_count == 1
    bad = httpx.post(f"{base}/step", json={"action": {"command": "inventory"}})
    assert bad.status_code == 422 and {e["type"] for e in bad.json()["detail"]} >= {
        "missing",
        "extra_forbidden",
    }


async def test_our_client_against_our_server_holds_the_contract(served_textcraft: int) -> None:
    uri = f"openenv+http://127.0.0.1:{served_textcraft}?task_field=task_id&tasks=0-543&name=textcraft"
    checks = await check_env(lambda: open_env(uri))
    assert not [c for c in checks if c.status == "fail"], checks
    env = open_env(uri)
    try:
        await env.reset("goal:stick")
        results = [await env.step(a) for a in solve("stick")]
        assert results[-1].reward == 1.0 and results[-1].done
        with pytest.raises(UnknownTask, match="unknown task id"):
            await env.reset("no-such-task")
    finally:
        await env.close()


async def test_our_ws_answers_bad_messages_with_their_codes(served_textcraft: int) -> None:
    import json

    from websockets.asyncio.client import connect

    async with connect(f"ws://127.0.0.1:{served_textcraft}/ws") as ws:

        async def ask(raw: str) -> dict[str, Any]:
            await ws.send(raw)
            answer: dict[str, Any] = json.loads(await asyncio.wait_for(ws.recv(), 30))
            return answer

        assert (await ask("not json"))["data"]["code"] == "INVALID_JSON"
        unknown = await ask(json.dumps({"type": "mcp", "data": {}}))
        assert unknown == {
            "type": "error",
            "data": {"message": "Unknown message type: mcp", "code": "UNKNOWN_TYPE"},
        }
        assert (await ask("[]"))["data"]["code"] == "UNKNOWN_TYPE"
        missing = await ask(json.dumps({"type": "step"}))
        assert missing["data"]["code"] == "VALIDATION_ERROR" and missing["data"]["errors"][0]["loc"] == [
            "data"
        ]
        before = await ask(json.dumps({"type": "step", "data": {"action": "inventory"}}))
        assert before["data"]["code"] == "EXECUTION_ERROR" and "before reset" in before["data"]["message"]
        reset = await ask(
            json.dumps({"type": "reset", "data": {"task_id": "goal:stick", "episode_id": "e1"}})
        )
        assert reset["type"] == "observation" and reset["data"]["observation"]["task_id"] == "goal:stick"
        state = await ask(json.dumps({"type": "state"}))
        assert state == {
            "type": "state",
            "data": {"episode_id": "e1", "step_count": 0, "task_id": "goal:stick", "done": False},
        }


async def test_capacity_is_a_named_error(served_textcraft: int) -> None:
    envs = [open_env(f"openenv+http://127.0.0.1:{served_textcraft}") for _ in range(5)]
    try:
        for env in envs[:4]:
            for _ in range(40):  # the sessions of the tests before close on the server's side soon after
                try:
                    await env.reset("0")
                    break
                except EnvError as exc:
                    assert "CAPACITY_REACHED" in str(exc)
                    await asyncio.sleep(0.25)
        with pytest.raises(EnvError, match=r"CAPACITY_REACHED.*4/4"):
            await envs[4].reset("0")
    finally:
        await asyncio.gather(*(env.close() for env in envs))
