"""Owns the Idempotency-Key behaviour of POST routes.

A client may send ``Idempotency-Key: <1-200 printable characters>`` with any POST. Then:

* the ids the request creates (run id, trace ids, event ids, ...) are DERIVED from (caller's
  project, key), so a retry appends events with the same ids and the event store skips them as
  duplicates: the effect happens once even when two retries race, or when the process died between
  appending and recording the response;
* the first response is recorded in the ``idempotency_keys`` table; a retry with the same method,
  path and body gets that response again (with ``Idempotent-Replayed: true``), and a retry with a
  different request gets 422 naming the header;
* key issuance is the one exception to "same response": its secret is never stored, so a replay
  answers 409 naming the key that was issued (revoke it and issue a new one if the secret was lost).

Keys are namespaced by project (the bootstrap admin has its own namespace).
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any

from fastapi import Depends, Request
from fastapi.responses import JSONResponse
from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from api.deps import ApiServices, Principal, authenticate, services
from api.errors import ApiError
from core.domain.ids import derived_id, new_id
from core.store.tables import idempotency_keys

HEADER = "Idempotency-Key"
REPLAY_HEADER = "Idempotent-Replayed"


class IdempotentReplay(Exception):
    """Raised by the dependency when a stored response answers this request."""

    def __init__(self, status_code: int, body: Any) -> None:
        super().__init__("idempotent replay")
        self.status_code = status_code
        self.body = body


async def replay_handler(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, IdempotentReplay)
    return JSONResponse(exc.body, status_code=exc.status_code, headers={REPLAY_HEADER: "true"})


class Idempotency:
    """The idempotency context of one POST request (``key`` None when the header was not sent)."""

    def __init__(
        self, svc: ApiServices, principal: Principal, key: str | None, method: str, path: str, digest: str
    ) -> None:
        self._svc = svc
        self.scope = principal.scope_name
        self.key = key
        self.method = method
        self.path = path
        self.digest = digest

    def new_id(self, *parts: object) -> str:
        """A fresh id, or with an Idempotency-Key one derived from it (stable across retries)."""
        if self.key is None:
            return new_id()
        return derived_id("idempotency", self.scope, self.key, self.method, self.path, *parts)

    async def save(self, status_code: int, body: Any) -> None:
        """Record the response a retry with the same key gets (no-op without a key)."""
        if self.key is None:
            return
        engine = self._svc.store.engine
        insert = pg_insert if engine.dialect.name == "postgresql" else sqlite_insert
        statement = (
            insert(idempotency_keys)
            .values(
                scope=self.scope,
                key=self.key,
                method=self.method,
                path=self.path,
                request_hash=self.digest,
                status_code=status_code,
                response=body,
                created_at=datetime.now(UTC),
            )
            .on_conflict_do_nothing()
        )
        async with engine.begin() as conn:
            await conn.execute(statement)


def _check_key(raw: str) -> str:
    key = raw.strip()
    if not 1 <= len(key) <= 200 or not key.isprintable():
        raise ApiError(
            422,
            f"header {HEADER}: must be 1-200 printable characters",
            fields=[{"field": f"header.{HEADER}", "message": "must be 1-200 printable characters"}],
        )
    return key


async def idempotency(
    request: Request,
    principal: Principal = Depends(authenticate),
    svc: ApiServices = Depends(services),
) -> Idempotency:
    """Dependency: looks the key up and short-circuits a retry with the recorded response."""
    raw = request.headers.get(HEADER)
    body = await request.body()
    path = request.url.path
    digest = hashlib.sha256(request.method.encode() + b" " + path.encode() + b"\n" + body).hexdigest()
    key = _check_key(raw) if raw is not None else None
    ctx = Idempotency(svc, principal, key, request.method, path, digest)
    if key is None:
        return ctx
    async with svc.store.engine.connect() as conn:
        row = (
            (
                await conn.execute(
                    select(idempotency_keys).where(
                        idempotency_keys.c.scope == ctx.scope, idempotency_keys.c.key == key
                    )
                )
            )
            .mappings()
            .first()
        )
    if row is None:
        return ctx
    if row["request_hash"] != digest:
        raise ApiError(
            422,
            f"header {HEADER}: this key was already used for a different request "
            f"({row['method']} {row['path']}); use a new key",
            fields=[{"field": f"header.{HEADER}", "message": "already used for a different request"}],
        )
    raise IdempotentReplay(row["status_code"], row["response"])
