"""Owns the operational routes: /healthz (process alive), /readyz (the database answers, and Redis
when AGENTR_REDIS_URL is set), /metrics (Prometheus text). None of them needs an API key; none
reveals data. /metrics carries only process-wide counts (requests by route template and status,
events appended by type; no project, key or content labels) and, when AGENTR_METRICS_TOKEN is set,
answers only ``Authorization: Bearer <that token>`` (401 otherwise)."""

from __future__ import annotations

import asyncio
import hmac
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text

from api.deps import ApiServices, services
from api.errors import ApiError
from api.schemas import ErrorBody, HealthOut

router = APIRouter(tags=["health"])

CHECK_TIMEOUT_S = 2.0


@router.get("/healthz", response_model=HealthOut, summary="Liveness: the process answers")
async def healthz() -> Any:
    return HealthOut(status="ok")


async def _check_database(svc: ApiServices) -> str:
    async with svc.store.engine.connect() as conn:
        await conn.execute(text("SELECT 1"))
    return "ok"


async def _check_redis(svc: ApiServices) -> str:
    assert svc.redis is not None
    await svc.redis.ping()
    return "ok"


@router.get(
    "/readyz",
    response_model=HealthOut,
    summary="Readiness: the database (and Redis, when configured) answer",
    responses={503: {"model": HealthOut, "description": "A dependency does not answer"}},
)
async def readyz(svc: ApiServices = Depends(services)) -> Any:
    """Ready when every dependency of this deployment answers within 2 s; 503 naming the one that
    does not.

    The database is always checked. Redis is checked only when AGENTR_REDIS_URL is set: request
    handlers never talk to Redis (every change is an event appended to the store), but in such a
    deployment the relay publishes those events to Redis Streams for the workers, so a run
    submitted here goes nowhere while Redis is down. Without AGENTR_REDIS_URL (embedded, in-process
    bus) there is no Redis to wait for, and none is checked.
    """
    checks: dict[str, str] = {}
    probes = {"database": _check_database(svc)}
    if svc.redis is not None:
        probes["redis"] = _check_redis(svc)
    for name, probe in probes.items():
        try:
            checks[name] = await asyncio.wait_for(probe, CHECK_TIMEOUT_S)
        except Exception as exc:  # any failure means not ready; say which and why
            checks[name] = f"error: {type(exc).__name__}"
    ready = all(v == "ok" for v in checks.values())
    body = HealthOut(status="ok" if ready else "unavailable", checks=checks)
    return JSONResponse(body.model_dump(), status_code=200 if ready else 503)


@router.get(
    "/metrics",
    response_class=PlainTextResponse,
    summary="Prometheus metrics (text exposition format)",
    responses={
        200: {"content": {"text/plain": {"schema": {"type": "string"}}}},
        401: {"model": ErrorBody, "description": "AGENTR_METRICS_TOKEN is set and was not presented"},
    },
)
async def metrics(request: Request, svc: ApiServices = Depends(services)) -> Any:
    token = svc.settings.metrics_token
    if token:
        presented = request.headers.get("authorization", "")
        if not hmac.compare_digest(presented.encode(), f"Bearer {token}".encode()):
            raise ApiError(
                401,
                "this /metrics needs `Authorization: Bearer <AGENTR_METRICS_TOKEN>`",
                headers={"WWW-Authenticate": "Bearer"},
            )
    return PlainTextResponse(generate_latest(svc.metrics.registry), media_type=CONTENT_TYPE_LATEST)
