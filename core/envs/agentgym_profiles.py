"""Owns the AgentGym protocol profiles: for each published AgentGym environment server, the fields our
client sends and the fields it reads (request and response shapes of WooooDyy/AgentGym's
``agentenv-*`` servers, as their own clients in ``agentenv/envs/*.py`` use them).

Every profile sends BARE actions on ``/step`` (AgentGym's clients cut the model's ``Action:`` line out
before sending; our side parses the ReAct answer the same way). Per profile:

- ``textcraft`` (agentenv-textcraft): ``POST /create {}`` -> ``{"id", "observation", "reward",
  "done"}``; ``POST /reset {"id", "data_idx"}`` -> ``{"id", "observation", "reward", "done"}``;
  ``POST /step {"id", "action"}`` -> ``{"observation", "reward", "done"}``; ``GET /observation?id=``
  -> a string; ``POST /close {"id"}`` (a server without it answers 404, which is tolerated). Invalid
  actions answer ``Could not ...`` / ``Wrong item format ...``. The server wraps ``data_idx`` modulo
  its 544 goals, so the client refuses ids >= 544 itself.
- ``sciworld`` (agentenv-sciworld): ``POST /create`` -> ``{"id"}``; ``POST /reset {"id",
  "data_idx"}`` -> ``{"task_name", "var_num", "task_description", "observation", "reward", "score",
  "deleted", "done"}`` (the first observation is ``task_description`` + a blank line + ``observation``);
  ``POST /step`` -> ``{"observation", "reward", "score", "done"}`` where ``score`` is 0-100 (-100 on
  failure) and ``reward`` a per-step delta: the normalised reward is ``max(score, 0) / 100``. Invalid
  action: ``No known action matches that input.``. Out-of-range ids answer ``{"error": "list index
  out of range"}``. No ``/close`` (404 tolerated).
- ``webshop`` (agentenv-webshop): keys on ``env_idx``; ``POST /create`` -> a bare integer;
  ``POST /reset {"env_idx", "session_id"}`` -> ``[observation, null]``, after which the observation is
  read with ``GET /observation?env_idx=`` (as AgentGym's client does); ``POST /step {"env_idx",
  "action"}`` -> ``{"state", "reward", "done", "info"}`` with ``reward`` 0-1; ``POST /close
  {"env_idx"}`` -> ``{"closed": bool}`` where the server has it (404 tolerated). WebShop signals no
  invalid actions (an action it cannot perform changes nothing).
- ``alfworld`` (agentenv-alfworld): ``POST /create`` -> ``{"id"}``; ``POST /reset {"id", "game",
  "world_type"}`` (``world_type`` ``Text`` unless ``?world_type=`` says ``Embody`` / ``Hybrid``) ->
  ``{"id", "observation", "available_actions", "task_type"}``; ``POST /step {"id", "action"}`` ->
  ``{"observation", "reward", "available_actions", "done"}`` (reward = won, 0 or 1). Observations get
  ``AVAILABLE ACTIONS: a,b,...`` appended as AgentGym's client shows them, and the list is kept in
  ``StepResult.info["available_actions"]``. ``Nothing happens.`` is its invalid-action answer. There
  is NO ``/close``: the client never calls it.
- ``babyai`` (agentenv-babyai): ``POST /create`` -> ``{"id"}``; ``POST /reset {"id", "data_idx"}`` ->
  ``{"observation", "reward", "score", "deleted", "done"}``; ``POST /step`` -> ``{"observation",
  "reward", "score", "done"}``; ``reward`` is the task's 0-1 progress (``score`` accumulates rewards
  and is not a normalised score, so it is not used). Invalid actions answer ``The action is not
  recognized. Please check valid actions.`` or a reason such as ``There is a barrier in front of you,
  you can't move forward.``. No ``/close`` and no ``/observation``.
- valid actions (the Env port's optional ``valid_actions``, for constrained decoding): ALFWorld
  sends ``available_actions`` with every reset and step (kept as the state's list); WebShop has
  ``GET /available_actions?env_idx=`` -> ``{"has_search_bar", "clickables"}`` (``click[X]`` per
  clickable; a page with the search bar takes free text, so it has no list: None). TextCraft,
  BabyAI and the generic profile publish no actions endpoint (None); SciWorld's ``GET
  /action_hint`` gives action TEMPLATES and objects, not the valid combinations, so it is not used
  (None; the in-process ``sciworld`` env lists the simulator's valid combinations).
- ``generic`` (any other NAME): textcraft's shapes (``id`` / ``data_idx``, ``observation`` /
  ``reward`` in 0-1 / ``done``), ``score`` 0-100 used when present, ``POST /close`` tried (404
  tolerated), a ``valid`` field honoured when present.

Errors: AgentGym servers answer HTTP 200 with ``{"error": "..."}``. On ``/reset`` an error saying
``index out of range`` / ``unknown task`` / ``not valid`` about the id becomes UnknownTask naming the
server's words; everything else becomes EnvError naming them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

TEXTCRAFT_GOALS = 544  # AgentGym's TextCraft server holds the same 544 goals (and wraps ids modulo)
WORLD_TYPES = ("Text", "Embody", "Hybrid")


@dataclass(frozen=True)
class Reading:
    """What a /step (or /reset) answer says, in our terms."""

    observation: str
    reward: float  # normalised to [0, 1]
    done: bool
    raw_score: float | None
    valid: bool | None  # None: the profile cannot tell from this answer
    info: dict[str, Any] = field(default_factory=dict)


def _join_available(observation: str, payload: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    actions = payload.get("available_actions")
    if not isinstance(actions, list):
        return observation, {}
    names = [str(a) for a in actions]
    return f"{observation}\nAVAILABLE ACTIONS: {','.join(names)}", {"available_actions": names}


@dataclass(frozen=True)
class Profile:
    """The request and response shapes of one AgentGym environment server."""

    name: str
    id_key: str = "id"
    create_body: dict[str, Any] | None = field(default_factory=dict)  # None: POST without a body
    has_close: bool = True  # False: /close is never called
    has_observation: bool = True  # GET /observation exists
    observation_after_reset: bool = False  # read the first observation with GET /observation
    invalid_markers: tuple[str, ...] = ()
    max_task: int | None = None  # ids >= this are refused on our side (the server would wrap them)
    reset_body: Callable[[Profile, Any, int, dict[str, str]], dict[str, Any]] | None = None
    reset_text: Callable[[Any], str] | None = None
    step_reading: Callable[[Profile, Any], Reading] | None = None
    # where the valid actions of a state come from: "payload" (``available_actions`` in the reset /
    # step answers), "webshop" (``GET /available_actions``), None (the server does not say)
    actions_source: str | None = None

    def reset_request(self, env_id: Any, index: int, options: dict[str, str]) -> dict[str, Any]:
        if self.reset_body is not None:
            return self.reset_body(self, env_id, index, options)
        return {self.id_key: env_id, "data_idx": index}

    def first_observation(self, payload: Any) -> str:
        if self.reset_text is not None:
            return self.reset_text(payload)
        if isinstance(payload, dict):
            return str(payload.get("observation", ""))
        if isinstance(payload, list) and payload:
            return str(payload[0])
        return str(payload)

    def read_step(self, payload: Any) -> Reading:
        if self.step_reading is not None:
            return self.step_reading(self, payload)
        return _generic_step(self, payload)

    def is_invalid(self, observation: str) -> bool:
        text = observation.strip()
        return any(text.startswith(marker) for marker in self.invalid_markers)


def _require_dict(profile: Profile, payload: Any, what: str) -> dict[str, Any]:
    if not isinstance(payload, dict) or "observation" not in payload and "state" not in payload:
        raise ValueError(f"{profile.name} {what} answer has no observation: {payload!r}"[:400])
    return payload


def _generic_step(profile: Profile, payload: Any) -> Reading:
    body = _require_dict(profile, payload, "/step")
    observation = str(body.get("observation", body.get("state", "")))
    done = bool(body.get("done", False))
    raw: float | None
    if body.get("score") is not None and profile.name in ("sciworld", "generic"):
        raw = float(body["score"])
        reward = max(raw, 0.0) / 100.0
        done = done or raw < 0
    else:
        raw = float(body.get("reward") or 0.0)
        reward = raw
    valid: bool | None = None
    if "valid" in body:
        valid = bool(body["valid"])
    elif profile.invalid_markers:
        valid = not profile.is_invalid(observation)
    info: dict[str, Any] = {}
    if profile.name == "alfworld":
        observation, info = _join_available(observation, body)
    return Reading(observation, min(max(reward, 0.0), 1.0), done, raw, valid, info)


def _webshop_step(profile: Profile, payload: Any) -> Reading:
    if isinstance(payload, list) and len(payload) >= 3:  # older servers: [state, reward, done, info]
        state, reward, done = str(payload[0]), float(payload[1] or 0.0), bool(payload[2])
    else:
        body = _require_dict(profile, payload, "/step")
        state, reward, done = str(body.get("state", "")), float(body.get("reward") or 0.0), bool(body["done"])
    return Reading(state, min(max(reward, 0.0), 1.0), done, reward, None)


def _sciworld_reset_text(payload: Any) -> str:
    if not isinstance(payload, dict):
        return str(payload)
    observation = str(payload.get("observation", ""))
    description = payload.get("task_description")
    if description and str(description) not in observation:
        return f"{description}\n\n{observation}"
    return observation


def _alfworld_reset_text(payload: Any) -> str:
    if not isinstance(payload, dict):
        return str(payload)
    observation, _ = _join_available(str(payload.get("observation", "")), payload)
    return observation


def _alfworld_reset_body(
    profile: Profile, env_id: Any, index: int, options: dict[str, str]
) -> dict[str, Any]:
    return {profile.id_key: env_id, "game": index, "world_type": options.get("world_type", "Text")}


def _webshop_reset_body(profile: Profile, env_id: Any, index: int, options: dict[str, str]) -> dict[str, Any]:
    return {profile.id_key: env_id, "session_id": index}


PROFILES: dict[str, Profile] = {
    "textcraft": Profile(
        "textcraft",
        invalid_markers=("Could not", "Wrong item format"),
        max_task=TEXTCRAFT_GOALS,
    ),
    "sciworld": Profile(
        "sciworld",
        create_body=None,
        invalid_markers=("No known action matches that input.",),
        reset_text=_sciworld_reset_text,
    ),
    "webshop": Profile(
        "webshop",
        id_key="env_idx",
        create_body=None,
        observation_after_reset=True,
        reset_body=_webshop_reset_body,
        step_reading=_webshop_step,
        actions_source="webshop",
    ),
    "alfworld": Profile(
        "alfworld",
        create_body=None,
        has_close=False,
        invalid_markers=("Nothing happens.",),
        reset_body=_alfworld_reset_body,
        reset_text=_alfworld_reset_text,
        actions_source="payload",
    ),
    "babyai": Profile(
        "babyai",
        create_body=None,
        has_close=False,
        has_observation=False,
        invalid_markers=(
            "The action is not recognized.",
            "There is a barrier in front of you",
            "You cannot",
            "You can't",
        ),
    ),
}


def profile_for(name: str) -> Profile:
    """The profile of server NAME (``generic`` for a name AgentGym does not publish)."""
    return PROFILES.get(name) or Profile(
        "generic", invalid_markers=("Could not execute", "No known action matches", "Nothing happens.")
    )


def profile_options(name: str) -> tuple[str, ...]:
    """URI options specific to one profile."""
    return ("world_type",) if name == "alfworld" else ()


def webshop_actions(payload: Any) -> list[str] | None:
    """WebShop's ``/available_actions`` answer as actions: ``click[X]`` per clickable; None on a page
    with the search bar (``search[...]`` takes free text, which no list covers)."""
    if not isinstance(payload, dict) or not isinstance(payload.get("clickables"), list):
        raise ValueError(f"expected {{'has_search_bar', 'clickables'}}, got {str(payload)[:200]}")
    if payload.get("has_search_bar"):
        return None
    return [f"click[{c}]" for c in payload["clickables"]]
