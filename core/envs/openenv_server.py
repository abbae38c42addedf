"""Owns the OpenEnv-protocol server behind ``agentr env serve ENV --protocol openenv``: any of our
environment URIs presented to OpenEnv clients (openenv-core's ``EnvClient`` / ``GenericEnvClient``,
or our own ``openenv+http://`` client) in the shapes of openenv-core 0.3.0's ``HTTPEnvServer``
(their server code read, not copied; tests/integration/test_envs_openenv.py plays it with their
client).

Routes:

- ``WS /ws``: one environment per connection (at most ``max_sessions`` at once; past that the
  server answers ``CAPACITY_REACHED`` and closes). Messages ``{"type": "reset", "data": {seed?,
  episode_id?, task_id?}}``, ``{"type": "step", "data": {"action": TEXT, "metadata"?}}``,
  ``{"type": "state"}``, ``{"type": "close"}``; answers ``{"type": "observation", "data":
  {"observation": {"text", "valid", "task_id"}, "reward", "done"}}``, ``{"type": "state", "data":
  {"episode_id", "step_count", "task_id", "done"}}``, ``{"type": "error", "data": {"message",
  "code"}}`` with their codes (``INVALID_JSON``, ``UNKNOWN_TYPE``, ``VALIDATION_ERROR`` with
  pydantic's ``errors``, ``EXECUTION_ERROR``, ``CAPACITY_REACHED``, ``FACTORY_ERROR``).
- ``POST /reset`` (body optional) and ``POST /step {"action": {...}, "timeout_s"?, "request_id"?}``
  -> ``{"observation", "reward", "done"}``; a malformed action is HTTP 422 with pydantic's errors.
  Unlike openenv-core, whose HTTP routes build a fresh environment per request, ours share ONE HTTP
  episode (so ``/reset`` then ``/step`` over plain HTTP plays a game); WebSocket sessions are
  separate from it.
- ``GET /state`` (the HTTP episode's), ``GET /metadata`` (``{"name", "description", "readme_content",
  "version", "author", "documentation_url"}``; the description is the environment's instruction),
  ``GET /health`` (``{"status": "healthy"}``), ``GET /schema`` (``{"action", "observation",
  "state"}`` JSON schemas).

Tasks: ``reset`` plays ``task_id`` (our id, e.g. ``12`` or ``goal:stick``) when given, else the task
at index ``seed`` of the ordered ids ``agentr env serve`` indexes (split ``all`` where the env has
it), else the first of them. The action text loses its ReAct ``Action:`` prefix, as on the AgentGym
server. Rewards are ours ([0, 1]); OpenEnv has no validity flag, so the observation carries ``valid``.
There is no ``/mcp`` route and no ``mcp`` message (an ``UNKNOWN_TYPE`` error).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from fastapi import Body, FastAPI, HTTPException, WebSocket, WebSocketDisconnect
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core.envs.agentgym import bare_action
from core.envs.base import Env, EnvError
from core.envs.server import ordered_task_ids

log = logging.getLogger(__name__)


class TextAction(BaseModel):
    """The action of every environment we serve: one line of text."""

    model_config = ConfigDict(extra="forbid")
    action: str = Field(min_length=1, description="The action text (an `Action:` prefix is cut off)")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Ignored")


class TextObservation(BaseModel):
    """What a step shows (``reward``, ``done`` and ``metadata`` travel beside the observation)."""

    model_config = ConfigDict(extra="forbid")
    done: bool = False
    reward: float | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    text: str = Field(description="The environment's observation text")
    valid: bool = Field(default=True, description="False when the environment could not execute the action")
    task_id: str | None = Field(default=None, description="The task being played")


class EpisodeState(BaseModel):
    model_config = ConfigDict(extra="allow")
    episode_id: str | None = None
    step_count: int = Field(default=0, ge=0)
    task_id: str | None = None
    done: bool = False


class ResetBody(BaseModel):
    model_config = ConfigDict(extra="allow")
    seed: int | None = Field(default=None, ge=0, description="Index into the served task ids")
    episode_id: str | None = Field(default=None, max_length=255)
    task_id: str | None = Field(default=None, description="Our task id (wins over seed)")


class StepBody(BaseModel):
    model_config = ConfigDict(extra="allow")
    action: dict[str, Any]
    timeout_s: float | None = Field(default=None, gt=0)
    request_id: str | None = Field(default=None, max_length=255)


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: str
    data: dict[str, Any] = Field(default_factory=dict)


class _StepMessage(_Message):
    data: dict[str, Any]  # required, as in openenv-core's step message


class _Refused(Exception):
    def __init__(self, code: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.code, self.extra = code, extra


def _errors(exc: ValidationError) -> list[dict[str, Any]]:
    errors: list[dict[str, Any]] = json.loads(exc.json(include_url=False))
    return errors


@dataclass
class _Session:
    """One environment and its episode."""

    env: Env
    ids: list[str]
    episode_id: str | None = None
    step_count: int = 0
    task_id: str | None = None
    done: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def _task(self, body: ResetBody) -> str:
        if body.task_id is not None:
            return body.task_id
        if body.seed is None:
            return self.ids[0]
        if body.seed >= len(self.ids):
            raise EnvError(
                f"{self.env.name}: seed {body.seed} is out of range (0-{len(self.ids) - 1}); "
                "send task_id to name a task"
            )
        return self.ids[body.seed]

    async def reset(self, body: ResetBody) -> dict[str, Any]:
        async with self.lock:
            task_id = self._task(body)
            text = await self.env.reset(task_id)
            self.task_id, self.step_count, self.done = task_id, 0, False
            self.episode_id = body.episode_id or str(uuid.uuid4())
        return {
            "observation": {"text": text, "valid": True, "task_id": task_id},
            "reward": None,
            "done": False,
        }

    async def step(self, action: TextAction, timeout_s: float | None = None) -> dict[str, Any]:
        async with self.lock:
            if self.task_id is None:
                raise EnvError(f"{self.env.name}: step before reset (send a reset first)")
            result = await asyncio.wait_for(self.env.step(bare_action(action.action)), timeout_s)
            self.step_count += 1
            self.done = result.done
        observation = {"text": result.observation, "valid": result.valid, "task_id": self.task_id}
        return {"observation": observation, "reward": float(result.reward), "done": result.done}

    def state(self) -> dict[str, Any]:
        return EpisodeState(
            episode_id=self.episode_id, step_count=self.step_count, task_id=self.task_id, done=self.done
        ).model_dump()


def websocket_support() -> str | None:
    """None when uvicorn can serve ``/ws`` here, else what to install."""
    import importlib.util

    if any(importlib.util.find_spec(name) for name in ("websockets", "wsproto")):
        return None
    return "serving /ws needs the websockets package: pip install 'agentr[openenv]' (or websockets)"


def create_openenv_app(env_uri: str, *, max_sessions: int = 8) -> FastAPI:
    """An app presenting the environment ``env_uri`` names to OpenEnv clients."""
    from core.envs.registry import open_env

    if max_sessions < 1:
        raise EnvError(f"openenv server: max_sessions must be >= 1, got {max_sessions}")
    env_name = env_uri.split("?", 1)[0]
    sessions: dict[str, _Session | None] = {}  # None: the slot is held while its env opens
    shared: dict[str, Any] = {"http": None, "lock": asyncio.Lock(), "ids": None, "info": None}

    async def new_session() -> _Session:
        try:
            env = await asyncio.to_thread(open_env, env_uri)
        except Exception as exc:
            raise _Refused("FACTORY_ERROR", f"cannot open {env_uri}: {exc}", factory_name=env_uri) from exc
        if shared["ids"] is None:
            shared["ids"] = ordered_task_ids(env)
            shared["info"] = (env.name, env.instruction)
        if not shared["ids"]:
            raise _Refused(
                "FACTORY_ERROR", f"{env.name}: the environment lists no tasks", factory_name=env_uri
            )
        return _Session(env, shared["ids"])

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        for session in [*sessions.values(), shared["http"]]:
            if session is not None:
                with contextlib.suppress(Exception):
                    await session.env.close()

    app = FastAPI(title=f"agentr OpenEnv server: {env_uri}", lifespan=lifespan)

    async def http_session() -> _Session:
        async with shared["lock"]:
            if shared["http"] is None:
                try:
                    shared["http"] = await new_session()
                except _Refused as exc:
                    raise HTTPException(500, detail=str(exc)) from exc
            session: _Session = shared["http"]
            return session

    @app.post("/reset")
    async def reset(body: ResetBody = Body(default_factory=ResetBody)) -> dict[str, Any]:
        session = await http_session()
        try:
            return await session.reset(body)
        except Exception as exc:
            raise HTTPException(500, detail=str(exc)) from exc

    @app.post("/step")
    async def step(body: StepBody) -> dict[str, Any]:
        try:
            action = TextAction.model_validate(body.action)
        except ValidationError as exc:
            raise HTTPException(422, detail=_errors(exc)) from exc
        session = await http_session()
        try:
            return await session.step(action, body.timeout_s)
        except TimeoutError as exc:
            raise HTTPException(504, detail=f"step took longer than {body.timeout_s} s") from exc
        except Exception as exc:
            raise HTTPException(500, detail=str(exc)) from exc

    @app.get("/state")
    async def state() -> dict[str, Any]:
        return (await http_session()).state()

    @app.get("/metadata")
    async def metadata() -> dict[str, Any]:
        if shared["info"] is None:
            await http_session()
        name, instruction = shared["info"]
        return {
            "name": name,
            "description": instruction,
            "readme_content": None,
            "version": None,
            "author": None,
            "documentation_url": None,
        }

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "healthy"}

    @app.get("/schema")
    async def schema() -> dict[str, Any]:
        return {
            "action": TextAction.model_json_schema(),
            "observation": TextObservation.model_json_schema(),
            "state": EpisodeState.model_json_schema(),
        }

    async def answer(session: _Session, raw: str) -> dict[str, Any] | None:
        try:
            message = json.loads(raw)
        except json.JSONDecodeError as exc:
            return {"type": "error", "data": {"message": f"Invalid JSON: {exc}", "code": "INVALID_JSON"}}
        kind = message.get("type", "") if isinstance(message, dict) else ""
        try:
            if kind not in ("reset", "step", "state", "close"):
                return {
                    "type": "error",
                    "data": {"message": f"Unknown message type: {kind}", "code": "UNKNOWN_TYPE"},
                }
            parsed = (_StepMessage if kind == "step" else _Message).model_validate(message)
            if kind == "close":
                return None
            if kind == "state":
                return {"type": "state", "data": session.state()}
            if kind == "reset":
                return {
                    "type": "observation",
                    "data": await session.reset(ResetBody.model_validate(parsed.data)),
                }
            return {"type": "observation", "data": await session.step(TextAction.model_validate(parsed.data))}
        except ValidationError as exc:
            data = {"message": "Invalid message", "code": "VALIDATION_ERROR", "errors": _errors(exc)}
            return {"type": "error", "data": data}
        except Exception as exc:
            log.info("openenv server %s: %s", env_name, exc)
            return {"type": "error", "data": {"message": str(exc), "code": "EXECUTION_ERROR"}}

    @app.websocket("/ws")
    async def ws(websocket: WebSocket) -> None:
        await websocket.accept()
        key = str(uuid.uuid4())
        try:
            if len(sessions) >= max_sessions:
                raise _Refused(
                    "CAPACITY_REACHED",
                    f"Server at capacity: {len(sessions)}/{max_sessions} sessions active",
                    active_sessions=len(sessions),
                    max_sessions=max_sessions,
                )
            sessions[key] = None
            session = sessions[key] = await new_session()
            while True:
                reply = await answer(session, await websocket.receive_text())
                if reply is None:
                    break
                await websocket.send_text(json.dumps(reply))
        except WebSocketDisconnect:
            pass
        except _Refused as exc:
            with contextlib.suppress(Exception):
                data = {"message": str(exc), "code": exc.code, **exc.extra}
                await websocket.send_text(json.dumps({"type": "error", "data": data}))
        finally:
            opened = sessions.pop(key, None)
            if opened is not None:
                with contextlib.suppress(Exception):
                    await opened.env.close()
            with contextlib.suppress(Exception):
                await websocket.close()

    return app
