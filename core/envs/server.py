"""Owns the AgentGym-protocol server: any environment URI (built-in, python:, entry point) served over
HTTP (FastAPI) in the shapes of AgentGym's own servers, so that their clients and evaluation scripts
run against it unchanged and our client can be tested against a real server.

TextCraft and ScienceWorld are answered as WooooDyy/AgentGym's ``agentenv-textcraft`` and
``agentenv-sciworld`` servers answer (their server code read, not copied; the conformance test
tests/integration/test_agentgym_conformance.py replays transcripts recorded from it), field for field:

- TextCraft. ``POST /create {commands?, goal?}`` (a body is required: none is a 422) -> ``{"id",
  "observation", "done": false, "reward": 0}``, the instance reset to task ``data_idx = id`` (their
  server accepts ``commands`` and ``goal`` and, as recorded, does not use them: nor do we);
  ``POST /reset {"id", "data_idx"=0}`` -> the same shape; ``POST /step {"id", "action"}`` ->
  ``{"observation", "reward", "done"}`` where reward is the integer 1 and done true only on the step
  that crafts the goal (0 / false otherwise), and the episode goes on after it and past any number of
  steps; ``GET /observation?id=`` -> the last observation (a string); ``GET /detail?id=`` ->
  ``{"observation", "done", "reward", "deleted"}``; ``GET /commands`` / ``GET /goal`` -> the task's
  crafting commands / goal (their routes exist but their wrapper lacks the methods, so their server
  answers 500 there); ``POST /close {"id"}`` -> ``true`` (``false`` for an unknown id). ``data_idx``
  wraps modulo the 544 goals, negative ones too.
- ScienceWorld. ``POST /create`` (no body) -> ``{"id"}``; ``POST /reset {"id", "data_idx"}`` ->
  ``{"task_name", "var_num", "task_description", "observation", "reward", "score", "deleted",
  "done"}`` (the look-around's step); ``POST /step`` -> ``{"observation", "reward", "score", "done"}``
  with ``reward`` the step's change in points (an integer) and ``score`` the points so far (0-100,
  -100 on failure); once done, every call but ``/reset`` and ``/close`` answers ``{"error": "The task
  with environment N has finished."}``; ``data_idx`` indexes like a Python list (``-1`` is the last
  game, past the end is ``{"error": "list index out of range"}``); ``GET /observation``, ``/detail``,
  ``/action_hint`` (``{"possible_actions", "possible_objects"}``), ``/goals`` (``{"goals"}``: the
  goal progress text), ``/task_description``, ``/object_tree``, ``/state``; ``POST /close`` -> ``true``
  (a closed or unknown id is an HTTP 500, as theirs raises).
- Any other environment keeps the generic shapes: ``/create`` (optional body) -> ``{"id",
  "observation", "reward", "done"}``, ``/reset`` likewise, ``/step`` -> ``{"observation", "reward",
  "done", "valid"}``, ``/observation``, ``/close``; ``data_idx`` out of range answers ``{"error":
  "data_idx N is out of range (0-M)"}``.

Errors are HTTP 200 with ``{"error": "..."}`` as AgentGym's servers answer; an unknown id is ``The id
N is not valid.``. ``data_idx`` indexes the environment's ordered task ids (split ``all`` where the
env has one, else its default split). An ``Action:`` prefix on an action is cut off before it is
executed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel

from core.envs.agentgym import bare_action
from core.envs.base import Env, EnvError, StepResult

log = logging.getLogger(__name__)


class CreateBody(BaseModel):
    model_config = {"extra": "allow"}
    commands: str | None = None  # TextCraft: accepted and, as on their server, not used
    goal: str | None = None


class ResetBody(BaseModel):
    id: int
    data_idx: int = 0


class SciWorldResetBody(BaseModel):
    id: int
    data_idx: int  # required by their server


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
    info: dict[str, Any] = field(default_factory=dict)  # what /detail answers
    commands: str = ""
    score: int = 0
    done: bool = False


def strip_action_prefix(action: str) -> str:
    """The action without its ReAct ``Action:`` prefix (see core.envs.agentgym.bare_action)."""
    return bare_action(action)


def ordered_task_ids(env: Env) -> list[str]:
    """The ids ``data_idx`` indexes: split ``all`` where the env has it, else its default split."""
    try:
        return list(env.task_ids("all"))
    except EnvError:
        return list(env.task_ids())


async def _act(slot: _Slot, action: str) -> StepResult:
    """One step of the slot's environment (``Action:`` prefix cut off); the slot keeps its observation."""
    async with slot.lock:
        result = await slot.env.step(strip_action_prefix(action))
    slot.observation = result.observation
    return result


def _guarded(error: Any, read: Any) -> Any:
    """``read()``, or the AgentGym error answer naming what it raised."""
    try:
        return read()
    except Exception as exc:
        return error(exc)


def _commands_of(observation: str) -> str:
    head, _, _ = observation.partition("\n\nGoal: craft ")
    return head.removeprefix("Crafting commands:\n")


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

    def task_ids(env: Env) -> list[str]:
        ids = cache.get("ids")
        if ids is None:
            ids = cache["ids"] = ordered_task_ids(env)
        if not ids:
            raise EnvError(f"{env.name}: the environment lists no tasks")
        return ids

    def task_at(env: Env, data_idx: int) -> str:
        ids = task_ids(env)
        if env.name == "textcraft":
            return ids[data_idx % len(ids)]
        if not 0 <= data_idx < len(ids):
            raise EnvError(f"data_idx {data_idx} is out of range (0-{len(ids) - 1})")
        return ids[data_idx]

    async def open_slot() -> tuple[int, _Slot]:
        env = await asyncio.to_thread(open_env, env_uri)
        if hasattr(env, "open_ended"):  # TextCraft: AgentGym's episode (core.envs.textcraft.env)
            env.open_ended = True
        env_id = counter["next"]
        counter["next"] += 1
        slots[env_id] = _Slot(env)
        log.info("env server %s: created env %d", env_name, env_id)
        return env_id, slots[env_id]

    greeting = {"textcraft": "TextCraft", "sciworld": "ScienceWorld"}.get(env_name)

    @app.get("/")
    async def hello() -> str:  # AgentGym's servers' greeting for their environments
        return f"This is environment {greeting}." if greeting else f"This is environment {env_name} (agentr)."

    if env_name == "sciworld":
        _sciworld_routes(app, slots, slot_of, open_slot, error, task_ids)
    elif env_name == "textcraft":
        _textcraft_routes(app, slot_of, open_slot, error, task_at)
    else:
        _generic_routes(app, slot_of, open_slot, error, task_at)

    def current(env_id: int) -> str:
        slot = slot_of(env_id)
        if env_name == "sciworld" and slot.done:
            raise EnvError(f"The task with environment {env_id} has finished.")
        return slot.observation

    @app.get("/observation")
    async def observation(id: int) -> Any:
        return _guarded(error, lambda: current(id))

    @app.post("/close")
    async def close(body: CloseBody) -> Any:
        slot = slots.pop(body.id, None)
        if slot is None:
            if env_name == "sciworld":  # theirs raises on a closed / unknown id: HTTP 500
                raise HTTPException(500, f"The task with environment {body.id} has been deleted.")
            return False if env_name == "textcraft" else error(EnvError(f"The id {body.id} is not valid."))
        with contextlib.suppress(Exception):
            await slot.env.close()
        log.info("env server %s: closed env %d", env_name, body.id)
        return True

    return app


def _textcraft_routes(app: FastAPI, slot_of: Any, open_slot: Any, error: Any, task_at: Any) -> None:
    async def start(slot: _Slot, env_id: int, data_idx: int) -> dict[str, Any]:
        env: Any = slot.env
        async with slot.lock:
            first = await env.reset(task_at(env, data_idx))
            slot.commands = _commands_of(first)
            slot.observation = first
            slot.info = {"observation": first, "done": False, "reward": 0, "deleted": False}
        return {"id": env_id, "observation": first, "done": False, "reward": 0}

    @app.post("/create")
    async def create(body: CreateBody) -> dict[str, Any]:
        try:
            env_id, slot = await open_slot()
            return await start(slot, env_id, env_id)
        except Exception as exc:
            return error(exc)

    @app.post("/reset")
    async def reset(body: ResetBody) -> dict[str, Any]:
        try:
            return await start(slot_of(body.id), body.id, body.data_idx)
        except Exception as exc:
            return error(exc)

    @app.post("/step")
    async def step(body: StepBody) -> dict[str, Any]:
        try:
            slot = slot_of(body.id)
            result = await _act(slot, body.action)
            payload = {"observation": result.observation, "reward": int(result.reward), "done": result.done}
            slot.info.update(payload)
            return payload
        except Exception as exc:
            return error(exc)

    @app.get("/detail")
    async def detail(id: int) -> Any:
        return _guarded(error, lambda: slot_of(id).info)

    @app.get("/commands")
    async def commands(id: int) -> Any:
        return _guarded(error, lambda: slot_of(id).commands)

    @app.get("/goal")
    async def goal(id: int) -> Any:
        return _guarded(error, lambda: getattr(slot_of(id).env, "goal", None))


def _sciworld_routes(
    app: FastAPI, slots: dict[int, _Slot], slot_of: Any, open_slot: Any, error: Any, task_ids: Any
) -> None:
    def live(env_id: int) -> _Slot:
        slot = slot_of(env_id)
        if slot.done:
            raise EnvError(f"The task with environment {env_id} has finished.")
        return slot

    def simulator(slot: _Slot) -> Any:
        return getattr(slot.env, "simulator", None) or slot.env

    async def ask(env_id: int, make: Any) -> Any:
        try:
            slot = live(env_id)
            async with slot.lock:
                return await asyncio.to_thread(make, simulator(slot), slot)
        except Exception as exc:
            return error(exc)

    @app.post("/create")
    async def create() -> dict[str, Any]:
        try:
            env_id, _ = await open_slot()
            return {"id": env_id}
        except Exception as exc:
            return error(exc)

    @app.post("/reset")
    async def reset(body: SciWorldResetBody) -> dict[str, Any]:
        try:
            slot = slot_of(body.id)
            ids = task_ids(slot.env)
            task_id = ids[body.data_idx]  # a Python list index, as theirs (IndexError's words)
            async with slot.lock:
                first = await slot.env.reset(task_id)
            description, _, look = first.partition("\n\n")
            score = int(getattr(slot.env, "score", 0) or 0)
            task_name, variation = slot.env.game(task_id)  # type: ignore[attr-defined]
            slot.observation, slot.score, slot.done = look, score, False
            payload = {
                "task_name": task_name,
                "var_num": variation,
                "task_description": description,
                "observation": look,
                "reward": score,
                "score": score,
                "deleted": False,
                "done": False,
            }
            slot.info = {"deleted": False, "done": False, **payload}
            return payload
        except Exception as exc:
            return error(exc)

    @app.post("/step")
    async def step(body: StepBody) -> dict[str, Any]:
        try:
            slot = live(body.id)
            result = await _act(slot, body.action)
            score = int(result.raw_score if result.raw_score is not None else round(100 * result.reward))
            payload = {
                "observation": result.observation,
                "reward": score - slot.score,  # the step's change in points, as scienceworld's step
                "score": score,
                "done": result.done,
            }
            slot.score, slot.done = score, result.done
            slot.info.update(payload)
            return payload
        except Exception as exc:
            return error(exc)

    @app.get("/detail")
    async def detail(id: int) -> Any:
        return _guarded(error, lambda: live(id).info)

    @app.get("/action_hint")
    async def action_hint(id: int) -> Any:
        return await ask(
            id,
            lambda sim, _: {
                "possible_actions": sim.getPossibleActions(),
                "possible_objects": sim.getPossibleObjects(),
            },
        )

    @app.get("/goals")
    async def goals(id: int) -> Any:
        return await ask(id, lambda sim, _: {"goals": sim.getGoalProgressStr()})

    @app.get("/task_description")
    async def task_description(id: int) -> Any:
        return await ask(id, lambda sim, _: {"task_description": sim.get_task_description()})

    @app.get("/object_tree")
    async def object_tree(id: int) -> Any:
        return await ask(id, lambda sim, _: {"object_tree": sim.getObjectTree()})

    @app.get("/state")
    async def state(id: int) -> Any:
        return await ask(
            id,
            lambda sim, slot: {
                "observation": sim.look(),
                "inventory": sim.inventory(),
                "task_description": sim.get_task_description(),
                "goal_progress": sim.get_goal_progress(),
                "possible_actions": sim.get_possible_actions()[:10],
                "possible_objects": sim.get_possible_objects()[:10],
                "current_moves": sim.get_num_moves(),
                "environment_info": slot.info,
            },
        )


def _generic_routes(app: FastAPI, slot_of: Any, open_slot: Any, error: Any, task_at: Any) -> None:
    @app.post("/create")
    async def create(body: CreateBody | None = None) -> dict[str, Any]:
        try:
            env_id, slot = await open_slot()
            async with slot.lock:
                slot.observation = await slot.env.reset(task_at(slot.env, env_id))
        except Exception as exc:
            return error(exc)
        return {"id": env_id, "observation": slot.observation, "reward": 0, "done": False}

    @app.post("/reset")
    async def reset(body: ResetBody) -> dict[str, Any]:
        try:
            slot = slot_of(body.id)
            async with slot.lock:
                slot.observation = await slot.env.reset(task_at(slot.env, body.data_idx))
        except Exception as exc:
            return error(exc)
        return {"id": body.id, "observation": slot.observation, "reward": 0, "done": False}

    @app.post("/step")
    async def step(body: StepBody) -> dict[str, Any]:
        try:
            result = await _act(slot_of(body.id), body.action)
        except Exception as exc:
            return error(exc)
        return {
            "observation": result.observation,
            "reward": result.reward,
            "done": result.done,
            "valid": result.valid,
        }
