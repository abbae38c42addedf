"""Owns the AgentGym-protocol server: any built-in environment served over HTTP (FastAPI), so that
AgentGym's own clients can use ours and our client can be tested against a real server.

Endpoints (AgentGym conventions; errors are HTTP 200 with ``{"error": "..."}``):
``POST /create`` -> ``{"id", "observation", "reward", "done"}``; ``POST /reset {"id", "data_idx"}``;
``POST /step {"id", "action"}`` -> ``{"observation", "reward", "done", "valid"}`` (+ ``"score"`` 0-100
for sciworld, as AgentGym's SciWorld server); ``GET /observation?id=``; ``POST /close {"id"}``.
An ``Action:`` prefix (what AgentGym clients send) is stripped from actions before they are executed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel

from core.envs.base import Env, EnvError

log = logging.getLogger(__name__)

_ACTION_LINE = re.compile(r"(?:^|\n)\s*action\s*:\s*([^\n]*)", re.IGNORECASE)


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
    """``"Action: get 1 oak logs"`` (or ``"Thought: ...\nAction:\nget 1 oak logs"``) ->
    ``"get 1 oak logs"``; the last ``Action:`` wins; text without one is taken as the action."""
    found = _ACTION_LINE.findall(action)
    return found[-1].strip() if found else action.strip()


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

    def error(exc: Exception) -> dict[str, Any]:
        log.info("env server %s: %s", env_name, exc)
        return {"error": str(exc)}

    def slot_of(env_id: int) -> _Slot:
        slot = slots.get(env_id)
        if slot is None:
            raise EnvError(f"The id {env_id} is not valid.")
        return slot

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
        slots[env_id] = _Slot(env)
        log.info("env server %s: created env %d", env_name, env_id)
        return {"id": env_id, "observation": "", "reward": 0, "done": False}

    @app.post("/reset")
    async def reset(body: ResetBody) -> dict[str, Any]:
        try:
            slot = slot_of(body.id)
            async with slot.lock:
                slot.observation = await slot.env.reset(str(body.data_idx))
        except Exception as exc:
            return error(exc)
        return {"id": body.id, "observation": slot.observation, "reward": 0, "done": False}

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
        if slot.env.name == "sciworld" and result.raw_score is not None:
            payload["score"] = result.raw_score
        return payload

    @app.get("/observation")
    async def observation(id: int) -> Any:
        try:
            return slot_of(id).observation
        except Exception as exc:
            return error(exc)

    @app.post("/close")
    async def close(body: CloseBody) -> dict[str, Any]:
        try:
            slot = slots.pop(body.id, None)
            if slot is None:
                raise EnvError(f"The id {body.id} is not valid.")
            await slot.env.close()
        except Exception as exc:
            return error(exc)
        log.info("env server %s: closed env %d", env_name, body.id)
        return {"closed": True}

    return app
