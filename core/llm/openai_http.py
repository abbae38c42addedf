"""Owns the HTTP side of the ``openai`` Policy backend (``core.llm.openai_compat.OpenAIPolicy``): one
``httpx`` client per policy, at most ``max_concurrency`` requests in flight, transient failures
(connection errors, timeouts, 408/409/429/5xx) retried with exponential backoff and jitter, every
other answer turned into a ``PolicyError`` (``ServerRefused`` for HTTP error statuses) that names the
server and quotes what came back; the served model's name from ``GET /models``."""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Any

import httpx

from core.llm.ports import PolicyError

log = logging.getLogger("core.llm.openai_compat")  # the backend's one logger name, as before the split

RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}
UNSUPPORTED_STATUS = {400, 404, 405, 422, 501}  # answers meaning "this server lacks that feature"


class ServerRefused(PolicyError):
    """The server answered a request with an HTTP error status (not retried); ``status`` says which."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class OpenAIHttp:
    """The requests of an OpenAI-compatible client; ``OpenAIPolicy.__init__`` sets these attributes."""

    base_url: str
    root_url: str
    model: str | None
    model_version: str
    retries: int
    backoff: float
    _semaphore: asyncio.Semaphore
    _client: httpx.AsyncClient
    _model_lock: asyncio.Lock

    async def _request(self, method: str, path: str, payload: dict[str, Any] | None = None) -> Any:
        attempt = 0
        while True:
            try:
                async with self._semaphore:
                    response = await self._client.request(method, path, json=payload)
            except (httpx.TimeoutException, httpx.TransportError) as exc:
                if attempt >= self.retries:
                    raise PolicyError(
                        f"cannot reach model server {self.base_url} ({method} {path}): "
                        f"{type(exc).__name__}: {exc} (after {attempt + 1} attempts)"
                    ) from exc
            else:
                if response.status_code < 400:
                    try:
                        return response.json()
                    except ValueError as exc:
                        raise PolicyError(
                            f"model server {self.base_url} answered {method} {path} with non-JSON: "
                            f"{response.text[:300]!r}"
                        ) from exc
                if response.status_code not in RETRY_STATUS or attempt >= self.retries:
                    raise self._http_error(method, path, response)
            delay = self.backoff * (2**attempt) * (0.5 + random.random())
            attempt += 1
            log.warning("retrying %s %s%s in %.2fs (attempt %d)", method, self.base_url, path, delay, attempt)
            await asyncio.sleep(delay)

    def _http_error(self, method: str, path: str, response: httpx.Response) -> PolicyError:
        body = response.text[:300]
        if response.status_code == 404:
            return ServerRefused(
                f"model server {self.base_url} answered 404 to {method} {path} "
                f"(model {self.model!r} unknown or wrong base URL; base URL should end in /v1): {body}",
                404,
            )
        return ServerRefused(
            f"model server {self.base_url} answered HTTP {response.status_code} to {method} {path}: {body}",
            response.status_code,
        )

    async def _model_name(self) -> str:
        if self.model:
            return self.model
        async with self._model_lock:
            if self.model:
                return self.model
            listing = await self._request("GET", "/models")
            try:
                names = [entry["id"] for entry in listing["data"]]
            except (KeyError, TypeError) as exc:
                raise PolicyError(
                    f"model server {self.base_url} sent a malformed /models list: {listing!r:.300}"
                ) from exc
            if len(names) != 1:
                raise PolicyError(
                    f"model server {self.base_url} serves {len(names)} models ({', '.join(names)}); "
                    "name one with URL#model"
                )
            self.model = names[0]
            self.model_version = f"{self.base_url}#{self.model}"
            return self.model

    async def list_models(self) -> list[str]:
        listing = await self._request("GET", "/models")
        try:
            return [entry["id"] for entry in listing["data"]]
        except (KeyError, TypeError) as exc:
            raise PolicyError(
                f"model server {self.base_url} sent a malformed /models list: {listing!r:.300}"
            ) from exc

    def _malformed(self, what: str, body: Any) -> PolicyError:
        return PolicyError(f"model server {self.base_url} sent a malformed {what}: {str(body)[:300]}")

    async def close(self) -> None:
        await self._client.aclose()
