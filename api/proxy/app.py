"""Owns the standalone capture proxy process (``agentr proxy``): only the proxy routes, /healthz and
/metrics (the recorder's counters among them; ``AGENTR_METRICS_TOKEN`` guards it as on the API).

It opens the same store as the API (``AGENTR_DATABASE_URL``) to verify agent keys and record calls,
and keeps the upstream's URL and key in its own configuration (``ProxySettings``). No JSON
sanitiser on the way in: request bodies go to the upstream byte for byte (the body limit stays).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from api.deps import ApiServices
from api.errors import install_error_handlers
from api.middleware import AccessLogMiddleware, ApiMetrics, BodyLimitMiddleware
from api.proxy.routes import ProxySettings, redacted_url, start_proxy
from api.proxy.routes import router as proxy_router
from api.ratelimit import RateLimits
from api.routes.health import healthz
from api.routes.health import metrics as metrics_route
from core.runtime.settings import Settings

log = logging.getLogger("agentr.proxy")


def create_proxy_app(settings: Settings, proxy_settings: ProxySettings) -> FastAPI:
    metrics = ApiMetrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        from core.store.factory import open_store

        url = settings.effective_database_url
        store = await open_store(url, create_tables=url.startswith("sqlite"))
        limits = RateLimits(
            settings.auth_failures_per_min,
            settings.auth_failure_burst,
            settings.key_requests_per_s,
            settings.key_request_burst,
        )
        app.state.services = ApiServices(settings=settings, store=store, metrics=metrics, limits=limits)
        app.state.proxy = start_proxy(proxy_settings, app.state.services)
        log.info(
            "proxy started",
            extra={"upstream": redacted_url(proxy_settings.upstream_url), "database": store.dialect},
        )
        try:
            yield
        finally:
            await app.state.proxy.close()
            app.state.services = None
            await store.close()

    app = FastAPI(title="agentr capture proxy", version="0.1.0", lifespan=lifespan, redoc_url=None)
    install_error_handlers(app)
    app.include_router(proxy_router)
    app.add_api_route("/healthz", healthz, methods=["GET"], summary="Liveness: the process answers")
    app.add_api_route(
        "/metrics", metrics_route, methods=["GET"], summary="Prometheus metrics (text exposition format)"
    )
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    app.add_middleware(AccessLogMiddleware, metrics=metrics)
    return app
