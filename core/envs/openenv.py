"""Owns the OpenEnv client: an environment served with openenv-core (its ``HTTPEnvServer`` /
``create_app``, or ``agentr env serve --protocol openenv``) behind the Env port.

The protocol (openenv-core 0.3.0, ``openenv.core.env_server.http_server`` and ``env_client``): an
episode lives on a WebSocket session at ``/ws`` (the server builds one environment per connection);
the client sends ``{"type": "reset", "data": {seed?, episode_id?, ...}}``, ``{"type": "step",
"data": ACTION}``, ``{"type": "state"}`` and ``{"type": "close"}``, and the server answers
``{"type": "observation", "data": {"observation": {...}, "reward": float | null, "done": bool}}``,
``{"type": "state", "data": {...}}`` or ``{"type": "error", "data": {"message", "code", ...}}``.
Their HTTP ``POST /reset`` and ``POST /step`` build a fresh environment per request (no episode
spans two requests), so this client plays over the WebSocket only; HTTP serves ``GET /schema``
(the action and observation JSON schemas), read once before the first reset.

Mapping to our text model:

- action: the ReAct answer is cut to its bare ``Action:`` text (as for AgentGym servers) and sent as
  ``{ACTION_FIELD: text}``. ``?action_field=`` names the field; without it the field is read from the
  action schema: the one required string field, else the one string field, else the first of
  ``message``, ``action``, ``command``, ``text``, ``content`` that the schema has; otherwise opening
  fails naming the fields. A named field the schema does not have is an error naming the fields.
- observation: the text is ``observation[OBSERVATION_FIELD]`` (``?observation_field=``, or read
  from the observation schema the same way, ``reward`` / ``done`` / ``metadata`` aside); without
  one the text is the observation dict as JSON (sorted keys). ``StepResult.info["observation"]`` is
  the whole dict.
- reward: ``null`` is 0; scaled from [``reward_min``, ``reward_max``] (default [0, 1]) to [0, 1] and
  clipped; ``raw_score`` keeps the server's value. ``done`` is the server's. OpenEnv has no
  "invalid action" signal, so ``valid`` is always True.
- tasks: OpenEnv has no task list; a task is what ``reset`` is given: ``?task_field=seed`` (default:
  the id is sent as the integer ``seed``) or any other reset field (the id sent as a string, e.g.
  ``task_field=task_id`` for ``agentr env serve --protocol openenv``). ``?tasks=START-END``
  (default 0-99) lists split ``test`` / ``all``, ``?train_tasks=START-END`` split ``train``.

Errors are EnvError naming the URL and the server's message (a reset error about an unknown task or
an index out of range is UnknownTask); every connect and answer waits at most ``timeout`` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any
from urllib.parse import urlsplit

from core.envs.agentgym import GENERIC_INSTRUCTION, bare_action
from core.envs.base import EnvError, StepResult, UnknownTask
from core.envs.openenv_schema import fetch_schema, resolve_fields
from core.envs.uri_options import UriOptions

log = logging.getLogger(__name__)

_UNKNOWN_TASK_WORDS = ("unknown task", "out of range", "no such task", "index out of range")
OPTIONS = (
    "action_field, observation_field, task_field, tasks, train_tasks, timeout, max_steps, "
    "reward_min, reward_max, name"
)


def _id_range(uri: str, key: str, text: str) -> list[str]:
    try:
        start, end = (int(x) for x in text.split("-", 1))
    except ValueError as exc:
        raise EnvError(f"environment URI {uri!r}: option {key}={text!r} must be START-END") from exc
    if start < 0 or end < start:
        raise EnvError(
            f"environment URI {uri!r}: option {key}={text!r} must be START-END with 0 <= START <= END"
        )
    return [str(i) for i in range(start, end + 1)]


class OpenEnvEnv:
    """One WebSocket session with an OpenEnv server (one environment on its side)."""

    def __init__(
        self,
        base_url: str,
        *,
        name: str = "openenv",
        action_field: str | None = None,
        observation_field: str | None = None,
        task_field: str = "seed",
        splits: dict[str, list[str]] | None = None,
        timeout: float = 60.0,
        max_steps: int = 50,
        reward_min: float = 0.0,
        reward_max: float = 1.0,
        instruction: str = GENERIC_INSTRUCTION,
    ) -> None:
        if reward_max <= reward_min:
            raise EnvError(f"openenv: reward_max ({reward_max}) must be above reward_min ({reward_min})")
        if timeout <= 0:
            raise EnvError(f"openenv: timeout must be > 0, got {timeout}")
        if max_steps < 1:
            raise EnvError(f"openenv: max_steps must be >= 1, got {max_steps}")
        self.base_url = base_url.rstrip("/")
        scheme, rest = self.base_url.split("://", 1)
        self.ws_url = f"{'wss' if scheme == 'https' else 'ws'}://{rest}/ws"
        self.name = name
        self.instruction = instruction
        self.max_steps = max_steps
        self.action_field = action_field
        self.observation_field = observation_field
        self.task_field = task_field
        default = [str(i) for i in range(100)]
        self.splits = splits or {"test": default, "all": default}
        self.timeout = timeout
        self.reward_min = reward_min
        self.reward_max = reward_max
        self._ws: Any = None
        self._schema_read = False
        self.task_id: str | None = None

    async def _read_schema(self) -> None:
        if self._schema_read:
            return
        who = f"openenv {self.name}"
        schema = await fetch_schema(self.base_url, self.timeout, who)
        where = f"the server at {self.base_url}"
        fields = resolve_fields(schema, self.action_field, self.observation_field, who=who, where=where)
        self.action_field, self.observation_field = fields
        self._schema_read = True

    # ---- transport -------------------------------------------------------------------------------
    async def _connect(self) -> Any:
        if self._ws is not None:
            return self._ws
        try:
            from websockets.asyncio.client import connect
        except ImportError as exc:
            raise EnvError(
                'openenv: the WebSocket client needs the websockets package: pip install "agentr[openenv]"'
            ) from exc
        try:
            self._ws = await connect(self.ws_url, open_timeout=self.timeout, max_size=None)
        except TimeoutError as exc:
            raise EnvError(
                f"openenv {self.name}: connecting to {self.ws_url} timed out after {self.timeout} s"
            ) from exc
        except Exception as exc:  # noqa: BLE001 - refused, bad handshake, DNS: all named
            raise EnvError(
                f"openenv {self.name}: cannot connect to {self.ws_url}: {type(exc).__name__}: {exc}"
            ) from exc
        return self._ws

    async def _drop(self) -> None:
        ws, self._ws = self._ws, None
        if ws is not None:
            with contextlib.suppress(Exception):  # best effort: the session is gone either way
                await ws.close()

    async def _call(self, message: dict[str, Any], expect: str) -> dict[str, Any]:
        ws = await self._connect()
        kind = message["type"]
        try:
            try:
                await ws.send(json.dumps(message))
            except Exception as unsent:  # noqa: BLE001 - closed: the server may have said why first
                try:
                    raw = await asyncio.wait_for(ws.recv(), timeout=1.0)
                except Exception:  # noqa: BLE001 - nothing was said: report the send
                    raise unsent from None
            else:
                raw = await asyncio.wait_for(ws.recv(), timeout=self.timeout)
        except TimeoutError as exc:
            await self._drop()  # a late answer would be read as the next one's
            raise EnvError(
                f"openenv {self.name}: no answer to {kind!r} from {self.ws_url} within {self.timeout} s"
            ) from exc
        except Exception as exc:  # noqa: BLE001 - the connection broke
            await self._drop()
            raise EnvError(
                f"openenv {self.name}: the session at {self.ws_url} ended during {kind!r}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        try:
            answer = json.loads(raw)
        except (TypeError, ValueError) as exc:
            raise EnvError(
                f"openenv {self.name}: {self.ws_url} answered {kind!r} with non-JSON: {raw!r:.200}"
            ) from exc
        if not isinstance(answer, dict):
            raise EnvError(f"openenv {self.name}: {self.ws_url} answered {kind!r} with {answer!r:.200}")
        data = answer.get("data")
        data = data if isinstance(data, dict) else {}
        if answer.get("type") == "error":
            text = str(data.get("message", "unknown error"))
            errors = data.get("errors")
            if errors:
                text += ": " + "; ".join(
                    f"{'.'.join(str(p) for p in e.get('loc', []))} {e.get('msg', '')}".strip()
                    if isinstance(e, dict)
                    else str(e)
                    for e in errors
                )
            message_text = (
                f"openenv {self.name}: {self.ws_url} refused {kind!r} ({data.get('code', 'ERROR')}): {text}"
            )
            if kind == "reset" and any(w in text.lower() for w in _UNKNOWN_TASK_WORDS):
                raise UnknownTask(message_text)
            if data.get("code") in ("CAPACITY_REACHED", "FACTORY_ERROR", "SESSION_ERROR"):
                await self._drop()  # the server closes the session after these
            raise EnvError(message_text)
        if answer.get("type") != expect:
            raise EnvError(f"openenv {self.name}: {self.ws_url} answered {kind!r} with {answer!r:.200}")
        return data

    # ---- mapping ---------------------------------------------------------------------------------
    def _text(self, observation: dict[str, Any]) -> str:
        field = self.observation_field
        if field is not None and field in observation:
            value = observation[field]
            return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
        return json.dumps(observation, sort_keys=True, default=str)

    def _reward(self, raw: Any) -> tuple[float, float | None]:
        if raw is None:
            return 0.0, None
        try:
            value = float(raw)
        except (TypeError, ValueError) as exc:
            raise EnvError(f"openenv {self.name}: reward {raw!r} from {self.ws_url} is not a number") from exc
        scaled = (value - self.reward_min) / (self.reward_max - self.reward_min)
        return min(1.0, max(0.0, scaled)), value

    def _reading(self, data: dict[str, Any]) -> tuple[str, float, float | None, bool, dict[str, Any]]:
        observation = data.get("observation")
        if not isinstance(observation, dict):
            raise EnvError(
                f"openenv {self.name}: {self.ws_url} sent an observation that is not an object: {data!r:.200}"
            )
        reward, raw = self._reward(data.get("reward"))
        return self._text(observation), reward, raw, bool(data.get("done", False)), observation

    # ---- Env port --------------------------------------------------------------------------------
    def task_ids(self, split: str = "test") -> list[str]:
        if split not in self.splits:
            known = ", ".join(sorted(self.splits))
            raise EnvError(f"openenv {self.name}: unknown split {split!r} (known: {known})")
        return list(self.splits[split])

    def _reset_data(self, task_id: str) -> dict[str, Any]:
        text = str(task_id).strip()
        if self.task_field != "seed":
            return {self.task_field: text}
        if not text.isdigit():
            raise UnknownTask(
                f"openenv {self.name}: task id {task_id!r} is not a seed (a non-negative integer); "
                "open with ?task_field=FIELD to send ids that are not seeds"
            )
        return {"seed": int(text)}

    async def reset(self, task_id: str) -> str:
        data = self._reset_data(task_id)
        await self._read_schema()
        self.task_id = str(task_id).strip()
        answer = await self._call({"type": "reset", "data": data}, "observation")
        text, _, _, _, _ = self._reading(answer)
        return text

    async def step(self, action: str) -> StepResult:
        if self.task_id is None:
            raise EnvError(f"openenv {self.name}: step() before reset()")
        if self._ws is None:
            raise EnvError(
                f"openenv {self.name}: the session at {self.ws_url} was lost (see the error before); "
                "reset() again"
            )
        assert self.action_field is not None
        answer = await self._call(
            {"type": "step", "data": {self.action_field: bare_action(action)}}, "observation"
        )
        text, reward, raw, done, observation = self._reading(answer)
        return StepResult(text, reward, done, valid=True, raw_score=raw, info={"observation": observation})

    async def state(self) -> dict[str, Any]:
        """The server's state of the session (``{"episode_id", "step_count", ...}``)."""
        if self._ws is None:
            raise EnvError(f"openenv {self.name}: state() before reset()")
        return await self._call({"type": "state"}, "state")

    async def clone(self) -> None:
        return None

    async def close(self) -> None:
        ws = self._ws
        if ws is not None:
            with contextlib.suppress(Exception):  # closing anyway
                await ws.send(json.dumps({"type": "close"}))
        await self._drop()
        self.task_id = None


def open_openenv(uri: str) -> OpenEnvEnv:
    """``openenv+http://HOST:PORT[/PREFIX]?...`` (also ``+https``, ``+ws``, ``+wss``) -> a session."""
    parts = urlsplit(uri)
    transport = parts.scheme.removeprefix("openenv+")
    http = {"http": "http", "https": "https", "ws": "http", "wss": "https"}.get(transport)
    if http is None:
        raise EnvError(
            f"malformed environment URI {uri!r}: transport must be openenv+http, openenv+https, "
            "openenv+ws or openenv+wss"
        )
    if not parts.netloc:
        raise EnvError(f"malformed environment URI {uri!r}: expected openenv+http://HOST:PORT")
    try:
        parts.port  # noqa: B018 - validates the port
    except ValueError as exc:
        raise EnvError(f"malformed environment URI {uri!r}: {exc}") from exc
    options = UriOptions(uri, parts.query)

    path = parts.path.rstrip("/")
    if transport in ("ws", "wss"):
        path = path.removesuffix("/ws")  # the URL of the socket itself names the same server
    timeout = options.take_number("timeout", 60.0, float)
    max_steps = int(options.take_number("max_steps", 50, float))
    reward_min = options.take_number("reward_min", 0.0, float)
    reward_max = options.take_number("reward_max", 1.0, float)
    tasks = _id_range(uri, "tasks", options.take("tasks", "0-99"))
    splits = {"test": tasks, "all": tasks}
    if "train_tasks" in options.values:
        splits["train"] = _id_range(uri, "train_tasks", options.take("train_tasks", ""))
    action_field = options.take("action_field", "") or None
    observation_field = options.take("observation_field", "") or None
    task_field = options.take("task_field", "seed") or "seed"
    name = options.take("name", "openenv") or "openenv"
    options.finish("openenv", OPTIONS)
    return OpenEnvEnv(
        f"{http}://{parts.netloc}{path}",
        name=name,
        action_field=action_field,
        observation_field=observation_field,
        task_field=task_field,
        splits=splits,
        timeout=timeout,
        max_steps=max_steps,
        reward_min=reward_min,
        reward_max=reward_max,
    )
