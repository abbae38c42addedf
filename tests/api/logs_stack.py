"""The stack for production-log tests: the real API (in-process, PostgreSQL) plus the real critic and
splice workers over Redis Streams, driven to quiescence by ``settle()``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from core.bus.redis_streams import RedisStreamsBus
from core.runtime.settings import Settings
from tests.api.conftest import ApiHarness, make_settings, running
from tests.trace_pipeline import settle_workers


@dataclass
class LogsStack:
    api: ApiHarness
    key: dict[str, str]
    settle: Callable[[], Awaitable[None]]

    async def post(self, fmt: str, *traces: Any, **extra: Any) -> Any:
        response = await self.api.client.post(
            "/v1/traces", json={"format": fmt, "traces": list(traces), **extra}, headers=self.key
        )
        assert response.status_code == 202, response.text
        return response.json()

    async def trace(self, trace_id: str) -> dict[str, Any]:
        response = await self.api.client.get(f"/v1/traces/{trace_id}", headers=self.key)
        assert response.status_code == 200, response.text
        return dict(response.json())


@asynccontextmanager
async def logs_stack(pg_url: str, redis_url: str, redis_prefix: str) -> AsyncIterator[LogsStack]:
    """The stack for one test (use it from a fixture)."""
    async with running(make_settings(pg_url)) as api:
        store = api.store
        bus = RedisStreamsBus(redis_url, redis_prefix)
        settings = Settings(block_ms=50, critic_trace_strategy="rules")
        settle = settle_workers(store, bus, settings)

        project = await api.project("logs")
        key = api.auth(await api.key(project, "ingest", "read", "run"))
        try:
            yield LogsStack(api, key, settle)
        finally:
            await bus.close()
