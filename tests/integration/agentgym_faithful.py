"""Faithful in-test stand-ins for AgentGym's published environment servers (WooooDyy/AgentGym
``agentenv-textcraft``, ``-sciworld``, ``-webshop``, ``-alfworld``, ``-babyai``): each implements THAT
server's request models and response shapes (field names, value shapes, missing endpoints, error
strings, id handling) over a small game, so our client is tested against their protocol, not ours.
Every request is recorded (path + JSON body) for the tests to inspect. Served by uvicorn in a thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from pydantic import BaseModel

from core.envs.textcraft import TextCraftEnv
from tests.support import free_port


def _recording_app(title: str) -> tuple[FastAPI, list[tuple[str, Any]]]:
    app = FastAPI(title=title)
    log: list[tuple[str, Any]] = []

    @app.middleware("http")
    async def record(request: Request, call_next: Any) -> Any:
        body = await request.body()
        import json

        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = body.decode(errors="replace")
        log.append((request.url.path, parsed if request.method == "POST" else dict(request.query_params)))
        return await call_next(request)

    return app, log


# ---- agentenv-textcraft: CreateRequestBody{commands?, goal?}, ResetRequestBody{id, data_idx?=0} ----
class _TCCreate(BaseModel):
    commands: str | None = None
    goal: str | None = None


class _IdAction(BaseModel):
    id: int
    action: str


class _TCReset(BaseModel):
    id: int
    data_idx: int | None = 0


class _Id(BaseModel):
    id: int


def textcraft_app() -> tuple[FastAPI, list[tuple[str, Any]]]:
    app, log = _recording_app("TextCraft (AgentGym shapes)")
    envs: dict[int, TextCraftEnv] = {}
    info: dict[int, dict[str, Any]] = {}

    @app.post("/create")
    async def create(body: _TCCreate) -> dict[str, Any]:
        idx = len(envs)
        env = envs[idx] = TextCraftEnv()
        ob = env.reset_sync(str(idx % 544))  # theirs resets to data_idx = id on create
        info[idx] = {"observation": ob, "done": False, "reward": 0, "deleted": False}
        return {"id": idx, "observation": ob, "done": False, "reward": 0}

    @app.post("/reset")
    def reset(body: _TCReset) -> dict[str, Any]:
        if body.id not in envs:
            return {"error": f"The id {body.id} is not valid."}
        ob = envs[body.id].reset_sync(str((body.data_idx or 0) % 544))  # wraps modulo 544
        info[body.id].update({"observation": ob, "done": False, "reward": 0})
        return {"id": body.id, "observation": ob, "done": False, "reward": 0}

    @app.post("/step")
    def step(body: _IdAction) -> dict[str, Any]:
        if body.id not in envs:
            return {"error": f"The id {body.id} is not valid."}
        # their env matches the raw string: "Action: get 1 x" -> "Could not execute Action: get 1 x"
        result = envs[body.id].step_sync(body.action)
        payload = {"observation": result.observation, "reward": int(result.reward), "done": result.done}
        info[body.id].update(payload)
        return payload

    @app.get("/observation")
    def observation(id: int) -> Any:
        return info[id]["observation"] if id in info else {"error": f"The id {id} is not valid."}

    @app.post("/close")
    def close(body: _Id) -> Any:
        envs.pop(body.id, None)
        return True

    return app, log


# ---- agentenv-sciworld: create() no body -> {"id"}; ResetRequestBody{id, data_idx} ----------------
class _Reset(BaseModel):
    id: int
    data_idx: int


SCI_GAMES = [("boil", 0), ("boil", 1)]
SCI_PLAN = {"pick up pot": 25, "move pot to stove": 50, "activate stove": 100}


def sciworld_app() -> tuple[FastAPI, list[tuple[str, Any]]]:
    app, log = _recording_app("ScienceWorld (AgentGym shapes)")
    info: dict[int, dict[str, Any]] = {}

    @app.post("/create")
    async def create() -> dict[str, Any]:
        idx = len(info)
        info[idx] = {"deleted": False, "done": False, "score": 0}
        return {"id": idx}

    @app.post("/reset")
    def reset(body: _Reset) -> dict[str, Any]:
        try:
            if body.id not in info:
                raise ValueError(f"The id {body.id} is not valid.")
            name, var = SCI_GAMES[body.data_idx]
        except Exception as e:  # exactly their handler: any exception -> {"error": str(e)}
            return {"error": str(e)}
        payload = {
            "task_name": name,
            "var_num": var,
            "task_description": f"Your task is to boil water (variation {var}).",
            "observation": "This room is called the kitchen. You see a pot and a stove.",
            "reward": 0,
            "score": 0,
            "deleted": False,
            "done": False,
        }
        info[body.id].update(payload)
        return payload

    @app.post("/step")
    def step(body: _IdAction) -> dict[str, Any]:
        state = info.get(body.id)
        if state is None:
            return {"error": f"The id {body.id} is not valid."}
        if state["done"]:
            return {"error": f"The task with environment {body.id} has finished."}
        if body.action in SCI_PLAN:
            new = SCI_PLAN[body.action]
            reward, ob = new - state["score"], f"You {body.action}."
        elif body.action == "eat pot":
            new, reward, ob = -100, 0, "You eat the pot. That was a mistake."
        else:
            new, reward, ob = state["score"], 0, "No known action matches that input."
        done = new >= 100 or new < 0
        payload = {"observation": ob, "reward": reward, "score": new, "done": done}
        state.update(payload)
        return payload

    @app.get("/observation")
    def observation(id: int) -> Any:
        return info[id]["observation"] if id in info else {"error": f"The id {id} is not valid."}

    return app, log  # no /close: AgentGym's SciWorld server has none


# ---- agentenv-webshop: create -> int; ResetQuery{env_idx, session_id?}; StepQuery{env_idx, action} --
class _WSReset(BaseModel):
    env_idx: int
    session_id: int | None = None


class _WSStep(BaseModel):
    env_idx: int
    action: str


class _WSClose(BaseModel):
    env_idx: int


def webshop_app() -> tuple[FastAPI, list[tuple[str, Any]]]:
    app, log = _recording_app("WebShop (AgentGym shapes)")
    pages: dict[int, dict[str, Any]] = {}

    def home(session: int | None) -> str:
        goal = f"goal #{session}" if session is not None else "a random goal"
        return f"WebShop [SEP] Instruction: [SEP] Find me {goal}: red shoes [SEP] Search"

    @app.post("/create")
    async def create() -> int:
        idx = 48_950_000 + len(pages)  # theirs: a random index
        pages[idx] = {"page": home(None), "session": None}
        return idx

    @app.post("/reset")
    def reset(body: _WSReset) -> tuple[str, None]:
        pages[body.env_idx] = {"page": home(body.session_id), "session": body.session_id}
        return pages[body.env_idx]["page"], None

    @app.get("/observation")
    def observation(env_idx: int) -> str:
        return str(pages[env_idx]["page"])

    @app.post("/step")
    def step(body: _WSStep) -> dict[str, Any]:
        state = pages[body.env_idx]
        reward, done = 0.0, False
        if body.action.startswith("search[") and body.action.endswith("]"):
            state["page"] = f"[Back to Search] [SEP] Results for {body.action[7:-1]} [SEP] B01 [SEP] Red Shoe"
        elif body.action == "click[B01]":
            state["page"] = "[Back to Search] [SEP] Red Shoe [SEP] Buy Now"
        elif body.action == "click[Buy Now]":
            state["page"], reward, done = "Thank you for shopping with us!", 0.75, True
        # anything else: WebShop performs nothing and shows the same page
        return {"state": state["page"], "reward": reward, "done": done, "info": None}

    @app.get("/available_actions")
    def available_actions(env_idx: int) -> dict[str, Any]:
        # theirs: {"has_search_bar", "clickables"} of the current page
        page = str(pages[env_idx]["page"])
        if page.startswith("WebShop"):
            return {"has_search_bar": True, "clickables": ["search"]}
        clickables = [c.strip() for c in page.split("[SEP]") if c.strip() in ("B01", "Buy Now")]
        return {"has_search_bar": False, "clickables": ["back to search", *clickables]}

    @app.post("/close")
    def close(body: _WSClose) -> dict[str, bool]:
        return {"closed": pages.pop(body.env_idx, None) is not None}

    return app, log


# ---- agentenv-alfworld: ResetRequestBody{id, game: int, world_type: str} (required), no /close -----
class _AlfReset(BaseModel):
    id: int
    game: int
    world_type: str


ALF_ROOM = ["go to countertop 1", "take apple 1 from countertop 1", "go to fridge 1", "inventory"]


def alfworld_app() -> tuple[FastAPI, list[tuple[str, Any]]]:
    app, log = _recording_app("ALFWorld (AgentGym shapes)")
    info: dict[int, dict[str, Any]] = {}
    games = ["pick_and_place_simple-Apple-None-Fridge-1/trial_1", "look_at_obj-Book-None-Lamp-2/trial_3"]

    @app.post("/create")
    async def create() -> dict[str, Any]:
        idx = len(info)
        info[idx] = {"done": False, "reward": 0, "deleted": False}
        return {"id": idx}

    @app.post("/reset")
    def reset(body: _AlfReset) -> dict[str, Any]:
        if body.world_type not in ["Text", "Embody", "Hybrid"]:
            return {"error": 'world_type must be one of "Text", "Embody" and "Hybrid"'}
        try:
            game = games[body.game]
        except Exception as e:
            return {"error": str(e)}
        ob = "You are in the middle of a room. Your task is to: put an apple in fridge."
        info[body.id] = {
            "done": False,
            "reward": 0,
            "deleted": False,
            "holding": False,
            "at": "middle",
            "observation": ob,
            "available_actions": list(ALF_ROOM),
        }
        return {"id": body.id, "observation": ob, "available_actions": list(ALF_ROOM), "task_type": game}

    @app.post("/step")
    def step(body: _IdAction) -> dict[str, Any]:
        state = info.get(body.id)
        if state is None:
            return {"error": f"The id {body.id} is not valid."}
        if state["done"]:
            return {"error": f"The task with environment {body.id} has finished."}
        ob, reward, done = "Nothing happens.", 0.0, False
        if body.action == "go to countertop 1":
            state["at"], ob = "countertop", "You arrive at countertop 1. On it you see a apple 1."
        elif body.action == "take apple 1 from countertop 1" and state["at"] == "countertop":
            state["holding"], ob = True, "You pick up the apple 1 from the countertop 1."
        elif body.action == "go to fridge 1":
            state["at"], ob = "fridge", "You arrive at fridge 1."
        elif body.action == "put apple 1 in/on fridge 1" and state["holding"] and state["at"] == "fridge":
            ob, reward, done = "You put the apple 1 in/on the fridge 1.", 1.0, True
        available = list(ALF_ROOM) + (["put apple 1 in/on fridge 1"] if state["holding"] else [])
        payload = {"observation": ob, "reward": reward, "available_actions": available, "done": done}
        state.update(payload)
        return payload

    @app.get("/observation")
    def observation(id: int) -> Any:
        return info[id]["observation"]

    return app, log  # no /close: AgentGym's ALFWorld server has none


# ---- agentenv-babyai: create -> {"id"}; ResetRequestBody{id, data_idx}; no /close, no /observation ---
def babyai_app() -> tuple[FastAPI, list[tuple[str, Any]]]:
    app, log = _recording_app("BabyAI (AgentGym shapes)")
    info: dict[int, dict[str, Any]] = {}
    actions = '\nAvailable actions: ["turn left", "turn right", "move forward", "go to red ball 1"]'

    @app.post("/create")
    async def create() -> dict[str, Any]:
        idx = len(info)
        info[idx] = {"deleted": False, "done": False, "score": 0}
        return {"id": idx}

    @app.post("/reset")
    def reset(body: _Reset) -> dict[str, Any]:
        ob = "Your goal: go to the red ball\nThere is a red ball 1 2 steps in front of you." + actions
        payload = {"observation": ob, "reward": 0, "score": 0, "deleted": False, "done": False}
        info[body.id].update(payload)
        return payload

    @app.post("/step")
    def step(body: _IdAction) -> dict[str, Any]:
        state = info[body.id]
        if state["done"]:
            return {"error": f"The task with environment {body.id} has finished."}
        reward, done = 0.0, False
        if body.action == "go to red ball 1":
            ob, reward, done = "You are facing the red ball.\n The task is completed.", 1.0, True
        elif body.action in ("turn left", "turn right", "move forward"):
            ob = "You see a red ball."
        else:
            ob = "The action is not recognized. Please check valid actions."
        payload = {
            "observation": ob + actions,
            "reward": reward,
            "score": state["score"] + reward,
            "done": done,
        }
        state.update(payload)
        return payload

    return app, log


@contextmanager
def serve(app: FastAPI) -> Iterator[str]:
    """Serve ``app`` on a free port in a thread; yields its base URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("in-test AgentGym server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
