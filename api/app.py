"""Owns the FastAPI application factory: the API process's composition root.

``create_app(settings)`` wires routers, error handlers and middleware; the store (and Redis, when
``AGENTR_REDIS_URL`` is set) are opened in the lifespan, never at import, and closed on shutdown;
the lifespan also warms pyarrow up so the first Parquet download is not slowed by its start.
Routes: /healthz, /readyz, /metrics, /openapi.json, the web UI at /ui, and everything else under /v1
(the capture proxy under /v1/proxy/openai/v1, api/proxy).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from starlette.types import ASGIApp, Receive, Scope, Send

from api.deps import ApiServices
from api.docs_ui import router as docs_ui_router
from api.errors import ERROR_LOGGED, install_error_handlers
from api.idempotency import IdempotentReplay, replay_handler
from api.middleware import AccessLogMiddleware, ApiMetrics, BodyLimitMiddleware, JsonSanitizeMiddleware
from api.openapi import install_openapi
from api.proxy.routes import ProxySettings, load_proxy_settings, start_proxy
from api.proxy.routes import router as proxy_router
from api.ratelimit import RateLimits
from api.routes import (
    datasets,
    events,
    health,
    listings,
    otlp,
    progress,
    projects,
    quality,
    review,
    reviewers,
    runs,
    samples,
    traces,
    trees,
    whoami,
)
from api.ui import router as ui_router
from core.runtime.settings import Settings

log = logging.getLogger("agentr.api")

DESCRIPTION = """\
Agent-R as a service: submit runs (MCTS search -> first-error critic -> revision splicing ->
SFT), follow them, read trees, pairs and samples, download datasets, and ingest production traces.

Authenticate with `Authorization: Bearer <key>`. Keys belong to one project and carry scopes
(read, ingest, run, review, admin). POST routes accept an `Idempotency-Key` header.
"""


class _HandledErrors:
    """Outermost ASGI layer: an exception the app's 500 handler has already answered and logged
    (redacted, api/errors.py) ends here instead of reaching the server, which would log it again
    with its message (uvicorn's "Exception in ASGI application") and drop the kept-alive connection."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self.app(scope, receive, send)
        except Exception:
            if not scope.get("state", {}).get(ERROR_LOGGED):
                raise


class AgentrApi(FastAPI):
    """FastAPI with ``_HandledErrors`` around Starlette's whole middleware stack."""

    def build_middleware_stack(self) -> ASGIApp:
        return _HandledErrors(super().build_middleware_stack())


def create_app(
    settings: Settings, *, create_tables: bool | None = None, proxy_settings: ProxySettings | None = None
) -> FastAPI:
    """The API app for ``settings``.

    ``create_tables``: create missing tables at start-up; default only for the embedded SQLite
    database (PostgreSQL schemas come from ``agentr db upgrade``). ``proxy_settings``: the capture
    proxy's (default: from ``AGENTR_PROXY_*``); its routes exist only when it names an upstream.
    """
    metrics = ApiMetrics()
    proxy = proxy_settings or load_proxy_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        from api.datasets import warm_up
        from core.store.factory import open_store

        warm_up()
        url = settings.effective_database_url
        make_tables = url.startswith("sqlite") if create_tables is None else create_tables
        store = await open_store(url, create_tables=make_tables)
        redis: Any | None = None
        if settings.redis_url:
            import redis.asyncio as aioredis

            redis = aioredis.from_url(settings.redis_url, socket_timeout=5, socket_connect_timeout=5)
        limits = RateLimits(
            settings.auth_failures_per_min,
            settings.auth_failure_burst,
            settings.key_requests_per_s,
            settings.key_request_burst,
            follow_streams_per_key=settings.max_follow_streams_per_key,
        )
        app.state.services = ApiServices(
            settings=settings, store=store, metrics=metrics, redis=redis, limits=limits
        )
        app.state.proxy = start_proxy(proxy, app.state.services)
        log.info(
            "api started",
            extra={"database": store.dialect, "redis": bool(redis), "admin_key": bool(settings.admin_key)},
        )
        try:
            yield
        finally:
            await app.state.proxy.close()  # queued calls go to the spool
            app.state.services = None
            if redis is not None:
                await redis.aclose()
            await store.close()
            log.info("api stopped")

    app = AgentrApi(
        title="agentr",
        version="0.1.0",
        description=DESCRIPTION,
        lifespan=lifespan,
        docs_url=None,  # /docs is api.docs_ui: Swagger UI from local files, with a CSP
        redoc_url=None,
        openapi_url="/openapi.json",
    )
    install_error_handlers(app)
    install_openapi(app)  # /openapi.json states the sanitiser's NUL rule (api/openapi.py)
    app.add_exception_handler(IdempotentReplay, replay_handler)
    routers = (
        health,
        projects,
        runs,
        trees,
        datasets,
        traces,
        otlp,
        listings,
        events,
        review,
        reviewers,
        samples,
    )
    for module in (*routers, quality, progress, whoami):
        app.include_router(module.router)
    if proxy.upstream_url:  # the capture proxy (api/proxy): served only where an upstream is configured
        app.include_router(proxy_router)
    app.include_router(docs_ui_router)
    app.include_router(ui_router)  # the web UI at /ui (api/ui): static pages over the /v1 API
    # add_middleware wraps: the last added runs first. Access log outermost, so 413s are logged too;
    # the sanitiser inside the body limit, so it only ever buffers a bounded body.
    app.add_middleware(JsonSanitizeMiddleware, max_inflated=settings.max_body_bytes)
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    app.add_middleware(AccessLogMiddleware, metrics=metrics)
    return app
