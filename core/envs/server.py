"""Owns the AgentGym-protocol server: any environment URI (built-in, python:, entry point) served over
HTTP (FastAPI) in the shapes of AgentGym's own servers, so that their clients and evaluation scripts
run against it unchanged and our client can be tested against a real server.

Endpoints (errors are HTTP 200 with ``{"error": "..."}``, as AgentGym's servers answer):

- ``POST /create`` (optional body, ignored) -> ``{"id", "observation", "reward": 0, "done": false}``:
  the new instance is already reset to task ``data_idx = id`` (wrapped), as AgentGym's TextCraft
  server does, so ``observe()`` right after create has the task; ScienceWorld answers ``{"id"}`` only
  (as AgentGym's, without loading a game);
- ``POST /reset {"id", "data_idx"}`` -> ``{"id", "observation", "reward": 0, "done": false}``; for
  sciworld -> ``{"task_name", "var_num", "task_description", "observation", "reward", "score",
  "deleted", "done"}`` (``observation`` is the look-around, ``task_description`` the task);
- ``POST /step {"id", "action"}`` -> ``{"observation", "reward", "done", "valid"}`` (+ ``"score"``
  0-100 for sciworld, which AgentGym's SciWorld client reads as its reward);
- ``GET /observation?id=`` -> the current observation (a JSON string);
- ``POST /close {"id"}`` -> ``true``.

``data_idx`` indexes the environment's ordered task ids (split ``all`` where the env has one, else
its default split). Out of range: TextCraft wraps it modulo the number of goals (as AgentGym's
TextCraft server does, so their client keeps working); every other env answers ``{"error": ...}``
naming the range. An ``Action:`` prefix on an action is cut off before it is executed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel

from core.envs.agentgym import bare_action
from core.envs.base import Env, EnvError

log = logging.getLogger(__name__)


class CreateBody(BaseModel):
    model_config = {"extra": "allow"}


class ResetBody(BaseModel):
    id: int
    data_idx: int = 0


class StepBody(BaseModel):
    id: int
    action: str


class CloseBody(BaseModel):
    id: int


@dataclass
class _Slot:
    env: Env
    observation: str = ""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


def strip_action_prefix(action: str) -> str:
    """The action without its ReAct ``Action:`` prefix (see core.envs.agentgym.bare_action)."""
    return bare_action(action)


def ordered_task_ids(env: Env) -> list[str]:
    """The ids ``data_idx`` indexes: split ``all`` where the env has it, else its default split."""
    try:
        return list(env.task_ids("all"))
    except EnvError:
        return list(env.task_ids())


def create_app(env_uri: str) -> FastAPI:
    """An app serving the environment ``env_uri`` names (one instance per ``/create``)."""
    from core.envs.registry import open_env

    slots: dict[int, _Slot] = {}

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        for slot in list(slots.values()):  # release every environment (ScienceWorld JVMs) on shutdown
            with contextlib.suppress(Exception):
                await slot.env.close()
        slots.clear()

    app = FastAPI(title=f"agentr env server: {env_uri}", lifespan=lifespan)
    counter = {"next": 0}
    env_name = env_uri.split("?", 1)[0]
    cache: dict[str, list[str]] = {}

    def error(exc: Exception) -> dict[str, Any]:
        log.info("env server %s: %s", env_name, exc)
        return {"error": str(exc)}

    def slot_of(env_id: int) -> _Slot:
        slot = slots.get(env_id)
        if slot is None:
            raise EnvError(f"The id {env_id} is not valid.")
        return slot

    def task_at(env: Env, data_idx: int) -> str:
        ids = cache.get("ids")
        if ids is None:
            ids = cache["ids"] = ordered_task_ids(env)
        if not ids:
            raise EnvError(f"{env.name}: the environment lists no tasks")
        if env.name == "textcraft" and data_idx >= 0:
            return ids[data_idx % len(ids)]
        if not 0 <= data_idx < len(ids):
            raise EnvError(f"data_idx {data_idx} is out of range (0-{len(ids) - 1})")
        return ids[data_idx]

    @app.get("/")
    async def hello() -> str:
        return f"This is environment {env_name} (agentr)."

    @app.post("/create")
    async def create(body: CreateBody | None = None) -> dict[str, Any]:
        try:
            env = await asyncio.to_thread(open_env, env_uri)
        except Exception as exc:
            return error(exc)
        env_id = counter["next"]
        counter["next"] += 1
        slot = slots[env_id] = _Slot(env)
        log.info("env server %s: created env %d", env_name, env_id)
        if env.name == "sciworld":
            return {"id": env_id}
        try:
            async with slot.lock:
                slot.observation = await env.reset(task_at(env, env_id))
        except Exception as exc:
            return error(exc)
        return {"id": env_id, "observation": slot.observation, "reward": 0, "done": False}

    @app.post("/reset")
    async def reset(body: ResetBody) -> dict[str, Any]:
        try:
            slot = slot_of(body.id)
            async with slot.lock:
                task_id = task_at(slot.env, body.data_idx)
                first = await slot.env.reset(task_id)
        except Exception as exc:
            return error(exc)
        if slot.env.name == "sciworld":
            description, _, look = first.partition("\n\n")
            slot.observation = look
            game = getattr(slot.env, "game", None)
            task_name, variation = game(task_id) if callable(game) else (task_id, 0)
            return {
                "task_name": task_name,
                "var_num": variation,
                "task_description": description,
                "observation": look,
                "reward": 0,
                "score": 0,
                "deleted": False,
                "done": False,
            }
        slot.observation = first
        return {"id": body.id, "observation": first, "reward": 0, "done": False}

    @app.post("/step")
    async def step(body: StepBody) -> dict[str, Any]:
        try:
            slot = slot_of(body.id)
            async with slot.lock:
                result = await slot.env.step(strip_action_prefix(body.action))
                slot.observation = result.observation
        except Exception as exc:
            return error(exc)
        payload: dict[str, Any] = {
            "observation": result.observation,
            "reward": result.reward,
            "done": result.done,
            "valid": result.valid,
        }
        if slot.env.name == "sciworld":
            payload["score"] = result.raw_score if result.raw_score is not None else 100 * result.reward
        return payload

    @app.get("/observation")
    async def observation(id: int) -> Any:
        try:
            return slot_of(id).observation
        except Exception as exc:
            return error(exc)

    @app.post("/close")
    async def close(body: CloseBody) -> Any:
        try:
            slot = slots.pop(body.id, None)
            if slot is None:
                raise EnvError(f"The id {body.id} is not valid.")
            await slot.env.close()
        except Exception as exc:
            return error(exc)
        log.info("env server %s: closed env %d", env_name, body.id)
        return True

    return app
