"""Owns the capture proxy's HTTP client to the upstream model server: one pooled aiohttp session per
process (keep-alive connections, the upstream's key on every request, bodies passed as bytes).

aiohttp rather than httpx here: on the proxy's hot path its client costs about a fifth of the CPU per
call (bench/proxy.py; docs/benchmarks.md). Any failure to get an answer (refused, reset, timed out,
cut mid-body) is raised as ``UpstreamUnreachable`` holding the original error, so the routes answer
one kind of 502 (api/proxy/routes.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp
from yarl import URL

JSON = {"content-type": "application/json"}


class UpstreamUnreachable(Exception):
    """The upstream did not answer (``__cause__``: what aiohttp raised)."""


@dataclass(frozen=True)
class Answer:
    """A whole upstream answer: status, content type, body."""

    status: int
    content_type: str | None
    body: bytes


class Stream:
    """An upstream answer being read (status and content type known, body still arriving)."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status = response.status
        self.content_type: str | None = response.headers.get("content-type")

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives; a cut or stalled upstream raises ``UpstreamUnreachable``."""
        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise UpstreamUnreachable(str(exc)) from exc

    async def read(self) -> bytes:
        try:
            return await self._response.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise UpstreamUnreachable(str(exc)) from exc

    def close(self) -> None:
        """Give the connection back (closed, when the body was not read to its end)."""
        self._response.release()


class UpstreamClient:
    """Requests to ``{base_url}/...`` on pooled connections (made in a running event loop)."""

    def __init__(
        self, base_url: str, key: str | None, timeout_s: float, *, max_connections: int = 256
    ) -> None:
        self.base = URL(base_url.rstrip("/"))
        headers = {"accept-encoding": "identity"}
        if key is not None:
            headers["authorization"] = f"Bearer {key}"
        self._session = aiohttp.ClientSession(
            headers=headers,
            # per read, not per call: a long stream is fine as long as events keep coming
            timeout=aiohttp.ClientTimeout(total=None, connect=10.0, sock_read=timeout_s),
            # idle connections dropped after 2 s, before the upstream's own keep-alive timeout closes
            # them (uvicorn's, so vLLM's: 5 s); at the same 5 s a reused connection could be closed
            # under the request (a reset, so a 502: seen in bench/proxy.py between rounds)
            connector=aiohttp.TCPConnector(limit=max_connections, keepalive_timeout=2.0),
            auto_decompress=True,
            trust_env=True,  # HTTP(S)_PROXY / NO_PROXY honoured, as the httpx client before it did
        )

    def url(self, path: str) -> URL:
        """``path`` under the base URL (its query string, if any, kept)."""
        return self.base.with_path(self.base.path.rstrip("/") + path, keep_query=True)

    async def get(self, path: str) -> Answer:
        try:
            async with self._session.get(self.url(path)) as response:
                return Answer(response.status, response.headers.get("content-type"), await response.read())
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise UpstreamUnreachable(str(exc)) from exc

    async def post(self, path: str, body: bytes) -> Answer:
        try:
            async with self._session.post(self.url(path), data=body, headers=JSON) as response:
                return Answer(response.status, response.headers.get("content-type"), await response.read())
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise UpstreamUnreachable(str(exc)) from exc

    async def stream(self, path: str, body: bytes) -> Stream:
        """POST ``body``; returns once the status and headers are in (close the ``Stream``)."""
        try:
            response = await self._session.post(self.url(path), data=body, headers=JSON)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise UpstreamUnreachable(str(exc)) from exc
        return Stream(response)

    async def aclose(self) -> None:
        await self._session.close()
