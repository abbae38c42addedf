"""Owns the AgentGym HTTP client: any AgentGym environment server (TextCraft, SciWorld, WebShop,
ALFWorld, or ``agentr env serve``) behind the Env port.

Protocol: ``POST /create`` -> ``{"id", ...}``; ``POST /reset {"id", "data_idx"}``;
``POST /step {"id", "action"}`` -> ``{"observation", "reward", "done"}`` (SciWorld adds ``"score"``
0-100, used for the normalised reward since its ``reward`` is a per-step delta);
``GET /observation?id=``; ``POST /close {"id"}``. Errors arrive as HTTP 200 with ``{"error": ...}``
and become :class:`EnvError`. WebShop keys on ``env_idx`` and has no ``/close``.

Requests time out (``timeout`` seconds) and are retried ``retries`` times with exponential backoff on
transport errors; ``/step`` is not idempotent, so it is retried only when the connection could not be
made at all. Actions are sent with ``action_prefix`` (default ``"Action: "``, as current AgentGym
clients send the model's ``Action:`` line); set it to ``""`` for servers that want the bare action.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx

from core.envs.base import EnvError, StepResult, UnknownTask

log = logging.getLogger(__name__)

GENERIC_INSTRUCTION = "You are an agent in a text environment. Reply with one action per turn."
INVALID_MARKERS = ("Could not execute", "No known action matches", "Could not find", "Wrong item format")


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
        action_prefix: str = "Action: ",
        id_key: str | None = None,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        if retries < 0:
            raise EnvError(f"agentgym: retries must be >= 0, got {retries}")
        self.base_url = base_url.rstrip("/")
        self.name = name
        self.instruction = instruction
        self.max_steps = max_steps
        self.splits = splits or {}
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.action_prefix = action_prefix
        self.webshop = name == "webshop"
        self.id_key = id_key or ("env_idx" if self.webshop else "id")
        self._client = client or httpx.AsyncClient(base_url=self.base_url, timeout=timeout)
        self._env_id: Any = None
        self.done = False
        self.score = 0.0

    # ---- transport -------------------------------------------------------------------------------
    async def _request(self, method: str, path: str, *, idempotent: bool = True, **kwargs: Any) -> Any:
        attempt = 0
        while True:
            try:
                response = await self._client.request(method, path, **kwargs)
                break
            except httpx.TransportError as exc:
                retriable = idempotent or isinstance(exc, httpx.ConnectError)
                if not retriable or attempt >= self.retries:
                    raise EnvError(
                        f"agentgym {self.name}: {method} {self.base_url}{path} failed after "
                        f"{attempt + 1} attempt(s): {type(exc).__name__}: {exc}"
                    ) from exc
                delay = self.backoff * (2**attempt)
                log.warning(
                    "agentgym %s: %s %s failed (%s), retrying in %.2fs", self.name, method, path, exc, delay
                )
                await asyncio.sleep(delay)
                attempt += 1
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
            if "unknown task" in message.lower():
                raise UnknownTask(f"agentgym {self.name}: {message}")
            raise EnvError(f"agentgym {self.name}: server error on {path}: {message}")
        return payload

    async def _ensure_created(self) -> None:
        if self._env_id is not None:
            return
        payload = await self._request("POST", "/create", json={})
        if isinstance(payload, dict):
            env_id = payload.get(self.id_key, payload.get("id"))
        else:
            env_id = payload  # WebShop answers with the bare env index
        if env_id is None:
            raise EnvError(f"agentgym {self.name}: /create answered without an id: {payload!r}")
        self._env_id = env_id

    # ---- Env port --------------------------------------------------------------------------------
    def task_ids(self, split: str = "test") -> list[str]:
        if split not in self.splits:
            known = ", ".join(sorted(self.splits)) or "none (open with ?tasks=START-END)"
            raise EnvError(f"agentgym {self.name}: unknown split {split!r} (known: {known})")
        return list(self.splits[split])

    async def reset(self, task_id: str) -> str:
        text = str(task_id).strip()
        if not text.isdigit():
            raise UnknownTask(
                f"agentgym {self.name}: unknown task id {task_id!r} (AgentGym ids are integers)"
            )
        await self._ensure_created()
        payload = await self._request(
            "POST", "/reset", json={self.id_key: self._env_id, "data_idx": int(text)}
        )
        self.done = False
        self.score = 0.0
        if isinstance(payload, dict):
            observation = str(payload.get("observation", ""))
            description = payload.get("task_description")
            if description and description not in observation:
                observation = f"{description}\n\n{observation}"
            return observation
        if isinstance(payload, list) and payload:
            return str(payload[0])
        return str(payload)

    async def step(self, action: str) -> StepResult:
        if self._env_id is None:
            raise EnvError(f"agentgym {self.name}: step() before reset()")
        body = {self.id_key: self._env_id, "action": f"{self.action_prefix}{action.strip()}"}
        payload = await self._request("POST", "/step", json=body, idempotent=False)
        if isinstance(payload, list):  # WebShop: [state, reward, done, info]
            observation, reward, done = str(payload[0]), float(payload[1] or 0), bool(payload[2])
            raw: float | None = reward
            valid = True
        elif isinstance(payload, dict):
            observation = str(payload.get("observation", payload.get("state", "")))
            done = bool(payload.get("done", False))
            if payload.get("score") is not None:
                raw = float(payload["score"])
                reward = max(raw, 0.0) / 100.0
                done = done or raw < 0
            else:
                raw = float(payload.get("reward") or 0.0)
                reward = raw
            valid = bool(payload.get("valid", not observation.startswith(INVALID_MARKERS)))
        else:
            raise EnvError(f"agentgym {self.name}: /step answered {payload!r}")
        self.done = done
        return StepResult(observation, min(max(reward, 0.0), 1.0), done, valid=valid, raw_score=raw)

    async def observation(self) -> str:
        """The server's current observation (``GET /observation``)."""
        if self._env_id is None:
            raise EnvError(f"agentgym {self.name}: observation() before reset()")
        payload = await self._request("GET", "/observation", params={self.id_key: self._env_id})
        return payload if isinstance(payload, str) else str(payload.get("observation", payload))

    async def clone(self) -> None:
        return None

    async def close(self) -> None:
        try:
            if self._env_id is not None and not self.webshop:
                await self._request("POST", "/close", json={self.id_key: self._env_id})
        finally:
            self._env_id = None
            await self._client.aclose()
