"""Owns the API's request dependencies: the process services, the caller (Principal) and scopes.

``ApiServices`` is what the app's lifespan builds once per process (store, optional Redis, key
verifier, metrics). ``authenticate`` turns the ``Authorization: Bearer <key>`` header (or
``X-API-Key``) into a ``Principal``: the bootstrap admin (AGENTR_ADMIN_KEY, no project) or a
project key with scopes. ``require(scope)`` is the per-route guard: 401 without a valid key, 403
when the key lacks the scope, 429 (api/ratelimit.py) when the client address used up its failed
authentications with that key prefix (or, for a prefix that is no live key's, as a whole) or the key
its request rate. Data routes filter every query by the principal's
project, so another project's ids answer 404, exactly like ids that do not exist.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from api.errors import ApiError
from api.keys import KeyVerifier, VerifiedKeys, is_admin_key, parse_key, reject_at_full_cost
from api.middleware import ApiMetrics
from api.ratelimit import RateLimits
from core.runtime.settings import Settings
from core.store.queries import projects as keys
from core.store.sql import SqlEventStore

bearer = HTTPBearer(auto_error=False, description="An agentr API key: `Authorization: Bearer agr_...`.")


@dataclass
class ApiServices:
    """Everything a request handler may use; built in the app lifespan (the composition root)."""

    settings: Settings
    store: SqlEventStore
    metrics: ApiMetrics
    verifier: KeyVerifier = field(default_factory=KeyVerifier)
    limits: RateLimits = field(default_factory=lambda: RateLimits(0, 1, 0, 1))
    redis: Any | None = None  # redis.asyncio.Redis when AGENTR_REDIS_URL is set
    # callers the capture proxy verified (api/proxy/routes.py); a revoke in this process forgets its key
    verified: VerifiedKeys[Principal] = field(default_factory=VerifiedKeys)


@dataclass(frozen=True)
class Principal:
    """Who is calling: the bootstrap admin (project_id None) or a key of one project."""

    project_id: str | None
    key_id: str | None
    prefix: str | None
    scopes: frozenset[str]

    @property
    def is_bootstrap_admin(self) -> bool:
        return self.project_id is None

    @property
    def scope_name(self) -> str:
        """The namespace of this caller's idempotency keys."""
        return self.project_id or "admin"

    def allows(self, scope: str) -> bool:
        return "admin" in self.scopes or scope in self.scopes

    def project(self) -> str:
        """The caller's project; the bootstrap admin has none and must use a project key."""
        if self.project_id is None:
            raise ApiError(
                403,
                "the bootstrap admin key manages projects and keys only; use a key of the project",
            )
        return self.project_id


def services_of(request: Request) -> ApiServices:
    """The process's services (503 before the lifespan has started them)."""
    svc: ApiServices | None = getattr(request.app.state, "services", None)
    if svc is None:  # lifespan did not run
        raise ApiError(503, "the API is not started", code="unavailable")
    return svc


async def services(request: Request) -> ApiServices:
    """``services_of`` as a dependency: async, so FastAPI runs it on the event loop instead of
    handing every request's lookup to its thread pool (a thread hop per dependency per call)."""
    return services_of(request)


def _unauthorized(detail: str) -> ApiError:
    return ApiError(401, detail, headers={"WWW-Authenticate": "Bearer"})


async def authenticate(
    request: Request,
    credentials: HTTPAuthorizationCredentials | None = Depends(bearer),
    svc: ApiServices = Depends(services),
) -> Principal:
    presented = credentials.credentials if credentials is not None else request.headers.get("x-api-key")
    if not presented:
        raise _unauthorized("missing API key: send `Authorization: Bearer <key>`")
    client = request.client.host if request.client is not None else "unknown"
    if is_admin_key(presented, svc.settings.admin_key):
        request.state.key_prefix = "admin"
        return Principal(project_id=None, key_id=None, prefix="admin", scopes=frozenset({"admin"}))
    parsed = parse_key(presented)
    if parsed is None:  # costs no hashing; counted against the address
        svc.limits.check_client(client)
        svc.limits.failed(client)
        raise _unauthorized("invalid API key")
    rows = await keys.keys_with_prefix(svc.store, parsed.prefix)
    live = [row for row in rows if not row["revoked"]]
    # Before any hashing (api/ratelimit.py): a live key's prefix has its own failure budget per
    # address, so others' wrong keys from the same address (a NAT) never lock it out; a key already
    # verified in this process costs no hashing and passes even then. A prefix that is no live key's
    # is hashed against a dummy: the address's budget as a whole bounds that work.
    if live:
        wait = svc.limits.auth_wait(client, parsed.prefix)
        if wait is not None and not any(
            svc.verifier.known(row["key_id"], parsed, row["key_hash"]) for row in live
        ):
            svc.limits.check_client(client, parsed.prefix)
    else:
        svc.limits.check_client(client)
    for row in live:
        # scrypt takes tens of milliseconds on a cache miss: keep it off the event loop.
        if await asyncio.to_thread(svc.verifier.verify, row["key_id"], parsed, row["salt"], row["key_hash"]):
            request.state.project_id = row["project_id"]
            request.state.key_prefix = parsed.prefix
            svc.limits.check_key(parsed.prefix)
            return Principal(
                project_id=row["project_id"],
                key_id=row["key_id"],
                prefix=parsed.prefix,
                scopes=frozenset(row["scopes"]),
            )
    if not live:  # unknown or revoked prefix: cost what a wrong secret on a live key costs
        await asyncio.to_thread(reject_at_full_cost, parsed)
    svc.limits.failed(client, parsed.prefix)
    raise _unauthorized("invalid API key")


def require(scope: str) -> Callable[..., Awaitable[Principal]]:
    """A dependency that admits callers holding ``scope`` (or ``admin``); 403 otherwise."""

    async def guard(principal: Principal = Depends(authenticate)) -> Principal:
        if not principal.allows(scope):
            raise ApiError(403, f"this key lacks the {scope!r} scope")
        return principal

    guard.__name__ = f"require_{scope}"
    return guard
