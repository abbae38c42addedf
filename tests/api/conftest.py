"""Fixtures for the API tests: the real app on a fresh PostgreSQL database, driven in-process.

``api`` yields an ``ApiHarness``: an httpx client over ASGITransport (the app's lifespan runs, so
the store is opened exactly as in production), the store itself for seeding events the workers
would write, and helpers that create projects and keys through the API.

A run names a model folder that exists (a missing one is a 422): ``make_settings`` puts the
session's model root as ``AGENTR_MODEL_ROOTS`` unless a test names its own. That root holds a tiny
model folder named ``MODEL`` ("tiny") and, as links to it, the other names the tests' runs use
(``MODELS``: runs that must differ, idempotency races, text that must not reach logs).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.app import create_app
from core.runtime.settings import Settings
from core.store.sql import SqlEventStore

ADMIN_KEY = "test-admin-key-" + "x" * 16
MODEL = "tiny"
"""The model folder a test run names (inside the session's model root)."""
TINY_TEXTS = ["Thought: get wood.\nAction: get 1 oak logs", "Got 1 oak logs", "craft 4 oak planks"] * 20
MODELS = (
    "m",
    "other",
    "theirs",
    "same",
    "private-model-path",
    "USER-CONTENT-1234",
    *(f"m{i}" for i in range(10)),
    *(f"model-{i}" for i in range(32)),
)
"""Names of the session root that are links to ``MODEL`` (each a model folder a run may name)."""
SERVED_MODEL_URLS = "http://m:8000/v1,http://127.0.0.1:1/v1,http://127.0.0.1:9/v1"
"""AGENTR_ALLOWED_MODEL_URLS of the test apps: the served models the tests' runs name (no worker runs
here, so none is called); everything else is refused as in production."""
_MODEL_ROOT: list[Path] = []  # the session's model root, once built


@pytest.fixture(scope="session", autouse=True)
def model_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's model root: a tiny model folder named ``MODEL`` (runs are refused a folder
    that does not exist). ``make_settings`` uses it unless a test gives its own roots."""
    from core.llm.tiny import build_tiny_model

    root = tmp_path_factory.mktemp("api-model-root")
    build_tiny_model(root / MODEL, TINY_TEXTS, hidden=32, layers=1, heads=2, vocab_size=300)
    for name in MODELS:
        (root / name).symlink_to(MODEL, target_is_directory=True)
    _MODEL_ROOT[:] = [root]
    return root


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
        "allowed_model_urls": SERVED_MODEL_URLS,
    }
    if _MODEL_ROOT:
        base["model_roots"] = str(_MODEL_ROOT[0])
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
