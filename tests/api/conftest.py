"""Fixtures for the API tests: the real app on a fresh PostgreSQL database, driven in-process.

``api`` yields an ``ApiHarness``: an httpx client over ASGITransport (the app's lifespan runs, so
the store is opened exactly as in production), the store itself for seeding events the workers
would write, and helpers that create projects and keys through the API.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from api.app import create_app
from core.runtime.settings import Settings
from core.store.sql import SqlEventStore

ADMIN_KEY = "test-admin-key-" + "x" * 16


@dataclass
class ApiHarness:
    client: httpx.AsyncClient
    store: SqlEventStore
    app: Any

    @staticmethod
    def auth(key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"}

    @property
    def admin(self) -> dict[str, str]:
        return self.auth(ADMIN_KEY)

    async def project(self, name: str = "p") -> str:
        response = await self.client.post("/v1/projects", json={"name": name}, headers=self.admin)
        assert response.status_code == 201, response.text
        return str(response.json()["project_id"])

    async def key(self, project_id: str, *scopes: str) -> str:
        response = await self.client.post(
            f"/v1/projects/{project_id}/keys", json={"scopes": list(scopes)}, headers=self.admin
        )
        assert response.status_code == 201, response.text
        return str(response.json()["key"])


def make_settings(database_url: str, **overrides: Any) -> Settings:
    """Settings for an in-process test app; rate limits off unless a test sets them (every request
    here comes from one client address, and tests send many wrong keys on purpose)."""
    base: dict[str, Any] = {
        "database_url": database_url,
        "admin_key": ADMIN_KEY,
        "redis_url": None,
        "auth_failures_per_min": 0,
        "key_requests_per_s": 0,
    }
    return Settings(**(base | overrides))


@asynccontextmanager
async def running(settings: Settings) -> AsyncIterator[ApiHarness]:
    """The app for ``settings`` with its lifespan started and an in-process client."""
    app = create_app(settings, create_tables=True)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://agentr.test") as client,
    ):
        yield ApiHarness(client=client, store=app.state.services.store, app=app)


@pytest.fixture
async def api(pg_url: str) -> AsyncIterator[ApiHarness]:
    async with running(make_settings(pg_url)) as harness:
        yield harness
