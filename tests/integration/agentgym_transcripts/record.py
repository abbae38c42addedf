"""Records a request/response transcript of an AgentGym environment server (textcraft or sciworld),
for tests/integration/test_agentgym_conformance.py to replay against ``agentr env serve``.

How the committed transcripts were made (their code is not in this repository): WooooDyy/AgentGym at
commit 3ef9235 (``fetch github:WooooDyy/AgentGym``), ``git archive HEAD agentenv-textcraft`` /
``agentenv-sciworld`` unpacked under /tmp, each server started unchanged from its folder with this
project's virtual environment (fastapi, uvicorn, gymnasium, scienceworld 1.2.3 on PyPI)::

    cd /tmp/agtc/agentenv-textcraft && PYTHONHASHSEED=0 python -m uvicorn agentenv_textcraft:app --port 8761
    python tests/integration/agentgym_transcripts/record.py textcraft http://127.0.0.1:8761 \\
        --recipes /tmp/agtc/agentenv-textcraft/agentenv_textcraft/recipes
    cd /tmp/agsw/agentenv-sciworld && python -m uvicorn agentenv_sciworld:app --port 8762
    python tests/integration/agentgym_transcripts/record.py sciworld http://127.0.0.1:8762

The TextCraft transcript also records the order in which the server's ``os.listdir`` listed its
recipe files (their goal ids follow it) and the hash seed (their first observations follow it).
The requests are chosen here (our solver's plans for the goals the server names, invalid actions,
wrapping indices, missing bodies, unknown ids); the responses are the server's, verbatim.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent


class Recorder:
    def __init__(self, base: str) -> None:
        self.client = httpx.Client(base_url=base, timeout=300)
        self.entries: list[dict[str, Any]] = []

    def call(self, method: str, path: str, body: Any = None, *, no_body: bool = False, **params: Any) -> Any:
        kwargs: dict[str, Any] = {}
        if not no_body and method == "POST" and body is not None:
            kwargs["json"] = body
        if params:
            kwargs["params"] = params
        try:
            response = self.client.request(method, path, **kwargs)
        except httpx.TransportError:  # their server drops the connection after an unhandled error
            self.client = httpx.Client(base_url=str(self.client.base_url), timeout=300)
            response = self.client.request(method, path, **kwargs)
        try:
            payload = response.json()
        except ValueError:
            payload = response.text
        entry = {"method": method, "path": path, "status": response.status_code, "response": payload}
        if "json" in kwargs:
            entry["body"] = body
        if params:
            entry["params"] = params
        self.entries.append(entry)
        return payload


def record_textcraft(rec: Recorder, recipes: Path) -> dict[str, Any]:
    sys.path.insert(0, str(HERE.parents[2]))
    from core.envs.textcraft.recipes import agentgym_book
    from core.envs.textcraft.remote import goal_in_observation
    from core.envs.textcraft.solver import solve

    listing = [name for name in os.listdir(recipes) if name.endswith(".json")]
    book = agentgym_book(listing)
    rec.call("GET", "/")
    created = rec.call("POST", "/create", {})
    env_id = created["id"]
    rec.call("POST", "/create", no_body=True)  # their body is required: 422
    for data_idx in (5, 130, 420, 540):
        first = rec.call("POST", "/reset", {"id": env_id, "data_idx": data_idx})
        goal = goal_in_observation(first["observation"])
        plan = solve(goal, book) if goal else []
        extra = ["dance", "get 1 stick", "craft 1 stick using 1 dirt", "craft 4 planks using 1 oak logs"]
        for action in [*extra[: 2 if data_idx != 5 else 4], *plan[:-1], "inventory", plan[-1], "inventory"]:
            rec.call("POST", "/step", {"id": env_id, "action": action})
        rec.call("GET", "/observation", id=env_id)
        rec.call("GET", "/detail", id=env_id)
    rec.call("GET", "/commands", id=env_id)
    rec.call("GET", "/goal", id=env_id)
    for data_idx in (-1, 544, 600):
        rec.call("POST", "/reset", {"id": env_id, "data_idx": data_idx})
    rec.call("POST", "/reset", {"id": env_id})  # data_idx defaults to 0
    rec.call("POST", "/reset", no_body=True)
    rec.call("POST", "/step", {"id": env_id})
    rec.call("POST", "/step", {"id": 999, "action": "inventory"})
    rec.call("GET", "/observation", id=999)
    custom_task = {"commands": "craft 4 stick using 2 planks", "goal": "minecraft:stick"}
    custom = rec.call("POST", "/create", custom_task)
    for action in ("get 2 oak planks", "craft 4 stick using 2 oak planks", "inventory"):
        rec.call("POST", "/step", {"id": custom["id"], "action": action})
    rec.call("POST", "/close", {"id": custom["id"]})
    rec.call("POST", "/close", {"id": custom["id"]})
    rec.call("POST", "/step", {"id": custom["id"], "action": "inventory"})
    goals = []
    for data_idx in range(len(book.goals)):
        answer = rec.client.post("/reset", json={"id": env_id, "data_idx": data_idx}).json()
        observation = answer["observation"]
        goals.append(observation.rsplit("Goal: craft ", 1)[1].rstrip("."))
    return {"listing": listing, "goals": goals, "pythonhashseed": os.environ.get("PYTHONHASHSEED")}


def record_sciworld(rec: Recorder) -> dict[str, Any]:
    sys.path.insert(0, str(HERE.parents[2]))
    from core.envs.sciworld import SciWorldEnv

    local = SciWorldEnv()
    gold = local.gold_actions("300")
    local.close_sync()
    rec.call("GET", "/")
    env_id = rec.call("POST", "/create")["id"]
    rec.call("POST", "/reset", {"id": env_id, "data_idx": 300})
    for action in ["fly to the moon", *gold[:3]]:
        rec.call("POST", "/step", {"id": env_id, "action": action})
    hints = ["/observation", "/detail", "/action_hint", "/goals", "/task_description"]
    hints += ["/object_tree", "/state"]
    for path in hints:
        rec.call("GET", path, id=env_id)
    for action in gold[3:]:
        rec.call("POST", "/step", {"id": env_id, "action": action})
    rec.call("POST", "/step", {"id": env_id, "action": "look around"})  # finished
    rec.call("GET", "/observation", id=env_id)
    rec.call("POST", "/reset", {"id": env_id, "data_idx": -1})
    rec.call("POST", "/step", {"id": env_id, "action": "focus on agent"})  # fails the task: -100
    rec.call("POST", "/reset", {"id": env_id, "data_idx": 4639})
    rec.call("POST", "/reset", {"id": env_id})  # data_idx is required: 422
    rec.call("POST", "/step", {"id": 999, "action": "look around"})
    rec.call("POST", "/close", {"id": env_id})
    rec.call("POST", "/close", {"id": env_id})
    return {"gold_task": 300}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("env", choices=("textcraft", "sciworld"))
    parser.add_argument("base_url")
    parser.add_argument("--recipes", type=Path, help="textcraft: the server's recipes folder")
    args = parser.parse_args()
    rec = Recorder(args.base_url)
    if args.env == "textcraft":
        meta = record_textcraft(rec, args.recipes)
    else:
        meta = record_sciworld(rec)
    python = sys.version.split()[0]
    meta["source"] = f"WooooDyy/AgentGym@3ef9235 agentenv-{args.env} (unchanged), Python {python}"
    out = HERE / f"{args.env}.json"
    out.write_text(json.dumps({"meta": meta, "entries": rec.entries}, indent=1) + "\n", encoding="utf-8")
    print(f"{out}: {len(rec.entries)} requests")


if __name__ == "__main__":
    main()
