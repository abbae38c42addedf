"""Owns the AgentGym HTTP client: any AgentGym environment server (TextCraft, SciWorld, WebShop,
ALFWorld, BabyAI, or ``agentr env serve``) behind the Env port.

The wire shapes of each server are its profile (core.envs.agentgym_profiles); this module owns the
session: create on first reset, reset / step / observation / close, timeouts and retries, and the
mapping of server errors to UnknownTask / EnvError naming the server's words.

Actions are sent BARE by default, as AgentGym's own clients send them: a ``Thought: ...\\nAction: X``
answer (or ``Action: X``) given to ``step`` is cut down to ``X`` here, so a server never sees the
prefix (their TextCraft server would answer ``Could not execute Action: ...``). ``action_prefix``
(URI option) puts a prefix back for a server that wants one.

Requests time out (``timeout`` seconds) and are retried ``retries`` times with exponential backoff on
transport errors; ``/step`` and ``/create`` are not idempotent, so they are retried only when the
request never reached the server (the connection could not be made). A ``/create`` that times out
while the server may still be building the environment is not sent again: a second one would leave
the first environment orphaned on the server (AgentGym's create takes no client key, so the orphan
cannot be found and closed); the EnvError says so and names ``?timeout=``.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any

import httpx

from core.envs.agentgym_profiles import Profile, profile_for, webshop_actions
from core.envs.base import EnvError, StepResult, UnknownTask

log = logging.getLogger(__name__)

GENERIC_INSTRUCTION = "You are an agent in a text environment. Reply with one action per turn."
_UNKNOWN_TASK_WORDS = ("index out of range", "unknown task", "out of range", "no such task")


def bare_action(text: str) -> str:
    """``"Action: get 1 oak logs"`` (or ``"Thought: ...\\nAction:\\nget 1 oak logs"``) ->
    ``"get 1 oak logs"``; the last non-empty ``Action:`` line wins (an empty one takes the next line);
    text without one is taken as the action."""
    lines = text.strip().splitlines()
    found: str | None = None
    for index, line in enumerate(lines):
        match = re.match(r"\s*\**\s*action\s*\**\s*:\s*(.*)$", line, re.IGNORECASE)
        if match:
            rest = match.group(1).strip()
            if not rest and index + 1 < len(lines):
                rest = lines[index + 1].strip()
            found = rest
    return (found if found is not None else text).strip()


class AgentGymEnv:
    """A client session with one environment instance on an AgentGym server."""

    def __init__(
        self,
        base_url: str,
        name: str,
        *,
        instruction: str = GENERIC_INSTRUCTION,
        max_steps: int = 50,
        splits: dict[str, list[str]] | None = None,
        timeout: float = 60.0,
        retries: int = 3,
        backoff: float = 0.25,
        action_prefix: str = "",
        profile: Profile | None = None,
        options: dict[str, str] | None = None,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        if retries < 0:
            raise EnvError(f"agentgym: retries must be >= 0, got {retries}")
        self.base_url = base_url.rstrip("/")
        self.name = name
        self.profile = profile or profile_for(name)
        self.instruction = instruction
        self.max_steps = max_steps
        self.splits = splits or {}
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.action_prefix = action_prefix
        self.options = dict(options or {})
        self.id_key = self.profile.id_key
        self._client = client or httpx.AsyncClient(base_url=self.base_url, timeout=timeout)
        self._env_id: Any = None
        self.done = False
        self.task_id: str | None = None
        self._available: list[str] | None = None  # "payload" profiles: the last answer's list

    # ---- transport -------------------------------------------------------------------------------
    async def _send(self, method: str, path: str, *, idempotent: bool, **kwargs: Any) -> httpx.Response:
        attempt = 0
        while True:
            try:
                return await self._client.request(method, path, **kwargs)
            except httpx.TransportError as exc:
                never_sent = isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout))
                retriable = idempotent or never_sent
                if not retriable or attempt >= self.retries:
                    why = ""
                    if not retriable:
                        orphan = (
                            "; a second /create could orphan an environment there"
                            if path == "/create"
                            else ""
                        )
                        why = (
                            f" (not retried: the server may have acted on it{orphan}; "
                            "raise ?timeout= for a slow server)"
                        )
                    raise EnvError(
                        f"agentgym {self.name}: {method} {self.base_url}{path} failed after "
                        f"{attempt + 1} attempt(s): {type(exc).__name__}: {exc}{why}"
                    ) from exc
                delay = self.backoff * (2**attempt)
                log.warning(
                    "agentgym %s: %s %s failed (%s), retrying in %.2fs", self.name, method, path, exc, delay
                )
                await asyncio.sleep(delay)
                attempt += 1

    async def _request(
        self, method: str, path: str, *, idempotent: bool = True, missing_ok: bool = False, **kwargs: Any
    ) -> Any:
        response = await self._send(method, path, idempotent=idempotent, **kwargs)
        if missing_ok and response.status_code in (404, 405):
            return None
        if response.status_code != 200:
            raise EnvError(
                f"agentgym {self.name}: {method} {path} answered HTTP {response.status_code}: "
                f"{response.text[:300]}"
            )
        try:
            payload = response.json()
        except ValueError as exc:
            raise EnvError(
                f"agentgym {self.name}: {method} {path} answered non-JSON: {response.text[:200]}"
            ) from exc
        if isinstance(payload, dict) and payload.get("error") is not None:
            message = str(payload["error"])
            if path == "/reset" and any(w in message.lower() for w in _UNKNOWN_TASK_WORDS):
                raise UnknownTask(f"agentgym {self.name}: the server has no task {self.task_id!r}: {message}")
            raise EnvError(f"agentgym {self.name}: server error on {path}: {message}")
        return payload

    async def _ensure_created(self) -> None:
        if self._env_id is not None:
            return
        body = self.profile.create_body
        kwargs: dict[str, Any] = {} if body is None else {"json": body}
        payload = await self._request("POST", "/create", idempotent=False, **kwargs)
        if isinstance(payload, dict):
            env_id = payload.get(self.id_key, payload.get("id"))
        else:
            env_id = payload  # WebShop answers with the bare env index
        if env_id is None or isinstance(env_id, bool):
            raise EnvError(f"agentgym {self.name}: /create answered without an id: {payload!r}")
        self._env_id = env_id

    # ---- Env port --------------------------------------------------------------------------------
    def task_ids(self, split: str = "test") -> list[str]:
        if split not in self.splits:
            known = ", ".join(sorted(self.splits)) or "none (open with ?tasks=START-END)"
            raise EnvError(f"agentgym {self.name}: unknown split {split!r} (known: {known})")
        return list(self.splits[split])

    def _index_of(self, task_id: str) -> int:
        text = str(task_id).strip()
        if text.startswith("goal:"):
            raise UnknownTask(
                f"agentgym {self.name}: task id {task_id!r} names a goal, but AgentGym servers index "
                "tasks by integer only (their TextCraft order follows the file system's listing, so "
                "a goal cannot be mapped to their index); use the in-process `textcraft` env for goals"
            )
        if not text.isdigit():
            raise UnknownTask(
                f"agentgym {self.name}: unknown task id {task_id!r} (AgentGym ids are integers)"
            )
        index = int(text)
        limit = self.profile.max_task
        if limit is not None and index >= limit:
            raise UnknownTask(
                f"agentgym {self.name}: unknown task id {task_id!r} (task ids are 0-{limit - 1}; the "
                "server would silently wrap it)"
            )
        return index

    async def reset(self, task_id: str) -> str:
        index = self._index_of(task_id)
        self.task_id = str(index)
        await self._ensure_created()
        body = self.profile.reset_request(self._env_id, index, self.options)
        payload = await self._request("POST", "/reset", json=body)
        self.done = False
        self._available = _listed_actions(payload)
        if self.profile.observation_after_reset:
            return await self.observation()
        return self.profile.first_observation(payload)

    async def step(self, action: str) -> StepResult:
        if self._env_id is None:
            raise EnvError(f"agentgym {self.name}: step() before reset()")
        body = {self.id_key: self._env_id, "action": f"{self.action_prefix}{bare_action(action)}"}
        payload = await self._request("POST", "/step", json=body, idempotent=False)
        try:
            reading = self.profile.read_step(payload)
        except (ValueError, TypeError, KeyError) as exc:
            raise EnvError(f"agentgym {self.name}: unexpected /step answer: {exc}") from exc
        self.done = reading.done
        self._available = _listed_actions(payload)
        valid = reading.valid if reading.valid is not None else True
        return StepResult(
            reading.observation,
            reading.reward,
            reading.done,
            valid=valid,
            raw_score=reading.raw_score,
            info=reading.info,
        )

    async def observation(self) -> str:
        """The server's current observation (``GET /observation``)."""
        if self._env_id is None:
            raise EnvError(f"agentgym {self.name}: observation() before reset()")
        if not self.profile.has_observation:
            raise EnvError(f"agentgym {self.name}: this server has no /observation endpoint")
        payload = await self._request("GET", "/observation", params={self.id_key: self._env_id})
        return payload if isinstance(payload, str) else str(payload.get("observation", payload))

    async def valid_actions(self) -> list[str] | None:
        """The server's valid actions for the current state, where it publishes them (the profile's
        ``actions_source``, core.envs.agentgym_profiles); None where it does not, or once done."""
        if self._env_id is None or self.done:
            return None
        source = self.profile.actions_source
        if source == "payload":
            return None if self._available is None else list(self._available)
        if source == "webshop":
            payload = await self._request("GET", "/available_actions", params={self.id_key: self._env_id})
            try:
                return webshop_actions(payload)
            except ValueError as exc:
                raise EnvError(f"agentgym {self.name}: unexpected /available_actions answer: {exc}") from exc
        return None

    async def clone(self) -> None:
        return None

    async def close(self) -> None:
        try:
            if self._env_id is not None and self.profile.has_close:
                await self._request("POST", "/close", json={self.id_key: self._env_id}, missing_ok=True)
        finally:
            self._env_id = None
            await self._client.aclose()


def _listed_actions(payload: Any) -> list[str] | None:
    """The ``available_actions`` list of a reset / step answer, when it has one."""
    actions = payload.get("available_actions") if isinstance(payload, dict) else None
    return [str(a) for a in actions] if isinstance(actions, list) else None
